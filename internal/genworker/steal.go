package genworker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/pkg/priority"
)

// stealer finds another replica's low-priority queue whose oldest waiting
// step has waited longer than after, for a worker with idle slots. It looks
// at most once per interval, so an idle worker costs the server two small
// requests per replica per interval.
type stealer struct {
	self     string
	after    time.Duration
	interval time.Duration
	js       jetstream.JetStream
	topo     bus.Topology
	board    *priority.Board // its snapshots name the replicas
	now      func() time.Time

	mu        sync.Mutex
	last      time.Time
	consumers map[string]jetstream.Consumer

	stolen atomic.Int64 // gen steps taken from another replica's queue
}

// Steal implements bus.Runner.Steal: the low-priority consumer of the
// replica whose queue has waited longest beyond after, or nil.
func (s *stealer) Steal(ctx context.Context) jetstream.Consumer {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.last) < s.interval {
		return nil
	}
	s.last = now
	var victim jetstream.Consumer
	var longest time.Duration
	for _, r := range s.board.Replicas() {
		if r == s.self {
			continue
		}
		c, err := s.consumer(ctx, r)
		if err != nil {
			continue
		}
		if w := s.queueWait(ctx, c, r, now); w > s.after && w > longest {
			victim, longest = c, w
		}
	}
	return victim
}

func (s *stealer) consumer(ctx context.Context, replica string) (jetstream.Consumer, error) {
	if c, ok := s.consumers[replica]; ok {
		return c, nil
	}
	c, err := s.topo.Consumer(ctx, s.js, bus.StreamGen, "gen-"+replica+"-lo", bus.SubjectGen(replica, priority.ClassLow))
	if err != nil {
		return nil, err
	}
	if s.consumers == nil {
		s.consumers = map[string]jetstream.Consumer{}
	}
	s.consumers[replica] = c
	return c, nil
}

// queueWait is how long the oldest step not yet delivered from c has
// waited (0 when none waits). With none undelivered it is the age of the
// oldest unacknowledged one: a step handed back for redelivery (a stolen
// step that failed, say) waits there too, and a fetch then takes only such
// a step, never one another worker holds.
func (s *stealer) queueWait(ctx context.Context, c jetstream.Consumer, replica string, now time.Time) time.Duration {
	info, err := c.Info(ctx)
	if err != nil || info.NumPending+uint64(info.NumAckPending) == 0 {
		return 0
	}
	from := info.Delivered.Stream + 1
	if info.NumPending == 0 {
		from = info.AckFloor.Stream + 1
	}
	stream, err := s.js.Stream(ctx, bus.StreamGen)
	if err != nil {
		return 0
	}
	m, err := stream.GetMsg(ctx, from, jetstream.WithGetMsgSubject(bus.SubjectGen(replica, priority.ClassLow)))
	if err != nil {
		return 0 // none (ErrMsgNotFound) or unknown: nothing to steal
	}
	return now.Sub(m.Time)
}
