package localnats

import (
	"testing"
	"time"
)

func TestParseSync(t *testing.T) {
	for in, want := range map[string]Sync{"": {}, "always": {Always: true}, "10s": {Interval: 10 * time.Second}} {
		if got, err := ParseSync(in); err != nil || got != want {
			t.Errorf("ParseSync(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"never", "0s", "-1m", "10"} {
		if _, err := ParseSync(in); err == nil {
			t.Errorf("ParseSync(%q) accepted", in)
		}
	}
}

// The server syncs as told.
func TestStartSync(t *testing.T) {
	for _, sync := range []Sync{{Always: true}, {Interval: 5 * time.Second}} {
		s, err := Start(t.TempDir(), -1, sync)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.JetStreamConfig()
		s.Shutdown()
		if cfg == nil || cfg.SyncAlways != sync.Always || (sync.Interval > 0 && cfg.SyncInterval != sync.Interval) {
			t.Errorf("sync %+v: JetStream config %+v", sync, cfg)
		}
	}
}

func FuzzParseSync(f *testing.F) {
	for _, s := range []string{"", "always", "10s", "1h30m", "-5s", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseSync(s)
		if err != nil {
			return
		}
		if got.Always && got.Interval != 0 || got.Interval < 0 || (s != "" && !got.Always && got.Interval == 0) {
			t.Fatalf("ParseSync(%q) = %+v", s, got)
		}
	})
}
