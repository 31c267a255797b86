package sim

import (
	"errors"
	"testing"
)

func FuzzDecodeGenerateRequest(f *testing.F) {
	f.Add([]byte(`{"rid":"0123456789abcdef0123456789abcdef","input_ids":[256,117,10],"sampling_params":{"max_new_tokens":512,
		"temperature":0.7,"top_p":0.9,"top_k":20,"min_p":0.05,"stop":["</s>"],"stop_token_ids":[257],"skip_special_tokens":false,
		"no_stop_trim":true,"custom_params":{"actloop_reply":"ls -la"}},"return_logprob":true,"stream":false}`))
	f.Add([]byte(`{"text":"hi","sampling_params":{"stop":"x","stop_token_ids":[null,3],"top_k":-1}}`))
	f.Add([]byte(`{"input_ids":[[1],[2]]}`))
	f.Add([]byte(`{"input_ids":[1],"sampling_params":{"custom_params":{"actloop_reply":null}}}`))
	f.Add([]byte(`{"input_ids":[1],"sampling_params":{"top_p":0}}`))
	f.Add([]byte(`{"input_ids":[1],"sampling_params":{"max_new_tokens":1048576}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeGenerateRequest(b, DefaultContextLength)
		if err != nil {
			var fe *fieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a fieldError", err)
			}
			return
		}
		if req.RID == "" || len(req.InputIDs) == 0 || req.MaxNewTokens < 0 || len(req.InputIDs) >= DefaultContextLength ||
			len(req.InputIDs)+req.MaxNewTokens > DefaultContextLength {
			t.Fatalf("accepted invalid request %+v", req)
		}
		for _, id := range req.InputIDs {
			if id < 0 {
				t.Fatalf("negative input id in %+v", req)
			}
		}
	})
}
