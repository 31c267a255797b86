package schema

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func bodyResult(n int) Result {
	r := Result{ResultHead: ResultHead{V: Version, TrajID: "t", Status: StatusSubmitted, NumTokens: n},
		Tokens: make([]int32, n), Logprobs: make([]float32, n), LossMask: make([]int8, n), Versions: make([]int32, n),
		Messages: []Message{{Role: "user", Content: "fix it"}, {Role: "assistant", Content: "```bash\nls\n```"}},
		Diff:     "--- a\n+++ b\n", Tests: map[string]string{"t1": "PASSED"}, Metadata: json.RawMessage(`{"repo":"x"}`)}
	for i := range n {
		r.Tokens[i], r.Logprobs[i], r.Versions[i] = int32(i*7919%151643), -float32(i%31)/7, -1
		if i%3 != 0 {
			r.LossMask[i], r.Versions[i] = 1, int32(i/100)
		}
	}
	r.Logprobs[0] = float32(math.Inf(-1)) // a token the model could not have sampled
	return r
}

// A body decodes to exactly what was encoded, including -Inf log-probs and
// negative versions, and its arrays sit where docs say (4-byte aligned,
// little-endian), so other languages can read them in place.
func TestBodyRoundTrip(t *testing.T) {
	for _, n := range []int{1, 3, 1000} {
		r := bodyResult(n)
		b, err := EncodeBody(&r)
		if err != nil {
			t.Fatal(err)
		}
		got := Result{ResultHead: r.ResultHead}
		if err := DecodeBody(b, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("n=%d: round trip differs", n)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var raw bytes.Buffer
		if _, err := raw.ReadFrom(zr); err != nil {
			t.Fatal(err)
		}
		d := raw.Bytes()
		le := binary.LittleEndian
		if string(d[:4]) != "ALRB" || le.Uint32(d[4:]) != 1 || le.Uint32(d[8:]) != uint32(n) ||
			int32(le.Uint32(d[16+4*(n-1):])) != r.Tokens[n-1] || int32(le.Uint32(d[16+8*n+4*(n-1):])) != r.Versions[n-1] ||
			int8(d[16+12*n+n-1]) != r.LossMask[n-1] || int(le.Uint32(d[12:])) != len(d)-16-13*n {
			t.Fatalf("n=%d: layout differs from the documented one", n)
		}
	}
	// A proxy-flow result's segments travel in the JSON part.
	r := bodyResult(100)
	r.Segments = []int{0, 40}
	b, err := EncodeBody(&r)
	if err != nil {
		t.Fatal(err)
	}
	got := Result{ResultHead: r.ResultHead}
	if err := DecodeBody(b, &got); err != nil || !reflect.DeepEqual(got.Segments, r.Segments) {
		t.Fatalf("segments %v (%v), want %v", got.Segments, err, r.Segments)
	}
	var empty Result
	b, err = EncodeBody(&empty)
	if err != nil {
		t.Fatal(err)
	}
	if err := DecodeBody(b, &empty); err != nil || empty.Tokens == nil || empty.Messages == nil {
		t.Fatalf("empty body: %v", err)
	}
}

// Bodies that lie are refused with ErrInvalid: arrays of different
// lengths (on encoding), a wrong magic, a header promising more than
// follows, bytes past the end.
func TestBodyRefusesBadInput(t *testing.T) {
	r := bodyResult(10)
	r.Versions = r.Versions[:9]
	if _, err := EncodeBody(&r); !errors.Is(err, ErrInvalid) {
		t.Fatalf("ragged arrays: %v", err)
	}
	gz := func(raw []byte) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		_, _ = zw.Write(raw)
		_ = zw.Close()
		return b.Bytes()
	}
	header := func(magic string, format, n, m uint32) []byte {
		h := make([]byte, 16)
		copy(h, magic)
		binary.LittleEndian.PutUint32(h[4:], format)
		binary.LittleEndian.PutUint32(h[8:], n)
		binary.LittleEndian.PutUint32(h[12:], m)
		return h
	}
	for _, segs := range [][]int{{5}, {0, 0}, {0, 7, 3}, {0, 10}} {
		r := bodyResult(10)
		r.Segments = segs
		if _, err := EncodeBody(&r); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "segments") {
			t.Errorf("segments %v: %v, want ErrInvalid naming segments", segs, err)
		}
	}
	const badSegments = `{"messages":[],"segments":[3]}`
	for name, b := range map[string][]byte{
		"bad segments":  gz(append(header("ALRB", 1, 0, uint32(len(badSegments))), badSegments...)),
		"not gzip":      []byte("ALRB"),
		"bad magic":     gz(append(header("XXXX", 1, 0, 2), "{}"...)),
		"newer format":  gz(append(header("ALRB", 2, 0, 2), "{}"...)),
		"short":         gz(append(header("ALRB", 1, 1000, 2), "{}"...)),
		"huge n":        gz(header("ALRB", 1, math.MaxUint32, 2)),
		"trailing":      gz(append(header("ALRB", 1, 0, 2), "{}xx"...)),
		"bad json":      gz(append(header("ALRB", 1, 0, 2), "{x"...)),
		"header only 3": gz([]byte("ALR")),
	} {
		var got Result
		if err := DecodeBody(b, &got); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

func FuzzDecodeBody(f *testing.F) {
	for _, n := range []int{1, 5} {
		r := bodyResult(n)
		b, err := EncodeBody(&r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Result
		if err := DecodeBody(b, &r); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not ErrInvalid: %v", err)
			}
			return
		}
		// Whatever decodes encodes again to a body that decodes the same.
		r.NumTokens = len(r.Tokens)
		again, err := EncodeBody(&r)
		if err != nil {
			t.Fatal(err)
		}
		var r2 Result
		r2.NumTokens = r.NumTokens
		if err := DecodeBody(again, &r2); err != nil {
			t.Fatal(err)
		}
		if len(r2.Tokens) != len(r.Tokens) || !reflect.DeepEqual(r2.Versions, r.Versions) {
			t.Fatal("re-encoded body differs")
		}
	})
}
