package sim

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestDirectiveRoundTrip(t *testing.T) {
	d := Directive{Tokens: []int{120, 7, 340}, Exec: []float64{0.25, 12.5}}
	got, ok, err := ParseDirective("Fix the bug. " + d.String() + " Thanks.")
	if !ok || err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("ParseDirective(%s) = %+v %v %v", d, got, ok, err)
	}
	if _, ok, err := ParseDirective("no directive here"); ok || err != nil {
		t.Fatalf("a task without a directive: %v %v", ok, err)
	}
	for _, bad := range []string{
		"[actloop-sim tokens=1,2 exec=0.5", // unclosed
		"[actloop-sim tokens=1,2 exec=]",   // a run time short
		"[actloop-sim tokens=0 exec=]",     // an empty turn
		"[actloop-sim tokens=5 exec= x=1]", // unknown field
		"[actloop-sim tokens=a exec=]",
		"[actloop-sim tokens=5,5 exec=-1]",
		"[actloop-sim tokens=5 tokens=5 exec=]",
	} {
		if _, ok, err := ParseDirective(bad); !ok || err == nil {
			t.Errorf("ParseDirective(%q) accepted", bad)
		}
	}
}

// The simulator plays a directive: each turn's output is the asked number of
// tokens (plus <|im_end|>), each command runs the asked time, the last
// submits, and the plan agrees.
func TestSimulatorPlaysDirective(t *testing.T) {
	h := newHarness(t, Config{Seed: 5, MaxTurns: 100})
	d := Directive{Tokens: []int{60, 300, 45, 90}, Exec: []float64{1.5, 0, 30}}
	p := play(t, h, "Task with a plan "+d.String(), func(int) string { return "ok" })
	if len(p.outLens) != len(d.Tokens) {
		t.Fatalf("%d turns, want %d", len(p.outLens), len(d.Tokens))
	}
	for k, n := range d.Tokens {
		if p.outLens[k] != n+1 {
			t.Errorf("turn %d: %d tokens, want %d + <|im_end|>: %q", k+1, p.outLens[k], n, p.replies[k])
		}
		if k < len(d.Exec) {
			if want := fmt.Sprintf("sleep %.3f", d.Exec[k]); !strings.Contains(p.replies[k], want) {
				t.Errorf("turn %d runs no %q: %q", k+1, want, p.replies[k])
			}
		} else if !strings.Contains(p.replies[k], Submission) {
			t.Errorf("last turn does not submit: %q", p.replies[k])
		}
	}
	if p.plans[0].TurnsTotal != len(d.Tokens) || p.plans[0].RemainingTokens != 60+300+45+90+4 {
		t.Fatalf("plan at the start: %+v", p.plans[0])
	}
}

func FuzzParseDirective(f *testing.F) {
	f.Add("[actloop-sim tokens=120,7 exec=0.5]")
	f.Add("x [actloop-sim tokens=1 exec=] y")
	f.Add("[actloop-sim tokens=,, exec=1e400]")
	f.Fuzz(func(t *testing.T, s string) {
		d, ok, err := ParseDirective(s)
		if !ok || err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("parsed directive does not validate: %v", err)
		}
		again, ok, err := ParseDirective(d.String())
		if !ok || err != nil || len(again.Tokens) != len(d.Tokens) {
			t.Fatalf("re-parsing %s: %+v %v %v", d, again, ok, err)
		}
	})
}
