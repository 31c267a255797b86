package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// CrossCheck is one mode of one scenario on both engines.
type CrossCheck struct {
	Scenario string  `json:"scenario"`
	Mode     string  `json:"mode"`
	LiveS    float64 `json:"live_makespan_s"`
	VirtualS float64 `json:"virtual_makespan_s"`
	// Ratio is LiveS / VirtualS; Agree is whether it is within
	// CrossCheckTolerance of 1.
	Ratio float64 `json:"ratio"`
	Agree bool    `json:"agree"`
	// The figures that explain a difference: the mean input tokens of a
	// generation call (the live stack's prompts and observations are what
	// its templates and sandbox make; the virtual engine draws them),
	// re-prefilled tokens and preemptions on each engine.
	LiveInputPerCall    float64 `json:"live_input_tokens_per_call"`
	VirtualInputPerCall float64 `json:"virtual_input_tokens_per_call"`
	LiveReprefilled     int64   `json:"live_reprefilled_tokens"`
	VirtualReprefilled  int64   `json:"virtual_reprefilled_tokens"`
	LivePreemptions     int64   `json:"live_preemptions"`
	VirtualPreemptions  int64   `json:"virtual_preemptions"`
	Why                 string  `json:"why,omitempty"`
}

// CrossCheckTolerance is how far the engines' makespans may part and still
// agree.
const CrossCheckTolerance = 0.10

// RunCrossCheck runs s's small scenarios on the live engine (at
// s.TimeScale) and on the virtual engine (one seed, s.Seed) and compares
// the makespans mode by mode. It reports; a difference is not an error.
func RunCrossCheck(ctx context.Context, s Scheduling, stdout, stderr io.Writer) error {
	s.Engine, s.Seeds = EngineLive, 1
	if err := s.Validate(); err != nil {
		return err
	}
	live := s
	live.JSON, live.Charts = true, ""
	var lb strings.Builder
	if err := RunScheduling(ctx, live, &lb, stderr); err != nil {
		return err
	}
	virt := live
	virt.Engine = EngineVirtual
	var vb strings.Builder
	if err := RunScheduling(ctx, virt, &vb, stderr); err != nil {
		return err
	}
	var lr, vr []Result
	if err := json.Unmarshal([]byte(lb.String()), &lr); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(vb.String()), &vr); err != nil {
		return err
	}
	byKey := map[string]Result{}
	for _, r := range vr {
		byKey[r.Scenario+"/"+r.Mode] = r
	}
	var out []CrossCheck
	for _, l := range lr {
		v := byKey[l.Scenario+"/"+l.Mode]
		c := CrossCheck{Scenario: l.Scenario, Mode: l.Mode, LiveS: l.MakespanS, VirtualS: v.MakespanS,
			Ratio: l.MakespanS / v.MakespanS, LiveInputPerCall: l.InputPerCall, VirtualInputPerCall: v.InputPerCall,
			LiveReprefilled: l.Reprefilled, VirtualReprefilled: v.Reprefilled,
			LivePreemptions: l.Preemptions, VirtualPreemptions: v.Preemptions}
		c.Agree = math.Abs(c.Ratio-1) <= CrossCheckTolerance
		if !c.Agree {
			c.Why = fmt.Sprintf("live/virtual makespan %.2f: input per call %.0f/%.0f tokens, re-prefilled %d/%d, preemptions %d/%d; "+
				"the live stack adds its pipeline's latency (%.0f simulated ms per wall ms at --time-scale %g)",
				c.Ratio, c.LiveInputPerCall, c.VirtualInputPerCall, c.LiveReprefilled, c.VirtualReprefilled,
				c.LivePreemptions, c.VirtualPreemptions, 1/s.TimeScale, s.TimeScale)
		}
		out = append(out, c)
	}
	if s.JSON {
		b, _ := json.Marshal(out)
		_, err := fmt.Fprintln(stdout, string(b))
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tmode\tlive s\tvirtual s\tlive/virtual\tagree\tinput/call live/virtual\tre-prefill live/virtual\t")
	for _, c := range out {
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.3f\t%v\t%.0f/%.0f\t%d/%d\t\n", c.Scenario, c.Mode, c.LiveS, c.VirtualS, c.Ratio, c.Agree,
			c.LiveInputPerCall, c.VirtualInputPerCall, c.LiveReprefilled, c.VirtualReprefilled)
	}
	for _, c := range out {
		if c.Why != "" {
			fmt.Fprintf(tw, "%s/%s: %s\n", c.Scenario, c.Mode, c.Why)
		}
	}
	return tw.Flush()
}
