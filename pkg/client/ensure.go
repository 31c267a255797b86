package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/pkg/schema"
)

// SubjectConsumerCreate is where a trainer asks the coordinator to create,
// or take up again, a consumer of results or groups of its own
// (ConsumerRequest, answered with a ConsumerReply). A trainer may not
// create consumers itself: permissions cannot look into a create request,
// and one with a deliver subject would have the server publish the stream
// on any subject of the account, the services' work streams included.
const SubjectConsumerCreate = "actloop.consumers.create"

// ConsumerRequest asks for the durable pull consumer Name of Subject
// (schema.SubjectResults or schema.SubjectGroups) on the results stream,
// made as ConsumerConfig makes it. Run, when set, names the one run the
// consumer is for (RunPattern): its reader keeps only the messages of ids
// that start with Run + "." (RunSubjectPrefix), and the consumer records
// Run (its metadata MetaRun), so that the name cannot be taken up again
// for another run or subject (ErrConsumerConflict).
type ConsumerRequest struct {
	V       int    `json:"v"`
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Run     string `json:"run,omitempty"`
}

// ConsumerReply answers a ConsumerRequest: Error is empty when the
// consumer exists as asked.
type ConsumerReply struct {
	V     int    `json:"v"`
	Error string `json:"error,omitempty"`
}

// RunPattern is what a run may be called: an id token without '.', short
// enough that "<run>.<id>" leaves room for an id and "<run>-groups" is a
// consumer name.
const RunPattern = `^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$`

var runPattern = regexp.MustCompile(RunPattern)

// ValidRun reports whether run matches RunPattern.
func ValidRun(run string) bool { return runPattern.MatchString(run) }

// MetaRun is the consumer metadata key that holds a run-scoped consumer's
// run.
const MetaRun = "actloop_run"

// RunSubjectPrefix is the start of the subject of every message of subject
// (schema.SubjectResults or schema.SubjectGroups) whose id starts with
// run + ".": "actloop.results.<run>~" (schema.SubjectToken writes an id's
// dots as '~', so an id is one subject token and a run cannot be a
// consumer's filter subject: a run-scoped reader filters by this prefix).
func RunSubjectPrefix(subject, run string) string {
	if subject == schema.SubjectGroups {
		return schema.SubjectGroup(run + ".")
	}
	return schema.SubjectResult(run + ".")
}

// ErrConsumerConflict matches the error of a consumer request whose name
// is a consumer of another subject or run: a consumer's name is its
// position in one sequence of messages, and taking it up for another
// would silently skip or repeat them.
var ErrConsumerConflict = errors.New("consumer name in use for another subject or run")

// conflictError is an ErrConsumerConflict with its own text.
type conflictError struct{ msg string }

func (e *conflictError) Error() string        { return e.msg }
func (e *conflictError) Is(target error) bool { return target == ErrConsumerConflict }

// Validate reports what is wrong with r: a subject other than results' or
// groups', a name that is not a consumer name, a service's consumer, or a
// run that does not match RunPattern.
func (r ConsumerRequest) Validate() error {
	var errs []error
	if r.Subject != schema.SubjectResults && r.Subject != schema.SubjectGroups {
		errs = append(errs, fmt.Errorf("subject %q: want %s or %s", r.Subject, schema.SubjectResults, schema.SubjectGroups))
	}
	if r.Name == "" || strings.ContainsAny(r.Name, ".*> \t\r\n/\\") {
		errs = append(errs, fmt.Errorf("consumer name %q: want a name without '.', '*', '>', '/', '\\' or whitespace", r.Name))
	}
	if schema.ServiceConsumer(r.Name) {
		errs = append(errs, fmt.Errorf("consumer %s: a service's consumer of %s; name one of your own", r.Name, schema.StreamResults))
	}
	if r.Run != "" && !ValidRun(r.Run) {
		errs = append(errs, fmt.Errorf("run %q: want %s (no '.')", r.Run, RunPattern))
	}
	return errors.Join(errs...)
}

// Config is the consumer r asks for: ConsumerConfig, with r.Run in its
// metadata.
func (r ConsumerRequest) Config() jetstream.ConsumerConfig {
	cfg := ConsumerConfig(r.Name, r.Subject)
	if r.Run != "" {
		cfg.Metadata = map[string]string{MetaRun: r.Run}
	}
	return cfg
}

// describe names what a consumer reads: its subject, and its run if any.
func describe(subject, run string) string {
	if run == "" {
		return subject + " (every run)"
	}
	return fmt.Sprintf("%s of run %s", subject, run)
}

// CreateConsumer creates, or takes up again, the consumer r asks for
// (r.Config, deleted by the server after inactive without a pull), as the
// coordinator does for a trainer. It does not look the consumer up first
// (the coordinator's NATS user may not): EnsureConsumerRequest, on the
// trainer's side, refuses a name in use for another subject or run before
// it asks.
func CreateConsumer(ctx context.Context, js jetstream.JetStream, r ConsumerRequest, inactive time.Duration) (jetstream.Consumer, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	cfg := r.Config()
	cfg.InactiveThreshold = inactive
	return js.CreateOrUpdateConsumer(ctx, schema.StreamResults, cfg)
}

// lookUp returns the consumer r names as it is, nil if there is none, or
// an ErrConsumerConflict if it reads another subject or run than r asks
// for (one made before runs, without MetaRun, reads every run).
func lookUp(ctx context.Context, js jetstream.JetStream, r ConsumerRequest) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, schema.StreamResults, r.Name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up consumer %s: %w", r.Name, err)
	}
	have := c.CachedInfo().Config
	if have.FilterSubject != r.Subject || have.Metadata[MetaRun] != r.Run {
		return nil, &conflictError{fmt.Sprintf("consumer %s reads %s, not %s: a consumer's name is its position in what it reads; name another consumer",
			r.Name, describe(have.FilterSubject, have.Metadata[MetaRun]), describe(r.Subject, r.Run))}
	}
	return c, nil
}

// EnsureConsumer creates, or takes up again, the durable consumer name of
// subject on the results stream: it asks the coordinator
// (SubjectConsumerCreate) and looks the consumer up. With no coordinator
// listening it creates the consumer itself, which a user allowed to (not
// the trainer's) may.
func EnsureConsumer(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name, subject string) (jetstream.Consumer, error) {
	return EnsureConsumerRequest(ctx, nc, js, ConsumerRequest{V: 1, Name: name, Subject: subject})
}

// EnsureConsumerRequest is EnsureConsumer of the consumer req asks for
// (req.Run scopes it to a run). A name in use for another subject or run
// is refused, left as it is, with an error that matches
// ErrConsumerConflict: the consumer is looked up before the coordinator is
// asked and again after (two callers making one new name at once for two
// runs: one of them is refused).
func EnsureConsumerRequest(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, req ConsumerRequest) (jetstream.Consumer, error) {
	req.V = 1
	if err := req.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	if _, err := lookUp(ctx, js, req); err != nil {
		return nil, err
	}
	m, err := nc.RequestWithContext(ctx, SubjectConsumerCreate, b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		if _, err := CreateConsumer(ctx, js, req, ConsumerInactive); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("ask the coordinator on %s: %w", SubjectConsumerCreate, err)
	default:
		var reply ConsumerReply
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			return nil, fmt.Errorf("the coordinator's answer on %s: %w", SubjectConsumerCreate, err)
		}
		if reply.Error != "" {
			return nil, fmt.Errorf("the coordinator: %s", reply.Error)
		}
	}
	c, err := lookUp(ctx, js, req)
	if err == nil && c == nil {
		err = fmt.Errorf("consumer %s: not found once made", req.Name)
	}
	return c, err
}
