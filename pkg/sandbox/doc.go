// Package sandbox runs an agent's shell commands in an isolated working copy
// of a task's workspace and takes the resulting diff.
//
// A Backend starts sandboxes from a Spec (workspace to copy, optional patch,
// setup commands, environment) and re-attaches them by handle. Each sandbox
// is owned by one process at a time; its Handle is an opaque string meant to
// be persisted (for example in Redis) so that the owner can Attach it again
// after a restart. Attach returns ErrNotFound once the sandbox is gone.
//
// Three backends implement the interfaces:
//
//   - Local keeps each sandbox as a directory under a root and runs commands
//     with bash under bubblewrap (its own user, pid and network namespaces,
//     read-only system directories, nothing else of the host, a seccomp
//     filter denying DeniedSyscalls), or unisolated where that is
//     explicitly allowed (LocalConfig.AllowUnisolated; ErrUnisolated
//     otherwise). Its limits: file size (RLIMIT_FSIZE), disk and files (a
//     size- and inode-capped tmpfs per sandbox where the worker may mount,
//     DiskTmpfs; else the sandbox measured while a command runs,
//     DiskWatch), CPU time (RLIMIT_CPU), and memory,
//     processes and CPU share in a cgroup v2 per command where the worker
//     has a delegated one (Local.Cgroups); as a fallback where it has
//     none, in a cgroup per command in each of the cgroup v1 memory, pids
//     and cpu hierarchies where they are writable at the worker's cgroups
//     (the command enters them before it runs anything; an OOM kills the
//     whole command, as in v2); else RLIMIT_AS and, under bwrap,
//     RLIMIT_NPROC.
//   - Docker runs a container per sandbox over the Docker Engine HTTP API
//     (versions 1.41 to 1.55, negotiated with the engine; else
//     ErrDockerAPIVersion): an unprivileged user, no capabilities,
//     no-new-privileges, a read-only root with a size-limited in-memory
//     work dir and /tmp, a cgroup namespace of its own, memory, process and
//     CPU limits, no network by default, and only the images DockerConfig
//     allows (ErrImageNotAllowed).
//   - Sim runs no processes; it simulates latencies and a handful of commands
//     (echo, sleep, exit) for load tests and for tests of the layers above.
//
// Semantics shared by the backends, checked by package sandboxtest:
//
//   - Exec never reports a command timeout as an error: the result has
//     TimedOut set, ReturnCode -1 and the output produced so far. An error
//     means the sandbox itself failed, is gone (ErrNotFound) or ctx ended.
//   - Start with an id that is already live in the same Backend value fails
//     with ErrExists; ids must match [A-Za-z0-9][A-Za-z0-9._-]{0,191}
//     (ValidateID), else ErrInvalidID.
//   - A failing setup command, or setup past Spec.SetupTotalTimeout or
//     Spec.SetupDeadline, fails Start with a *SetupError and leaves
//     nothing behind; so does ctx ending during setup, with ctx's error.
//   - Output that is not valid UTF-8 is returned with U+FFFD in its place
//     and ExecResult.Replaced set (Local and Docker add ReplacedNote).
//   - Close is idempotent and removes everything; afterwards Attach, Exec and
//     Diff report ErrNotFound.
//   - Output is capped (the head and tail kept) while it is read, and
//     DiffCapped cuts a diff at the caller's cap; a CappedDiffer (Local, Docker)
//     also reads no further, so neither costs the caller more memory than
//     its cap whatever the sandbox holds.
//
// Only Local checks these, in its own tests: a command stopped by a limit
// (or, under DiskTmpfs, that filled the sandbox to one) has
// ExecResult.Limit set and its output ends with a line naming the limit
// (file size, disk, files, memory and processes where a cgroup tells, CPU
// time); the seccomp filter; symlinks in a workspace copied as links,
// never followed.
// ResolveWorkspace is the check a caller makes before Start on a
// workspace named by untrusted input.
//
// A Local sandbox is also a Server: it serves one HTTP handler of the
// caller's to its commands (the proxy flow's model endpoint). Under
// bubblewrap without the host's network, the handler listens on a Unix
// socket in the sandbox's /tmp and each command runs under a forwarder
// (ForwarderName: a copy of the program's own executable, which must call
// Forwarder first thing in main) that carries connections to ServePort of
// the sandbox's loopback to it; nothing else of the host's network is
// reachable. Docker and Sim sandboxes do not serve yet.
//
// For a caller that crashed between Start and persisting the handle: Local
// replaces a sandbox left under the same id by an earlier process, so Start
// can simply be retried with the same id; Sim sandboxes do not survive the
// process at all.
//
// All Backend and Sandbox values are safe for concurrent use.
package sandbox
