package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/actloop/actloop/internal/service"
)

// deploy/nats.conf's users are `actloop config nats`'s for its replicas
// and env-worker: the file is a regeneration, not a hand edit.
func TestConfigNATSIsDeployNATSConf(t *testing.T) {
	b, err := os.ReadFile("../../deploy/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(b)
	i := strings.Index(conf, "\nauthorization {\n")
	if i < 0 {
		t.Fatal("deploy/nats.conf: no authorization block")
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "nats", "--replicas", "r0,r1", "--env-workers", "env-worker-0"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := conf[i+1:]; got != out.String() {
		t.Errorf("deploy/nats.conf's authorization block is not `actloop config nats --replicas r0,r1 --env-workers env-worker-0`'s:\n%s\nwant:\n%s", got, out.String())
	}
}

// The block for another set of replicas loads in nats-server, and each
// user has its permissions of the table with its replica or id filled in.
func TestConfigNATSForMoreReplicas(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "nats", "--replicas", "r0,r1,r2", "--env-workers", "env-a,env-b"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	want := map[string]service.NATSPermissions{
		"coordinator":   service.NATSPermissionsOf(service.NATSCoordinator, ""),
		"gen-worker-r0": service.NATSPermissionsOf(service.NATSGenWorker, "r0"),
		"gen-worker-r1": service.NATSPermissionsOf(service.NATSGenWorker, "r1"),
		"gen-worker-r2": service.NATSPermissionsOf(service.NATSGenWorker, "r2"),
		"env-a":         service.NATSPermissionsOf(service.NATSEnvWorker, "env-a"),
		"env-b":         service.NATSPermissionsOf(service.NATSEnvWorker, "env-b"),
		"predictor-gw":  service.NATSPermissionsOf(service.NATSPredictor, ""),
		"trainer":       service.NATSPermissionsOf(service.NATSTrainer, ""),
		"gateway":       service.NATSPermissionsOf(service.NATSGateway, ""),
	}
	for user := range want {
		t.Setenv("NATS_PASSWORD_"+strings.ToUpper(strings.ReplaceAll(user, "-", "_")), "pw-"+user)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the block: %v\n%s", err, out.String())
	}
	if len(opts.Users) != len(want) {
		t.Errorf("%d users, want %d", len(opts.Users), len(want))
	}
	for _, u := range opts.Users {
		w, ok := want[u.Username]
		if !ok {
			t.Errorf("unexpected user %s", u.Username)
			continue
		}
		p := u.Permissions
		if u.Password != "pw-"+u.Username || p == nil || p.Publish == nil || p.Subscribe == nil ||
			!slices.Equal(p.Publish.Allow, w.Publish) || !slices.Equal(p.Publish.Deny, w.PublishDeny) ||
			!slices.Equal(p.Subscribe.Allow, w.Subscribe) || (p.Response != nil) != w.Responses {
			t.Errorf("user %s: password %q, permissions %+v; want %+v", u.Username, u.Password, p, w)
		}
	}
}

// Bad lists are usage errors naming the flag.
func TestConfigNATSRefusesBadLists(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no replicas", []string{"--env-workers", "e0"}, "--replicas: at least one"},
		{"no env-workers", []string{"--replicas", "r0"}, "--env-workers: at least one"},
		{"invalid replica", []string{"--replicas", "r0,a.b", "--env-workers", "e0"}, `--replicas: "a.b" is not a valid name`},
		{"replica twice", []string{"--replicas", "r0,r0", "--env-workers", "e0"}, `--replicas: "r0" is listed twice`},
		{"env-worker named as a service", []string{"--replicas", "r0", "--env-workers", "trainer"}, `--env-workers: "trainer" is another service's user`},
	} {
		err := run(context.Background(), append([]string{"config", "nats"}, tc.args...), io.Discard, io.Discard)
		var ee *exitError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%s: %v, want a usage error with %q", tc.name, err, tc.want)
		}
	}
}
