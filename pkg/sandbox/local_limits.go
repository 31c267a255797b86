package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limit names, for ExecResult.Limit.
const (
	LimitFileSize = "file_size"
	LimitDisk     = "disk"
	LimitMemory   = "memory"
	LimitCPUTime  = "cpu_time"
	LimitProcs    = "procs"
	LimitFiles    = "files"
)

// limitPrelude returns a bash script that lowers the rlimits and then
// execs its arguments ("" when there is nothing to limit). ulimit without
// -S or -H sets both soft and hard limits, so commands cannot raise them.
// Limits above the worker's own hard limits are clamped to those. fsize
// says whether the file size limit is set (not for Local's own git
// commands, which must be able to store what the agent wrote).
func limitPrelude(lim Limits, nproc int, fsize bool) string {
	var parts []string
	add := func(flag string, resource int, value, unit uint64) {
		var rl unix.Rlimit
		if err := unix.Getrlimit(resource, &rl); err == nil && rl.Max != unix.RLIM_INFINITY && value > rl.Max/unit {
			value = rl.Max / unit
		}
		parts = append(parts, fmt.Sprintf("ulimit %s %d", flag, value))
	}
	if nproc > 0 {
		add("-u", unix.RLIMIT_NPROC, uint64(nproc), 1)
	}
	if lim.MemoryMB > 0 {
		// ulimit -v takes KiB; the rlimit is in bytes.
		add("-v", unix.RLIMIT_AS, uint64(lim.MemoryMB)*1024, 1024)
	}
	if lim.CPUTime > 0 {
		add("-t", unix.RLIMIT_CPU, uint64((lim.CPUTime+time.Second-1)/time.Second), 1)
	}
	if fsize && lim.FileSizeMB > 0 {
		// bash's ulimit -f takes KiB outside POSIX mode.
		add("-f", unix.RLIMIT_FSIZE, uint64(lim.FileSizeMB)*1024, 1024)
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, " && ") + ` || exit 126; exec "$@"`
}

// limitFromExit names the rlimit whose signal a command died of: a shell
// reports death by signal N as 128+N.
func limitFromExit(code int) string {
	switch code {
	case 128 + int(syscall.SIGXFSZ):
		return LimitFileSize
	case 128 + int(syscall.SIGXCPU):
		return LimitCPUTime
	}
	return ""
}

// limitNote is the line Local appends to a command's output when a limit
// stopped it, so that the model (and whoever reads the trajectory) knows
// which one.
func (l *Local) limitNote(limit string) string {
	lim := l.limitsCfg
	switch limit {
	case LimitFileSize:
		return fmt.Sprintf("[sandbox limit: file size: a file may hold at most %d MiB; the write past it failed]", lim.FileSizeMB)
	case LimitDisk:
		if l.disk == DiskTmpfs {
			return fmt.Sprintf("[sandbox limit: disk: the sandbox may hold at most %d MiB (working copy and /tmp) and is full; "+
				"writes past it fail (No space left on device); delete files to go on]", lim.DiskMB)
		}
		return fmt.Sprintf("[sandbox limit: disk: the sandbox may hold at most %d MiB (working copy and /tmp); "+
			"the command was stopped; delete files to go on]", lim.DiskMB)
	case LimitFiles:
		if l.disk == DiskTmpfs {
			return fmt.Sprintf("[sandbox limit: files: the sandbox may hold at most %d files and directories (working copy and /tmp) "+
				"and is full; creating more fails (No space left on device); delete files to go on]", lim.Files)
		}
		return fmt.Sprintf("[sandbox limit: files: the sandbox may hold at most %d files and directories (working copy and /tmp); "+
			"the command was stopped; delete files to go on]", lim.Files)
	case LimitMemory:
		return fmt.Sprintf("[sandbox limit: memory: the command may use at most %d MiB; it was killed]", lim.MemoryMB)
	case LimitCPUTime:
		return fmt.Sprintf("[sandbox limit: CPU time: a process may use at most %s of CPU; it was killed]", lim.CPUTime)
	case LimitProcs:
		return fmt.Sprintf("[sandbox limit: processes: at most %d at once; a fork failed]", lim.MaxProcs)
	}
	return ""
}

// errDiskLimit and errFilesLimit are the cancel causes of a command the
// disk watcher stopped.
var (
	errDiskLimit  = errors.New("disk limit reached")
	errFilesLimit = errors.New("file limit reached")
)

// Disk watching (DiskWatch): the sandbox is measured every diskPollMin, or
// less often when a measurement is slow (a large working copy), so that
// watching costs about 1/diskPollFactor of a core, but never less often
// than every diskPollMax: a command must not get minutes to write between
// two measurements. A walk stops early once it has counted past a limit
// the sandbox was under.
const (
	diskPollMin    = 250 * time.Millisecond
	diskPollMax    = 2 * time.Second
	diskPollFactor = 20
)

// usage is what a sandbox holds: bytes on disk and files (inodes).
type usage struct{ bytes, files int64 }

// diskLimits are the caps the watcher enforces; 0 means none.
type diskLimits usage

func (d diskLimits) any() bool { return d.bytes > 0 || d.files > 0 }

// over names the cap u is past, "" for none.
func (d diskLimits) over(u usage) string {
	switch {
	case d.bytes > 0 && u.bytes > d.bytes:
		return LimitDisk
	case d.files > 0 && u.files > d.files:
		return LimitFiles
	}
	return ""
}

// watchLimits are the caps watchDisk enforces for l.
func (l *Local) watchLimits() diskLimits {
	return diskLimits{bytes: l.diskBytes, files: int64(l.limitsCfg.Files)}
}

// errPastLimit stops a walk that has counted past a limit.
var errPastLimit = errors.New("past a limit")

// diskUsage returns the bytes the files under dirs take on disk (allocated
// blocks, so sparse files count what they use) and how many files there
// are (every entry but the dirs themselves), not following symlinks.
// Files that vanish while it walks are skipped. With a non-zero stop it
// returns as soon as the count is past one of stop's caps.
func diskUsage(ctx context.Context, stop diskLimits, dirs ...string) (usage, error) {
	var u usage
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
					return nil
				}
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return nil
			}
			u.bytes += st.Blocks * 512
			if p != dir {
				u.files++
			}
			if stop.over(u) != "" {
				return errPastLimit
			}
			return nil
		})
		if errors.Is(err, errPastLimit) {
			return u, nil
		}
		if err != nil {
			return u, err
		}
	}
	return u, nil
}

// watchDisk measures dirs until ctx ends and stops the command (with
// errDiskLimit or errFilesLimit) once they hold more than a limit allows
// and more than at the measurement before (the first is taken as the
// command starts): a command may not take the sandbox past a limit nor
// grow it while it is past, but one that finds it past the limit (a
// command stopped there before) and only deletes, the agent cleaning up,
// runs however long it takes.
func watchDisk(ctx context.Context, lim diskLimits, stop context.CancelCauseFunc, dirs ...string) {
	prev, err := diskUsage(ctx, diskLimits{}, dirs...)
	if err != nil {
		return // ctx ended
	}
	wait := diskPollMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := time.Now()
		// Under every limit before: a count past one is enough to stop.
		early := diskLimits{}
		if lim.over(prev) == "" {
			early = lim
		}
		used, err := diskUsage(ctx, early, dirs...)
		if err != nil {
			return // ctx ended
		}
		switch {
		case lim.bytes > 0 && used.bytes > lim.bytes && used.bytes > prev.bytes:
			stop(errDiskLimit)
			return
		case lim.files > 0 && used.files > lim.files && used.files > prev.files:
			stop(errFilesLimit)
			return
		}
		prev = used
		wait = min(diskPollMax, max(diskPollMin, diskPollFactor*time.Since(start)))
	}
}
