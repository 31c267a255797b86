package service

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// A server whose max_payload cannot carry a sample is refused, naming the
// setting; one too small for long trajectories' results is warned about;
// nats-server's default (1 MiB) is the second.
func TestCheckMaxPayload(t *testing.T) {
	tests := []struct {
		name     string
		max      int64
		wantErr  bool
		wantWarn bool
	}{
		{"under a sample", 512 << 10, true, false},
		{"nats-server's default", 1 << 20, false, true},
		{"as deploy/nats.conf", 8 << 20, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := checkMaxPayload(tt.max, slog.New(slog.NewTextHandler(&buf, nil)))
			if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), "max_payload")) {
				t.Fatalf("error %v, want one naming max_payload: %v", err, tt.wantErr)
			}
			if warned := strings.Contains(buf.String(), "max_payload"); warned != tt.wantWarn {
				t.Fatalf("warning %q, want one: %v", buf.String(), tt.wantWarn)
			}
		})
	}
}
