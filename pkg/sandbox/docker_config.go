package sandbox

import (
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"
)

// ErrImageNotAllowed means a Spec names an image that the Docker backend's
// configuration does not allow (DockerConfig.Images). No retry can fix it.
var ErrImageNotAllowed = errors.New("sandbox: image not allowed")

// DockerConfig configures a Docker backend.
//
// Every container runs as User (never root) with all capabilities
// dropped, no-new-privileges and a read-only root filesystem; the only
// writable places are WorkDir (WorkDirSizeMB) and /tmp (TmpSizeMB), both
// in memory (tmpfs), and /dev/shm (the engine's 64 MiB default).
type DockerConfig struct {
	// Host is the Engine API address: unix:///path/to/docker.sock,
	// tcp://host:port or http://host:port. "" means DefaultDockerHost.
	Host string
	// Image is the image of a sandbox whose Spec has none; it is always
	// allowed.
	Image string
	// Images lists the other images a Spec may name. An entry is an exact
	// reference ("python:3.12", "ghcr.io/org/env@sha256:…") or ends in
	// "*" and allows every reference that starts with the rest
	// ("python:*": any tag of python; "ghcr.io/org/*": everything under
	// ghcr.io/org/; "*" alone: any image). References are compared as
	// written: "python" (implicitly :latest) matches neither "python:*"
	// nor "docker.io/library/python:latest". Any other image fails Start
	// with ErrImageNotAllowed, before the engine is contacted.
	Images []string
	// User is the numeric "uid:gid" every process in the container runs
	// as, not root (uid 0); "" means DefaultDockerUser. Names are not
	// accepted: the workspace's files and WorkDir are given to these ids
	// without looking into the image's /etc/passwd.
	User string
	// WorkDir is the directory in the container that holds the workspace
	// and where commands run. "" means DefaultDockerWorkDir. It is an
	// empty in-memory volume of WorkDirSizeMB owned by User; whatever the
	// image has there is hidden.
	WorkDir string
	// WorkDirSizeMB bounds WorkDir (the copied workspace included); 0
	// means DefaultDockerWorkDirSizeMB.
	WorkDirSizeMB int
	// TmpSizeMB bounds /tmp, an in-memory filesystem; 0 means
	// DefaultDockerTmpSizeMB.
	TmpSizeMB int
	// OutputLimit is as in LocalConfig.
	OutputLimit int
	// Network attaches containers to the default bridge network; off by
	// default (network mode "none").
	Network bool
	// Limits bound each container: memory and processes for the container
	// as a whole, CPU time for each process (ulimit "cpu"). A zero field
	// means no limit; callers usually start from DefaultLimits.
	Limits Limits
	// CPUs bounds the CPU share of a container (NanoCpus); 0: no limit.
	CPUs float64
	// NamePrefix starts every container's name; "" means "actloop-".
	NamePrefix string
}

// Defaults for DockerConfig.
const (
	DefaultDockerHost    = "unix:///var/run/docker.sock"
	DefaultDockerWorkDir = "/workspace"
	// DefaultDockerUser is nobody:nogroup in Debian, Ubuntu and Alpine
	// images, and Local's DefaultSandboxUID.
	DefaultDockerUser          = "65534:65534"
	DefaultDockerWorkDirSizeMB = 4096
	DefaultDockerTmpSizeMB     = 1024
)

// Validate reports every problem with the configuration, each naming its
// field.
func (c DockerConfig) Validate() error {
	var errs []error
	if c.OutputLimit < 0 {
		errs = append(errs, fmt.Errorf("OutputLimit: %d is negative", c.OutputLimit))
	}
	if c.WorkDir != "" && (!path.IsAbs(c.WorkDir) || path.Clean(c.WorkDir) != c.WorkDir || c.WorkDir == "/") {
		errs = append(errs, fmt.Errorf("WorkDir: %q is not a clean absolute path other than /", c.WorkDir))
	} else if c.WorkDir == "/tmp" {
		errs = append(errs, errors.New("WorkDir: must not be /tmp, which is a filesystem of its own (TmpSizeMB)"))
	}
	if c.WorkDirSizeMB < 0 {
		errs = append(errs, fmt.Errorf("WorkDirSizeMB: %d is negative", c.WorkDirSizeMB))
	}
	if c.TmpSizeMB < 0 {
		errs = append(errs, fmt.Errorf("TmpSizeMB: %d is negative", c.TmpSizeMB))
	}
	if c.User != "" {
		if _, _, err := parseDockerUser(c.User); err != nil {
			errs = append(errs, fmt.Errorf("User: %w", err))
		}
	}
	for i, p := range c.Images {
		if err := validateImagePattern(p); err != nil {
			errs = append(errs, fmt.Errorf("Images[%d]: %w", i, err))
		}
	}
	if strings.ContainsAny(c.Image, "* \t\n") {
		errs = append(errs, fmt.Errorf("Image: %q is not an image reference", c.Image))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Limits: %w", err))
	}
	if c.CPUs < 0 || math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0) {
		errs = append(errs, fmt.Errorf("CPUs: %v is not a non-negative number", c.CPUs))
	}
	if c.NamePrefix != "" && !idPattern.MatchString(c.NamePrefix) {
		errs = append(errs, fmt.Errorf("NamePrefix: %q is not [A-Za-z0-9._-]", c.NamePrefix))
	}
	return errors.Join(errs...)
}

// parseDockerUser parses a numeric "uid:gid" other than root's.
func parseDockerUser(s string) (uid, gid int, err error) {
	u, g, ok := strings.Cut(s, ":")
	uid, uerr := strconv.Atoi(u)
	gid, gerr := strconv.Atoi(g)
	switch {
	case !ok || uerr != nil || gerr != nil || uid < 0 || gid < 0 || uid > math.MaxInt32 || gid > math.MaxInt32 ||
		strconv.Itoa(uid) != u || strconv.Itoa(gid) != g:
		return 0, 0, fmt.Errorf("%q is not a numeric uid:gid", s)
	case uid == 0:
		return 0, 0, fmt.Errorf("%q is root; sandboxes run as a user without privileges", s)
	}
	return uid, gid, nil
}

// validateImagePattern checks one entry of DockerConfig.Images.
func validateImagePattern(p string) error {
	switch {
	case p == "":
		return errors.New("empty")
	case strings.ContainsAny(p, " \t\n"):
		return fmt.Errorf("%q contains white space", p)
	case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
		return fmt.Errorf("%q has a * before its end (only a trailing * is a pattern)", p)
	}
	return nil
}

// imageAllowed reports whether image is the default image or matches one
// of the patterns of DockerConfig.Images.
func imageAllowed(image, def string, patterns []string) bool {
	if image == def {
		return true
	}
	for _, p := range patterns {
		if prefix, glob := strings.CutSuffix(p, "*"); glob && strings.HasPrefix(image, prefix) || image == p {
			return true
		}
	}
	return false
}
