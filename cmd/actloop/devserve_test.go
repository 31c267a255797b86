package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/actloop/actloop/internal/coordinator"
	"github.com/actloop/actloop/internal/testkit"
)

// impostor is an HTTP server on the CLI's default coordinator address that
// answers everything and records each request that carries a token.
type impostor struct {
	mu     sync.Mutex
	tokens []string // "METHOD path" of each request with an Authorization header
}

func (i *impostor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		i.mu.Lock()
		i.tokens = append(i.tokens, r.Method+" "+r.URL.Path)
		i.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte("{}\n"))
}

func (i *impostor) got() []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]string(nil), i.tokens...)
}

// startImpostor listens on addr; nil when addr is not free.
func startImpostor(t *testing.T, addr string) *impostor {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil
	}
	imp := &impostor{}
	srv := httptest.NewUnstartedServer(imp)
	_ = srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return imp
}

// readDevEnv reads the export lines of actloop.env ("" and false while it
// is missing).
func readDevEnv(path string) (map[string]string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if kv, ok := strings.CutPrefix(sc.Text(), "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = strings.Trim(v, "'")
		}
	}
	return env, sc.Err() == nil
}

// With the coordinator's default address taken by another program,
// `actloop dev --serve` serves elsewhere and says where in actloop.env:
// the CLI loaded with it reaches the real coordinator, and the program on
// the default address never sees the API token, not even from a CLI whose
// ACTLOOP_COORDINATOR_URL is missing.
func TestDevServeDefaultAddressTaken(t *testing.T) {
	const defaultAddr = "127.0.0.1:8080" // dev's --addr and the CLI's ACTLOOP_COORDINATOR_URL default
	imp := startImpostor(t, defaultAddr)
	if imp == nil {
		t.Logf("%s is taken on this machine by another program: the stack falls back as it does from ours, "+
			"but no impostor checks what reaches that address", defaultAddr)
	}
	for _, k := range []string{"ACTLOOP_COORDINATOR_URL", "ACTLOOP_GATEWAY_URL", "ACTLOOP_API_TOKEN"} {
		unsetenv(t, k)
	}

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var devErr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev", "--serve", "--dir", dir, "--gateway-addr", "127.0.0.1:0", "--replicas", "1"},
			&bytes.Buffer{}, &devErr)
	}()
	stopped := false
	stopDev := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev --serve: %v\n%s", err, devErr.String())
		}
	}
	t.Cleanup(stopDev)

	envPath := filepath.Join(dir, devEnvFile)
	var env map[string]string
	testkit.Eventually(t, 3*time.Minute, "actloop dev --serve to write the gateway's address to actloop.env", func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("dev --serve ended: %v\n%s", err, devErr.String())
		default:
		}
		var ok bool
		env, ok = readDevEnv(envPath)
		return ok && env["ACTLOOP_GATEWAY_URL"] != ""
	})

	token := env["ACTLOOP_API_TOKEN"]
	for _, k := range []string{"ACTLOOP_NATS_URL", "ACTLOOP_COORDINATOR_URL", "ACTLOOP_GATEWAY_URL"} {
		switch u := env[k]; {
		case u == "":
			t.Errorf("actloop.env lacks %s:\n%v", k, env)
		case strings.Contains(u, defaultAddr):
			t.Errorf("actloop.env: %s=%s, the address another program holds", k, u)
		}
	}
	// The addresses are the bound ones: the coordinator and the gateway
	// answer there, with the token.
	for _, k := range []string{"ACTLOOP_COORDINATOR_URL", "ACTLOOP_GATEWAY_URL"} {
		if env[k] == "" {
			continue
		}
		if st, err := getStatus(ctx, env[k], token); err != nil {
			t.Errorf("GET %s/v1/status: %v", env[k], err)
		} else if st.Replicas == nil {
			t.Errorf("GET %s/v1/status: no replicas in the status", env[k])
		}
	}

	// The CLI loaded with actloop.env asks the real coordinator.
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"status", "--json"}, &out, &errOut); err != nil {
		t.Errorf("status with actloop.env: %v", err)
	} else if st := (coordinator.Status{}); json.Unmarshal(out.Bytes(), &st) != nil || st.Replicas == nil {
		t.Errorf("status with actloop.env printed no coordinator's status: %s", out.String())
	}

	// Without ACTLOOP_COORDINATOR_URL the CLI refuses to send its token
	// to the default address, and says which setting is missing.
	unsetenv(t, "ACTLOOP_COORDINATOR_URL")
	out.Reset()
	err := run(ctx, []string{"status", "--json"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "ACTLOOP_COORDINATOR_URL") || !strings.Contains(err.Error(), "ACTLOOP_API_TOKEN") {
		t.Errorf("status with a token and no ACTLOOP_COORDINATOR_URL: %v (printed %q); want a refusal naming both settings", err, out.String())
	}

	stopDev()
	if imp != nil {
		if got := imp.got(); len(got) > 0 {
			t.Errorf("the program on %s got the API token with %d requests: %v", defaultAddr, len(got), got)
		}
	}
}

// unsetenv unsets k for the rest of the test (a variable set to "" is not
// one left unset: the CLI's default applies only to the latter).
func unsetenv(t *testing.T, k string) {
	t.Helper()
	t.Setenv(k, "") // restored at the end
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}

// getStatus reads base's /v1/status with token as the bearer token.
func getStatus(ctx context.Context, base, token string) (coordinator.Status, error) {
	var st coordinator.Status
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, errors.New(resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// The CLI sends ACTLOOP_API_TOKEN only to an ACTLOOP_COORDINATOR_URL it
// was given; without a token the default address is still asked.
func TestTrainerConfigTokenNeedsURL(t *testing.T) {
	for _, tc := range []struct {
		name       string
		token, url string // "" = unset
		wantURL    string
		wantErr    error
	}{
		{"neither", "", "", "http://127.0.0.1:8080", nil},
		{"url only", "", "http://coord:8080", "http://coord:8080", nil},
		{"both", "s3cret", "http://coord:8080", "http://coord:8080", nil},
		{"the default given explicitly", "s3cret", "http://127.0.0.1:8080", "http://127.0.0.1:8080", nil},
		{"token without url", "s3cret", "", "", errTokenWithoutURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range map[string]string{"ACTLOOP_API_TOKEN": tc.token, "ACTLOOP_COORDINATOR_URL": tc.url} {
				if v == "" {
					unsetenv(t, k)
				} else {
					t.Setenv(k, v)
				}
			}
			c, err := loadTrainerConfig()
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("loadTrainerConfig: %v, want %v", err, tc.wantErr)
			}
			if err == nil && c.CoordinatorURL != tc.wantURL {
				t.Errorf("CoordinatorURL = %q, want %q", c.CoordinatorURL, tc.wantURL)
			}
		})
	}
}
