package virtual

import (
	"testing"

	"github.com/actloop/actloop/pkg/priority"
)

func TestQueueOf(t *testing.T) {
	tests := []struct {
		name     string
		order    string
		class    string
		first    bool
		want     int
		wantHigh bool
	}{
		{"actloop: high back from its env step is rhi, taken first", DispatchActloop, priority.ClassHigh, false, 0, true},
		{"actloop: low back from its env step is rlo, before any first generation", DispatchActloop, priority.ClassLow, false, 1, false},
		{"actloop: high first generation is hi, after every trajectory under way", DispatchActloop, priority.ClassHigh, true, 2, true},
		{"actloop: low first generation is lo, last", DispatchActloop, priority.ClassLow, true, 3, false},
		{"reference: high back from its env step is hp_resume", DispatchReference, priority.ClassHigh, false, 0, true},
		{"reference: low back from its env step is lp_resume", DispatchReference, priority.ClassLow, false, 1, false},
		{"reference: high first generation is pending", DispatchReference, priority.ClassHigh, true, 2, false},
		{"reference: low first generation is pending", DispatchReference, priority.ClassLow, true, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := queueOf(tt.order, tt.class, tt.first)
			if got != tt.want {
				t.Errorf("queueOf(%q, %q, first %v) = %d, want %d", tt.order, tt.class, tt.first, got, tt.want)
			}
			if got < 0 || got >= queues(tt.order) {
				t.Fatalf("queue %d out of the %d of order %q", got, queues(tt.order), tt.order)
			}
			if high := queueHigh(tt.order, got); high != tt.wantHigh {
				t.Errorf("queueHigh(%q, %d) = %v, want %v", tt.order, got, high, tt.wantHigh)
			}
		})
	}
}

func TestValidateNamesAnUnknownDispatch(t *testing.T) {
	cfg := Defaults(1, 4)
	cfg.Dispatch = "lifo"
	if err := cfg.Validate(); err == nil {
		t.Fatal("Validate accepted dispatch lifo")
	}
	cfg.Dispatch = DispatchReference
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}
