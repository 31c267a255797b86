package sandbox

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// DeniedSyscalls returns the system calls that fail with EPERM under bwrap
// (the seccomp filter Local hands bwrap): everything else is allowed. They
// reach the kernel's attack surface far beyond what building and testing
// code needs: tracing other processes, mounting, the kernel keyring, eBPF,
// userfaultfd, kernel modules, kexec, reboot, swap, pivot_root,
// perf_event_open, changing the system clock or name, quotas, accounting,
// open_by_handle_at (which escapes bind mounts), the new mount API and
// io_uring (whose users fall back to plain system calls). New user namespaces are refused too: unshare and clone with
// CLONE_NEWUSER fail with EPERM and clone3 with ENOSYS (C libraries then
// fall back to clone), and bwrap's --disable-userns backs this up.
func DeniedSyscalls() []string { return slices.Clone(deniedSyscalls) }

var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"mount", "umount2", "pivot_root", "chroot",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"keyctl", "add_key", "request_key",
	"bpf", "userfaultfd", "perf_event_open",
	"init_module", "finit_module", "delete_module",
	"kexec_load", "kexec_file_load", "reboot",
	"swapon", "swapoff",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"sethostname", "setdomainname",
	"quotactl", "acct", "lookup_dcookie", "open_by_handle_at", "name_to_handle_at",
	"iopl", "ioperm", "setns", "syslog",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"nfsservctl", "vhangup", "uselib", "ustat", "sysfs", "_sysctl",
}

// seccompArches maps Go's architecture names to the audit architecture a
// filter checks; the filter refuses system calls made with any other (a
// 32-bit call on a 64-bit kernel, say) so that they cannot bypass it.
var seccompArches = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}

// seccompFilter compiles the deny list into the raw BPF program bwrap's
// --seccomp reads: struct sock_filter entries in the machine's byte order.
func seccompFilter() ([]byte, error) {
	goarch := runtime.GOARCH
	auditArch, ok := seccompArches[goarch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no filter for architecture %s", goarch)
	}
	info, err := arch.GetInfo(goarch)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	var names []string
	for _, n := range deniedSyscalls {
		// Some calls exist on one architecture only (iopl, _sysctl).
		if _, ok := info.SyscallNames[n]; ok {
			names = append(names, n)
		}
	}
	policy := seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Names: names, Action: seccomp.ActionErrno},
			{Names: []string{"clone3"}, Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS)},
			{NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "unshare", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
				{Name: "clone", Conditions: seccomp.ArgumentConditions{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_NEWUSER}}},
			}, Action: seccomp.ActionErrno},
		},
	}
	prog, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	// The library's program lets a call of a foreign architecture through
	// to the default action (allow); refuse those first. Its jumps are
	// relative, so prepending keeps them valid.
	prog = append([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: uint32(seccomp.ActionErrno) | uint32(unix.EPERM)},
	}, prog...)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// seccompPipe returns a pipe whose read end holds prog, for bwrap's
// --seccomp; the caller closes it once bwrap has started. The program is
// far smaller than a pipe's buffer, so writing cannot block.
func seccompPipe(prog []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	_, err = w.Write(prog)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("seccomp pipe: %w", err)
	}
	return r, nil
}
