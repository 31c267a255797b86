package virtual

import (
	"reflect"
	"testing"

	"github.com/actloop/actloop/internal/workload"
	"github.com/actloop/actloop/pkg/priority"
)

// A batch that has waited longer than the age limit is still admitted in
// the policy's order: waiting samples age against the newest arrival, not
// the clock (priority.AdmissionOrder). By the clock every sample aged at
// 2 minutes and admission fell back to trajectory id.
func TestWaitingBatchKeepsPolicyOrder(t *testing.T) {
	sc, _ := workload.Lookup("swe-uniform")
	plans := sc.Generate(1, 48)
	cfg := Defaults(1, 4)
	cfg.Kind, cfg.Policy, cfg.Predictor, cfg.RankBy = KindTrajectory, priority.NameLPT, PredictOracle, priority.RankByTokens
	e, err := newEngine(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	predicted := make([]float64, len(e.ts)) // what admission ranks by: set at arrival
	for i, tr := range e.ts {
		predicted[i] = tr.predicted
	}
	for e.done < len(e.ts) {
		if err := e.step(); err != nil {
			t.Fatal(err)
		}
	}
	late := 0
	for i, a := range e.ts {
		if a.admittedAt > cfg.AgeLimit.Seconds() {
			late++
		}
		for j, b := range e.ts {
			if predicted[i] > predicted[j] && a.admittedAt > b.admittedAt {
				t.Fatalf("%s (%.0f tokens predicted) admitted at %.0f s, after %s (%.0f) at %.0f s",
					a.plan.ID, predicted[i], a.admittedAt, b.plan.ID, predicted[j], b.admittedAt)
			}
		}
	}
	if late < len(e.ts)/2 {
		t.Fatalf("only %d of %d admitted after the age limit: the test needs a longer wait", late, len(e.ts))
	}
}

// Config.Custom is the policy when set, whatever Policy names: the lpt
// policy given as a user's own runs as lpt by name does, and not as the
// fcfs that Policy names.
func TestCustomPolicy(t *testing.T) {
	sc, _ := workload.Lookup("swe-longtail")
	// More than the first admissions take (13 a slot: priority.ColdStart),
	// so that the policy orders the rest.
	plans := sc.Generate(2, 200)
	cfg := modes(2, 4, 200)["action-lpt-oracle"]
	want, err := Run(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = priority.NameFCFS
	fcfs, err := Run(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(fcfs, want) {
		t.Fatal("fcfs and lpt ran alike: the test cannot tell them apart")
	}
	cfg.Policy, cfg.Custom = "mine", priority.LPT{Config: priority.Config{AgeLimit: cfg.AgeLimit}}
	got, err := Run(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a custom lpt: makespan %.1f s, lpt by name %.1f s", got.MakespanS, want.MakespanS)
	}
}

// Admission by KV has no count ceiling unless one is set: on the services'
// defaults a replica whose pool holds the whole batch takes it, beyond the
// 3 × floor that the count limit would stop at; a ceiling set is kept.
func TestAdmissionByKVHasNoCountCeilingByDefault(t *testing.T) {
	sc, _ := workload.Lookup("tool-fast")
	plans := sc.Generate(1, 40)
	cfg := Defaults(1, 2) // floor 3, count ceiling 9
	if cfg.ceiling() != 9 {
		t.Fatalf("count ceiling %d, want 9", cfg.ceiling())
	}
	res, err := Run(cfg, plans)
	if err != nil {
		t.Fatal(err)
	}
	if res.PeakActive <= cfg.ceiling() {
		t.Fatalf("at most %d active at once: the count ceiling %d bound admission by KV", res.PeakActive, cfg.ceiling())
	}
	cfg.MaxActiveCeiling = 5
	if res, err = Run(cfg, plans); err != nil {
		t.Fatal(err)
	}
	if res.PeakActive > 5 {
		t.Fatalf("%d active at once under ACTLOOP_MAX_ACTIVE_CEILING=5", res.PeakActive)
	}
}
