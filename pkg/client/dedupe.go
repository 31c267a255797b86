package client

import (
	"encoding/json"
	"sync"
	"time"
)

// dedupe keeps a late duplicate from reaching the trainer: a result can be
// in the stream twice (published again after a crash, beyond JetStream's
// two-minute duplicate window), and a trainer counts each trajectory once.
// It remembers, per consumer name, the keys (traj_id, or group_id for
// groups) of the deliveries acknowledged, and of those handed out and not
// yet settled; it lives as long as the Client.
type dedupe struct {
	key func(data []byte) string

	mu    sync.Mutex
	acked map[string]bool
	held  map[string]time.Time // handed out, not yet settled: when
}

func newDedupe(key func([]byte) string) *dedupe {
	return &dedupe{key: key, acked: map[string]bool{}, held: map[string]time.Time{}}
}

// verdict is what Fetch does with a delivery.
type verdict int

const (
	deliver   verdict = iota + 1 // hand it to the trainer
	duplicate                    // its key was acknowledged: ack it unseen
	twin                         // its key is with the trainer now: hand it back for later
)

// take decides on a delivery with key k at now, and marks it held when it
// is handed out. A key held longer than AckWait counts as released (its
// Delivery was dropped unsettled).
func (d *dedupe) take(k string, now time.Time) verdict {
	if k == "" {
		return deliver // no key to dedupe by
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.acked[k] {
		return duplicate
	}
	if at, ok := d.held[k]; ok && now.Sub(at) < AckWait {
		return twin
	}
	d.held[k] = now
	return deliver
}

// settled records that the delivery of k was acknowledged (acked) or
// handed back.
func (d *dedupe) settled(k string, acked bool) {
	if k == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.held, k)
	if acked {
		d.acked[k] = true
	}
}

// trajKey and groupKey read the key a result or a group is deduplicated by
// ("" when the message does not decode: it is delivered as it is).
func trajKey(data []byte) string {
	var v struct {
		TrajID string `json:"traj_id"`
	}
	_ = json.Unmarshal(data, &v)
	return v.TrajID
}

func groupKey(data []byte) string {
	var v struct {
		GroupID string `json:"group_id"`
	}
	_ = json.Unmarshal(data, &v)
	return "group:" + v.GroupID
}
