// Command syscallprobe tries system calls the sandbox's seccomp filter
// denies and prints, one a line, each call's name and its errno ("ok" when
// it succeeded). The tests build it statically and run it in a sandbox.
package main

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	probes := []struct {
		name string
		call func() syscall.Errno
	}{
		{"ptrace", func() syscall.Errno {
			// PTRACE_TRACEME needs no target and no privilege.
			_, _, e := syscall.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
			return e
		}},
		{"keyctl", func() syscall.Errno {
			_, _, e := syscall.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(0xfffffffd), 0) // the session keyring
			return e
		}},
		{"unshare_user", func() syscall.Errno {
			// In a thread of its own: a user namespace is per thread here.
			ch := make(chan syscall.Errno)
			go func() {
				_, _, e := syscall.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
				ch <- e
				select {} // the thread stays locked in its namespace
			}()
			return <-ch
		}},
		{"bpf", func() syscall.Errno {
			_, _, e := syscall.RawSyscall(unix.SYS_BPF, 0, 0, 0)
			return e
		}},
		{"userfaultfd", func() syscall.Errno {
			_, _, e := syscall.RawSyscall(unix.SYS_USERFAULTFD, 0, 0, 0)
			return e
		}},
		{"getpid", func() syscall.Errno {
			_, _, e := syscall.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
			return e
		}},
	}
	for _, p := range probes {
		e := p.call()
		res := "ok"
		if e != 0 {
			res = unix.ErrnoName(e)
		}
		fmt.Println(p.name, res)
	}
}
