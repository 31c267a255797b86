package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/coordinator"
)

// actloop status sends ACTLOOP_API_TOKEN to a coordinator whose status is
// closed, and shows the replicas' busy slots and the queues.
func TestStatusSendsTheToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		_ = json.NewEncoder(w).Encode(coordinator.Status{Active: 3, Replicas: []coordinator.ReplicaStatus{{Name: "r0", Slots: 4, Busy: 2, Live: true}},
			Queues: []coordinator.QueueStatus{{Subject: "actloop.gen.r0.hi", Depth: 5, OldestAgeS: 12}}})
	}))
	defer srv.Close()
	t.Setenv("ACTLOOP_COORDINATOR_URL", srv.URL)
	var out strings.Builder
	if err := run(context.Background(), []string{"status"}, &out, io.Discard); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the token: %v", err)
	}
	t.Setenv("ACTLOOP_API_TOKEN", "s3cret")
	if err := run(context.Background(), []string{"status"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"r0", "2/4", "actloop.gen.r0.hi", "12s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}

// A status the coordinator could read only in part shows the rest, and
// names what it could not read first.
func TestStatusShowsWhatWasNotRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(coordinator.Status{Active: 3, Replicas: []coordinator.ReplicaStatus{{Name: "r0", Slots: 4, Live: true}},
			Errors: []string{"samples not yet taken in: context deadline exceeded"}})
	}))
	defer srv.Close()
	t.Setenv("ACTLOOP_COORDINATOR_URL", srv.URL)
	var out strings.Builder
	if err := run(context.Background(), []string{"status"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := strings.Cut(out.String(), "\n"); first != "NOT READ    samples not yet taken in: context deadline exceeded" {
		t.Errorf("first line %q, want what was not read", first)
	}
	if !strings.Contains(out.String(), "3 active") || !strings.Contains(out.String(), "r0") {
		t.Errorf("status lacks the rest:\n%s", out.String())
	}
}
