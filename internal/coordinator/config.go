package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/priority"
	"github.com/actloop/actloop/pkg/schema"
)

// Config is the coordinator's settings (ACTLOOP_ prefix).
type Config struct {
	service.Common
	// Replicas are the inference replicas expected at start, if any: each
	// counts as live for the first REPLICA_TIMEOUT while its gen-workers
	// come up, and is reported (down) until one of them heartbeats. The
	// coordinator needs none listed: a replica joins when the first of its
	// gen-workers heartbeats (admission and dispatch use it at once) and
	// leaves when none of them is live (its trajectories move, as from a
	// replica that went down).
	Replicas []string `envconfig:"REPLICAS"`
	// Slots is the generation slots of an expected replica not heard from
	// yet; a live replica has the slots its gen-workers announce in their
	// heartbeats (their ACTLOOP_SLOTS).
	Slots     int `envconfig:"SLOTS" default:"4"`
	MaxActive int `envconfig:"MAX_ACTIVE" default:"0"`
	// MaxActiveCeiling bounds how far admission may adapt above MAX_ACTIVE
	// (the floor); 0 = 3 x the floor. Admission by KV (while the servers
	// report their pools) counts against it only when it is set: 0 = no
	// count ceiling, the pools bound it.
	MaxActiveCeiling int `envconfig:"MAX_ACTIVE_CEILING" default:"0"`
	// AdaptInterval is how often the admission limit is reconsidered.
	AdaptInterval time.Duration `envconfig:"ADAPT_INTERVAL" default:"5s"`
	// ReprefillLimit: when prompt tokens prefilled again (evicted from the
	// servers' prefix caches) exceed this share of the tokens generated,
	// the admission limit falls.
	ReprefillLimit float64 `envconfig:"REPREFILL_LIMIT" default:"0.5"`
	// KVBudget is the share of each replica's KV pool (as its gen-workers
	// report it from the server) that the active trajectories' expected KV
	// may fill: admission goes by KV while every live replica reports its
	// pool, and by the adaptive count limit otherwise. 0: always by count.
	KVBudget float64 `envconfig:"KV_BUDGET" default:"1"`
	// Hold makes admission by KV reversible: while the contexts of a
	// replica's trajectories would overfill its pool, the last of them in
	// policy order are held (their gen steps wait; no sample is admitted
	// there) until the others have made room (priority.KVPools.Hold). Only while
	// admission goes by KV.
	Hold   bool   `envconfig:"HOLD" default:"true"`
	Policy string `envconfig:"POLICY" default:"fcfs"`
	// RankBy is what lpt and sjf rank by: time (the predicted remaining
	// tokens at the replica's measured seconds per token, plus the
	// predicted remaining turns at the time a turn spends outside
	// generation, learnt from finished trajectories) or tokens.
	RankBy string `envconfig:"RANK_BY" default:"time"`
	// Scheduling is action (action-level scheduling: admission adapts
	// between MAX_ACTIVE and MAX_ACTIVE_CEILING) or trajectory (a trajectory
	// holds a generation slot for its whole life: exactly SLOTS x replicas
	// are admitted), siiRL-agentic's enable_action_level_scheduling. It is
	// published in the control state: a gen-worker whose ACTLOOP_SCHEDULING
	// says otherwise takes no work (its replica goes down) until they agree.
	Scheduling string `envconfig:"SCHEDULING" default:"action"`
	// AgeLimit: a trajectory waiting this long for a generation ranks first
	// whatever the policy, so nothing starves; a waiting sample does once a
	// sample arrived this long after it (a batch that arrives together is
	// admitted in policy order).
	AgeLimit time.Duration `envconfig:"AGE_LIMIT" default:"2m"`
	// HighSlots is the size of each replica's high class; 0 = SLOTS.
	HighSlots int `envconfig:"HIGH_SLOTS" default:"0"`
	// SnapshotInterval debounces priority snapshots: at most one per
	// replica per interval, and only when facts changed.
	SnapshotInterval time.Duration `envconfig:"SNAPSHOT_INTERVAL" default:"200ms"`
	// MaxWaiting bounds the samples taken from the stream to rank for
	// admission; beyond it they wait in the stream.
	MaxWaiting     int           `envconfig:"MAX_WAITING" default:"10000"`
	PredictTimeout time.Duration `envconfig:"PREDICT_TIMEOUT" default:"200ms"`
	// ReplicaTimeout: a replica with no gen-worker heartbeat for this long
	// is down; its trajectories move to live replicas.
	ReplicaTimeout time.Duration `envconfig:"REPLICA_TIMEOUT" default:"15s"`
	// EnvWorkerTimeout: an env-worker not heard from for this long is gone;
	// its trajectories move to live env-workers, which rebuild their
	// sandboxes by replay. 0 = never move them.
	EnvWorkerTimeout time.Duration `envconfig:"ENV_WORKER_TIMEOUT" default:"1m"`
	StallTimeout     time.Duration `envconfig:"STALL_TIMEOUT" default:"30m"`
	// RepublishAfter: a trajectory whose state has not advanced for this
	// long gets the work message its state calls for published again (once
	// per RepublishAfter), in case the one sent was lost (a lost ack of the
	// stream, a purged message); the seq check makes a second copy harmless.
	// 0 = never. A step that runs holds a lease (ACTLOOP_STEP_LEASE), and
	// neither this nor StallTimeout applies while it does.
	RepublishAfter time.Duration `envconfig:"REPUBLISH_AFTER" default:"10m"`
	// ResultGrace is how long an ended trajectory may wait for its result
	// to be seen before the coordinator publishes the result again.
	ResultGrace time.Duration `envconfig:"RESULT_GRACE" default:"30s"`
	Addr        string        `envconfig:"COORDINATOR_ADDR" default:":8080"`
	// APIToken is the bearer token the HTTP API's mutating calls (POST
	// /v1/pause, /v1/resume, /v1/abort) and GET /v1/trajectories/{id} (one
	// trajectory, actloop inspect) need; with StatusOpen false the
	// read-only ones (/, /v1/status, /v1/control) need it too. /healthz,
	// /readyz and /metrics stay open. The coordinator does not start
	// without it unless ACTLOOP_INSECURE=true, and then lets every call
	// through.
	APIToken   string `envconfig:"API_TOKEN"`
	StatusOpen bool   `envconfig:"STATUS_OPEN" default:"true"`
	// LeaderLease is the coordinator leader lease (`actloop serve
	// coordinator` runs under it, so several may run): the leader renews
	// it every third of the lease, and a standby takes over at most about a
	// lease after the leader died (at once when it stopped cleanly).
	LeaderLease time.Duration `envconfig:"LEADER_LEASE" default:"10s"`
	// CoordinatorID names this coordinator in the lease; default the host
	// name and process id.
	CoordinatorID string `envconfig:"COORDINATOR_ID"`
	// PauseTimeout is how long a pause waits for every live gen-worker to
	// report paused when the call names no timeout.
	PauseTimeout time.Duration `envconfig:"PAUSE_TIMEOUT" default:"30s"`
	// MaxVersionStep bounds how far one resume may raise the weight
	// version (versions never go back, so a mistaken huge one would hold
	// every later resume); 0: no bound. The default leaves room for
	// versions numbered by the trainer's global step.
	MaxVersionStep int64 `envconfig:"MAX_VERSION_STEP" default:"1000000"`
	// MaxStaleness (weight versions; -1: no limit) and StalePolicy (keep,
	// restart, mask) decide what happens to a trajectory whose oldest
	// generated token is too old; published in the control state.
	MaxStaleness int64  `envconfig:"MAX_STALENESS" default:"-1"`
	StalePolicy  string `envconfig:"STALE_POLICY" default:"keep"`
	// TrainBatchSize is the trainer's batch size in trajectories; with
	// MAX_STALENESS >= 0 admission stops while more trajectories would be
	// admitted than the trainer can consume before they go stale. 0: no
	// such bound.
	TrainBatchSize int `envconfig:"TRAIN_BATCH_SIZE" default:"0"`
	// TrainerConsumerInactive: a trainer's consumer of results or groups
	// (made on actloop.consumers.create, or by GET /v1/results of the
	// gateway) that nobody pulls from for this long is deleted by the
	// server, so names used once do not pile up; the trainer's user cannot
	// delete consumers. A trainer that comes back later under the name
	// starts again from the oldest result kept.
	TrainerConsumerInactive time.Duration `envconfig:"TRAINER_CONSUMER_INACTIVE" default:"168h"`
}

// Unauthenticated is what Common.Unauthenticated names, and the API token
// when it is empty.
func (c *Config) Unauthenticated() []string {
	missing := c.Common.Unauthenticated()
	if c.APIToken == "" {
		missing = append(missing, "the HTTP API's write calls have no token: set ACTLOOP_API_TOKEN")
	}
	return missing
}

// Validate joins every problem with c.
func (c *Config) Validate() error {
	errs := []error{c.Common.Validate()}
	if !c.StatusOpen && c.APIToken == "" {
		errs = append(errs, errors.New("ACTLOOP_STATUS_OPEN: false needs ACTLOOP_API_TOKEN (the token the status then asks for)"))
	}
	for i, r := range c.Replicas {
		if !bus.ValidName(r) {
			errs = append(errs, fmt.Errorf("ACTLOOP_REPLICAS: %q is not a valid name ([A-Za-z0-9_-], not \"start\")", r))
		} else if slices.Contains(c.Replicas[:i], r) {
			errs = append(errs, fmt.Errorf("ACTLOOP_REPLICAS: %q is listed twice", r))
		}
	}
	if c.Slots < 1 {
		errs = append(errs, errors.New("ACTLOOP_SLOTS: must be >= 1"))
	}
	if c.EnvWorkerTimeout < 0 {
		errs = append(errs, fmt.Errorf("ACTLOOP_ENV_WORKER_TIMEOUT: must be >= 0, got %v", c.EnvWorkerTimeout))
	}
	if c.RepublishAfter < 0 {
		errs = append(errs, fmt.Errorf("ACTLOOP_REPUBLISH_AFTER: must be >= 0, got %v", c.RepublishAfter))
	}
	if c.LeaderLease < time.Second {
		errs = append(errs, fmt.Errorf("ACTLOOP_LEADER_LEASE: must be >= 1s, got %v", c.LeaderLease))
	}
	if c.MaxActiveCeiling < 0 {
		errs = append(errs, errors.New("ACTLOOP_MAX_ACTIVE_CEILING: must be >= 0 (0 = 3 x the floor)"))
	}
	if c.AdaptInterval < 10*time.Millisecond {
		errs = append(errs, errors.New("ACTLOOP_ADAPT_INTERVAL: must be >= 10ms"))
	}
	if c.ReprefillLimit <= 0 {
		errs = append(errs, errors.New("ACTLOOP_REPREFILL_LIMIT: must be > 0"))
	}
	if c.RankBy != priority.RankByTime && c.RankBy != priority.RankByTokens {
		errs = append(errs, fmt.Errorf("ACTLOOP_RANK_BY: %q: want time or tokens", c.RankBy))
	}
	if c.KVBudget < 0 || c.KVBudget > 2 {
		errs = append(errs, fmt.Errorf("ACTLOOP_KV_BUDGET: must be in [0, 2] (0: admission by count), got %v", c.KVBudget))
	}
	if c.MaxActive < 0 {
		errs = append(errs, errors.New("ACTLOOP_MAX_ACTIVE: must be >= 0 (0 = slots x replicas x 1.5)"))
	}
	switch c.Scheduling {
	case priority.SchedulingAction:
	case priority.SchedulingTrajectory:
		if c.MaxActive > 0 || c.MaxActiveCeiling > 0 {
			errs = append(errs, errors.New("ACTLOOP_MAX_ACTIVE, ACTLOOP_MAX_ACTIVE_CEILING: not with ACTLOOP_SCHEDULING=trajectory, which admits exactly SLOTS x replicas"))
		}
	default:
		errs = append(errs, fmt.Errorf("ACTLOOP_SCHEDULING: %q: want action or trajectory", c.Scheduling))
	}
	if _, err := priority.New(c.Policy, priority.Config{AgeLimit: c.AgeLimit}); err != nil {
		errs = append(errs, fmt.Errorf("ACTLOOP_POLICY: %w", err))
	}
	if c.AgeLimit <= 0 {
		errs = append(errs, errors.New("ACTLOOP_AGE_LIMIT: must be > 0"))
	}
	if c.HighSlots < 0 {
		errs = append(errs, errors.New("ACTLOOP_HIGH_SLOTS: must be >= 0 (0 = SLOTS)"))
	}
	if c.SnapshotInterval < 10*time.Millisecond {
		errs = append(errs, errors.New("ACTLOOP_SNAPSHOT_INTERVAL: must be >= 10ms"))
	}
	if c.PauseTimeout <= 0 {
		errs = append(errs, errors.New("ACTLOOP_PAUSE_TIMEOUT: must be > 0"))
	}
	if c.MaxVersionStep < 0 {
		errs = append(errs, errors.New("ACTLOOP_MAX_VERSION_STEP: must be >= 0 (0: no bound)"))
	}
	if c.MaxStaleness < -1 {
		errs = append(errs, errors.New("ACTLOOP_MAX_STALENESS: must be >= -1 (-1: no limit)"))
	}
	switch c.StalePolicy {
	case schema.StaleKeep, schema.StaleRestart, schema.StaleMask:
	default:
		errs = append(errs, fmt.Errorf("ACTLOOP_STALE_POLICY: %q is not keep, restart or mask", c.StalePolicy))
	}
	if c.TrainBatchSize < 0 {
		errs = append(errs, errors.New("ACTLOOP_TRAIN_BATCH_SIZE: must be >= 0"))
	}
	if c.ReplicaTimeout < 100*time.Millisecond {
		errs = append(errs, errors.New("ACTLOOP_REPLICA_TIMEOUT: must be >= 100ms"))
	}
	if c.MaxWaiting < 1 {
		errs = append(errs, errors.New("ACTLOOP_MAX_WAITING: must be >= 1"))
	}
	if c.PredictTimeout < 0 {
		errs = append(errs, errors.New("ACTLOOP_PREDICT_TIMEOUT: must be >= 0 (0 = no predictions)"))
	}
	if c.StallTimeout < time.Second {
		errs = append(errs, errors.New("ACTLOOP_STALL_TIMEOUT: must be >= 1s"))
	}
	if c.TrainerConsumerInactive < time.Minute {
		errs = append(errs, fmt.Errorf("ACTLOOP_TRAINER_CONSUMER_INACTIVE: must be >= 1m, got %v", c.TrainerConsumerInactive))
	}
	if c.ResultGrace < time.Second {
		errs = append(errs, errors.New("ACTLOOP_RESULT_GRACE: must be >= 1s"))
	}
	return errors.Join(errs...)
}

// ActiveFloor is the least the admission limit goes to (priority.ActiveBounds)
// with the expected replicas (one when none is listed) at SLOTS each:
// MAX_ACTIVE, or total gen slots x 1.5 when unset, so sandbox start-up
// overlaps generation; under ACTLOOP_SCHEDULING=trajectory the slots. The
// running coordinator bounds it by the replicas live at the time and the
// slots their gen-workers announce.
func (c *Config) ActiveFloor() int {
	floor, _ := priority.ActiveBounds(c.Scheduling, c.Slots, max(len(c.Replicas), 1), c.MaxActive, c.MaxActiveCeiling)
	return floor
}

// highSlots is the size of each replica's high class.
func (c *Config) highSlots() int {
	if c.HighSlots > 0 {
		return c.HighSlots
	}
	return c.Slots
}

// ActiveCeiling is the most the admission limit may rise to
// (priority.ActiveBounds), as ActiveFloor counts the replicas.
func (c *Config) ActiveCeiling() int {
	_, ceiling := priority.ActiveBounds(c.Scheduling, c.Slots, max(len(c.Replicas), 1), c.MaxActive, c.MaxActiveCeiling)
	return ceiling
}
