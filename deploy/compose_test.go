package deploy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/actloop/actloop/internal/launch"
	"github.com/actloop/actloop/internal/service"
)

// loadCompose loads dir/docker-compose.yml with Compose's own loader
// (compose-go, as `docker compose config` does: interpolation, the
// Compose schema, merging of YAML anchors, consistency of depends_on and
// volumes, paths resolved), the variables of dir/.env when there is one,
// and of the environment only env (KEY=value).
func loadCompose(dir string, env []string) (*types.Project, error) {
	var envFiles []string
	if _, err := os.Stat(filepath.Join(dir, ".env")); err == nil {
		envFiles = append(envFiles, filepath.Join(dir, ".env"))
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "docker-compose.yml")},
		cli.WithWorkingDirectory(dir), cli.WithName("actloop"), cli.WithEnv(env), cli.WithResolvedPaths(true),
		cli.WithEnvFiles(envFiles...), cli.WithDotEnv)
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// composeSecrets are the variables docker-compose.yml requires (${VAR:?…}).
func composeSecrets(data []byte) []string {
	var out []string
	for _, g := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*):?\?`).FindAllStringSubmatch(string(data), -1) {
		if !slices.Contains(out, g[1]) {
			out = append(out, g[1])
		}
	}
	slices.Sort(out)
	return out
}

// composeDir is a copy of the repository's Compose files (docker-compose.yml
// with data in its place when not nil, deploy/nats.conf,
// deploy/compose-secrets.sh, deploy/seccomp/env-worker.json) under a new directory, with the .env the
// secrets script writes there.
func composeDir(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "deploy", "seccomp"), 0o755); err != nil {
		t.Fatal(err)
	}
	if data == nil {
		var err error
		if data, err = os.ReadFile("../docker-compose.yml"); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string][]byte{"docker-compose.yml": data}
	for _, f := range []string{"deploy/nats.conf", "deploy/compose-secrets.sh", "deploy/seccomp/env-worker.json"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = b
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("sh", filepath.Join(dir, "deploy", "compose-secrets.sh")).CombinedOutput(); err != nil {
		t.Fatalf("compose-secrets.sh: %v\n%s", err, out)
	}
	return dir
}

// actloopBinDir holds the actloop binary actloopBinary builds; TestMain
// removes it.
var actloopBinDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if actloopBinDir != "" {
		_ = os.RemoveAll(actloopBinDir)
	}
	os.Exit(code)
}

// actloopBinary builds cmd/actloop once, for the checks of subcommands
// and their flags.
var actloopBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "actloop-compose-test-")
	if err != nil {
		return "", err
	}
	actloopBinDir = dir
	bin := filepath.Join(dir, "actloop")
	build := exec.Command("go", "build", "-o", bin, "./cmd/actloop")
	build.Dir = ".." // in actloop's module, with its go.sum
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ../cmd/actloop: %v\n%s", err, out)
	}
	return bin, nil
})

// runsActloop reports whether the service runs an actloop image (built
// here, or named actloop*).
func runsActloop(s types.ServiceConfig) bool {
	return s.Build != nil || strings.HasPrefix(s.Image, "actloop")
}

// envOf is s's environment, unset variables as "".
func envOf(s types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// simDefaultAddr is `actloop sim --addr`'s default.
const simDefaultAddr = ":30000"

// checkCompose checks a loaded Compose project against the actloop
// binary: every actloop service runs an existing subcommand or service
// with flags it takes, sets only ACTLOOP_ variables that service reads,
// and has a health check (actloop probe, on the port it serves); every
// depends_on target has a health check to wait for; bind mounts exist;
// every replica the coordinator knows has a gen-worker whose default
// inference server is a service here; published ports reach this host
// only; a seccomp profile is a file, not unconfined. (Compose's loader
// has checked that each depends_on target and named volume is declared.)
func checkCompose(p *types.Project) error {
	if len(p.Services) == 0 {
		return errors.New("compose: services: none")
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	genWorkers := map[string]string{} // replica -> its LLM URL
	var replicas []string
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		svc := p.Services[name]
		at := "services." + name
		env := envOf(svc)
		var reads []string // the ACTLOOP_ variables this service reads
		if runsActloop(svc) {
			cmd := []string(svc.Command)
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
				bin, err := actloopBinary()
				if err != nil {
					fail("%v", err)
				} else if out, err := exec.Command(bin, append(slices.Clone(cmd), "-h")...).CombinedOutput(); err != nil {
					fail("%s.command: %q: %v: %s", at, cmd, err, strings.TrimSpace(string(out)))
				}
				if cmd[0] == "sim" {
					addr = simDefaultAddr
					if i := slices.Index(cmd, "--addr"); i >= 0 && i+1 < len(cmd) {
						addr = cmd[i+1]
					}
				}
			}
			switch {
			case svc.HealthCheck == nil || len(svc.HealthCheck.Test) == 0:
				fail("%s.healthcheck: missing", at)
			case !slices.Contains(svc.HealthCheck.Test, "probe"):
				fail("%s.healthcheck.test: %q: want actloop probe URL", at, svc.HealthCheck.Test)
			case addr != "":
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					fail("%s: address %q: %v", at, addr, err)
				}
				if u, err := url.Parse(svc.HealthCheck.Test[len(svc.HealthCheck.Test)-1]); err != nil || u.Port() != port {
					fail("%s.healthcheck.test: %q: want a URL on port %s, where it serves", at, svc.HealthCheck.Test, port)
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
			switch target := p.Services[dep]; {
			case d.Condition != types.ServiceConditionHealthy:
				fail("%s.depends_on.%s.condition: %q, want service_healthy", at, dep, d.Condition)
			case target.HealthCheck == nil || len(target.HealthCheck.Test) == 0:
				fail("%s.depends_on.%s: it has no healthcheck to wait for", at, dep)
			}
		}
		for _, v := range svc.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				fail("%s.volumes: %s: %v", at, v.Target, err)
			}
		}
		for _, o := range svc.SecurityOpt {
			profile, ok := strings.CutPrefix(o, "seccomp=")
			if !ok {
				continue
			}
			if profile == "unconfined" {
				fail("%s.security_opt: %s: want a profile (deploy/seccomp/env-worker.json)", at, o)
			} else if _, err := os.Stat(filepath.Join(p.WorkingDir, profile)); err != nil {
				fail("%s.security_opt: %s: %v", at, o, err)
			}
		}
		for _, port := range svc.Ports {
			if port.Published != "" && port.HostIP != "127.0.0.1" {
				fail("%s.ports: %s:%d: want it bound to 127.0.0.1, not %q", at, port.Published, port.Target, port.HostIP)
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
		if err != nil || p.Services[u.Hostname()].Command == nil {
			fail("compose: replica %s: ACTLOOP_LLM_URL %q: want a service of this file by default", r, llm)
		}
	}
	// A gen-worker of a replica ACTLOOP_REPLICAS does not list is no
	// mistake: its replica joins when it heartbeats.
	return errors.Join(errs...)
}

// The repository's docker-compose.yml, loaded by Compose's loader with the
// .env deploy/compose-secrets.sh writes, passes the checks, runs every
// service, and its NATS server (deploy/nats.conf) has a user per service.
func TestComposeFile(t *testing.T) {
	dir := composeDir(t, nil)
	p, err := loadCompose(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCompose(p); err != nil {
		t.Fatal(err)
	}
	for _, name := range launch.Names {
		found := false
		for _, svc := range p.Services {
			found = found || slices.Equal(svc.Command, types.ShellCommand{"serve", name})
		}
		if !found {
			t.Errorf("no service runs %s", name)
		}
	}
	// JetStream on a named volume, with an explicit fsync interval.
	nats := p.Services["nats"]
	i := slices.Index(nats.Command, "-sd")
	if !slices.Contains(nats.Command, "-js") || i < 0 || i+1 == len(nats.Command) ||
		!slices.ContainsFunc(nats.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Type == types.VolumeTypeVolume && v.Target == nats.Command[i+1]
		}) {
		t.Errorf("nats: command %q: want -js and -sd on a named volume", nats.Command)
	}
	if !slices.ContainsFunc(nats.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeBind && v.Source == filepath.Join(dir, "deploy", "nats.conf") &&
			v.Target == "/etc/nats/actloop.conf" && v.ReadOnly
	}) || !slices.Contains(nats.Command, "/etc/nats/actloop.conf") {
		t.Errorf("nats: deploy/nats.conf is not its configuration: %q %+v", nats.Command, nats.Volumes)
	}
	// nats.conf reads the passwords from the nats service's environment.
	for k, v := range envOf(nats) {
		t.Setenv(k, v)
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "deploy", "nats.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !opts.SyncAlways && (opts.SyncInterval <= 0 || opts.SyncInterval >= 2*time.Minute) {
		t.Errorf("deploy/nats.conf: sync_interval %v, want explicit and shorter than the 2m default", opts.SyncInterval)
	}
	redis := strings.Join(p.Services["redis"].Command, " ")
	if !strings.Contains(redis, "--appendonly yes") || !strings.Contains(redis, "--appendfsync everysec") {
		t.Errorf("redis: command %q: want AOF fsynced every second", redis)
	}
	checkComposeCredentials(t, p, opts)
	// The coordinator and the gateway have the token (neither starts
	// without one), the same: the gateway reads the status with it.
	token := envOf(p.Services["coordinator"])["ACTLOOP_API_TOKEN"]
	if token == "" {
		t.Errorf("services.coordinator: no ACTLOOP_API_TOKEN: the coordinator would refuse to start")
	}
	gw := envOf(p.Services["gateway"])
	if gw["ACTLOOP_API_TOKEN"] != token {
		t.Errorf("services.gateway: ACTLOOP_API_TOKEN is not the coordinator's")
	}
	if u, err := url.Parse(gw["ACTLOOP_COORDINATOR_URL"]); err != nil || u.Hostname() != "coordinator" ||
		u.Port() != strings.TrimPrefix(envOf(p.Services["coordinator"])["ACTLOOP_COORDINATOR_ADDR"], ":") {
		t.Errorf("services.gateway: ACTLOOP_COORDINATOR_URL %q: want the coordinator's address", gw["ACTLOOP_COORDINATOR_URL"])
	}
}

// Without the .env of the secrets script, Compose refuses the file, naming
// the script.
func TestComposeNeedsSecrets(t *testing.T) {
	dir := composeDir(t, nil)
	if err := os.Remove(filepath.Join(dir, ".env")); err != nil {
		t.Fatal(err)
	}
	_, err := loadCompose(dir, nil)
	if err == nil || !strings.Contains(err.Error(), "run deploy/compose-secrets.sh once") {
		t.Fatalf("load without .env: %v, want the script named", err)
	}
}

// checkComposeCredentials: NATS and Redis want passwords; every actloop
// service logs in to NATS as a user of deploy/nats.conf with the password
// the server has for it, and that user has exactly docs/security.md's
// permissions for the service (its replica's or id's; the gateway's
// without every service's); the CLI's user (trainer) has the CLI's; no
// other user. Every actloop service but the gateway logs in to Redis as its
// ACL user of docs/security.md, whose rules the server has, with the
// password the server has for it; the health check's redis-cli gives the
// default user's (requirepass); the gateway gets no Redis setting (it does
// not connect to Redis).
func checkComposeCredentials(t *testing.T, p *types.Project, opts *server.Options) {
	t.Helper()
	perms := documentedPermissions(t)
	if perms == nil {
		return
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	if len(users) == 0 || opts.Username != "" || opts.Authorization != "" {
		t.Fatalf("deploy/nats.conf: want users (authorization { users = [...] }), got %d users", len(users))
	}
	usedBy := map[string]string{}
	check := func(at, name, password string, want natsPerms) {
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
		if got := serverPerms(u); !got.equal(want) {
			t.Errorf("%s: NATS user %s: %v; want docs/security.md's: %v", at, name, got, want)
		}
	}
	redisCmd := p.Services["redis"].Command
	i := slices.Index(redisCmd, "--requirepass")
	if i < 0 || i+1 == len(redisCmd) || redisCmd[i+1] == "" {
		t.Fatalf("redis: command %q: want --requirepass", redisCmd)
	}
	redisPassword := redisCmd[i+1]
	if envOf(p.Services["redis"])["REDISCLI_AUTH"] != redisPassword {
		t.Errorf("redis: REDISCLI_AUTH is not the requirepass password: its health check's redis-cli would be refused")
	}
	// Redis's ACL users: docs/security.md's (service.RedisTable), each
	// with its rules and a password of its own.
	redisUsers := map[string]string{} // user: password
	for user, args := range redisServerUsers(redisCmd) {
		if len(args) < 2 {
			t.Errorf("redis: user %s: %q: want on and a password", user, args)
			continue
		}
		pw, ok := strings.CutPrefix(args[1], ">")
		if args[0] != "on" || !ok || pw == "" || pw == redisPassword {
			t.Errorf("redis: user %s: %q %q: want on and a password of its own", user, args[0], args[1])
		}
		if want := service.RedisRules(user); !slices.Equal(args[2:], want) {
			t.Errorf("redis: user %s: rules %q, want docs/security.md's %q", user, args[2:], want)
		}
		redisUsers[user] = pw
	}
	if len(redisUsers) != len(service.RedisTable) {
		t.Errorf("redis: users %v, want those of docs/security.md", slices.Sorted(maps.Keys(redisUsers)))
	}
	for _, name := range slices.Sorted(maps.Keys(p.Services)) {
		svc := p.Services[name]
		if !runsActloop(svc) || len(svc.Command) != 2 || svc.Command[0] != "serve" {
			continue
		}
		at := "services." + name
		env := envOf(svc)
		var want natsPerms
		if svc.Command[1] == "gateway" {
			for k := range env {
				if strings.HasPrefix(k, "ACTLOOP_REDIS_") {
					t.Errorf("%s: %s: the gateway does not connect to Redis", at, k)
				}
			}
			want = natsPerms{}.add(perms["gateway"], nil)
		} else {
			user := env["ACTLOOP_REDIS_USERNAME"]
			if pw, ok := redisUsers[user]; user != svc.Command[1] || !ok || env["ACTLOOP_REDIS_PASSWORD"] != pw {
				t.Errorf("%s: Redis user %q: want %s with its password", at, user, svc.Command[1])
			}
			subst := map[string]string{"<replica>": env["ACTLOOP_REPLICA"], "<id>": env["ACTLOOP_ENV_WORKER_ID"]}
			want = natsPerms{}.add(perms["every service"], nil).add(perms[svc.Command[1]], subst)
		}
		check(at, env["ACTLOOP_NATS_USER"], env["ACTLOOP_NATS_PASSWORD"], want)
	}
	check("the CLI", "trainer", envOf(p.Services["nats"])["NATS_PASSWORD_TRAINER"], perms["CLI (trainer)"])
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

// checkCompose, and Compose's loader before it, fail each kind of mistake,
// naming where it is.
func TestComposeCheckFails(t *testing.T) {
	const good = `
services:
  nats:
    image: nats:2.15-alpine
    volumes: ["nats-data:/data", "./deploy/nats.conf:/etc/nats/actloop.conf:ro"]
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
      ACTLOOP_API_TOKEN: ${API_TOKEN:?run deploy/compose-secrets.sh once}
    ports: ["127.0.0.1:8080:8080"]
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
    security_opt: ["seccomp=./deploy/seccomp/env-worker.json", "systempaths=unconfined"]
volumes:
  nats-data:
`
	check := func(doc string) error {
		p, err := loadCompose(composeDir(t, []byte(doc)), nil)
		if err != nil {
			return fmt.Errorf("compose: %w", err)
		}
		return checkCompose(p)
	}
	if err := check(good); err != nil {
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
		{"missing dependency", "{nats: {condition", "{natz: {condition", "natz"},
		{"started, not healthy", "{condition: service_healthy}}\n    healthcheck: {test: [\"CMD\", \"actloop\", \"probe\", \"http://localhost:8080",
			"{condition: service_started}}\n    healthcheck: {test: [\"CMD\", \"actloop\", \"probe\", \"http://localhost:8080",
			"services.coordinator.depends_on.nats.condition"},
		{"dependency without health check", `healthcheck: {test: ["CMD", "true"]}`, ``, "services.coordinator.depends_on.nats: it has no healthcheck"},
		{"no health check", `healthcheck: {test: ["CMD", "actloop", "probe", "http://localhost:8081/readyz"]}`, ``,
			"services.gen-worker-r0.healthcheck: missing"},
		{"health check on another port", "localhost:8080/readyz", "localhost:8081/readyz", "services.coordinator.healthcheck.test"},
		{"address not set", "ACTLOOP_GEN_WORKER_ADDR: :8081", "ACTLOOP_SLOTS: \"4\"", "services.gen-worker-r0.environment.ACTLOOP_GEN_WORKER_ADDR: missing"},
		{"undeclared volume", "nats-data:/data", "nats-store:/data", "nats-store"},
		{"missing bind mount", "./deploy/nats.conf:", "./deploy/natz.conf:", "natz.conf"},
		{"port on every interface", `"127.0.0.1:8080:8080"`, `"8080:8080"`, "services.coordinator.ports"},
		{"seccomp unconfined", "seccomp=./deploy/seccomp/env-worker.json", "seccomp=unconfined", "services.gen-worker-r0.security_opt: seccomp=unconfined"},
		{"seccomp profile missing", "seccomp/env-worker.json", "seccomp/env_worker.json", "env_worker.json: no such file"},
		{"replica without gen-worker", "ACTLOOP_REPLICAS: r0", "ACTLOOP_REPLICAS: r0,r1", "replica r1 (coordinator's ACTLOOP_REPLICAS) has no gen-worker"},
		{"server not in the file", "http://sim-r0:30000}", "http://sim-0:30000}", "replica r0: ACTLOOP_LLM_URL"},
		{"not yaml", "services:", "services: [", "compose:"},
		{"not Compose", "healthcheck: {test: [\"CMD\", \"true\"]}", "healthcheck: {test: [\"CMD\", \"true\"]}\n    restart_policy: always", "restart_policy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(good, tt.old, tt.new, 1)
			if bad == good {
				t.Fatalf("%q is not in the good document", tt.old)
			}
			err := check(bad)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// deploy/compose-secrets.sh writes, once, an .env only its owner reads with
// a secret of its own for every variable docker-compose.yml requires.
func TestComposeSecretsScript(t *testing.T) {
	data, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	want := composeSecrets(data)
	if len(want) < 9 {
		t.Fatalf("docker-compose.yml requires %v: want a secret per NATS user, Redis's and the API token", want)
	}
	dir := composeDir(t, data) // runs the script once
	if out, err := exec.Command("sh", filepath.Join(dir, "deploy", "compose-secrets.sh")).CombinedOutput(); err != nil {
		t.Fatalf("compose-secrets.sh, again: %v\n%s", err, out) // and leaves the file alone
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
	for l := range strings.SplitSeq(string(b), "\n") {
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
