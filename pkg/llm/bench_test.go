package llm

import (
	"math"
	"strconv"
	"testing"
)

// A generation step's wire cost on the client: an 8,192-token context out,
// 256 tokens with log-probs back.
func BenchmarkEncodeGenerateRequest(b *testing.B) {
	req := Request{RID: NewRID(), InputIDs: make([]int32, 8192), Sampling: SamplingParams{MaxNewTokens: 256, Temperature: 1}}
	for i := range req.InputIDs {
		req.InputIDs[i] = int32(i * 37 % 151000)
	}
	for b.Loop() {
		if _, err := encodeGenerateRequest(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeGenerateResponse(b *testing.B) {
	body := []byte(`{"text":"","output_ids":[`)
	lps := []byte(`[`)
	for i := range 256 {
		if i > 0 {
			body, lps = append(body, ','), append(lps, ',')
		}
		id := strconv.Itoa(i * 91 % 151000)
		body = append(body, id...)
		lps = append(lps, `[`+strconv.FormatFloat(-math.Abs(math.Sin(float64(i))), 'g', -1, 32)+`,`+id+`,null]`...)
	}
	body = append(body, `],"meta_info":{"id":"x","finish_reason":{"type":"length","length":256},"prompt_tokens":8192,"completion_tokens":256,"cached_tokens":8000,"output_token_logprobs":`...)
	body = append(append(body, lps...), "]}}"...)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := decodeGenerateResponse(body); err != nil {
			b.Fatal(err)
		}
	}
}
