package predict

import (
	"errors"
	"testing"
)

func FuzzDecodeHTTPReply(f *testing.F) {
	f.Add([]byte(`{"remaining_tokens": 1234.5, "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_tokens": 0, "remaining_turns": 0, "source": "x"}`))
	f.Add([]byte(`{"remaining_tokens": -1, "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_tokens": 1e400, "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_tokens": "1", "remaining_turns": 3}`))
	f.Add([]byte(`{"remaining_turns": 3}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := decodeHTTPReply(b)
		if err != nil {
			if !errors.Is(err, ErrBadReply) {
				t.Fatalf("error %v does not wrap ErrBadReply", err)
			}
			return
		}
		if rep.Source != SourceHTTP || rep.Error != "" {
			t.Fatalf("reply %+v", rep)
		}
		if err := rep.Validate(); err != nil {
			t.Fatalf("accepted an invalid reply %+v: %v", rep, err)
		}
	})
}
