package llm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// ModelName reads the served model where each server reports it: SGLang's
// /get_model_info, vLLM's /v1/models; an OpenAI client configured with a
// model names that without asking.
func TestModelName(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/get_model_info":
			_, _ = w.Write([]byte(`{"model_path":"Qwen/Qwen3-8B","is_generation":true}`))
		case "/v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"qwen3-served","object":"model"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	defer empty.Close()
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		namer   ModelNamer
		want    string
		wantErr error
	}{
		{"sglang", NewSGLang(srv.URL, SGLangOptions{}), "Qwen/Qwen3-8B", nil},
		{"openai", NewOpenAI(srv.URL, OpenAIOptions{}), "qwen3-served", nil},
		{"openai with a model", NewOpenAI(empty.URL, OpenAIOptions{Model: "mine"}), "mine", nil},
		{"sglang without model_path", NewSGLang(empty.URL, SGLangOptions{}), "", ErrBadResponse},
		{"openai without models", NewOpenAI(empty.URL, OpenAIOptions{}), "", ErrBadResponse},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.namer.ModelName(ctx)
			if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("ModelName = %q, %v; want %q, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
