package sandbox

import (
	"errors"
	"fmt"
	"math"
	"path"
)

// DockerConfig configures a Docker backend.
type DockerConfig struct {
	// Host is the Engine API address: unix:///path/to/docker.sock,
	// tcp://host:port or http://host:port. "" means DefaultDockerHost.
	Host string
	// Image is the image of a sandbox whose Spec has none.
	Image string
	// WorkDir is the directory in the container that holds the workspace
	// and where commands run. "" means DefaultDockerWorkDir.
	WorkDir string
	// OutputLimit is as in LocalConfig.
	OutputLimit int
	// Network attaches containers to the default bridge network; off by
	// default (network mode "none").
	Network bool
	// Limits bound each container: memory and processes for the container
	// as a whole, CPU time for each process (ulimit "cpu").
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
)

// Validate reports every problem with the configuration.
func (c DockerConfig) Validate() error {
	var errs []error
	if c.OutputLimit < 0 {
		errs = append(errs, fmt.Errorf("output limit %d is negative", c.OutputLimit))
	}
	if c.WorkDir != "" && (!path.IsAbs(c.WorkDir) || path.Clean(c.WorkDir) != c.WorkDir || c.WorkDir == "/") {
		errs = append(errs, fmt.Errorf("workdir %q is not a clean absolute path other than /", c.WorkDir))
	}
	if err := c.Limits.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.CPUs < 0 || math.IsNaN(c.CPUs) || math.IsInf(c.CPUs, 0) {
		errs = append(errs, fmt.Errorf("cpus %v is not a non-negative number", c.CPUs))
	}
	if c.NamePrefix != "" && !idPattern.MatchString(c.NamePrefix) {
		errs = append(errs, fmt.Errorf("name prefix %q is not [A-Za-z0-9._-]", c.NamePrefix))
	}
	return errors.Join(errs...)
}
