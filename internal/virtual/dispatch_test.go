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
		{"actloop: resumed high first", DispatchActloop, priority.ClassHighResume, false, 0, true},
		{"actloop: resumed low before any waiting high", DispatchActloop, priority.ClassLowResume, false, 1, false},
		{"actloop: continuing high", DispatchActloop, priority.ClassHigh, false, 2, true},
		{"actloop: first generation shares hi with continuing turns", DispatchActloop, priority.ClassHigh, true, 2, true},
		{"actloop: continuing low", DispatchActloop, priority.ClassLow, false, 3, false},
		{"actloop: first generation shares lo with continuing turns", DispatchActloop, priority.ClassLow, true, 3, false},
		{"reference: high back from its env step is hp_resume", DispatchReference, priority.ClassHigh, false, 0, true},
		{"reference: interrupted high is hp_resume", DispatchReference, priority.ClassHighResume, false, 0, true},
		{"reference: low back from its env step is lp_resume", DispatchReference, priority.ClassLow, false, 1, false},
		{"reference: interrupted low is lp_resume", DispatchReference, priority.ClassLowResume, false, 1, false},
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
