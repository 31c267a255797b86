package bus

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// InProgress tells the server the message is being worked on (InProgress)
// every interval while the chain inside it runs, so a consumer's AckWait
// can stay short (a dead worker's message comes back soon) while a step
// runs for minutes. The Runner uses AckWait/3. every <= 0: no heartbeat.
func InProgress(every time.Duration) Middleware {
	return func(next Handler) Handler {
		if every <= 0 {
			return next
		}
		return func(ctx context.Context, m jetstream.Msg) error {
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				t := time.NewTicker(every)
				defer t.Stop()
				for {
					select {
					case <-t.C:
						_ = m.InProgress()
					case <-done:
						return
					case <-ctx.Done():
						return
					}
				}
			})
			defer wg.Wait() // no heartbeat after the ack
			defer close(done)
			return next(ctx, m)
		}
	}
}
