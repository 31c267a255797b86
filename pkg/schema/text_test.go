package schema

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// nested is a JSON value n arrays and objects deep, alternating.
func nested(n int) string {
	var open, end strings.Builder
	for i := range n {
		if i%2 == 0 {
			open.WriteString(`{"a":`)
			end.WriteString(`}`)
		} else {
			open.WriteString(`[`)
			end.WriteString(`]`)
		}
	}
	closing := []byte(end.String())
	for i, j := 0, len(closing)-1; i < j; i, j = i+1, j-1 {
		closing[i], closing[j] = closing[j], closing[i]
	}
	return open.String() + `1` + string(closing)
}

// Metadata nested past what every client's JSON decoder reads (CPython's
// json recurses once per level) is refused by name; at the limit it is
// accepted, as strings holding brackets do not count.
func TestDecodeSampleMetadataDepth(t *testing.T) {
	tests := []struct {
		name     string
		metadata string
		wantErr  bool
	}{
		{"flat", `{"k":"v"}`, false},
		{"scalar", `7`, false},
		{"brackets in strings", `{"a":"[[[[{{{{","b":["]]]}}}"]}`, false},
		{"at the limit", nested(MaxMetadataDepth), false},
		{"one past the limit", nested(MaxMetadataDepth + 1), true},
		{"encoding/json's own limit", nested(9000), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeSample([]byte(sampleWith(`"metadata":` + tt.metadata)))
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("DecodeSample: %v", err)
				}
				if string(s.Metadata) != tt.metadata {
					t.Fatalf("metadata changed: %.80s", s.Metadata)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != "metadata" || !errors.Is(err, ErrInvalid) {
				t.Fatalf("DecodeSample = %v, want a FieldError on metadata", err)
			}
			if !strings.Contains(err.Error(), strconv.Itoa(MaxMetadataDepth)+" levels") {
				t.Errorf("error %q does not name the limit", err)
			}
		})
	}
}

// A sample or request whose text holds invalid UTF-8 is refused, naming
// the field, rather than read with U+FFFD in place of the bad bytes.
func TestDecodeInvalidUTF8(t *testing.T) {
	const bad = "\xff\xfe"
	tests := []struct {
		name      string
		in        string
		wantField string // "" = valid
	}{
		{"valid multibyte", sampleWith(`"family":"é☃😀","metadata":{"ключ":"值"}`), ""},
		{"task", `{"v":1,"id":"a","task":"t` + bad + `","env":{"backend":"sim"}}`, "task"},
		{"truncated rune", `{"v":1,"id":"a","task":"t` + "\xe2\x98" + `","env":{"backend":"sim"}}`, "task"},
		{"surrogate encoded in UTF-8", `{"v":1,"id":"a","task":"t` + "\xed\xa0\x80" + `","env":{"backend":"sim"}}`, "task"},
		{"nested string", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","eval":"` + bad + `"}}`, "env.eval"},
		{"array element", sampleWith(`"script":["ok","x` + bad + `"]`), "script[1]"},
		{"setup command", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","setup":["a","b","c` + bad + `"]}}`, "env.setup[2]"},
		{"metadata value", sampleWith(`"metadata":{"x":[1,{"y":"` + bad + `"}]}`), "metadata.x[1].y"},
		{"metadata key", sampleWith(`"metadata":{"k` + bad + `":1}`), "metadata.k\uFFFD"},
		{"stop", sampleWith(`"sampling":{"stop":["` + bad + `"]}`), "sampling.stop[0]"},
		{"outside any string", `{"v":1,"id":"a","task":"t","env":{"backend":"sim"}}` + bad, "(message)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSample([]byte(tt.in))
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("DecodeSample: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField || !errors.Is(err, ErrInvalid) {
				t.Fatalf("DecodeSample = %v, want a FieldError on %s", err, tt.wantField)
			}
			if !strings.Contains(fe.Reason, "invalid UTF-8 at byte") {
				t.Errorf("reason %q does not say invalid UTF-8", fe.Reason)
			}
		})
	}
	t.Run("deep malformed request", func(t *testing.T) {
		// Found in one pass, without recursion or a frame per level; the
		// path is cut short.
		b := []byte(strings.Repeat("[", 1<<20) + "\"" + bad + "\"")
		_, err := DecodeRequest[AbortRequest](b)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != strings.Repeat("[0]", 32)+"…" ||
			fe.Reason != "invalid UTF-8 at byte 1048577 of the message (encode text as UTF-8)" {
			t.Fatalf("DecodeRequest = %.400v", err)
		}
	})
	t.Run("abort reason", func(t *testing.T) {
		_, err := DecodeRequest[AbortRequest]([]byte(`{"traj_ids":["a"],"reason":"r` + bad + `"}`))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != "reason" {
			t.Fatalf("DecodeRequest = %v, want a FieldError on reason", err)
		}
	})
}

// A sample built in Go (json.Marshal would replace invalid UTF-8 silently
// too) is checked by Validate.
func TestValidateInvalidUTF8(t *testing.T) {
	s := Sample{V: Version, ID: "a", Task: "t", Env: Env{Backend: BackendSim}}
	s.Script = []string{"ok", "b\xff"}
	s.Metadata = []byte("{\"a\":\"\xff\"}")
	err := s.Validate()
	for _, field := range []string{"script[1]: invalid UTF-8 at byte 1", "metadata: invalid UTF-8 at byte 6"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate = %v, want an error on %s", err, field)
		}
	}
}

// pathAt takes any input, valid JSON or not, and any offset in it without
// panicking.
func FuzzPathAt(f *testing.F) {
	f.Add([]byte(`{"a":[1,{"b":"x"}],"c":"y"}`), 14)
	f.Add([]byte(`[[[[["\"",{"k":"]"}]]]]]`), 13)
	f.Add([]byte(`{"a":`), 3)
	f.Fuzz(func(t *testing.T, b []byte, off int) {
		if off < 0 || off >= len(b) {
			return
		}
		_ = pathAt(b, off)
	})
}
