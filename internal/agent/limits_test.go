package agent

import (
	"errors"
	"testing"
	"time"
)

func TestCheckLimits(t *testing.T) {
	tests := []struct {
		name    string
		limits  Limits
		usage   Usage
		wantErr string // "" for nil
	}{
		{"zero limits are unlimited", Limits{}, Usage{Calls: 1e6, Tokens: 1e9, Elapsed: 1e6 * time.Hour}, ""},
		{"below step limit", Limits{StepLimit: 10}, Usage{Calls: 9}, ""},
		{"exactly at step limit", Limits{StepLimit: 10}, Usage{Calls: 10}, "limits exceeded: step_limit 10 reached"},
		{"past step limit", Limits{StepLimit: 10}, Usage{Calls: 11}, "limits exceeded: step_limit 10 reached"},
		{"below token budget", Limits{TokenBudget: 4096}, Usage{Tokens: 4095}, ""},
		{"exactly at token budget", Limits{TokenBudget: 4096}, Usage{Tokens: 4096}, "limits exceeded: token_budget 4096 reached"},
		{"below wall clock", Limits{WallClock: 30 * time.Minute}, Usage{Elapsed: 30*time.Minute - 1}, ""},
		{"exactly at wall clock", Limits{WallClock: 30 * time.Minute}, Usage{Elapsed: 30 * time.Minute}, "limits exceeded: wall_clock 30m0s reached"},
		{"steps reported first", Limits{StepLimit: 1, TokenBudget: 1, WallClock: 1}, Usage{Calls: 1, Tokens: 1, Elapsed: 1}, "limits exceeded: step_limit 1 reached"},
		{"tokens before wall clock", Limits{StepLimit: 5, TokenBudget: 1, WallClock: 1}, Usage{Calls: 1, Tokens: 1, Elapsed: 1}, "limits exceeded: token_budget 1 reached"},
		{"negative limit is unlimited, as in mini-swe-agent", Limits{StepLimit: -1}, Usage{Calls: 5}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckLimits(tt.limits, tt.usage)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckLimits() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrLimitsExceeded) {
				t.Fatalf("CheckLimits() = %v, want ErrLimitsExceeded", err)
			}
			if err.Error() != tt.wantErr {
				t.Fatalf("CheckLimits() = %q, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMaxNewTokens(t *testing.T) {
	tests := []struct {
		name   string
		maxNew int
		limits Limits
		usage  Usage
		want   int
	}{
		{"no budget", 1024, Limits{}, Usage{Tokens: 1e9}, 1024},
		{"plenty left", 1024, Limits{TokenBudget: 4096}, Usage{Tokens: 100}, 1024},
		{"exactly maxNew left", 1024, Limits{TokenBudget: 4096}, Usage{Tokens: 3072}, 1024},
		{"less than maxNew left", 1024, Limits{TokenBudget: 4096}, Usage{Tokens: 3073}, 1023},
		{"one left", 1024, Limits{TokenBudget: 4096}, Usage{Tokens: 4095}, 1},
		{"exactly at budget", 1024, Limits{TokenBudget: 4096}, Usage{Tokens: 4096}, 0},
		{"past budget never negative", 1024, Limits{TokenBudget: 4096}, Usage{Tokens: 5000}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MaxNewTokens(tt.maxNew, tt.limits, tt.usage); got != tt.want {
				t.Fatalf("MaxNewTokens() = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name    string
		limits  Limits
		wantErr string // "" for nil
	}{
		{"zero", Limits{}, ""},
		{"positive", Limits{StepLimit: 10, TokenBudget: 100, WallClock: time.Minute}, ""},
		{"negative, all named", Limits{StepLimit: -1, TokenBudget: -1, WallClock: -1},
			"step_limit: -1 is negative\ntoken_budget: -1 is negative\nwall_clock: -1ns is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limits.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestMinLimit(t *testing.T) {
	tests := []struct{ a, b, want int }{
		{0, 0, 0}, {5, 0, 5}, {0, 7, 7}, {5, 7, 5}, {9, 7, 7}, {-1, 3, 3}, {3, -1, 3},
	}
	for _, tt := range tests {
		if got := MinLimit(tt.a, tt.b); got != tt.want {
			t.Errorf("MinLimit(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
