package priority

import (
	"slices"
	"sync"
)

// Board holds the newest snapshot per replica. It is safe for concurrent use;
// the zero value is empty and ready.
type Board struct {
	mu    sync.RWMutex
	snaps map[string]*Snapshot
}

// Set keeps s if no snapshot is held for its replica or s's Version is newer
// than the held one's, and reports whether it did. A nil snapshot or one
// without a replica is not kept. s must not be modified afterwards.
func (b *Board) Set(s *Snapshot) bool {
	if s == nil || s.Replica == "" {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if held, ok := b.snaps[s.Replica]; ok && s.Version <= held.Version {
		return false
	}
	if b.snaps == nil {
		b.snaps = map[string]*Snapshot{}
	}
	b.snaps[s.Replica] = s
	return true
}

// Get returns the snapshot held for replica, or nil. It is shared: do not
// modify it.
func (b *Board) Get(replica string) *Snapshot {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.snaps[replica]
}

// Class is the class of trajID by the snapshot held for replica; ClassLow
// when there is none.
func (b *Board) Class(replica, trajID string) string {
	return b.Get(replica).Class(trajID)
}

// Held reports whether trajID is held by the snapshot held for replica.
func (b *Board) Held(replica, trajID string) bool {
	return b.Get(replica).IsHeld(trajID)
}

// Replicas returns the replicas a snapshot is held for, sorted.
func (b *Board) Replicas() []string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	rs := make([]string, 0, len(b.snaps))
	for r := range b.snaps {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}
