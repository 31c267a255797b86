package tokenize

import (
	"slices"
	"testing"
)

func TestBytesRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []int32
	}{
		{"empty", "", []int32{}},
		{"ascii", "ab", []int32{'a', 'b'}},
		{"special", "<|im_end|>x", []int32{ImEnd, 'x'}},
		{"partial special stays bytes", "<|im_", []int32{'<', '|', 'i', 'm', '_'}},
		{"utf8", "é", []int32{0xc3, 0xa9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Bytes{}.Encode(tt.in)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tt.in, got, tt.want)
			}
			if back := (Bytes{}).Decode(got); back != tt.in {
				t.Fatalf("Decode(Encode(%q)) = %q", tt.in, back)
			}
		})
	}
}

// Turn-by-turn deltas must equal rendering the whole conversation at once.
func TestChatMLDeltasEqualWhole(t *testing.T) {
	c := NewByteChatML()
	var deltas []int32
	deltas = append(deltas, c.Message("system", "sys")...)
	deltas = append(deltas, c.Message("user", "task")...)
	deltas = append(deltas, c.GenerationPrompt()...)
	gen := c.Tok.Encode("reply<|im_end|>")
	deltas = append(deltas, gen...)
	deltas = append(deltas, c.CloseTurn(gen)...)
	deltas = append(deltas, c.Message("user", "obs")...)

	whole := c.Tok.Encode("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\ntask<|im_end|>\n" +
		"<|im_start|>assistant\nreply<|im_end|>\n<|im_start|>user\nobs<|im_end|>\n")
	if !slices.Equal(deltas, whole) {
		t.Fatalf("deltas differ from whole:\n%q\n%q", c.Tok.Decode(deltas), c.Tok.Decode(whole))
	}
	// A turn cut at the length limit gets its end-of-turn token added.
	if got := c.Tok.Decode(c.CloseTurn(c.Tok.Encode("cut"))); got != "<|im_end|>\n" {
		t.Fatalf("CloseTurn(cut) = %q", got)
	}
}

func FuzzBytesRoundTrip(f *testing.F) {
	f.Add("hello <|im_start|>user\n")
	f.Add("\xff\x00<|endoftext|")
	f.Fuzz(func(t *testing.T, s string) {
		if got := (Bytes{}).Decode(Bytes{}.Encode(s)); got != s {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
	})
}
