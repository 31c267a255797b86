package deploy

import (
	"encoding/json"
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/moby/profiles/seccomp"
)

// BwrapSyscalls are the system calls bwrap makes, run by a non-root user,
// to build a sandbox that a container runtime's default seccomp profile
// allows only to holders of CAP_SYS_ADMIN (or, pivot_root, to nobody):
// clone with namespace flags and unshare for the user, mount, PID, IPC,
// UTS and network namespaces, mount and umount2 for the sandbox's root,
// /proc, /dev and /tmp, pivot_root into it and sethostname (bwrap's
// --hostname). Inside its own user namespace the kernel grants the
// process these calls; outside it they fail without CAP_SYS_ADMIN,
// profile or not.
var BwrapSyscalls = []string{"clone", "mount", "pivot_root", "sethostname", "umount2", "unshare"}

// EnvWorkerSeccomp is the seccomp profile of the env-worker's container in
// the Docker Engine's format (deploy/seccomp/env-worker.json): the
// engine's default profile, as github.com/moby/profiles/seccomp holds it,
// with BwrapSyscalls allowed. The engine resolves its conditions (on
// capabilities, architecture, kernel) for each container.
func EnvWorkerSeccomp() *seccomp.Seccomp {
	p := seccomp.DefaultProfile()
	p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
		LinuxSyscall: specs.LinuxSyscall{Names: BwrapSyscalls, Action: specs.ActAllow},
		Comment:      "actloop's env-worker: bwrap, unprivileged, builds each sandbox in new namespaces",
	})
	return p
}

// ociArches are the architectures the Helm chart has resolved profiles
// for, by `uname -m` (how its installer picks one on a node): the
// profile's native architecture name (GOARCH's) and its seccomp
// architecture.
var ociArches = map[string]struct {
	native string
	arch   specs.Arch
}{
	"x86_64":  {"amd64", specs.ArchX86_64},
	"aarch64": {"arm64", specs.ArchAARCH64},
}

// ociMachine is the machine (`uname -m`) of GOARCH goarch that the chart
// has a profile for; "" when none.
func ociMachine(goarch string) string {
	for m, a := range ociArches {
		if a.native == goarch {
			return m
		}
	}
	return ""
}

// EnvWorkerSeccompOCI is EnvWorkerSeccomp resolved as the runtime-spec
// has it (what containerd reads from a Kubernetes Localhost profile: it
// does not resolve the engine format's conditions) for the machine
// `uname -m` names, for a container without capabilities (the chart's
// env-worker drops them all), on a kernel no older than any rule asks
// (4.8; user-namespaced pods need 6.3). It resolves as the engine does
// (seccomp.LoadProfile), for an architecture of one's choosing.
func EnvWorkerSeccompOCI(machine string) (*specs.LinuxSeccomp, error) {
	a, ok := ociArches[machine]
	if !ok {
		return nil, fmt.Errorf("seccomp: no profile for machine %q", machine)
	}
	p := EnvWorkerSeccomp()
	out := p.LinuxSeccomp
	for _, m := range p.ArchMap {
		if m.Arch == a.arch {
			out.Architectures = append([]specs.Arch{m.Arch}, m.SubArches...)
		}
	}
	for _, call := range p.Syscalls {
		if ex := call.Excludes; ex != nil && (slices.Contains(ex.Arches, a.native) || ex.MinKernel != nil) {
			continue // excluded on this machine, or on every kernel this runs on
		}
		if in := call.Includes; in != nil && (len(in.Arches) > 0 && !slices.Contains(in.Arches, a.native) || len(in.Caps) > 0) {
			continue // for another machine, or for a capability it lacks
		}
		out.Syscalls = append(out.Syscalls, call.LinuxSyscall)
	}
	return &out, nil
}

// SeccompProfileFiles are the profile's files, relative to the deploy
// directory, and their contents: the engine's format for
// docker-compose.yml and `docker run --security-opt seccomp=…`, and the
// runtime-spec's for each machine in the Helm chart (whose files must lie
// inside it).
func SeccompProfileFiles() (map[string][]byte, error) {
	files := map[string]any{"seccomp/env-worker.json": EnvWorkerSeccomp()}
	for machine := range ociArches {
		p, err := EnvWorkerSeccompOCI(machine)
		if err != nil {
			return nil, err
		}
		files["helm/actloop/files/env-worker-seccomp/"+machine+".json"] = p
	}
	out := map[string][]byte{}
	for name, v := range files {
		b, err := json.MarshalIndent(v, "", "\t")
		if err != nil {
			return nil, err
		}
		out[name] = append(b, '\n')
	}
	return out, nil
}
