package agent

import (
	_ "embed" // the default configuration is a YAML file, read as users' files are
	"maps"
	"sync"

	"github.com/actloop/actloop/pkg/schema"
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

//go:embed tool_call.yaml
var toolCallYAML []byte

var toolCallConfig = sync.OnceValues(func() (Config, error) { return Parse(toolCallYAML, nil) })

// DefaultConfigFor returns the built-in configuration of the flow named
// flow: DefaultConfig, or for the tool_call flow tool_call.yaml in this
// package (its prompts speak of tools, not of ```bash blocks).
func DefaultConfigFor(flow string) Config {
	if flow != schema.FlowToolCall {
		return DefaultConfig()
	}
	c, err := toolCallConfig()
	if err != nil {
		return Config{}
	}
	c.Vars = maps.Clone(c.Vars)
	return c
}

// Agent is a flow and the configuration it runs under.
type Agent struct {
	Flow
	Config Config
}

// Agents gives each sample's flow its configuration: for the bash flow the
// one read from a file (ACTLOOP_AGENT_CONFIG) when there is one, and
// otherwise each flow's built-in one (a mini-swe-agent file's prompts ask
// for ```bash blocks, which the tool_call flow does not read).
type Agents struct {
	custom *Config
}

// LoadAgents reads the configuration at path for the bash flow; "" keeps
// its built-in one.
func LoadAgents(path string) (Agents, error) {
	if path == "" {
		return Agents{}, nil
	}
	c, err := Load(path)
	if err != nil {
		return Agents{}, err
	}
	return Agents{custom: &c}, nil
}

// For returns the agent of the flow named flow ("" is the bash flow).
func (a Agents) For(flow string) (Agent, error) {
	f, err := FlowNamed(flow)
	if err != nil {
		return Agent{}, err
	}
	if a.custom != nil && f.Name() == schema.FlowBash {
		return Agent{Flow: f, Config: *a.custom}, nil
	}
	return Agent{Flow: f, Config: DefaultConfigFor(f.Name())}, nil
}

// Notices is Config.Notices of the configuration read from a file.
func (a Agents) Notices() []string {
	if a.custom == nil {
		return nil
	}
	return a.custom.Notices()
}
