package service

import (
	"strings"
	"testing"
)

// A server whose max_payload cannot carry a sample is refused, naming the
// setting; nats-server's default (1 MiB) is enough.
func TestCheckMaxPayload(t *testing.T) {
	tests := []struct {
		name    string
		max     int64
		wantErr bool
	}{
		{"under a sample", 512 << 10, true},
		{"just under the least", MinMaxPayload - 1, true},
		{"nats-server's default", 1 << 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkMaxPayload(tt.max)
			if (err != nil) != tt.wantErr || (err != nil && !strings.Contains(err.Error(), "max_payload")) {
				t.Fatalf("error %v, want one naming max_payload: %v", err, tt.wantErr)
			}
		})
	}
}
