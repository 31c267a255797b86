package predict_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/predict"
	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/internal/traj"
	"github.com/actloop/actloop/pkg/schema"
)

// startExampleServer runs examples/predictor/server.py on a free port until
// the end of the test and returns its URL.
func startExampleServer(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: the example predictor server (examples/predictor) needs it")
	}
	cmd := exec.Command(py, "../../examples/predictor/server.py", "--port", "0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("server.py's stderr:\n%s", stderr.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l, ok := <-line:
		url, found := strings.CutPrefix(l, "listening on ")
		if !ok || !found {
			t.Fatalf("server.py's first line %q, want \"listening on <url>\"", l)
		}
		return url
	case <-time.After(time.Minute):
		t.Fatal("server.py did not say where it listens within a minute")
	}
	return ""
}

// The example server (examples/predictor) speaks the protocol the http
// backend posts, and answers as its README's rule says.
func TestExamplePredictorServer(t *testing.T) {
	url := startExampleServer(t)
	rdb, _ := testkit.StartRedis(t, testkit.PreferredRedis(t))
	st := traj.New(rdb, nil)
	p, err := predict.NewHTTPWith(url, time.Minute, predict.HTTPSources{Store: st, Template: tokenize.NewByteChatML(), Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	ctx := context.Background()
	put := func(id string, msgs ...schema.Message) {
		t.Helper()
		if err := st.Put(ctx, &traj.Trajectory{ID: id, Status: traj.StatusNeedsEnvStep, Seq: 1,
			Sample: schema.Sample{V: schema.Version, ID: id, Task: "task"}, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	put("g-0", msg("system", "s"), msg("user", "task"), msg("assistant", "a1"), msg("user", "all good"), msg("assistant", "a2"))
	put("t-0", msg("system", "s"), msg("user", "task"), msg("assistant", "a1"), msg("user", "ok"), msg("assistant", "a2"),
		msg("user", "Traceback (most recent call last):\n  boom"), msg("assistant", "a3"), msg("user", "not asked about yet"))
	observe(t, p, result("g-1", "g", "", 1000, 6), result("g-2", "g", "", 300, 2))
	if _, err := p.Predict(ctx, request("r-1", "r", "", 4, 400)); err != nil {
		t.Fatal(err)
	}

	submit := request("s-0", "", "", 2, 100)
	submit.CommandKind = schema.CommandSubmit
	traceback := request("t-0", "", "", 3, 300)
	traceback.ObsTokens = 20
	exit := request("u-0", "", "", 3, 300) // not stored: no conversation
	exit.ObsTokens, exit.ExitCode = 20, 2
	finished := request("g-0", "g", "", 2, 120)
	finished.ObsTokens = 12
	tests := []struct {
		name string
		req  schema.PredictRequest
		want schema.PredictReply
	}{
		{"submits: nothing left", submit, reply(0, 0, predict.SourceHTTP)},
		// g-1 ran longer: 1000 - 120 tokens, 6 - 2 turns.
		{"finished siblings", finished, reply(880, 4, predict.SourceHTTP)},
		// r-1 is at turn 4: 4 + 1 - 1 turns, at 50 tokens a turn.
		{"running siblings", request("r-0", "r", "", 1, 50), reply(200, 4, predict.SourceHTTP)},
		// 20 - 3 turns at 100 tokens, and one more for the failed command:
		// a traceback in the newest observation as asked (not in the one
		// stored after it), or a non-zero exit code.
		{"default, a traceback", traceback, reply(1800, 18, predict.SourceHTTP)},
		{"default, an exit code", exit, reply(1800, 18, predict.SourceHTTP)},
		{"default", request("u-1", "", "", 3, 300), reply(1700, 17, predict.SourceHTTP)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := p.Predict(ctx, tt.req)
			if err != nil || rep != tt.want {
				t.Fatalf("Predict = %+v, %v; want %+v", rep, err, tt.want)
			}
		})
	}

	t.Run("bad request names the field", func(t *testing.T) {
		for body, field := range map[string]string{
			`{"v":1,"turns":1}`:                  "traj_id: missing",
			`{"v":1,"traj_id":"a","protocol":3}`: "protocol",
			`{"v":1,"traj_id":"a","turns":-1}`:   "turns: must be >= 0",
			`{"v":1,"traj_id":"a","siblings":{"finished":[{"turns":"x","gen_tokens":1}]}}`: "siblings.finished[0].turns",
			`[1]`: "body",
		} {
			resp, err := http.Post(url, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), field) {
				t.Errorf("POST %s: %d %s, want 400 naming %q", body, resp.StatusCode, b, field)
			}
		}
		http.DefaultClient.CloseIdleConnections()
	})
}
