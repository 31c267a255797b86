package llm

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestTokenIDsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 200 {
		ids := make([]int32, n)
		for i := range ids {
			ids[i] = int32(r.Uint32())
		}
		ids = append(ids, 0, math.MaxInt32, math.MinInt32)
		b, err := json.Marshal(TokenIDs(ids))
		if err != nil {
			t.Fatal(err)
		}
		var std []int32
		if err := json.Unmarshal(b, &std); err != nil || !slices.Equal(std, ids) {
			t.Fatalf("encoding/json reads %s as %v (%v)", b, std, err)
		}
		var back TokenIDs
		if err := json.Unmarshal(b, &back); err != nil || !slices.Equal(back, ids) {
			t.Fatalf("read back %v (%v)", back, err)
		}
	}
	if b, _ := json.Marshal(struct{ X TokenIDs }{}); string(b) != `{"X":null}` {
		t.Errorf("nil encodes as %s", b)
	}
	if b, _ := json.Marshal(TokenIDs{}); string(b) != `[]` {
		t.Errorf("empty encodes as %s", b)
	}
}

func TestParseTokenIDsErrorsNameTheElement(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`[1,null]`, "[1]: null token id"},
		{`[1,2.5]`, "[1]: not an integer token id (number 2.5)"},
		{`[7,1e3]`, "[1]: not an integer token id (number 1e3)"},
		{`[2147483648]`, "[0]: token id 2147483648 out of int32 range"},
		{`[-2147483649]`, "[0]: token id -2147483649 out of int32 range"},
		{`[99999999999999999999999]`, "[0]: token id 99999999999999999999999 out of int32 range"},
		{`[1,"a"]`, "[1]: not an integer token id (string)"},
		{`[[1]]`, "[0]: not an integer token id (array)"},
		{`{"a":1}`, "cannot unmarshal object"},
		{`[1,]`, "malformed"},
		{`[01]`, "malformed"},
		{`[1 2]`, "malformed"},
		{`[1`, "malformed"},
		{`[1]x`, "malformed"},
		{`[-]`, "malformed"},
		{``, "cannot unmarshal nothing"},
	} {
		_, err := ParseTokenIDs([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseTokenIDs(%s) = %v, want %q", c.in, err, c.want)
		}
	}
	var ee *TokenIDError
	if _, err := ParseTokenIDs([]byte(`[0, null]`)); !errors.As(err, &ee) || ee.Index != 1 {
		t.Errorf("TokenIDError: %v", err)
	}
	for _, ok := range []string{" [ 1 , -2 ,3 ] ", "[]", " null ", "[-0]", "[0]"} {
		if _, err := ParseTokenIDs([]byte(ok)); err != nil {
			t.Errorf("ParseTokenIDs(%q): %v", ok, err)
		}
	}
}

// FuzzParse checks Parse against encoding/json: what one accepts as a list
// of int32s the other accepts with the same values.
func FuzzParseTokenIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `null`, `[]`, `[1,null]`, `[1.5]`, `[2147483648]`, ` [ -7 ] `, `["x"]`, `[01]`, `{}`, `[1,]`, `[1e2]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseTokenIDs(b)
		var ptrs []*int32
		stdErr := json.Unmarshal(b, &ptrs)
		if stdErr == nil && slices.Contains(ptrs, nil) {
			stdErr = errors.New("null element")
		}
		if (err == nil) != (stdErr == nil) {
			t.Fatalf("ParseTokenIDs(%q): %v; encoding/json: %v", b, err, stdErr)
		}
		if err != nil {
			return
		}
		if (got == nil) != (ptrs == nil) || len(got) != len(ptrs) {
			t.Fatalf("ParseTokenIDs(%q) = %v; encoding/json %d elements", b, got, len(ptrs))
		}
		for i, p := range ptrs {
			if *p != got[i] {
				t.Fatalf("ParseTokenIDs(%q)[%d] = %d, encoding/json %d", b, i, got[i], *p)
			}
		}
		again, err := ParseTokenIDs(AppendTokenIDs(nil, got))
		if err != nil || !slices.Equal(again, got) {
			t.Fatalf("round trip of %v: %v %v", got, again, err)
		}
	})
}

func BenchmarkParseTokenIDs(b *testing.B) {
	ids := make([]int32, 8192)
	for i := range ids {
		ids[i] = int32(i * 37 % 151000)
	}
	raw := AppendTokenIDs(nil, ids)
	b.Run("TokenIDs", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := ParseTokenIDs(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var v []int32
			if err := json.Unmarshal(raw, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
