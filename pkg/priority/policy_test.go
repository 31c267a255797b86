package priority

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func ids(facts []Fact) []string {
	out := make([]string, len(facts))
	for i, f := range facts {
		out[i] = f.TrajID
	}
	return out
}

func mustNew(t testing.TB, name string, cfg Config) Policy {
	t.Helper()
	p, err := New(name, cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	return p
}

func TestNew(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		wantName string
		wantErr  error
	}{
		{name: "fcfs", wantName: "fcfs"},
		{name: "", wantName: "fcfs"},
		{name: "lpt", cfg: Config{AgeLimit: time.Minute}, wantName: "lpt"},
		{name: "sjf", wantName: "sjf"},
		{name: "LPT", wantErr: ErrUnknownPolicy},
		{name: "random", wantErr: ErrUnknownPolicy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.name, tt.cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				for _, n := range Names() {
					if !strings.Contains(err.Error(), n) {
						t.Errorf("error %q does not list %q", err, n)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tt.wantName {
				t.Fatalf("Name = %q, want %q", p.Name(), tt.wantName)
			}
		})
	}
	if _, err := New("lpt", Config{AgeLimit: -time.Second}); err == nil || !strings.Contains(err.Error(), "age limit") {
		t.Fatalf("negative age limit: err = %v", err)
	}
	p, err := ByName("sjf")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.(SJF).AgeLimit; got != DefaultAgeLimit {
		t.Fatalf("ByName age limit = %v, want %v", got, DefaultAgeLimit)
	}
}

func TestRank(t *testing.T) {
	const limit = time.Minute
	now := sec(1000)
	// waited returns a WaitingSince that has waited d at now.
	waited := func(d time.Duration) time.Time { return now.Add(-d) }
	fresh := waited(time.Second)
	tests := []struct {
		name   string
		policy string
		limit  time.Duration
		facts  []Fact
		want   []string
	}{
		{
			name: "fcfs admission order, predictions ignored", policy: "fcfs",
			facts: []Fact{
				{TrajID: "c", AdmittedAt: sec(3), Predicted: 900},
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 10},
				{TrajID: "b", AdmittedAt: sec(2)},
			},
			want: []string{"a", "b", "c"},
		},
		{
			name: "fcfs ties by id", policy: "fcfs",
			facts: []Fact{{TrajID: "y", AdmittedAt: sec(1)}, {TrajID: "x", AdmittedAt: sec(1)}, {TrajID: "w", AdmittedAt: sec(2)}},
			want:  []string{"x", "y", "w"},
		},
		{
			name: "lpt longest first", policy: "lpt",
			facts: []Fact{
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 100},
				{TrajID: "b", AdmittedAt: sec(2), Predicted: 5000},
				{TrajID: "c", AdmittedAt: sec(3), Predicted: 700},
			},
			want: []string{"b", "c", "a"},
		},
		{
			name: "lpt unknown ranks at the median of known", policy: "lpt",
			// known 100, 300, 500: median 300; u ties with m (300) and
			// goes first by admission.
			facts: []Fact{
				{TrajID: "m", AdmittedAt: sec(5), Predicted: 300},
				{TrajID: "lo", AdmittedAt: sec(1), Predicted: 100},
				{TrajID: "hi", AdmittedAt: sec(6), Predicted: 500},
				{TrajID: "u", AdmittedAt: sec(2)},
			},
			want: []string{"hi", "u", "m", "lo"},
		},
		{
			name: "lpt unknown at the median of an even count", policy: "lpt",
			// known 100, 400: median 250.
			facts: []Fact{
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 100},
				{TrajID: "b", AdmittedAt: sec(2), Predicted: 400},
				{TrajID: "u", AdmittedAt: sec(3)},
				{TrajID: "v", AdmittedAt: sec(4), Predicted: 249},
				{TrajID: "w", AdmittedAt: sec(5), Predicted: 251},
			},
			// known 100, 249, 251, 400: median 250.
			want: []string{"b", "w", "u", "v", "a"},
		},
		{
			name: "lpt negative, NaN and Inf are unknown", policy: "lpt",
			facts: []Fact{
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 10},
				{TrajID: "b", AdmittedAt: sec(2), Predicted: 30},
				{TrajID: "neg", AdmittedAt: sec(3), Predicted: -1000},
				{TrajID: "nan", AdmittedAt: sec(4), Predicted: math.NaN()},
				{TrajID: "inf", AdmittedAt: sec(5), Predicted: math.Inf(1)},
			},
			// median of 10, 30 is 20.
			want: []string{"b", "neg", "nan", "inf", "a"},
		},
		{
			name: "lpt none known is fcfs", policy: "lpt",
			facts: []Fact{{TrajID: "b", AdmittedAt: sec(2)}, {TrajID: "c", AdmittedAt: sec(1)}, {TrajID: "a", AdmittedAt: sec(2)}},
			want:  []string{"c", "a", "b"},
		},
		{
			name: "lpt ties by admission then id", policy: "lpt",
			facts: []Fact{
				{TrajID: "z", AdmittedAt: sec(1), Predicted: 50},
				{TrajID: "y", AdmittedAt: sec(2), Predicted: 50},
				{TrajID: "x", AdmittedAt: sec(1), Predicted: 50},
			},
			want: []string{"x", "z", "y"},
		},
		{
			name: "sjf shortest first", policy: "sjf",
			facts: []Fact{
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 100},
				{TrajID: "b", AdmittedAt: sec(2), Predicted: 5000},
				{TrajID: "c", AdmittedAt: sec(3), Predicted: 700},
			},
			want: []string{"a", "c", "b"},
		},
		{
			name: "sjf unknown at the median", policy: "sjf",
			facts: []Fact{
				{TrajID: "m", AdmittedAt: sec(1), Predicted: 300},
				{TrajID: "lo", AdmittedAt: sec(2), Predicted: 100},
				{TrajID: "hi", AdmittedAt: sec(3), Predicted: 500},
				{TrajID: "u", AdmittedAt: sec(4)},
			},
			want: []string{"lo", "m", "u", "hi"},
		},
		{
			name: "sjf none known is fcfs", policy: "sjf",
			facts: []Fact{{TrajID: "b", AdmittedAt: sec(2)}, {TrajID: "a", AdmittedAt: sec(1)}},
			want:  []string{"a", "b"},
		},
		{
			name: "sjf ties by admission then id", policy: "sjf",
			facts: []Fact{
				{TrajID: "q", AdmittedAt: sec(2), Predicted: 7},
				{TrajID: "p", AdmittedAt: sec(2), Predicted: 7},
				{TrajID: "r", AdmittedAt: sec(1), Predicted: 7},
			},
			want: []string{"r", "p", "q"},
		},
		{
			name: "lpt aged short job overrides the policy", policy: "lpt", limit: limit,
			facts: []Fact{
				{TrajID: "long", AdmittedAt: sec(1), Predicted: 10000, WaitingSince: fresh},
				{TrajID: "short", AdmittedAt: sec(2), Predicted: 1, WaitingSince: waited(limit)},
			},
			want: []string{"short", "long"},
		},
		{
			name: "sjf aged long job overrides the policy", policy: "sjf", limit: limit,
			facts: []Fact{
				{TrajID: "short", AdmittedAt: sec(1), Predicted: 1, WaitingSince: fresh},
				{TrajID: "long", AdmittedAt: sec(2), Predicted: 10000, WaitingSince: waited(2 * limit)},
			},
			want: []string{"long", "short"},
		},
		{
			name: "fcfs aged late admission overrides the policy", policy: "fcfs", limit: limit,
			facts: []Fact{
				{TrajID: "early", AdmittedAt: sec(1), WaitingSince: fresh},
				{TrajID: "late", AdmittedAt: sec(9), WaitingSince: waited(limit + time.Second)},
			},
			want: []string{"late", "early"},
		},
		{
			name: "aged ordered by oldest wait, not by the policy", policy: "lpt", limit: limit,
			facts: []Fact{
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 9000, WaitingSince: waited(limit)},
				{TrajID: "b", AdmittedAt: sec(2), Predicted: 1, WaitingSince: waited(3 * limit)},
				{TrajID: "c", AdmittedAt: sec(3), Predicted: 5, WaitingSince: waited(2 * limit)},
				{TrajID: "d", AdmittedAt: sec(0), Predicted: 99999, WaitingSince: waited(limit - time.Nanosecond)},
			},
			want: []string{"b", "c", "a", "d"},
		},
		{
			name: "aged ties by admission then id", policy: "sjf", limit: limit,
			facts: []Fact{
				{TrajID: "b", AdmittedAt: sec(1), Predicted: 1, WaitingSince: waited(limit)},
				{TrajID: "c", AdmittedAt: sec(0), Predicted: 9, WaitingSince: waited(limit)},
				{TrajID: "a", AdmittedAt: sec(1), Predicted: 5, WaitingSince: waited(limit)},
			},
			want: []string{"c", "a", "b"},
		},
		{
			name: "no ageing with a zero limit", policy: "lpt",
			facts: []Fact{
				{TrajID: "short", AdmittedAt: sec(1), Predicted: 1, WaitingSince: waited(24 * time.Hour)},
				{TrajID: "long", AdmittedAt: sec(2), Predicted: 100, WaitingSince: fresh},
			},
			want: []string{"long", "short"},
		},
		{
			name: "zero WaitingSince never ages", policy: "lpt", limit: limit,
			facts: []Fact{
				{TrajID: "idle", AdmittedAt: sec(1), Predicted: 1},
				{TrajID: "long", AdmittedAt: sec(2), Predicted: 100, WaitingSince: fresh},
			},
			want: []string{"long", "idle"},
		},
		{
			name: "waiting since the future does not age", policy: "sjf", limit: limit,
			facts: []Fact{
				{TrajID: "skewed", AdmittedAt: sec(1), Predicted: 100, WaitingSince: now.Add(time.Hour)},
				{TrajID: "short", AdmittedAt: sec(2), Predicted: 1, WaitingSince: fresh},
			},
			want: []string{"short", "skewed"},
		},
		{name: "empty", policy: "lpt", limit: limit, facts: nil, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, tt.policy, Config{AgeLimit: tt.limit})
			in := slices.Clone(tt.facts)
			got := p.Rank(in, now)
			if !slices.Equal(ids(got), tt.want) {
				t.Fatalf("Rank = %v, want %v", ids(got), tt.want)
			}
			if !slices.Equal(ids(in), ids(tt.facts)) {
				t.Fatalf("Rank reordered its input: %v", ids(in))
			}
			if len(in) > 0 && &got[0] == &in[0] {
				t.Fatal("Rank returned its input slice")
			}
		})
	}
}

// Admission ranks a batch that arrived together in the policy's order
// however long it has waited: waits run to the newest arrival, not to now.
// By the clock the whole batch would have aged after AgeLimit and fallen
// back to TrajID order. A sample that arrived AgeLimit before a later one
// still ages, and goes first.
func TestAdmissionOrderDoesNotAgeABatch(t *testing.T) {
	lpt := mustNew(t, NameLPT, Config{AgeLimit: DefaultAgeLimit})
	var batch []Fact
	for i, pred := range []float64{300, 900, 100, 700, 500} {
		batch = append(batch, Fact{TrajID: fmt.Sprintf("s%d", i), AdmittedAt: t0, WaitingSince: t0, Predicted: pred})
	}
	want := []string{"s1", "s3", "s4", "s0", "s2"}
	if got := ids(gather(batch, AdmissionOrder(lpt, batch))); !slices.Equal(got, want) {
		t.Fatalf("a batch that has waited: %v, want lpt order %v", got, want)
	}
	// Ranked at the clock, 10 minutes on, the batch has aged: TrajID order.
	if got := ids(lpt.Rank(batch, t0.Add(10*time.Minute))); !slices.Equal(got, []string{"s0", "s1", "s2", "s3", "s4"}) {
		t.Fatalf("by the clock: %v", got)
	}
	// A stream: s2 arrived AgeLimit before the newest arrival, so it has
	// aged and goes first; the rest keep lpt order.
	stream := slices.Clone(batch)
	for i := range stream {
		if stream[i].TrajID != "s2" {
			stream[i].AdmittedAt, stream[i].WaitingSince = sec(150), sec(150)
		}
	}
	want = []string{"s2", "s1", "s3", "s4", "s0"}
	if got := ids(gather(stream, AdmissionOrder(lpt, stream))); !slices.Equal(got, want) {
		t.Fatalf("a stream: %v, want the aged sample first, %v", got, want)
	}
	if got := AdmissionOrder(lpt, nil); len(got) != 0 {
		t.Fatalf("nothing waiting: %v", got)
	}
}
