package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Disk enforcement modes for LocalConfig.Disk.
const (
	// DiskAuto uses DiskTmpfs where the worker may mount (root, or
	// CAP_SYS_ADMIN in its mount namespace) and DiskWatch elsewhere;
	// Local.Disk says which is in force and Local.DiskError why not tmpfs.
	DiskAuto = "auto"
	// DiskTmpfs gives each sandbox a tmpfs of its own, mounted in the
	// worker's mount namespace with size=DiskMB and nr_inodes=Files, that
	// holds its working copy and its private /tmp: the kernel refuses a
	// write or a new file past either cap (ENOSPC), whatever the command
	// does and however fast. A tmpfs lives in memory (and swap): a sandbox
	// costs the host's memory what it holds, up to DiskMB. A sandbox's
	// tmpfs outlives the worker process but not the host (or container):
	// after a reboot Attach reports it gone.
	DiskTmpfs = "tmpfs"
	// DiskWatch measures the sandbox (bytes and files) while a command
	// runs and kills the command once it is over a cap; it needs no
	// privilege, but a command can overshoot a cap by what it writes
	// between two measurements.
	DiskWatch = "watch"
)

// diskDirName holds each sandbox's tmpfs under DiskTmpfs: Root/+disk/<id>,
// with the working copy in w (bind-mounted at Root/<id>) and the private
// /tmp in t.
const diskDirName = "+disk"

// tmpfsExtraInodes are the tmpfs's own inodes (its root, w and t), beyond
// the files the sandbox may hold.
const tmpfsExtraInodes = 3

func (l *Local) diskRoot() string          { return filepath.Join(l.root, diskDirName) }
func (l *Local) diskOf(id string) string   { return filepath.Join(l.diskRoot(), id) }
func (l *Local) diskWork(id string) string { return filepath.Join(l.diskOf(id), "w") }
func (l *Local) diskTmp(id string) string  { return filepath.Join(l.diskOf(id), "t") }

// initDisk resolves cfg.Disk: DiskTmpfs where asked for (an error where it
// cannot mount) or, under DiskAuto, where a probe mount works and there is
// a disk cap to enforce.
func (l *Local) initDisk(cfg LocalConfig) error {
	l.disk = DiskWatch
	if cfg.Limits.DiskMB == 0 && cfg.Disk != DiskTmpfs {
		return nil // nothing for a tmpfs to cap in bytes; files, if capped, are watched
	}
	switch cfg.Disk {
	case DiskWatch:
		return nil
	case DiskTmpfs:
		if cfg.Limits.DiskMB == 0 {
			return fmt.Errorf("disk %q: needs a disk limit (Limits.DiskMB); a tmpfs without one would hold as much as memory allows", DiskTmpfs)
		}
		if err := l.probeTmpfs(); err != nil {
			return fmt.Errorf("disk %q: %w", DiskTmpfs, err)
		}
		l.disk = DiskTmpfs
	default: // DiskAuto
		if err := l.probeTmpfs(); err != nil {
			l.diskErr = err
			return nil
		}
		l.disk = DiskTmpfs
	}
	return nil
}

// probeTmpfs mounts a small tmpfs and binds a directory of it elsewhere,
// as a sandbox's start does, and undoes both.
func (l *Local) probeTmpfs() error {
	if err := os.MkdirAll(l.diskRoot(), 0o755); err != nil {
		return err
	}
	probe, err := os.MkdirTemp(l.diskRoot(), "+probe-")
	if err != nil {
		return err
	}
	bind, err := os.MkdirTemp(l.diskRoot(), "+probe-bind-")
	if err != nil {
		_ = os.Remove(probe)
		return err
	}
	defer func() {
		_ = unmount(bind)
		_ = unmount(probe)
		_ = os.Remove(bind)
		_ = removeAll(probe)
	}()
	if err := mountTmpfs(probe, 1, 8); err != nil {
		return err
	}
	w := filepath.Join(probe, "w")
	if err := os.Mkdir(w, 0o755); err != nil {
		return fmt.Errorf("tmpfs probe: %w", err)
	}
	if err := unix.Mount(w, bind, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount (needs root or CAP_SYS_ADMIN): %w", err)
	}
	return nil
}

// mountTmpfs mounts a tmpfs of mb MiB and at most inodes inodes (0: the
// kernel's default) at dir.
func mountTmpfs(dir string, mb, inodes int) error {
	opts := fmt.Sprintf("size=%dk,mode=0755", mb*1024)
	if inodes > 0 {
		opts += fmt.Sprintf(",nr_inodes=%d", inodes)
	}
	if err := unix.Mount("actloop-sandbox", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount tmpfs (%s) at %s (needs root or CAP_SYS_ADMIN): %w", opts, dir, err)
	}
	return nil
}

// unmount detaches what is mounted at dir; nothing mounted there (or no
// dir) is not an error.
func unmount(dir string) error {
	// Checked first: a worker that may not mount (DiskWatch) may not
	// unmount either, not even what is not mounted.
	if m, err := mounted(dir); err != nil || !m {
		return err
	}
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", dir, err)
}

// mountTmpfsFor makes sandbox id's tmpfs and binds its working copy at
// Root/<id> (which must exist, empty).
func (l *Local) mountTmpfsFor(id string) error {
	dir := l.diskOf(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	inodes := 0
	if l.limitsCfg.Files > 0 {
		inodes = l.limitsCfg.Files + tmpfsExtraInodes
	}
	if err := mountTmpfs(dir, l.limitsCfg.DiskMB, inodes); err != nil {
		return err
	}
	if err := os.Mkdir(l.diskWork(id), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(l.diskTmp(id), 0o700); err != nil {
		return err
	}
	if err := unix.Mount(l.diskWork(id), l.dirOf(id), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s at %s: %w", l.diskWork(id), l.dirOf(id), err)
	}
	return nil
}

// unmountFor undoes mountTmpfsFor, whatever of it was done; the tmpfs's
// contents go with it.
func (l *Local) unmountFor(id string) error {
	return errors.Join(unmount(l.dirOf(id)), unmount(l.diskOf(id)))
}

// mounted reports whether dir is on another filesystem than its parent:
// a sandbox's working copy bound from its tmpfs (every tmpfs has a device
// of its own, also where Root itself is on a tmpfs).
func mounted(dir string) (bool, error) {
	var st, parent unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	if err := unix.Lstat(filepath.Dir(dir), &parent); err != nil {
		return false, err
	}
	return st.Dev != parent.Dev, nil
}

// tmpfsFull reports which cap sandbox id's tmpfs has reached: LimitDisk
// when it has no byte left, LimitFiles when it has no inode left, "" when
// neither (or it cannot tell).
func (l *Local) tmpfsFull(id string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(l.diskOf(id), &st); err != nil {
		return ""
	}
	switch {
	case st.Bavail == 0:
		return LimitDisk
	case l.limitsCfg.Files > 0 && st.Ffree == 0:
		return LimitFiles
	}
	return ""
}

// fullOf is tmpfsFull for sb, "" for a sandbox without a tmpfs.
func (l *Local) fullOf(sb *localSandbox) string {
	if !sb.tmpfs {
		return ""
	}
	return l.tmpfsFull(sb.id)
}

// limitName names the disk or file limit with its value, for errors.
func (l *Local) limitName(limit string) string {
	if limit == LimitFiles {
		return fmt.Sprintf("file limit (%d files)", l.limitsCfg.Files)
	}
	return fmt.Sprintf("disk limit (%d MiB)", l.limitsCfg.DiskMB)
}
