package envworker

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// proxyEndpoint serves an agent run's endpoint with no trajectory behind it:
// the test plays the steps, taking calls from r.calls.
func proxyEndpoint(t *testing.T) (*agentRun, *httptest.Server) {
	t.Helper()
	r := &agentRun{key: "sk-test", model: servedModel, calls: make(chan *agentCall), done: make(chan struct{}),
		exited: make(chan struct{}), keepAlive: 10 * time.Millisecond, taken: map[int]*agentCall{}}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func call(t *testing.T, srv *httptest.Server, method, path, key, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

// wantError checks an OpenAI error answer: its status and the error's type.
func wantError(t *testing.T, res *http.Response, status int, typ string) {
	t.Helper()
	var body struct {
		Error struct {
			Message, Type string
		}
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != status || body.Error.Type != typ ||
		body.Error.Message == "" {
		t.Fatalf("%d %+v (%v), want %d and an error of type %s", res.StatusCode, body, err, status, typ)
	}
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]`

// The endpoint wants the trajectory's key, serves the paths it lists and
// refuses others as OpenAI's servers do, and refuses a bad body with 400
// naming the field before it reaches a step.
func TestEndpointRefusals(t *testing.T) {
	_, srv := proxyEndpoint(t)
	wantError(t, call(t, srv, "POST", "/v1/chat/completions", "", chatBody+"}"), http.StatusUnauthorized, "invalid_request_error")
	wantError(t, call(t, srv, "POST", "/v1/chat/completions", "sk-wrong", chatBody+"}"), http.StatusUnauthorized, "invalid_request_error")
	wantError(t, call(t, srv, "POST", "/v1/embeddings", "sk-test", "{}"), http.StatusNotFound, "invalid_request_error")
	wantError(t, call(t, srv, "GET", "/v1/completions", "sk-test", ""), http.StatusMethodNotAllowed, "invalid_request_error")
	res := call(t, srv, "POST", "/v1/chat/completions", "sk-test", chatBody+`,"n":2}`)
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), `"param":"n"`) {
		t.Fatalf("n=2: %d %s", res.StatusCode, b)
	}
	res = call(t, srv, "GET", "/v1/models", "sk-test", "")
	var models struct {
		Data []struct{ ID string }
	}
	if err := json.NewDecoder(res.Body).Decode(&models); err != nil || len(models.Data) != 1 || models.Data[0].ID != servedModel {
		t.Fatalf("models: %+v %v", models, err)
	}
}

// A streamed call that waits for its generation gets SSE comments, which
// keep a client's read timeout from ending it, and then its answer; a
// call whose trajectory ends meanwhile gets the error as an event (its
// stream had started) or a 503 (it had not).
func TestEndpointKeepsAStreamedCallAlive(t *testing.T) {
	r, srv := proxyEndpoint(t)
	res := call(t, srv, "POST", "/v1/chat/completions", "sk-test", chatBody+`,"stream":true}`)
	c := <-r.calls
	rd := bufio.NewReader(res.Body)
	line, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, ": ") || res.StatusCode != http.StatusOK ||
		res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("first line %q (%v), status %d, type %q: want an SSE comment", line, err, res.StatusCode, res.Header.Get("Content-Type"))
	}
	c.answer <- func(cw *callWriter) {
		cw.events(func(w io.Writer) error {
			_, err := io.WriteString(w, "data: {\"x\":1}\n\ndata: [DONE]\n\n")
			return err
		})
	}
	rest, _ := io.ReadAll(rd)
	if !strings.HasSuffix(string(rest), "data: {\"x\":1}\n\ndata: [DONE]\n\n") {
		t.Fatalf("stream ends %q", rest)
	}

	res = call(t, srv, "POST", "/v1/chat/completions", "sk-test", chatBody+`,"stream":true}`)
	<-r.calls
	rd = bufio.NewReader(res.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, ": ") {
		t.Fatalf("first line %q (%v)", line, err)
	}
	close(r.done)
	rest, _ = io.ReadAll(rd)
	if !strings.Contains(string(rest), `data: {"error":{"message":"the trajectory is over`) || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("after the end: %q", rest)
	}
	wantError(t, call(t, srv, "POST", "/v1/chat/completions", "sk-test", chatBody+"}"), http.StatusServiceUnavailable, "server_error")
}
