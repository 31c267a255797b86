package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/testkit"
)

// syncBuffer is a bytes.Buffer safe for one writer and a polling reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// listenAddr returns the address of the "http listening" line logged to
// log, or "".
func listenAddr(log string) string {
	for line := range strings.SplitSeq(log, "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "http listening" {
			return rec.Addr
		}
	}
	return ""
}

// `actloop sim` serves the simulator: a scripted /generate is answered
// with the script's reply, and SIGTERM (ctx) stops it cleanly.
func TestSimServes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--addr", "127.0.0.1:0", "--time-scale", "0", "--seed", "7"}, io.Discard, &stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sim: %v\n%s", err, stderr.String())
		}
	})
	var addr string
	testkit.Eventually(t, 30*time.Second, "the simulator to listen", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("sim ended: %v\n%s", err, stderr.String())
		default:
		}
		addr = listenAddr(stderr.String())
		return addr != ""
	})
	base := "http://" + addr
	body := `{"text":"<|im_start|>user\nsay hi<|im_end|>\n<|im_start|>assistant\n",` +
		`"sampling_params":{"max_new_tokens":64,"custom_params":{"actloop_reply":"hi there"}}}`
	resp, err := http.Post(base+"/generate", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Text     string         `json:"text"`
		MetaInfo map[string]any `json:"meta_info"`
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST /generate: %s: %s", resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.Text, "hi there") {
		t.Errorf("text = %q, want the scripted reply", out.Text)
	}
	if n, _ := out.MetaInfo["completion_tokens"].(float64); n < 1 {
		t.Errorf("meta_info.completion_tokens = %v, want >= 1", out.MetaInfo["completion_tokens"])
	}
	// The gen-workers' health probe answers too.
	if err := run(context.Background(), []string{"probe", base + "/health"}, io.Discard, io.Discard); err != nil {
		t.Errorf("probe /health: %v", err)
	}
}

func TestSimFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"sim", "--tokenizer", "gpt2"},
		{"sim", "--slots", "0"},
		{"sim", "--time-scale", "-1"},
		{"sim", "--cache-tokens", "0"},
		{"sim", "extra"},
	} {
		var errOut bytes.Buffer
		err := run(context.Background(), args, io.Discard, &errOut)
		if exitCode(err) != 2 {
			t.Errorf("%v: exit %d (%v), want 2", args, exitCode(err), err)
		}
	}
}

// `actloop probe URL` succeeds on 2xx only and says why otherwise.
func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
			fmt.Fprintln(w, "ok")
		case "/readyz":
			http.Error(w, "redis: connection refused\nmore", http.StatusServiceUnavailable)
		case "/hang":
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"ok", []string{srv.URL + "/healthz"}, 0, ""},
		{"not ready", []string{srv.URL + "/readyz"}, 1, "503 Service Unavailable: redis: connection refused"},
		{"not found", []string{srv.URL + "/nope"}, 1, "404"},
		{"timeout", []string{"--timeout", "50ms", srv.URL + "/hang"}, 1, "deadline exceeded"},
		{"refused", []string{closed.URL + "/healthz"}, 1, "connection refused"},
		{"no url", nil, 2, "name one URL"},
		{"bad url", []string{"http://[::1"}, 2, "probe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"probe"}, tt.args...), io.Discard, io.Discard)
			if code := exitCode(err); err == nil && tt.wantCode != 0 || err != nil && code != tt.wantCode {
				t.Fatalf("exit %d (%v), want %d", code, err, tt.wantCode)
			}
			if err != nil {
				if !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q: want one line containing %q", err, tt.wantErr)
				}
			}
		})
	}
}
