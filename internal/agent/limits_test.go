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
		{"room for two tokens", Limits{ContextLength: 4096}, Usage{Context: 4093}, ""},
		{"room for one token", Limits{ContextLength: 4096}, Usage{Context: 4094}, ""},
		{"no room: the last token is spared", Limits{ContextLength: 4096}, Usage{Context: 4095}, "limits exceeded: context_length 4096 reached"},
		{"input past the context", Limits{ContextLength: 4096}, Usage{Context: 10914}, "limits exceeded: context_length 4096 reached"},
		{"no context length is unbounded", Limits{}, Usage{Context: 1 << 30}, ""},
		{"format errors before context", Limits{FormatErrorLimit: 1, ContextLength: 10}, Usage{FormatErrors: 1, Context: 10}, "limits exceeded: format_error_limit 1 reached"},
		{"steps before context", Limits{StepLimit: 1, ContextLength: 10}, Usage{Calls: 1, Context: 10}, "limits exceeded: step_limit 1 reached"},
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
		// The case: 1,040,000 new tokens asked of a 1,048,576-token
		// context after 10,914 tokens of conversation.
		{"capped at the context", 1040000, Limits{ContextLength: 1 << 20}, Usage{Context: 10914}, 1<<20 - 10914 - 1},
		{"context has room for all", 1024, Limits{ContextLength: 1 << 20}, Usage{Context: 10914}, 1024},
		{"exactly maxNew fits", 1024, Limits{ContextLength: 4096}, Usage{Context: 4096 - 1024 - 1}, 1024},
		{"one token fits", 1024, Limits{ContextLength: 4096}, Usage{Context: 4094}, 1},
		{"context full", 1024, Limits{ContextLength: 4096}, Usage{Context: 4095}, 0},
		{"input past the context never negative", 1024, Limits{ContextLength: 4096}, Usage{Context: 5000}, 0},
		{"the lower of budget and context", 1024, Limits{TokenBudget: 4096, ContextLength: 4096}, Usage{Tokens: 4000, Context: 3000}, 96},
		{"the lower of context and budget", 1024, Limits{TokenBudget: 4096, ContextLength: 4096}, Usage{Tokens: 100, Context: 3995}, 100},
		// A resumed turn: its output so far is in the context and spent
		// from maxNew already.
		{"resume within the context", 1000 - 600, Limits{ContextLength: 4096}, Usage{Context: 1800 + 600}, 400},
		{"resume capped", 1000 - 600, Limits{ContextLength: 2600}, Usage{Context: 1800 + 600}, 199},
		{"resume with no room", 1000 - 600, Limits{ContextLength: 2401}, Usage{Context: 1800 + 600}, 0},
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
		{"negative, all named", Limits{StepLimit: -1, TokenBudget: -1, WallClock: -1, ContextLength: -1},
			"step_limit: -1 is negative\ntoken_budget: -1 is negative\nwall_clock: -1ns is negative\ncontext_length: -1 is negative"},
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
