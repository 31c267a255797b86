package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/actloop/actloop/pkg/schema"
)

// SubmitError is a Submit that stopped part-way: the first Submitted
// samples are stored; the one with ID may or may not be (it is not when
// Err is an IDTakenError), and the rest are not. Submit the samples from
// the one with ID on again: each stored one would be refused as taken.
type SubmitError struct {
	Submitted int
	ID        string
	Err       error
}

func (e *SubmitError) Error() string {
	return fmt.Sprintf("submit sample %s (after %d stored): %v", e.ID, e.Submitted, e.Err)
}

func (e *SubmitError) Unwrap() error { return e.Err }

// Submit checks every sample and, if all are valid, their ids distinct
// and not taken, and their groups consistent, publishes them in order on
// actloop.samples, each with Nats-Msg-Id set to its id, returning once
// the stream has stored the last. An id is taken when the results stream
// holds a result under it (CheckIDs) or a sample under it was stored
// within the stream's duplicate window (PublishSample): a sample id names
// one run, and a second sample under it would never have a result of its
// own, so it is refused as an IDTakenError naming the earlier run (before
// anything is published, when the results stream shows it; otherwise in a
// SubmitError). A publish the stream does not answer (a leader election,
// a restarting server) is tried again under the same id until ctx ends, or
// for 30 s a sample when ctx has no deadline. Samples are sent as given;
// the coordinator fills defaults (schema.Sample.Normalize).
func (c *Client) Submit(ctx context.Context, samples ...schema.Sample) error {
	data, err := encodeSamples(samples)
	if err != nil {
		return err
	}
	ids := make([]string, len(samples))
	for i := range samples {
		ids[i] = samples[i].ID
	}
	taken, err := CheckIDs(ctx, c.js, ids)
	if err != nil {
		return fmt.Errorf("nothing submitted: %w", err)
	}
	var errs []error
	for i, err := range taken {
		if err != nil {
			errs = append(errs, fmt.Errorf("sample %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("nothing submitted:\n%w", errors.Join(errs...))
	}
	for i, b := range data {
		if err := PublishSample(ctx, c.js, samples[i].ID, b); err != nil {
			return &SubmitError{Submitted: i, ID: samples[i].ID, Err: err}
		}
	}
	return nil
}

// encodeSamples validates and marshals every sample, reporting every
// problem; nothing is returned unless all are fine.
func encodeSamples(samples []schema.Sample) ([][]byte, error) {
	var errs []error
	out := make([][]byte, len(samples))
	seen := make(map[string]int, len(samples))
	var groups schema.GroupCheck
	for i := range samples {
		s := &samples[i]
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("sample %d (%s): %w", i, s.ID, err))
			continue
		}
		if prev, dup := seen[s.ID]; dup {
			errs = append(errs, fmt.Errorf("sample %d: %w", i,
				&schema.FieldError{Field: "id", Reason: fmt.Sprintf("%q repeats sample %d", s.ID, prev)}))
			continue
		}
		seen[s.ID] = i
		if err := groups.Add(s); err != nil {
			errs = append(errs, fmt.Errorf("sample %d (%s): %w", i, s.ID, err))
			continue
		}
		b, err := json.Marshal(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("sample %d (%s): %w", i, s.ID, err))
			continue
		}
		if len(b) > schema.MaxSampleBytes {
			errs = append(errs, fmt.Errorf("sample %d (%s): %w", i, s.ID, &schema.FieldError{Field: "(message)",
				Reason: fmt.Sprintf("%d bytes exceeds the sample limit of %d", len(b), schema.MaxSampleBytes)}))
			continue
		}
		out[i] = b
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("nothing submitted:\n%w", errors.Join(errs...))
	}
	return out, nil
}
