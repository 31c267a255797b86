package sandbox

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// copyTree copies the contents of directory src into the existing directory
// dst: regular files with their modes and modification times (so git's
// stat cache stays useful), directories likewise, symlinks as symlinks.
// Sockets, pipes and devices are skipped. Symlinks are never followed, so
// one pointing outside src copies as a link, not as what it points to.
// skip (Root, should it lie inside
// src) is not copied.
func copyTree(ctx context.Context, src, dst, skip string) error {
	type dirAttrs struct {
		path  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []dirAttrs
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if path == skip {
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch mode := info.Mode(); {
		case mode.IsDir():
			if rel != "." {
				// Owner-writable until its contents are in; see below.
				if err := os.Mkdir(target, 0o700); err != nil {
					return err
				}
			} else {
				// The sandbox root stays usable by its owner.
				mode |= 0o700
			}
			dirs = append(dirs, dirAttrs{target, mode & modeBits, info.ModTime()})
		case mode&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case mode.IsRegular():
			return copyFile(path, target, mode&modeBits, info.ModTime())
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Deepest first, so read-only directories are locked after their
	// contents are written and their mtimes are not disturbed by children.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(dirs[i].path, dirs[i].mode); err != nil {
			return err
		}
		if err := os.Chtimes(dirs[i].path, time.Time{}, dirs[i].mtime); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode fs.FileMode, mtime time.Time) (err error) {
	// Not following a symlink: one swapped in for the file since the walk
	// saw it must not copy what it points to.
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("copy %s: no longer a regular file", src)
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
		return fmt.Errorf("copy %s: %w", src, err)
	}
	// Explicitly: OpenFile's mode is filtered by the umask.
	if err := out.Chmod(mode); err != nil {
		return err
	}
	return os.Chtimes(dst, time.Time{}, mtime)
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
