package priority

import (
	"math"
	"time"

	"github.com/actloop/actloop/pkg/schema"
)

// Victim picks the low-priority generation a high-priority step preempts:
// the newest one (least work lost) that may be preempted at now, that is
// whose notBefore (its trajectory's last preemption plus the cooldown) has
// passed. notBefore lists the running low-priority generations oldest
// first; Victim returns an index into it, or -1 when none may be.
func Victim(notBefore []time.Time, now time.Time) int {
	for i := len(notBefore) - 1; i >= 0; i-- {
		if !now.Before(notBefore[i]) {
			return i
		}
	}
	return -1
}

// MustRestart reports whether a trajectory starts again before its next
// generation: under stale_policy restart, when its oldest generated token
// (OldestVersion) is more than max_staleness weight versions behind.
func MustRestart(ctl schema.Control, oldest int64) bool {
	return ctl.StalePolicy == schema.StaleRestart && oldest < ctl.StaleBefore()
}

// OldestVersion is the weight version of the oldest generated token (mask
// 1) among versions; math.MaxInt64 when there is none.
func OldestVersion(mask []int8, versions []int32) int64 {
	oldest := int64(math.MaxInt64)
	for i, m := range mask {
		if m == 1 {
			oldest = min(oldest, int64(versions[i]))
		}
	}
	return oldest
}
