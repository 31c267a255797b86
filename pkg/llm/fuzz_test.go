package llm

import (
	"encoding/json"
	"errors"
	"math"
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
