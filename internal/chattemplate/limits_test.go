package chattemplate

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that rendering leaves no goroutine behind (gonja's own
// range did).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name, src   string
		kwargs      map[string]any
		wantInError string
	}{
		{"range", `{% for i in range(200000) %}{% endfor %}`, nil, "over the limit"},
		{"nested loops", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, nil, "loops ran over"},
		{"macro recursion", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, nil, "recursion deeper"},
		{"output", `{% for i in range(100000) %}{{ big }}{% endfor %}`, map[string]any{"big": strings.Repeat("x", 1024)}, errOutputTooLong.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.src, nil).Render(Input{Kwargs: tt.kwargs})
			if err == nil || !strings.Contains(err.Error(), tt.wantInError) {
				t.Fatalf("Render error = %v, want one mentioning %q", err, tt.wantInError)
			}
		})
	}
}

func TestRange(t *testing.T) {
	for src, want := range map[string]string{
		`{{ range(3) | join(',') }}`:        "0,1,2",
		`{{ range(1, 7, 2) | join(',') }}`:  "1,3,5",
		`{{ range(5, 0, -2) | join(',') }}`: "5,3,1",
		`{{ range(3, 1) | length }}`:        "0",
		`{% set r = range(4) %}{{ r[2] }}`:  "2",
	} {
		got, err := New(src, nil).Render(Input{})
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", src, got, err, want)
		}
	}
}
