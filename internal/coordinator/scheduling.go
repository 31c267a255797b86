package coordinator

import (
	"context"
	"fmt"
)

// publishScheduling puts this coordinator's ACTLOOP_SCHEDULING in the
// control state, where every gen-worker compares it with its own and
// refuses work while they differ. It writes only when the state says
// otherwise (the first start, or a restart in the other mode); every later
// write of the state starts from the current one and keeps it.
func (c *Coordinator) publishScheduling(ctx context.Context) error {
	c.ctl.write.Lock()
	defer c.ctl.write.Unlock()
	st := c.controlState()
	if st.Scheduling == c.cfg.Scheduling {
		return nil
	}
	st.Scheduling = c.cfg.Scheduling
	if err := c.putControl(ctx, st); err != nil {
		return fmt.Errorf("publish ACTLOOP_SCHEDULING=%s in the control state: %w", c.cfg.Scheduling, err)
	}
	return nil
}
