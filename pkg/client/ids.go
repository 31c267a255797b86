package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/schema"
)

// ErrIDTaken matches an IDTakenError: a sample whose id an earlier sample
// used.
var ErrIDTaken = errors.New("sample id already used")

// IDTakenError is a sample refused because its id is taken: a sample id
// names one run, and its result keeps the id as long as the results
// stream keeps the result (ACTLOOP_RESULTS_MAX_AGE, 168 h by default).
type IDTakenError struct {
	ID string
	// Earlier names the earlier run that holds the id.
	Earlier string
}

func (e *IDTakenError) Error() string {
	return fmt.Sprintf("id %s: already used by %s; a sample id names one run: give this sample an id of its own", e.ID, e.Earlier)
}

// Is makes every IDTakenError match ErrIDTaken.
func (e *IDTakenError) Is(target error) bool { return target == ErrIDTaken }

// checkParallel is how many ids CheckIDs looks up at once.
const checkParallel = 16

// CheckIDs looks up each of ids on the results stream and returns, by
// position, an IDTakenError for each id whose subject
// (actloop.results.<id>) holds a result: an earlier run's, which the
// stream keeps, so a sample under that id would run for nothing (its
// result could not be stored). The error is for a lookup that failed.
// A results stream that does not exist yet holds no id.
//
// It cannot see an id whose earlier sample is still waiting or running
// and was submitted longer ago than the stream's duplicate window
// (2 min): the coordinator refuses that one (docs/trainer-api.md).
func CheckIDs(ctx context.Context, js jetstream.JetStream, ids []string) ([]error, error) {
	out := make([]error, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	st, err := js.Stream(ctx, schema.StreamResults)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up sample ids on %s: %w", schema.StreamResults, err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		sem   = make(chan struct{}, checkParallel)
	)
	for i, id := range ids {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			subject := schema.SubjectResult(id)
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				if first == nil {
					first = fmt.Errorf("look up sample id %s on %s: %w", id, schema.StreamResults, err)
				}
			case info.State.Subjects[subject] > 0:
				out[i] = &IDTakenError{ID: id, Earlier: fmt.Sprintf("an earlier run, whose result %s holds", subject)}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	return out, nil
}

// PublishSample publishes a sample's encoded data on actloop.samples
// with Nats-Msg-Id id, as Submit does each. A sample the stream answers as
// a duplicate of one it stored under id within its duplicate window
// (2 min), on the first attempt, is an IDTakenError naming that message:
// not stored again, and answered no other way. A duplicate answer to an
// attempt made again (the first one's acknowledgement lost) is this
// call's own sample, stored.
func PublishSample(ctx context.Context, js jetstream.JetStream, id string, data []byte) error {
	ack, retried, err := publish(ctx, js, schema.SubjectSamples, id, data)
	if err != nil {
		return err
	}
	if ack.Duplicate && !retried {
		return &IDTakenError{ID: id, Earlier: fmt.Sprintf("a sample submitted within the last 2 minutes (message %d of %s)",
			ack.Sequence, ack.Stream)}
	}
	return nil
}
