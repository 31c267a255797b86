package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.yaml.in/yaml/v3"

	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/internal/service"
)

// composeDoc is the part of a Compose file that checkCompose reads.
type composeDoc struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context string `yaml:"context"`
		Target  string `yaml:"target"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Volumes []string `yaml:"volumes"`
	Ports   []string `yaml:"ports"`
}

// runsActloop reports whether the service runs an actloop image (built
// here, or named actloop*).
func (s composeService) runsActloop() bool {
	return s.Build != nil || strings.HasPrefix(s.Image, "actloop")
}

var composeVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*)|(:?\?)([^}]*))?\}`)

// interpolate replaces each ${VAR:-default} with its default, ${VAR} with
// "", and each required ${VAR:?message} (a secret of .env) with a value of
// its own, "t<VAR>": the file as Compose reads it with only .env set.
func interpolate(s string) string {
	return composeVar.ReplaceAllStringFunc(s, func(m string) string {
		g := composeVar.FindStringSubmatch(m)
		if g[4] != "" {
			return "t" + g[1]
		}
		return g[3]
	})
}

// composeSecrets are the variables docker-compose.yml requires (${VAR:?…}).
func composeSecrets(data []byte) []string {
	var out []string
	for _, g := range composeVar.FindAllStringSubmatch(string(data), -1) {
		if g[4] != "" && !slices.Contains(out, g[1]) {
			out = append(out, g[1])
		}
	}
	slices.Sort(out)
	return out
}

// simDefaultAddr is `actloop sim --addr`'s default.
const simDefaultAddr = ":30000"

// checkCompose checks a Compose file against the actloop binary: every
// actloop service runs an existing subcommand or service with flags it
// takes, sets only ACTLOOP_ variables that service reads, and has a health
// check (actloop probe, on the port it serves); every depends_on target
// exists and has a health check to wait for; volumes are declared and bind
// mounts exist under dir; every replica the coordinator knows has a
// gen-worker whose default inference server is a service here.
func checkCompose(data []byte, dir string) error {
	var doc composeDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("compose: %w", err)
	}
	if len(doc.Services) == 0 {
		return errors.New("compose: services: none")
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	names := slices.Sorted(maps.Keys(doc.Services))
	genWorkers := map[string]string{} // replica -> its LLM URL
	var replicas []string
	for _, name := range names {
		svc := doc.Services[name]
		at := "services." + name
		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = interpolate(v)
		}
		var reads []string // the ACTLOOP_ variables this service reads
		if svc.runsActloop() {
			cmd := make([]string, len(svc.Command))
			for i, a := range svc.Command {
				cmd[i] = interpolate(a)
			}
			addr := ""
			switch {
			case len(cmd) == 0:
				fail("%s.command: missing (the image's default only prints the usage)", at)
			case cmd[0] == "serve":
				if len(cmd) != 2 || !launch.Known(cmd[1]) {
					fail("%s.command: %q: want serve and one of %v", at, cmd, launch.Names)
					break
				}
				reads = launch.Settings(cmd[1])
				for _, k := range reads {
					if strings.HasSuffix(k, "_ADDR") {
						if addr = env[k]; addr == "" {
							fail("%s.environment.%s: missing (the health check's port must be the one served)", at, k)
						}
					}
				}
				if cmd[1] == "gen-worker" {
					genWorkers[env["ACTLOOP_REPLICA"]] = env["ACTLOOP_LLM_URL"]
				}
				if cmd[1] == "coordinator" {
					replicas = append(replicas, service.SplitList(env["ACTLOOP_REPLICAS"])...)
				}
			default:
				// Every subcommand but serve parses flags: -h after the
				// service's arguments prints the help, and succeeds, only
				// when the subcommand exists and takes every flag given.
				if err := run(context.Background(), append(slices.Clone(cmd), "-h"), io.Discard, io.Discard); err != nil {
					fail("%s.command: %q: %v", at, cmd, err)
				}
				if cmd[0] == "sim" {
					addr = simDefaultAddr
					if i := slices.Index(cmd, "--addr"); i >= 0 && i+1 < len(cmd) {
						addr = cmd[i+1]
					}
				}
			}
			switch {
			case svc.Healthcheck == nil || len(svc.Healthcheck.Test) == 0:
				fail("%s.healthcheck: missing", at)
			case !slices.Contains(svc.Healthcheck.Test, "probe"):
				fail("%s.healthcheck.test: %q: want actloop probe URL", at, svc.Healthcheck.Test)
			case addr != "":
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					fail("%s: address %q: %v", at, addr, err)
				}
				if u, err := url.Parse(svc.Healthcheck.Test[len(svc.Healthcheck.Test)-1]); err != nil || u.Port() != port {
					fail("%s.healthcheck.test: %q: want a URL on port %s, where it serves", at, svc.Healthcheck.Test, port)
				}
			}
		}
		for _, k := range slices.Sorted(maps.Keys(svc.Environment)) {
			if strings.HasPrefix(k, "ACTLOOP_") && !slices.Contains(reads, k) {
				fail("%s.environment.%s: not a setting this service reads", at, k)
			}
		}
		for _, dep := range slices.Sorted(maps.Keys(svc.DependsOn)) {
			d := svc.DependsOn[dep]
			target, ok := doc.Services[dep]
			switch {
			case !ok:
				fail("%s.depends_on.%s: no such service", at, dep)
			case d.Condition != "service_healthy":
				fail("%s.depends_on.%s.condition: %q, want service_healthy", at, dep, d.Condition)
			case target.Healthcheck == nil:
				fail("%s.depends_on.%s: it has no healthcheck to wait for", at, dep)
			}
		}
		for _, v := range svc.Volumes {
			src, _, ok := strings.Cut(v, ":")
			switch {
			case !ok:
				fail("%s.volumes: %q: want SOURCE:TARGET", at, v)
			case strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/"):
				if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
					fail("%s.volumes: %q: %v", at, v, err)
				}
			default:
				if _, ok := doc.Volumes[src]; !ok {
					fail("%s.volumes: %q: volume %s is not declared", at, v, src)
				}
			}
		}
	}
	for _, r := range replicas {
		llm, ok := genWorkers[r]
		if !ok {
			fail("compose: replica %s (coordinator's ACTLOOP_REPLICAS) has no gen-worker", r)
			continue
		}
		u, err := url.Parse(llm)
		if err != nil || doc.Services[u.Hostname()].Command == nil {
			fail("compose: replica %s: ACTLOOP_LLM_URL %q: want a service of this file by default", r, llm)
		}
	}
	for _, r := range slices.Sorted(maps.Keys(genWorkers)) {
		if len(replicas) > 0 && !slices.Contains(replicas, r) {
			fail("compose: gen-worker of replica %q: not in the coordinator's ACTLOOP_REPLICAS %v", r, replicas)
		}
	}
	return errors.Join(errs...)
}

// The repository's docker-compose.yml passes the checks.
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCompose(data, "../.."); err != nil {
		t.Fatal(err)
	}
	var doc composeDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, name := range launch.Names {
		found := false
		for _, svc := range doc.Services {
			found = found || slices.Equal(svc.Command, []string{"serve", name})
		}
		if !found {
			t.Errorf("no service runs %s", name)
		}
	}
	// JetStream on a named volume, with an explicit fsync interval.
	nats := doc.Services["nats"]
	if i := slices.Index(nats.Command, "-sd"); !slices.Contains(nats.Command, "-js") || i < 0 || i+1 == len(nats.Command) ||
		!slices.ContainsFunc(nats.Volumes, func(v string) bool { return strings.HasSuffix(v, ":"+nats.Command[i+1]) }) {
		t.Errorf("nats: command %q: want -js and -sd on a mounted volume", nats.Command)
	}
	if !slices.Contains(nats.Volumes, "./deploy/nats.conf:/etc/nats/actloop.conf:ro") ||
		!slices.Contains(nats.Command, "/etc/nats/actloop.conf") {
		t.Errorf("nats: deploy/nats.conf is not its configuration: %q %q", nats.Command, nats.Volumes)
	}
	// nats.conf reads the passwords from the nats service's environment.
	for k, v := range nats.Environment {
		t.Setenv(k, interpolate(v))
	}
	opts, err := server.ProcessConfigFile("../../deploy/nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !opts.SyncAlways && (opts.SyncInterval <= 0 || opts.SyncInterval >= 2*time.Minute) {
		t.Errorf("deploy/nats.conf: sync_interval %v, want explicit and shorter than the 2m default", opts.SyncInterval)
	}
	redis := strings.Join(doc.Services["redis"].Command, " ")
	if !strings.Contains(redis, "--appendonly yes") || !strings.Contains(redis, "--appendfsync everysec") {
		t.Errorf("redis: command %q: want AOF fsynced every second", redis)
	}
	checkComposeCredentials(t, doc, opts)
	// Published ports reach this host only, and the coordinator has its
	// token (it does not start without one).
	for _, name := range slices.Sorted(maps.Keys(doc.Services)) {
		for _, p := range doc.Services[name].Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("services.%s: port %q: want it bound to 127.0.0.1", name, p)
			}
		}
	}
	if interpolate(doc.Services["coordinator"].Environment["ACTLOOP_API_TOKEN"]) == "" {
		t.Errorf("services.coordinator: no ACTLOOP_API_TOKEN: the coordinator would refuse to start")
	}
}

// sameSubjects compares allow lists as sets.
func sameSubjects(a, b []string) bool {
	return slices.Equal(slices.Compact(slices.Sorted(slices.Values(a))), slices.Compact(slices.Sorted(slices.Values(b))))
}

// checkComposeCredentials: NATS and Redis want passwords; every actloop
// service logs in to NATS as a user of deploy/nats.conf with the password
// the server has for it, and that user has exactly docs/security.md's
// permissions for the service (its replica's or id's); the CLI's user
// (trainer) has the CLI's; no other user. Every actloop service gives
// Redis its requirepass password, and so does the health check's
// redis-cli.
func checkComposeCredentials(t *testing.T, doc composeDoc, opts *server.Options) {
	t.Helper()
	perms := documentedPermissions(t)
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	if len(users) == 0 || opts.Username != "" || opts.Authorization != "" {
		t.Fatalf("deploy/nats.conf: want users (authorization { users = [...] }), got %d users", len(users))
	}
	usedBy := map[string]string{}
	check := func(at, name, password string, want clientPerms) {
		t.Helper()
		u := users[name]
		if other, ok := usedBy[name]; ok {
			t.Errorf("%s: NATS user %q: %s's too; each service its own", at, name, other)
			return
		}
		if u == nil {
			t.Errorf("%s: NATS user %q: not in deploy/nats.conf", at, name)
			return
		}
		usedBy[name] = at
		if u.Password != password || password == "" {
			t.Errorf("%s: NATS user %s: the password given differs from the server's", at, name)
		}
		var pub, sub []string
		if p := u.Permissions; p != nil && p.Publish != nil && p.Subscribe != nil && len(p.Publish.Deny)+len(p.Subscribe.Deny) == 0 {
			pub, sub = p.Publish.Allow, p.Subscribe.Allow
		}
		responses := u.Permissions != nil && u.Permissions.Response != nil
		if !sameSubjects(pub, want.pub) || !sameSubjects(sub, want.sub) || responses != want.responses {
			t.Errorf("%s: NATS user %s: publish %q subscribe %q allow_responses %v; want docs/security.md's: publish %q subscribe %q allow_responses %v",
				at, name, pub, sub, responses, want.pub, want.sub, want.responses)
		}
	}
	redisCmd := doc.Services["redis"].Command
	i := slices.Index(redisCmd, "--requirepass")
	if i < 0 || i+1 == len(redisCmd) || interpolate(redisCmd[i+1]) == "" {
		t.Fatalf("redis: command %q: want --requirepass", redisCmd)
	}
	redisPassword := interpolate(redisCmd[i+1])
	if got := interpolate(doc.Services["redis"].Environment["REDISCLI_AUTH"]); got != redisPassword {
		t.Errorf("redis: REDISCLI_AUTH is not the requirepass password: its health check's redis-cli would be refused")
	}
	for _, name := range slices.Sorted(maps.Keys(doc.Services)) {
		svc := doc.Services[name]
		if !svc.runsActloop() || len(svc.Command) != 2 || svc.Command[0] != "serve" {
			continue
		}
		at := "services." + name
		env := func(k string) string { return interpolate(svc.Environment[k]) }
		if env("ACTLOOP_REDIS_PASSWORD") != redisPassword {
			t.Errorf("%s: ACTLOOP_REDIS_PASSWORD is not the requirepass password", at)
		}
		row := perms[svc.Command[1]]
		want := natsUser("", "", map[string]string{"<replica>": env("ACTLOOP_REPLICA"), "<id>": env("ACTLOOP_ENV_WORKER_ID")},
			perms["every service"], row)
		check(at, env("ACTLOOP_NATS_USER"), env("ACTLOOP_NATS_PASSWORD"),
			clientPerms{pub: want.Permissions.Publish.Allow, sub: want.Permissions.Subscribe.Allow, responses: row.responses})
	}
	check("the CLI", "trainer", interpolate(doc.Services["nats"].Environment["NATS_PASSWORD_TRAINER"]), perms["CLI (trainer)"])
	// One secret per user.
	seen := map[string]string{}
	for _, u := range opts.Users {
		if other, ok := seen[u.Password]; ok {
			t.Errorf("deploy/nats.conf: users %s and %s share a password", other, u.Username)
		}
		seen[u.Password] = u.Username
	}
	for _, name := range slices.Sorted(maps.Keys(users)) {
		if _, ok := usedBy[name]; !ok {
			t.Errorf("deploy/nats.conf: user %s: no service logs in as it", name)
		}
	}
}

// checkCompose fails each kind of mistake, naming where it is.
func TestComposeCheckFails(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nats.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	const good = `
services:
  nats:
    image: nats:2.15-alpine
    volumes: ["nats-data:/data", "./nats.conf:/etc/nats/actloop.conf:ro"]
    healthcheck: {test: ["CMD", "true"]}
  sim-r0:
    build: {context: ., target: actloop}
    command: ["sim", "--addr", ":30000", "--time-scale", "${SIM_TIME_SCALE:-1}"]
    healthcheck: {test: ["CMD", "actloop", "probe", "http://localhost:30000/health"]}
  coordinator:
    image: actloop:local
    command: ["serve", "coordinator"]
    environment:
      ACTLOOP_REPLICAS: r0
      ACTLOOP_COORDINATOR_ADDR: :8080
    depends_on: {nats: {condition: service_healthy}}
    healthcheck: {test: ["CMD", "actloop", "probe", "http://localhost:8080/readyz"]}
  gen-worker-r0:
    image: actloop:local
    command: ["serve", "gen-worker"]
    environment:
      ACTLOOP_REPLICA: r0
      ACTLOOP_LLM_URL: ${LLM_URL_R0:-http://sim-r0:30000}
      ACTLOOP_GEN_WORKER_ADDR: :8081
    depends_on: {sim-r0: {condition: service_healthy}}
    healthcheck: {test: ["CMD", "actloop", "probe", "http://localhost:8081/readyz"]}
volumes:
  nats-data:
`
	if err := checkCompose([]byte(good), dir); err != nil {
		t.Fatalf("the good document: %v", err)
	}
	tests := []struct {
		name, old, new, wantErr string
	}{
		{"misspelt variable", "ACTLOOP_LLM_URL:", "ACTLOOP_LLM_ULR:", "services.gen-worker-r0.environment.ACTLOOP_LLM_ULR: not a setting"},
		{"another service's variable", "ACTLOOP_REPLICA: r0", "ACTLOOP_REPLICAS: r0", "services.gen-worker-r0.environment.ACTLOOP_REPLICAS: not a setting"},
		{"variable on the simulator", `healthcheck: {test: ["CMD", "actloop", "probe", "http://localhost:30000/health"]}`,
			"healthcheck: {test: [\"CMD\", \"actloop\", \"probe\", \"http://localhost:30000/health\"]}\n    environment: {ACTLOOP_SLOTS: \"4\"}",
			"services.sim-r0.environment.ACTLOOP_SLOTS"},
		{"unknown service", `["serve", "coordinator"]`, `["serve", "coordinater"]`, "services.coordinator.command"},
		{"unknown subcommand", `["sim", "--addr"`, `["simulate", "--addr"`, `services.sim-r0.command: ["simulate"`},
		{"unknown flag", `"--time-scale"`, `"--time-scal"`, "services.sim-r0.command"},
		{"no command", `command: ["serve", "gen-worker"]`, ``, "services.gen-worker-r0.command: missing"},
		{"missing dependency", "{nats: {condition", "{natz: {condition", "services.coordinator.depends_on.natz: no such service"},
		{"started, not healthy", "{condition: service_healthy}}\n    healthcheck: {test: [\"CMD\", \"actloop\", \"probe\", \"http://localhost:8080",
			"{condition: service_started}}\n    healthcheck: {test: [\"CMD\", \"actloop\", \"probe\", \"http://localhost:8080",
			"services.coordinator.depends_on.nats.condition"},
		{"dependency without health check", `healthcheck: {test: ["CMD", "true"]}`, ``, "services.coordinator.depends_on.nats: it has no healthcheck"},
		{"no health check", `healthcheck: {test: ["CMD", "actloop", "probe", "http://localhost:8081/readyz"]}`, ``,
			"services.gen-worker-r0.healthcheck: missing"},
		{"health check on another port", "localhost:8080/readyz", "localhost:8081/readyz", "services.coordinator.healthcheck.test"},
		{"address not set", "ACTLOOP_GEN_WORKER_ADDR: :8081", "ACTLOOP_SLOTS: \"4\"", "services.gen-worker-r0.environment.ACTLOOP_GEN_WORKER_ADDR: missing"},
		{"undeclared volume", "nats-data:/data", "nats-store:/data", "volume nats-store is not declared"},
		{"missing bind mount", "./nats.conf:", "./natz.conf:", "natz.conf"},
		{"replica without gen-worker", "ACTLOOP_REPLICAS: r0", "ACTLOOP_REPLICAS: r0,r1", "replica r1 (coordinator's ACTLOOP_REPLICAS) has no gen-worker"},
		{"server not in the file", "http://sim-r0:30000}", "http://sim-0:30000}", "replica r0: ACTLOOP_LLM_URL"},
		{"not yaml", "services:", "services: [", "compose:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(good, tt.old, tt.new, 1)
			if bad == good {
				t.Fatalf("%q is not in the good document", tt.old)
			}
			err := checkCompose([]byte(bad), dir)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// deploy/compose-secrets.sh writes, once, an .env only its owner reads with
// a secret of its own for every variable docker-compose.yml requires.
func TestComposeSecretsScript(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := composeSecrets(data)
	if len(want) < 8 {
		t.Fatalf("docker-compose.yml requires %v: want a secret per NATS user, Redis's and the API token", want)
	}
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile("../../deploy/compose-secrets.sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy", "compose-secrets.sh"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run leaves the file alone
		if out, err := exec.Command("sh", filepath.Join(dir, "deploy", "compose-secrets.sh")).CombinedOutput(); err != nil {
			t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
		}
	}
	env := filepath.Join(dir, ".env")
	st, err := os.Stat(env)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf(".env: mode %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(env)
	vals := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			vals[k] = v
		}
	}
	if got := slices.Sorted(maps.Keys(vals)); !slices.Equal(got, want) {
		t.Errorf(".env holds %v, docker-compose.yml requires %v", got, want)
	}
	seen := map[string]bool{}
	for k, v := range vals {
		// nats.conf reads them as variables: a letter, then letters and digits.
		if !regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{31,}$`).MatchString(v) || seen[v] {
			t.Errorf(".env: %s: not a fresh secret of 32 or more letters and digits", k)
		}
		seen[v] = true
	}
}
