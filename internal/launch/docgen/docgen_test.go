package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/actloop/actloop/internal/launch"
)

func root(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	r, err := moduleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The committed docs/configuration.md is what docgen writes from the
// settings structs as they are.
func TestConfigurationDocIsCurrent(t *testing.T) {
	r := root(t)
	want, err := generate(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(r, Doc))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with the settings structs' tags and doc comments; regenerate it with\n\tgo run ./internal/launch/docgen\nand commit the result", Doc)
	}
}

// The sections a service reads are exactly the settings it reads, as
// reflection over its Config sees them: docgen's reading of the sources
// and its "Read by" lines are both right.
func TestSectionsAreWhatServicesRead(t *testing.T) {
	r := root(t)
	for _, name := range launch.Names {
		var got []string
		for _, sec := range sections {
			if !slices.Contains(sec.readBy, name) || sec.static != nil {
				continue
			}
			rows, _, err := fields(filepath.Join(r, sec.file), sec.typ)
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range rows {
				got = append(got, row.Name)
			}
		}
		want := launch.Settings(name)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: the sections read by it list %v;\nits Config reads %v", name, got, want)
		}
	}
}

// Every setting has a meaning, and no note is left for a setting that is
// gone.
func TestEverySettingHasAMeaning(t *testing.T) {
	if _, err := tables(root(t)); err != nil {
		t.Fatal(err)
	}
}

func TestMeaning(t *testing.T) {
	byGo := map[string]string{"StealAfter": "STEAL_AFTER", "Steal": "STEAL", "URL": "PREDICTOR_URL", "Slots": "SLOTS"}
	tags := []string{"STEAL_AFTER", "STEAL", "PREDICTOR_URL", "SLOTS"}
	for _, tc := range []struct{ name, doc, goName, want string }{
		{"is", "Steal is whether to steal.", "Steal", "whether to steal."},
		{"colon", "Steal: a worker with idle slots.", "Steal", "a worker with idle slots."},
		{"verb", "Steal lets a worker take steps older than StealAfter.", "Steal", "lets a worker take steps older than `ACTLOOP_STEAL_AFTER`."},
		{"clause", "URL, when set, is the base URL.", "URL", "the base URL."},
		{"kept", "Steal (on or off) and StealAfter decide.", "Steal", "`ACTLOOP_STEAL` (on or off) and `ACTLOOP_STEAL_AFTER` decide."},
		{"tags", "0 = SLOTS; see ACTLOOP_PULL_WAIT, not `SLOTS`.", "Slots", "0 = `ACTLOOP_SLOTS`; see `ACTLOOP_PULL_WAIT`, not `SLOTS`."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := meaning(tc.doc, tc.goName, byGo, tags); got != tc.want {
				t.Errorf("meaning(%q) =\n%q, want\n%q", tc.doc, got, tc.want)
			}
		})
	}
	if got, want := cell("a <id> | `b <c>`"), "a &lt;id&gt; \\| `b <c>`"; got != want {
		t.Errorf("cell = %q, want %q", got, want)
	}
}
