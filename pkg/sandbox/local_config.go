package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Isolation modes for LocalConfig.Isolation.
const (
	// IsolationNone runs commands directly on the host, in the sandbox dir.
	IsolationNone = "none"
	// IsolationBwrap runs commands under bubblewrap: the sandbox dir is the
	// only writable host path, the rest of / is read-only, other sandboxes
	// are hidden, /tmp is private to the sandbox, and there is no network
	// and a private pid namespace.
	IsolationBwrap = "bwrap"
)

// LocalConfig configures a Local backend.
type LocalConfig struct {
	// Root is the parent directory of the sandboxes; it is created if
	// missing. Root belongs to one Local (one process) at a time.
	Root string
	// OutputLimit is how many bytes of a command's output are kept: the
	// first and last halves, with a marker line in between. 0 means
	// DefaultOutputLimit.
	OutputLimit int
	// Isolation is IsolationNone (the default when "") or IsolationBwrap.
	Isolation string
}

// Validate reports every problem with the configuration.
func (c LocalConfig) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("root is empty"))
	} else if abs, err := filepath.Abs(c.Root); err == nil && abs == "/" {
		errs = append(errs, errors.New("root must not be /"))
	}
	if c.OutputLimit < 0 {
		errs = append(errs, fmt.Errorf("output limit %d is negative", c.OutputLimit))
	}
	switch c.Isolation {
	case "", IsolationNone, IsolationBwrap:
	default:
		errs = append(errs, fmt.Errorf("isolation %q is not %q or %q", c.Isolation, IsolationNone, IsolationBwrap))
	}
	return errors.Join(errs...)
}
