package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// copyTree copies the contents of directory src into the existing directory
// dst: regular files with their modes and modification times (so git's
// stat cache stays useful), directories likewise, symlinks as symlinks.
// Sockets, pipes and devices are skipped. No symlink is ever followed, not
// even one swapped in for a directory or a file while the copy runs (the
// workspace may be written meanwhile): every file and directory is opened
// relative to its parent's descriptor with O_NOFOLLOW, so a copy never
// reads outside src. skip (Root, should it lie inside src) is not copied.
func copyTree(ctx context.Context, src, dst, skip string) error {
	var skipID *fileID
	var st unix.Stat_t
	if err := unix.Stat(skip, &st); err == nil {
		skipID = &fileID{st.Dev, st.Ino}
	}
	fd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: src, Err: err}
	}
	return copyDir(ctx, fd, src, dst, skipID, true)
}

// fileID identifies a file: device and inode.
type fileID struct {
	dev uint64
	ino uint64
}

// copyDir copies the directory open as fd (which it closes; path names it
// in errors) into dst, which exists; top is the workspace's own root.
func copyDir(ctx context.Context, fd int, path, dst string, skip *fileID, top bool) error {
	dir := os.NewFile(uintptr(fd), path)
	defer func() { _ = dir.Close() }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := copyEntry(ctx, fd, path, name, dst, skip); err != nil {
			return err
		}
	}
	mode := fileMode(st.Mode)
	if top {
		// The sandbox root stays usable by its owner.
		mode |= 0o700
	}
	// After the contents: a read-only directory is locked once they are
	// in, and its mtime is not disturbed by them.
	if err := os.Chmod(dst, mode); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, time.Unix(st.Mtim.Sec, st.Mtim.Nsec))
}

// copyEntry copies name, an entry of the directory open as dirfd (path),
// into the directory dst.
func copyEntry(ctx context.Context, dirfd int, path, name, dst string, skip *fileID) error {
	src, target := filepath.Join(path, name), filepath.Join(dst, name)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since the listing
		}
		return &fs.PathError{Op: "lstat", Path: src, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if skip != nil && (fileID{st.Dev, st.Ino}) == *skip {
			return nil
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: src, Err: err}
		}
		// Owner-writable until its contents are in; see copyDir.
		if err := os.Mkdir(target, 0o700); err != nil {
			_ = unix.Close(fd)
			return err
		}
		return copyDir(ctx, fd, src, target, skip, false)
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return &fs.PathError{Op: "readlink", Path: src, Err: err}
		}
		return os.Symlink(string(buf[:n]), target)
	case unix.S_IFREG:
		// Not following a symlink: one swapped in for the file since it
		// was listed must not copy what it points to.
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return &fs.PathError{Op: "open", Path: src, Err: err}
		}
		return copyFile(os.NewFile(uintptr(fd), src), target)
	}
	return nil
}

// fileMode converts a stat mode's permission bits to an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// copyFile copies the file open as in (which it closes) to the new file
// dst, with in's mode and modification time.
func copyFile(in *os.File, dst string) (err error) {
	defer func() { _ = in.Close() }()
	fi, err := in.Stat()
	if err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("copy %s: no longer a regular file", in.Name())
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("copy %s: %w", in.Name(), err)
	}
	// Explicitly: OpenFile's mode is filtered by the umask.
	if err := out.Chmod(fi.Mode() & modeBits); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, fi.ModTime())
}

// removeAll is os.RemoveAll that also copes with read-only directories
// (a Go module cache, or an agent's chmod -w), which stop RemoveAll for
// users other than root.
func removeAll(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	// Errors here resurface, more usefully, from the second RemoveAll.
	_ = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}
