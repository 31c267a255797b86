package sandbox_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/actloop/actloop/pkg/sandbox"
)

// hostImageTools are the programs a sandbox container needs for the
// conformance suite: bash, what the backend's scripts run (sleep as the
// container's command; rm, cat, mktemp, cp and git in the exec wrapper,
// the kill, the diff and the apply) and what the suite's commands run
// (seq).
var hostImageTools = []string{"bash", "sleep", "cat", "rm", "mktemp", "cp", "seq", "git"}

// hostImageRepo names the images hostImage makes; the tag is a digest of
// the root filesystem.
const hostImageRepo = "actloop-sandbox-test"

// hostImage returns an image for the conformance suite made of this
// host's own files, for an engine that cannot pull one: it imports (POST
// /images/create?fromSrc=-) a root filesystem of hostImageTools and the
// shared libraries they load, tagged with a digest of its content, unless
// the engine already has that tag. It skips the test when the host lacks
// a tool.
func hostImage(t testing.TB, d *sandbox.Docker) string {
	t.Helper()
	rootfs, err := hostRootfs(hostImageTools)
	if err != nil {
		t.Skipf("no image to run and none to make from this host: %v", err)
	}
	sum := sha256.Sum256(rootfs)
	tag := hex.EncodeToString(sum[:6])
	ref := hostImageRepo + ":" + tag
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if ok, err := d.ImageExists(ctx, ref); err != nil {
		t.Fatal(err)
	} else if ok {
		return ref
	}
	// The default PATH of a Linux container, which an imported image
	// has no Env to give.
	changes := []string{"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if err := d.ImportImage(ctx, hostImageRepo, tag, changes, bytes.NewReader(rootfs)); err != nil {
		t.Fatal(err)
	}
	return ref
}

// hostRootfs returns a root filesystem, as a tar archive, of the host's
// programs tools (found on PATH), the shared libraries they load and the
// directories a container needs (/tmp, /etc, /dev, /proc, /sys). The
// archive depends on the files' content and modes alone: entries are
// sorted, owned by root, dated at the Unix epoch.
func hostRootfs(tools []string) ([]byte, error) {
	r := &rootfsBuilder{entries: map[string]*tar.Header{}, seen: map[string]bool{}}
	for _, tool := range tools {
		p, err := exec.LookPath(tool)
		if err != nil {
			return nil, err
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		if err := r.addELF(abs); err != nil {
			return nil, fmt.Errorf("%s: %w", tool, err)
		}
	}
	for _, dir := range []string{"/tmp", "/etc", "/dev", "/proc", "/sys"} {
		mode := int64(0o755)
		if dir == "/tmp" {
			mode = 0o1777
		}
		r.entries[dir] = &tar.Header{Typeflag: tar.TypeDir, Name: dir[1:] + "/", Mode: mode}
	}
	return r.archive()
}

// rootfsBuilder collects the entries of a root filesystem copied from the
// host.
type rootfsBuilder struct {
	entries map[string]*tar.Header // by absolute path
	seen    map[string]bool        // ELF files whose dependencies are added
	ldDirs  []string               // the dynamic loader's search path
}

// add adds the host's path p with every directory and symbolic link on
// the way to it (so /lib/x86_64-linux-gnu/libc.so.6 brings the link /lib
// -> usr/lib along), and returns the path of the file it resolves to.
func (r *rootfsBuilder) add(p string) (string, error) {
	for range 40 {
		comps := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		cur, next := "/", ""
		for i, c := range comps {
			at := filepath.Join(cur, c)
			fi, err := os.Lstat(at)
			if err != nil {
				return "", err
			}
			name := strings.TrimPrefix(at, "/")
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(at)
				if err != nil {
					return "", err
				}
				r.entries[at] = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}
				if !filepath.IsAbs(target) {
					target = filepath.Join(cur, target)
				}
				next = filepath.Join(append([]string{target}, comps[i+1:]...)...)
			case fi.IsDir():
				if _, ok := r.entries[at]; !ok {
					r.entries[at] = &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755}
				}
			case fi.Mode().IsRegular() && i == len(comps)-1:
				r.entries[at] = &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size()}
				return at, nil
			default:
				return "", fmt.Errorf("%s: not a directory, a regular file or a symbolic link", at)
			}
			if next != "" {
				break
			}
			cur = at
		}
		if next == "" {
			return "", fmt.Errorf("%s is a directory", p)
		}
		p = next
	}
	return "", fmt.Errorf("%s: too many symbolic links", p)
}

// addELF adds the program or library p, its ELF interpreter and the
// libraries it needs (DT_NEEDED), found as the dynamic loader finds them:
// in its DT_RUNPATH or DT_RPATH ($ORIGIN expanded), then in the
// directories of /etc/ld.so.conf.d, then in /lib64, /usr/lib64, /lib and
// /usr/lib, skipping libraries of another ELF class or machine.
func (r *rootfsBuilder) addELF(p string) error {
	real, err := r.add(p)
	if err != nil || r.seen[real] {
		return err
	}
	r.seen[real] = true
	f, err := elf.Open(real)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(prog.Open())
		if err != nil {
			return fmt.Errorf("%s: interpreter: %w", real, err)
		}
		if err := r.addELF(string(bytes.TrimRight(b, "\x00"))); err != nil {
			return err
		}
	}
	needed, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("%s: %w", real, err)
	}
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		paths, _ := f.DynString(tag)
		for _, list := range paths {
			for _, dir := range filepath.SplitList(list) {
				dirs = append(dirs, strings.ReplaceAll(dir, "$ORIGIN", filepath.Dir(real)))
			}
		}
	}
	dirs = append(dirs, r.loaderDirs()...)
	for _, lib := range needed {
		found := ""
		for _, dir := range dirs {
			if c := filepath.Join(dir, lib); sameELFKind(c, f) {
				found = c
				break
			}
		}
		if found == "" {
			return fmt.Errorf("%s needs %s, which is in none of %v", real, lib, dirs)
		}
		if err := r.addELF(found); err != nil {
			return err
		}
	}
	return nil
}

// loaderDirs returns the directories of /etc/ld.so.conf.d/*.conf and the
// loader's own defaults.
func (r *rootfsBuilder) loaderDirs() []string {
	if r.ldDirs != nil {
		return r.ldDirs
	}
	confs, _ := filepath.Glob("/etc/ld.so.conf.d/*.conf")
	slices.Sort(confs)
	for _, conf := range confs {
		b, err := os.ReadFile(conf)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "/") {
				r.ldDirs = append(r.ldDirs, line)
			}
		}
	}
	r.ldDirs = append(r.ldDirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	return r.ldDirs
}

// sameELFKind reports whether p is an ELF file of the class and machine
// of f.
func sameELFKind(p string, f *elf.File) bool {
	g, err := elf.Open(p)
	if err != nil {
		return false
	}
	defer g.Close()
	return g.Class == f.Class && g.Machine == f.Machine
}

// archive writes the entries, sorted, with the files' content.
func (r *rootfsBuilder) archive() ([]byte, error) {
	paths := make([]string, 0, len(r.entries))
	for p := range r.entries {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		h := r.entries[p]
		h.ModTime, h.Format = time.Unix(0, 0), tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		_, err = io.CopyN(tw, f, h.Size)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TestHostRootfs checks the root filesystem hostImage imports: the same
// bytes each time, every tool and the interpreter and libraries of each
// in it, with the links on the way to them.
func TestHostRootfs(t *testing.T) {
	a, err := hostRootfs(hostImageTools)
	if err != nil {
		t.Skipf("this host lacks a tool: %v", err)
	}
	b, err := hostRootfs(hostImageTools)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("a second archive differs (error %v)", err)
	}
	entries := map[string]*tar.Header{}
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		entries["/"+strings.TrimSuffix(h.Name, "/")] = h
	}
	// resolve follows the archive's own links, as the container will.
	var resolve func(p string, depth int) *tar.Header
	resolve = func(p string, depth int) *tar.Header {
		comps := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
		cur := "/"
		for i, c := range comps {
			at := filepath.Join(cur, c)
			h := entries[at]
			if h == nil || depth > 40 {
				return nil
			}
			if h.Typeflag == tar.TypeSymlink {
				target := h.Linkname
				if !filepath.IsAbs(target) {
					target = filepath.Join(cur, target)
				}
				return resolve(filepath.Join(append([]string{target}, comps[i+1:]...)...), depth+1)
			}
			cur = at
		}
		return entries[cur]
	}
	for _, tool := range hostImageTools {
		p, _ := exec.LookPath(tool)
		h := resolve(p, 0)
		if h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Fatalf("%s (%s) is not an executable in the archive: %+v", tool, p, h)
		}
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		libs, _ := f.ImportedLibraries()
		f.Close()
		for _, lib := range libs {
			found := false
			for p := range entries {
				if h := resolve(p, 0); filepath.Base(p) == lib && h != nil && h.Typeflag == tar.TypeReg {
					found = true
				}
			}
			if !found {
				t.Errorf("%s needs %s, which is not in the archive", tool, lib)
			}
		}
	}
	if h := entries["/tmp"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory with mode 1777", h)
	}
}
