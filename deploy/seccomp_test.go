package deploy

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestEnvWorkerSeccompProfileIsCurrent keeps the profile's files what
// SeccompProfileFiles makes (go run ./seccompgen writes them), and checks
// what they hold: the engine's default and BwrapSyscalls, nothing else;
// resolved for this machine, what the engine resolves.
func TestEnvWorkerSeccompProfileIsCurrent(t *testing.T) {
	files, err := SeccompProfileFiles()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from deploy.SeccompProfileFiles: run `cd deploy && go run ./seccompgen`", name)
		}
	}
	var p seccomp.Seccomp
	if err := json.Unmarshal(files["seccomp/env-worker.json"], &p); err != nil {
		t.Fatal(err)
	}
	def := seccomp.DefaultProfile()
	if p.DefaultAction != def.DefaultAction || len(p.Syscalls) != len(def.Syscalls)+1 {
		t.Fatalf("profile: default action %s, %d rules; want the default's (%s, %d) and one more",
			p.DefaultAction, len(p.Syscalls), def.DefaultAction, len(def.Syscalls))
	}
	last := p.Syscalls[len(p.Syscalls)-1]
	if !slices.Equal(last.Names, BwrapSyscalls) || last.Action != specs.ActAllow || len(last.Args) > 0 ||
		last.Includes != nil || last.Excludes != nil {
		t.Errorf("profile's last rule %+v, want BwrapSyscalls allowed unconditionally", last)
	}

	machine := ociMachine(runtime.GOARCH)
	if machine == "" {
		t.Skipf("no resolved profile for %s", runtime.GOARCH)
	}
	mine, err := EnvWorkerSeccompOCI(machine)
	if err != nil {
		t.Fatal(err)
	}
	// The engine's resolution, for a container without capabilities, on
	// this machine's kernel.
	engine, err := seccomp.LoadProfile(string(files["seccomp/env-worker.json"]),
		&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := mustMarshal(t, mine), mustMarshal(t, engine); a != b {
		t.Errorf("resolved for %s:\n%s\nthe engine's:\n%s", machine, a, b)
	}
	for _, m := range []string{"mips", "x86"} {
		if _, err := EnvWorkerSeccompOCI(m); err == nil {
			t.Errorf("EnvWorkerSeccompOCI(%q): no error", m)
		}
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sandboxBoundaryTests are pkg/sandbox's tests of bwrap's boundaries that
// TestEnvWorkerSeccompProfile runs in the container.
var sandboxBoundaryTests = []string{"TestLocalAutoPicksBwrap", "TestLocalBwrapConformance", "TestLocalBwrapIsolation",
	"TestBwrapNoNetwork", "TestBwrapHidesOtherSandboxesAndHost", "TestBwrapMemoryHogContained", "TestBwrapTimeoutKillsGrandchildren"}

// TestEnvWorkerSeccompProfile runs the env-worker's sandbox boundary tests
// (pkg/sandbox's, compiled here) in a Docker Engine container as a
// non-root user, with the security options docker-compose.yml gives the
// env-worker, its seccomp profile among them, and again with the Helm
// chart's profile for this machine: bwrap works and every boundary test
// passes. With the engine's default profile in its place
// bwrap does not work, nor with the profile less any one of
// BwrapSyscalls: the profile is what it needs, and all of it is. The
// container's filesystem is the host's /usr and /etc, read-only, so the
// host needs bash, git and bwrap (as for pkg/sandbox's own tests).
// Without an engine (the docker CLI and its DOCKER_HOST or default
// socket) it skips.
func TestEnvWorkerSeccompProfile(t *testing.T) {
	docker := dockerEngine(t)
	for _, tool := range []string{"bwrap", "bash", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the container runs the host's", tool)
		}
	}
	p, err := loadCompose(composeDir(t, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, ok := p.Services["env-worker"]
	if !ok {
		t.Fatal("compose: no env-worker service")
	}
	var opts []string // docker run's, the profile aside
	profile := ""
	for _, o := range svc.SecurityOpt {
		if path, ok := strings.CutPrefix(o, "seccomp="); ok {
			profile = path
			continue
		}
		opts = append(opts, "--security-opt", o)
	}
	if profile == "" || profile == "unconfined" {
		t.Fatalf("compose: env-worker's security_opt %q names no seccomp profile file", svc.SecurityOpt)
	}
	body, err := os.ReadFile(filepath.Join(p.WorkingDir, profile))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "sandbox.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./pkg/sandbox")
	build.Dir = ".." // in actloop's module
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c ./pkg/sandbox: %v\n%s", err, out)
	}
	image := hostBaseImage(t, docker)
	run := func(t *testing.T, profile []byte, tests ...string) string {
		t.Helper()
		pf := filepath.Join(t.TempDir(), "profile.json")
		if err := os.WriteFile(pf, profile, 0o644); err != nil {
			t.Fatal(err)
		}
		// The docker CLI reads the file, as Compose does, and sends it.
		args := slices.Concat([]string{"run", "--rm", "--user", "10001:10001", "--security-opt", "seccomp=" + pf}, opts,
			[]string{"-v", "/usr:/usr:ro", "-v", "/etc:/etc:ro", "-v", bin + ":/sandbox.test:ro",
				"--tmpfs", "/work:uid=10001,gid=10001", "-w", "/work", "-e", "HOME=/work",
				image, "/sandbox.test", "-test.v", "-test.count=1", "-test.run", "^(" + strings.Join(tests, "|") + ")$"})
		out, err := exec.Command(docker, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	profiles := map[string][]byte{"compose": body}
	if machine := ociMachine(runtime.GOARCH); machine != "" {
		// The Helm chart's, as containerd hands it to the runtime; the
		// engine reads the runtime-spec's form unchanged.
		if profiles["helm"], err = os.ReadFile("helm/actloop/files/env-worker-seccomp/" + machine + ".json"); err != nil {
			t.Fatal(err)
		}
	}
	for name, profile := range profiles {
		t.Run(name, func(t *testing.T) {
			out := run(t, profile, sandboxBoundaryTests...)
			for _, test := range sandboxBoundaryTests {
				if !strings.Contains(out, "--- PASS: "+test+" ") {
					t.Errorf("%s did not pass in the container:\n%s", test, out)
				}
			}
		})
	}
	// Without the profile (or part of it) the probe finds bwrap unusable
	// and the test skips, saying why.
	refused := regexp.MustCompile(`bubblewrap does not work here: .*(Operation not permitted|No permissions to create new namespace)`)
	wantRefused := func(t *testing.T, profile []byte) {
		out := run(t, profile, "TestLocalAutoPicksBwrap")
		if !refused.MatchString(out) || !strings.Contains(out, "--- SKIP: TestLocalAutoPicksBwrap") {
			t.Errorf("bwrap was not refused:\n%s", out)
		}
	}
	t.Run("default profile", func(t *testing.T) {
		def, err := json.Marshal(seccomp.DefaultProfile())
		if err != nil {
			t.Fatal(err)
		}
		wantRefused(t, def)
	})
	for _, call := range BwrapSyscalls {
		t.Run("without "+call, func(t *testing.T) {
			p := EnvWorkerSeccomp()
			last := p.Syscalls[len(p.Syscalls)-1]
			last.Names = slices.DeleteFunc(slices.Clone(last.Names), func(n string) bool { return n == call })
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			wantRefused(t, b)
		})
	}
}

// dockerEngine returns the docker CLI's path, skipping t when there is
// none or no engine answers it.
func dockerEngine(t *testing.T) string {
	t.Helper()
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Skip("no docker CLI: the test needs a Docker Engine")
	}
	if out, err := exec.Command(docker, "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker Engine answers: %v: %s", err, bytes.TrimSpace(out))
	}
	return docker
}

// hostBaseImage imports (once per engine: the tag names its content) an
// image of empty mount points for the host's /usr and /etc and the
// merged-/usr links to them.
func hostBaseImage(t *testing.T, docker string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"usr", "etc", "proc", "sys", "dev", "work", "tmp"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "lib", "lib64", "sbin"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: l, Linkname: "usr/" + l}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	image := fmt.Sprintf("actloop-test-hostbase:%x", sha256.Sum256(buf.Bytes()))[:len("actloop-test-hostbase:")+12]
	if exec.Command(docker, "image", "inspect", image).Run() == nil {
		return image
	}
	imp := exec.Command(docker, "import", "-", image)
	imp.Stdin = &buf
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v\n%s", err, out)
	}
	return image
}
