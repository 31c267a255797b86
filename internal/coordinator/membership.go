package coordinator

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/schema"
)

// membership knows which gen-workers and env-workers are alive, from their
// heartbeats in NATS KV, and so which replicas there are: a replica joins
// when the first heartbeat of one of its gen-workers arrives and is down
// while none of them is live. Liveness is judged by when a heartbeat
// arrived here, so clocks on other hosts do not matter. It owns its state
// under its own lock.
type membership struct {
	replicaTimeout, envTimeout time.Duration
	started                    time.Time
	expected                   []string // ACTLOOP_REPLICAS: known before they heartbeat

	mu      sync.Mutex
	beats   map[string]map[string]time.Time // replica -> worker -> last heartbeat seen
	hearts  map[string]schema.Heartbeat     // "gen.<replica>.<worker>" -> its last heartbeat
	envSeen map[string]time.Time            // env-worker -> its last heartbeat (or stop)
}

func newMembership(expected []string, replicaTimeout, envTimeout time.Duration, started time.Time) *membership {
	return &membership{expected: slices.Clone(expected), replicaTimeout: replicaTimeout, envTimeout: envTimeout, started: started,
		beats: map[string]map[string]time.Time{}, hearts: map[string]schema.Heartbeat{}, envSeen: map[string]time.Time{}}
}

// watch follows the heartbeats bucket until ctx ends; changed is called
// after each gen-worker heartbeat or departure.
func (m *membership) watch(ctx context.Context, js jetstream.JetStream, log *slog.Logger, now func() time.Time, changed func()) error {
	return bus.WatchKV(ctx, js, log, bus.BucketHeartbeats, func(e jetstream.KeyValueEntry, initial bool) {
		at := now()
		if id, ok := strings.CutPrefix(e.Key(), "env."); ok {
			if initial && at.Sub(e.Created()) > m.envTimeout {
				at = e.Created() // an old entry: not a sign of life
			}
			// A removed entry (the worker stopped) counts as its last sign
			// of life: it may come back under the same id within
			// EnvWorkerTimeout and keep its sandboxes.
			m.mu.Lock()
			m.envSeen[id] = at
			m.mu.Unlock()
			return
		}
		parts := strings.SplitN(e.Key(), ".", 3)
		if len(parts) != 3 || parts[0] != "gen" {
			return
		}
		replica, worker := parts[1], parts[2]
		if e.Operation() == jetstream.KeyValuePut {
			h, err := schema.Decode[schema.Heartbeat](e.Value())
			if err != nil {
				return
			}
			if initial && at.Sub(e.Created()) > m.replicaTimeout {
				// An old entry, perhaps of a worker that died without
				// removing its key: not a sign of life. (A live worker's
				// next beat arrives as an update.)
				at = e.Created()
			}
			m.genBeat(replica, worker, h, at)
		} else {
			m.genGone(replica, worker) // the worker stopped
		}
		changed()
	})
}

// genBeat records a heartbeat of gen-worker worker of replica, seen at at;
// the replica's first makes it known.
func (m *membership) genBeat(replica, worker string, h schema.Heartbeat, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.beats[replica] == nil {
		m.beats[replica] = map[string]time.Time{}
	}
	m.beats[replica][worker] = at
	m.hearts["gen."+replica+"."+worker] = h
}

// genGone records that gen-worker worker of replica stopped (removed its
// heartbeat).
func (m *membership) genGone(replica, worker string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ws := m.beats[replica]; ws != nil {
		delete(ws, worker)
	}
	delete(m.hearts, "gen."+replica+"."+worker)
}

// liveLocked reports whether replica has a gen-worker whose heartbeat is
// recent. A replica never heard from is live during the first
// replicaTimeout after start, while its workers come up.
func (m *membership) liveLocked(replica string, now time.Time) bool {
	ws, heard := m.beats[replica]
	if !heard {
		return now.Sub(m.started) < m.replicaTimeout
	}
	for _, at := range ws {
		if now.Sub(at) <= m.replicaTimeout {
			return true
		}
	}
	return false
}

// live reports whether replica is live now (see liveLocked).
func (m *membership) live(replica string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveLocked(replica, now)
}

// replicas lists every replica known: the expected ones in their order,
// then, by name, those a gen-worker has heartbeated for since the
// coordinator started (live or not).
func (m *membership) replicas() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.replicasLocked()
}

func (m *membership) replicasLocked() []string {
	out := slices.Clone(m.expected)
	var heard []string
	for r := range m.beats {
		if !slices.Contains(m.expected, r) {
			heard = append(heard, r)
		}
	}
	slices.Sort(heard)
	return append(out, heard...)
}

// liveReplicas lists the known replicas (replicas) that are live now, in
// that order.
func (m *membership) liveReplicas(now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var live []string
	for _, r := range m.replicasLocked() {
		if m.liveLocked(r, now) {
			live = append(live, r)
		}
	}
	return live
}

// slots sums the generation slots the live gen-workers of each replica
// announce in their heartbeats; a replica none of whose workers is live is
// absent.
func (m *membership) slots(now time.Time) map[string]int {
	out := map[string]int{}
	for _, h := range m.genWorkers(now) {
		out[h.Replica] += h.Slots
	}
	return out
}

// genWorkers returns the heartbeats of the gen-workers heard from within
// replicaTimeout, by key "gen.<replica>.<worker>".
func (m *membership) genWorkers(now time.Time) map[string]schema.Heartbeat {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]schema.Heartbeat, len(m.hearts))
	for key, h := range m.hearts {
		if at, ok := m.beats[h.Replica][h.Worker]; ok && now.Sub(at) <= m.replicaTimeout {
			out[key] = h
		}
	}
	return out
}

// liveGenWorkers names the gen-workers whose heartbeat is recent, as
// "gen.<replica>.<worker>" (the key of their pause reports).
func (m *membership) liveGenWorkers(now time.Time) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var live []string
	for replica, ws := range m.beats {
		for worker, at := range ws {
			if now.Sub(at) <= m.replicaTimeout {
				live = append(live, "gen."+replica+"."+worker)
			}
		}
	}
	return live
}

// busy sums the running generations of each replica's live gen-workers.
func (m *membership) busy(now time.Time) map[string]int {
	busy := map[string]int{}
	for _, h := range m.genWorkers(now) {
		busy[h.Replica] += h.Running
	}
	return busy
}

// capacity is each replica's KV pool in tokens, as its live gen-workers
// last read it from their server; a replica none of whose workers reports
// one is absent.
func (m *membership) capacity(now time.Time) map[string]int {
	out := map[string]int{}
	for _, h := range m.genWorkers(now) {
		if h.ServerKVTokens > 0 {
			out[h.Replica] = max(out[h.Replica], h.ServerKVTokens)
		}
	}
	return out
}

// envWorkers splits the env-workers heard from into the dead (not heard
// from for envTimeout) and the live, each live one with a count of 0.
func (m *membership) envWorkers(now time.Time) (dead map[string]bool, live map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	dead, live = map[string]bool{}, map[string]int{}
	for id, at := range m.envSeen {
		if now.Sub(at) > m.envTimeout {
			dead[id] = true
		} else {
			live[id] = 0
		}
	}
	return dead, live
}
