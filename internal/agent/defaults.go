package agent

import (
	_ "embed" // the default configuration is a YAML file, read as users' files are
	"maps"
	"sync"
)

//go:embed default.yaml
var defaultYAML []byte

var defaultConfig = sync.OnceValues(func() (Config, error) { return Parse(defaultYAML, nil) })

// DefaultConfig returns actloop's built-in configuration (default.yaml in
// this package: mini-swe-agent's default.yaml with the changes listed at its
// top). Rendering it needs no host variables. TestDefaultConfigParses keeps
// the embedded file valid; were it not, DefaultConfig would return a zero
// Config, which every render and Validate reject.
func DefaultConfig() Config {
	c, err := defaultConfig()
	if err != nil {
		return Config{}
	}
	c.Vars = maps.Clone(c.Vars)
	return c
}
