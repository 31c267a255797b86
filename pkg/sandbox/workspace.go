package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrWorkspaceRefused means a Spec.Workspace lies outside the directories
// workspaces may come from.
var ErrWorkspaceRefused = errors.New("sandbox: workspace refused")

// ResolveWorkspace returns the real path of workspace (every symlink
// evaluated) when it is a directory inside one of roots (whose own
// symlinks are evaluated too), and an error wrapping ErrWorkspaceRefused
// otherwise: a workspace is copied with the worker's privileges, so where
// it may come from is the operator's choice, not the sample's. No roots
// refuse every workspace. A workspace that overlaps one of private (lies
// inside it, or holds it: the sandbox root, where other trajectories'
// sandboxes live, or a directory holding the services' state and
// credentials) is refused too, wherever the roots are. The backends copy
// symlinks inside a workspace as symlinks, never what they point to.
func ResolveWorkspace(roots []string, workspace string, private ...string) (string, error) {
	if len(roots) == 0 {
		return "", fmt.Errorf("%w: %q: no workspace roots are allowed", ErrWorkspaceRefused, workspace)
	}
	if !filepath.IsAbs(workspace) {
		return "", fmt.Errorf("%w: %q is not an absolute path", ErrWorkspaceRefused, workspace)
	}
	real, err := filepath.EvalSymlinks(workspace)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrWorkspaceRefused, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrWorkspaceRefused, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is not a directory", ErrWorkspaceRefused, workspace)
	}
	for _, p := range private {
		if r, err := filepath.EvalSymlinks(p); err == nil && Overlap(r, real) {
			return "", fmt.Errorf("%w: %s (really %s) overlaps %s, which no workspace may hold or lie in",
				ErrWorkspaceRefused, workspace, real, p)
		}
	}
	for _, root := range roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue // a root that does not exist holds nothing
		}
		if within(r, real) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%w: %s (really %s) is not inside an allowed root (%s)",
		ErrWorkspaceRefused, workspace, real, strings.Join(roots, ", "))
}

// within reports whether the clean absolute path p is root or lies below it.
func within(root, p string) bool {
	if root == "/" {
		return true
	}
	return p == root || strings.HasPrefix(p, root+string(filepath.Separator))
}

// Overlap reports whether the clean absolute paths a and b overlap: one is
// the other or lies below it.
func Overlap(a, b string) bool { return within(a, b) || within(b, a) }
