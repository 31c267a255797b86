package coordinator

import (
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/pkg/priority"
)

// ACTLOOP_SCHEDULING: action adapts admission between its floor and
// ceiling; trajectory admits exactly the slots and refuses the settings
// that would say otherwise; anything else is named.
func TestSchedulingSetting(t *testing.T) {
	var cfg Config
	service.Defaults(&cfg)
	cfg.Replicas, cfg.Slots = []string{"r0", "r1"}, 8
	if err := cfg.Validate(); err != nil || cfg.Scheduling != priority.SchedulingAction {
		t.Fatalf("defaults: %v, scheduling %q", err, cfg.Scheduling)
	}
	if cfg.ActiveFloor() != 24 || cfg.ActiveCeiling() != 72 {
		t.Errorf("action: %d..%d", cfg.ActiveFloor(), cfg.ActiveCeiling())
	}
	cfg.Scheduling = priority.SchedulingTrajectory
	if err := cfg.Validate(); err != nil || cfg.ActiveFloor() != 16 || cfg.ActiveCeiling() != 16 {
		t.Errorf("trajectory: %v, %d..%d", err, cfg.ActiveFloor(), cfg.ActiveCeiling())
	}
	cfg.MaxActive = 40
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_SCHEDULING=trajectory") {
		t.Errorf("trajectory with MAX_ACTIVE: %v", err)
	}
	cfg.MaxActive, cfg.Scheduling = 0, "both"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ACTLOOP_SCHEDULING") {
		t.Errorf("unknown: %v", err)
	}
}

// ACTLOOP_REPLICAS is optional (replicas join by heartbeat); a name it
// lists must be valid and listed once.
func TestReplicasSetting(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas []string
		wantErr  string
	}{
		{"none", nil, ""},
		{"some", []string{"r0", "r1"}, ""},
		{"invalid", []string{"r0", "a.b"}, `ACTLOOP_REPLICAS: "a.b" is not a valid name`},
		{"twice", []string{"r0", "r1", "r0"}, `ACTLOOP_REPLICAS: "r0" is listed twice`},
	} {
		var cfg Config
		service.Defaults(&cfg)
		cfg.Replicas = tc.replicas
		err := cfg.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.wantErr)
		}
	}
	var cfg Config
	service.Defaults(&cfg)
	if len(cfg.Replicas) != 0 || cfg.ActiveFloor() != 6 {
		t.Errorf("default: replicas %q, floor %d (one replica of 4 slots: 6)", cfg.Replicas, cfg.ActiveFloor())
	}
}
