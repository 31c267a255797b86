package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/sim"
	"github.com/actloop/actloop/internal/tokenize"
)

// userServer is an inference server of the user's: a simulator started on
// its own, tokenizing with tok.
func userServer(t *testing.T, tok tokenize.Tokenizer) (*sim.Server, *httptest.Server) {
	t.Helper()
	s := sim.New(sim.Config{Tokenizer: tok})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// `actloop dev --llm-url` runs the demo batch on the user's server, in
// either API: every trajectory ends with a result, the generations reach
// that server, and the summary counts one replica.
func TestDevOnUsersServer(t *testing.T) {
	tok, err := tokenize.OpenTokenizer(tokenize.TokenizerQwen)
	if err != nil {
		t.Fatal(err)
	}
	for _, api := range []string{"sglang", "openai"} {
		t.Run(api, func(t *testing.T) {
			srv, ts := userServer(t, tok)
			var stdout, stderr bytes.Buffer
			args := []string{"dev", "--tasks", "2", "--json", "--dir", t.TempDir(), "--addr", "127.0.0.1:0",
				"--llm-url", ts.URL, "--llm-api", api}
			if err := run(context.Background(), args, &stdout, &stderr); err != nil {
				t.Fatalf("dev: %v\n%s", err, stderr.String())
			}
			lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
			var sum devSummary
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
				t.Fatalf("last line is not JSON: %q", lines[len(lines)-1])
			}
			if sum.Trajectories != 2 || sum.Completed+sum.Fallback != 2 || sum.Replicas != 1 || sum.GenSteps < 2 {
				t.Fatalf("summary %+v", sum)
			}
			if n := srv.Stats().Requests; n < int64(sum.GenSteps) {
				t.Fatalf("the user's server had %d generations for %d gen steps", n, sum.GenSteps)
			}
		})
	}
}

// A user's server with another tokenizer than the workers' stops the run
// with the gen-worker's refusal, naming both.
func TestDevRefusesAServerOfAnotherTokenizer(t *testing.T) {
	_, ts := userServer(t, tokenize.Bytes{})
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	args := []string{"dev", "--tasks", "1", "--json", "--dir", dir, "--addr", "127.0.0.1:0", "--llm-url", ts.URL}
	ctx, cancel := context.WithTimeout(context.Background(), devRefusalWait)
	defer cancel()
	err := run(ctx, args, &stdout, &stderr)
	if err == nil {
		t.Fatal("dev ran on a server of another tokenizer")
	}
	if ctx.Err() != nil {
		t.Fatalf("dev did not stop: %v", err)
	}
	for _, want := range []string{"tokenizes differently", "ACTLOOP_TOKENIZER=qwen", "position 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// devRefusalWait bounds the wait for a refusal.
const devRefusalWait = 2 * time.Minute

func TestDevLLMFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--llm-url", "http://a:1", "--llm-api", "vllm"}, `--llm-api: "vllm"`},
		{[]string{"--llm-url", "gpu-0:30000"}, `--llm-url: "gpu-0:30000"`},
		{[]string{"--llm-url", "http://a:1,http://b:1", "--replicas", "3"}, "--replicas 3 with 2 --llm-url servers"},
		{[]string{"--llm-model", "m"}, "--llm-model: only with --llm-url"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"dev", "--dir", t.TempDir()}, tt.args...), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
