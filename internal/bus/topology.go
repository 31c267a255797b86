package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/actloop/actloop/pkg/schema"
	"github.com/nats-io/nats.go/jetstream"
)

// Subjects and streams inside actloop; those a trainer uses are in
// package schema (schema.SubjectSamples, schema.StreamResults, ...).
const (
	SubjectEvents      = "actloop.events"
	SubjectPredictions = "actloop.predictions"
	SubjectEnvStart    = "actloop.env.start"
	SubjectPredict     = "actloop.predict"
	// SubjectCancel carries schema.Cancel from the coordinator to every
	// gen-worker (core NATS: no stream, no queue group).
	SubjectCancel = "actloop.cancel"

	StreamEvents = "ACTLOOP_EVENTS"
	StreamGen    = "ACTLOOP_GEN"
	StreamEnv    = "ACTLOOP_ENV"
)

// SubjectGen is the subject of gen steps for replica in class (priority.ClassHigh
// or priority.ClassLow).
func SubjectGen(replica, class string) string { return "actloop.gen." + replica + "." + class }

// SubjectEnv is the subject of env steps for the env-worker owner.
func SubjectEnv(owner string) string { return "actloop.env." + owner }

var tokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// reservedOwners would collide with other env subjects.
var reservedOwners = map[string]bool{"start": true}

// ValidName reports whether s can be a replica or env-worker name: one NATS
// subject token.
func ValidName(s string) bool { return tokenPattern.MatchString(s) && !reservedOwners[s] }

// Topology holds the settings of the streams and consumers.
type Topology struct {
	Replicas   int           // stream replicas (1 for one server; 3 on a cluster)
	AckWait    time.Duration // redelivery after this long without ack or progress
	MaxDeliver int           // deliveries before a worker gives up on a message
	ResultsAge time.Duration // how long results stay in their stream
	DLQAge     time.Duration // how long dead letters stay
	Memory     bool          // memory storage instead of file (tests)
}

// Validate joins every problem with t.
func (t Topology) Validate() error {
	var errs []error
	if t.Replicas < 1 || t.Replicas > 5 {
		errs = append(errs, fmt.Errorf("stream replicas: must be 1..5, got %d", t.Replicas))
	}
	if t.AckWait < time.Second {
		errs = append(errs, fmt.Errorf("ack wait: must be >= 1s, got %v", t.AckWait))
	}
	if t.MaxDeliver < 1 {
		errs = append(errs, fmt.Errorf("max deliver: must be >= 1, got %d", t.MaxDeliver))
	}
	if t.ResultsAge <= 0 || t.DLQAge <= 0 {
		errs = append(errs, errors.New("results and dlq max age: must be > 0"))
	}
	return errors.Join(errs...)
}

func (t Topology) streams() []jetstream.StreamConfig {
	storage := jetstream.FileStorage
	if t.Memory {
		storage = jetstream.MemoryStorage
	}
	work := func(name string, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Subjects: subjects, Retention: jetstream.WorkQueuePolicy,
			Storage: storage, Replicas: t.Replicas, Duplicates: 2 * time.Minute,
		}
	}
	kept := func(name string, age time.Duration, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Subjects: subjects, Retention: jetstream.LimitsPolicy,
			Storage: storage, Replicas: t.Replicas, Duplicates: 2 * time.Minute, MaxAge: age,
		}
	}
	return []jetstream.StreamConfig{
		work(schema.StreamSamples, schema.SubjectSamples),
		work(StreamEvents, SubjectEvents, SubjectPredictions),
		work(StreamGen, "actloop.gen.>"),
		work(StreamEnv, "actloop.env.>"),
		kept(schema.StreamResults, t.ResultsAge, schema.SubjectResults, schema.SubjectGroups),
		kept(schema.StreamDLQ, t.DLQAge, schema.SubjectDLQ),
	}
}

// EnsureStreams creates or updates every stream; safe to call from every
// service at start. A stream whose settings are already these is left
// alone: many services starting at once do not update it over and over.
func (t Topology) EnsureStreams(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range t.streams() {
		if s, err := js.Stream(ctx, cfg.Name); err == nil && sameStream(s.CachedInfo().Config, cfg) {
			continue
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// CreateStreams creates every stream that does not exist and leaves those
// that do as they are, whatever their settings: what a trainer's client
// (the CLI, the gateway) does, so that it may start before the services
// without ever changing the streams they declared (its settings may differ
// from theirs, and its NATS user may not update a stream).
func (t Topology) CreateStreams(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range t.streams() {
		_, err := js.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, cfg)
			if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
				err = nil // another client created it meanwhile
			}
		}
		if err != nil {
			return fmt.Errorf("create stream %s: %w", cfg.Name, err)
		}
	}
	return nil
}

// sameStream reports whether have holds every setting of want (the server
// fills in the rest).
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.Storage == want.Storage &&
		have.Replicas == want.Replicas && have.Duplicates == want.Duplicates && have.MaxAge == want.MaxAge
}

// Consumer creates or updates a durable pull consumer named name on stream,
// filtered to subject, with explicit ack and this topology's AckWait. The
// server redelivers without limit: the Runner counts deliveries and decides
// when to give up (MaxDeliver), so a give-up that cannot be reported is
// retried instead of silently dropped.
func (t Topology) Consumer(ctx context.Context, js jetstream.JetStream, stream, name, subject string) (jetstream.Consumer, error) {
	c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	})
	if err != nil {
		return nil, fmt.Errorf("ensure consumer %s on %s: %w", name, stream, err)
	}
	return c, nil
}
