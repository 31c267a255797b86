package launch

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/envworker"
	"github.com/actloop/actloop/internal/genworker"
	"github.com/actloop/actloop/internal/predictor"
	"github.com/actloop/actloop/internal/service"
)

// Every service's settings, built in code, reach a child process intact:
// envconfig reads back from Environ's variables exactly what was set.
func TestEnvironRoundTrips(t *testing.T) {
	co := coordinator.Config{}
	service.Defaults(&co)
	co.Replicas, co.Slots, co.ReprefillLimit, co.MaxStaleness = []string{"a", "b-2"}, 7, 0.25, -1
	co.PauseTimeout, co.Addr, co.NATSURL = 1500*time.Millisecond, "", "nats://10.0.0.1:4999"
	gw := genworker.Config{}
	service.Defaults(&gw)
	gw.Replica, gw.Slots, gw.Preempt = "b-2", 13, !gw.Preempt
	ew := envworker.Config{}
	service.Defaults(&ew)
	ew.ID, ew.SimEnvTimeScale, ew.SimExecLatency = "env-3", 0.125, 0
	pg := predictor.Config{}
	service.Defaults(&pg)
	pg.Addr = "127.0.0.1:0"
	for _, cfg := range []any{&co, &gw, &ew, &pg} {
		env, err := service.Environ(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
		back := reflect.New(reflect.TypeOf(cfg).Elem())
		if err := envconfig.Process("ACTLOOP", back.Interface()); err != nil {
			t.Fatalf("%T: %v", cfg, err)
		}
		if got := back.Interface(); !reflect.DeepEqual(got, cfg) {
			t.Errorf("%T read back differs:\n got %+v\nwant %+v", cfg, got, cfg)
		}
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			os.Unsetenv(k)
		}
	}
}

func TestEnvironRefuses(t *testing.T) {
	if _, err := service.Environ(3); err == nil {
		t.Error("a number is not a settings struct")
	}
	type untagged struct{ X int }
	if _, err := service.Environ(untagged{}); err == nil || !strings.Contains(err.Error(), "X") {
		t.Errorf("untagged field: %v", err)
	}
	type commas struct {
		L []string `envconfig:"L"`
	}
	if _, err := service.Environ(commas{L: []string{"a,b"}}); err == nil || !strings.Contains(err.Error(), "ACTLOOP_L") {
		t.Errorf("comma in a list element: %v", err)
	}
}

func TestRunUnknown(t *testing.T) {
	if err := Run("nope"); err == nil || !strings.Contains(err.Error(), "gen-worker") {
		t.Errorf("Run(nope) = %v", err)
	}
	if !Known("env-worker") || Known("nope") {
		t.Error("Known")
	}
}
