package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
)

func FuzzDecodeGenerateResponse(f *testing.F) {
	f.Add([]byte(capturedResponse))
	f.Add([]byte(`{"text":"","meta_info":{"id":"x","finish_reason":{"type":"abort","message":"Abort before prefill"},"prompt_tokens":0,"completion_tokens":0}}`))
	f.Add([]byte(`{"output_ids":[],"meta_info":{"finish_reason":{"type":"abort","message":"Abort in waiting queue"},"output_token_logprobs":[]}}`))
	f.Add([]byte(`{"output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop","matched":[1,2]},"output_token_logprobs":[[-1,1,null],[-2,2,"x"]]}}`))
	f.Add([]byte(`{"output_ids":[1],"meta_info":{"finish_reason":{"type":"length","length":1},"output_token_logprobs":[[null,1,null]]}}`))
	f.Add([]byte(`{"meta_info":{"finish_reason":{"type":"stop","matched":"</s>"},"output_token_logprobs":[[-1,5]]}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := decodeGenerateResponse(b)
		if err != nil {
			if !errors.Is(err, ErrBadResponse) {
				t.Fatalf("error %v is not ErrBadResponse", err)
			}
			return
		}
		if len(res.Logprobs) != len(res.OutputIDs) && !(res.Logprobs == nil && len(res.OutputIDs) == 0) {
			t.Fatalf("%d logprobs for %d output ids", len(res.Logprobs), len(res.OutputIDs))
		}
		if res.Finish.Type < FinishStop || res.Finish.Type > FinishAbort {
			t.Fatalf("finish type %d", res.Finish.Type)
		}
		if res.PromptTokens < 0 || res.CompletionTokens < 0 || res.CachedTokens < 0 || res.Finish.Length < 0 {
			t.Fatalf("negative count in %+v", res)
		}
	})
}

// FuzzParseLogprobs checks the fast parse of output_token_logprobs against
// the reflective one: whatever it accepts, decodeLogprobEntry reads the same.
func FuzzParseLogprobs(f *testing.F) {
	for _, s := range []string{`[[-1,1,null],[-2.5e-3,2,"x\"y\u00e9"]]`, `[]`, ` [ [ 0 , 7 ] ] `, `[[-1,1,null,4]]`,
		`[[1.,2]]`, `[[01,2]]`, `[[-1,2147483648]]`, `[[-1,2,"\x01"]]`, `[[1e400,2]]`, `[[-0,-0,""]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lps, ids, ok := parseLogprobs(b)
		if !ok {
			return
		}
		var raw []json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			t.Fatalf("fast parse accepted %q, encoding/json: %v", b, err)
		}
		if len(raw) != len(lps) || len(ids) != len(lps) {
			t.Fatalf("%q: %d entries, fast %d", b, len(raw), len(lps))
		}
		for i, r := range raw {
			lp, id, err := decodeLogprobEntry(r, i)
			if err != nil || math.Float32bits(lp) != math.Float32bits(lps[i]) || id != ids[i] {
				t.Fatalf("%q[%d]: slow %v %d %v, fast %v %d", b, i, lp, id, err, lps[i], ids[i])
			}
		}
	})
}

func FuzzDecodeCompletionChunk(f *testing.F) {
	for _, ev := range strings.Split(capturedStream, "\n\n") {
		if d, ok := strings.CutPrefix(ev, "data: "); ok {
			f.Add([]byte(d))
		}
	}
	f.Add([]byte(`{"error":{"message":"x","code":503}}`))
	f.Add([]byte(`{"object":"error","message":"x","code":"a"}`))
	f.Add([]byte(`{"choices":[{"index":0,"logprobs":{"tokens":["token_id:1"],"token_logprobs":[-1]},"token_ids":[1],"finish_reason":"abort","stop_reason":"x"}]}`))
	f.Add([]byte(`{"choices":[{"logprobs":null,"finish_reason":"stop","stop_reason":[1]}]}`))
	f.Add([]byte(`{"usage":{"prompt_tokens":-1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeCompletionChunk(b)
		if err != nil {
			var he *HTTPError
			if !errors.Is(err, ErrBadResponse) && !errors.As(err, &he) {
				t.Fatalf("error %v is neither ErrBadResponse nor an HTTPError", err)
			}
			if he != nil && (he.Status < 400 || he.Status > 599) {
				t.Fatalf("error event status %d", he.Status)
			}
			return
		}
		if len(d.ids) != len(d.lps) {
			t.Fatalf("%d ids, %d logprobs", len(d.ids), len(d.lps))
		}
		for _, id := range d.ids {
			if id < 0 {
				t.Fatalf("negative id %d", id)
			}
		}
		if d.finish != nil && (d.finish.Type < FinishStop || d.finish.Type > FinishAbort) {
			t.Fatalf("finish type %d", d.finish.Type)
		}
	})
}

func FuzzParseTokenID(f *testing.F) {
	for _, s := range []string{"token_id:0", "token_id:151645", "token_id:-1", "token_id:01", "token_id:99999999999", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseTokenID(s)
		if err != nil {
			return
		}
		if id < 0 || fmt.Sprintf("token_id:%d", id) != s {
			t.Fatalf("parseTokenID(%q) = %d: not the canonical form", s, id)
		}
	})
}

func FuzzReadSSE(f *testing.F) {
	f.Add([]byte(capturedStream))
	f.Add([]byte("data: a\r\ndata: b\r\n\r\n: c\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data:x\n\ndata"))
	f.Add([]byte("\r\r\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := readSSE(bytes.NewReader(b), func(d []byte) error {
			if bytes.Equal(d, []byte("[DONE]")) {
				t.Fatal("[DONE] passed to fn")
			}
			return nil
		})
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("error %v", err)
		}
		if err == nil && !bytes.Contains(b, []byte("[DONE]")) {
			t.Fatal("nil error without [DONE]")
		}
	})
}

func FuzzDecodeDetokenize(f *testing.F) {
	f.Add([]byte(`{"prompt":"a"}`))
	f.Add([]byte(`{"text":"a"}`))
	f.Add([]byte(`{"text":["a"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := decodeDetokenize(b); err != nil && !errors.Is(err, ErrBadResponse) {
			t.Fatalf("error %v is not ErrBadResponse", err)
		}
	})
}

func FuzzDecodeTokenize(f *testing.F) {
	f.Add([]byte(`{"tokens":[151644,8948,198],"count":3,"max_model_len":40960}`))
	f.Add([]byte(`{"tokens":[1,2],"count":2,"max_model_len":8,"token_strs":["a","b"]}`))
	f.Add([]byte(`{"tokens":[]}`))
	f.Add([]byte(`{"tokens":null}`))
	f.Add([]byte(`{"tokens":[-1]}`))
	f.Add([]byte(`{"tokens":[4294967296]}`))
	f.Add([]byte(`{"detail":"Not Found"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ids, err := decodeTokenize(b)
		if err != nil {
			if !errors.Is(err, ErrBadResponse) {
				t.Fatalf("error %v is not ErrBadResponse", err)
			}
			return
		}
		if ids == nil {
			t.Fatal("no error and no tokens")
		}
		for i, id := range ids {
			if id < 0 {
				t.Fatalf("tokens[%d] = %d", i, id)
			}
		}
	})
}
