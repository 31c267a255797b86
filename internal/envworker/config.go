package envworker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/sandbox"
	"github.com/actloop/actloop/pkg/schema"
)

// Reward is how an env-worker scores a trajectory beyond its eval: which
// trajectories are scored and the reward endpoint (ACTLOOP_REWARD_*);
// `actloop dev` reads it as the env-worker does.
type Reward struct {
	// RewardOn says which trajectories the eval scores: `submitted` (those
	// the agent submitted, as the reference loop does; one ended by a limit
	// gets reward 0 and its diff, not evaluated) or `always` (every
	// trajectory that ran to an end, a limit's included). A reward endpoint
	// (ACTLOOP_REWARD_URL, a sample's reward) is asked only for a
	// trajectory this lets the eval score.
	RewardOn string `envconfig:"REWARD_ON" default:"submitted"`
	// RewardURL is the deployment's reward endpoint: once a scored
	// trajectory's eval has run, the env-worker POSTs the trajectory to it
	// and the reward is its answer's (docs/agent.md, "Reward"); a
	// sample's reward.url takes its place where allowed. Empty: none but
	// the samples' own.
	RewardURL string `envconfig:"REWARD_URL"`
	// RewardURLs are the prefixes (comma-separated) a sample's reward.url
	// must start with to be called, each an http or https URL naming its
	// host and the "/" after it (http://judge:8000/ matches
	// http://judge:8000/score, never http://judge:8000.evil.example/);
	// ACTLOOP_REWARD_URL itself is always allowed. A sample naming another
	// URL gets reward 0 and a reward_error naming this setting, and nothing
	// is called: the env-worker's network is not the sample's to reach.
	// Empty, the default: samples may not name a URL.
	RewardURLs []string `envconfig:"REWARD_URLS"`
	// RewardTimeout bounds one attempt to ask the reward endpoint, where
	// a sample's reward.timeout_ms does not; at most 1h. An attempt past
	// it is given up and may be tried again (ACTLOOP_REWARD_RETRIES).
	RewardTimeout time.Duration `envconfig:"REWARD_TIMEOUT" default:"60s"`
	// RewardRetries is the attempts to ask the reward endpoint after the
	// first, where a sample's reward.retries does not say (0 to 10): on a
	// connection error, a 5xx answer or a timeout, never on a 4xx, after a
	// back-off from 500ms, doubling, with jitter. When none answers, the
	// reward is 0 and reward_error says why.
	RewardRetries int `envconfig:"REWARD_RETRIES" default:"2"`
}

// Config is an env-worker's settings (ACTLOOP_ prefix).
type Config struct {
	service.Common
	// ID names this worker; its sandboxes' later steps are routed to
	// actloop.env.<ID>. It must be stable across restarts so a restarted
	// worker finds its sandboxes again. Default: the host name.
	ID    string `envconfig:"ENV_WORKER_ID"`
	Slots int    `envconfig:"ENV_SLOTS" default:"8"`
	// HeartbeatInterval is how often the worker tells the coordinator it
	// is alive (NATS KV actloop_heartbeats, key env.<id>).
	HeartbeatInterval time.Duration `envconfig:"HEARTBEAT_INTERVAL" default:"5s"`
	SandboxRoot       string        `envconfig:"SANDBOX_ROOT"`
	// OutputLimit bounds the bytes of a command's output that are kept, its
	// first and last halves with a marker line between; the rest is
	// dropped while it is read, so a command that prints gigabytes costs
	// the worker no more than this.
	OutputLimit int `envconfig:"OUTPUT_LIMIT" default:"10000"`
	// MaxDiffBytes bounds a trajectory's diff: a larger one is not
	// evaluated but scores 0, with a reason, and is kept cut to this size.
	// The diff is kept in the trajectory's state (Redis) and in its
	// result's body (the object store), so no NATS message has to hold
	// it: this bounds what one trajectory costs there. The local backend reads the diff only this far (git is
	// stopped past it), so a huge file in a sandbox costs the worker no
	// more than this.
	MaxDiffBytes int `envconfig:"MAX_DIFF_BYTES" default:"1048576"`
	Reward           // ACTLOOP_REWARD_*: how a trajectory is scored
	// SandboxReplay: a trajectory whose sandbox is gone (its env-worker
	// restarted without it: a new machine, a wiped disk) gets a new one in
	// which its commands so far run again, in order, before its next step;
	// false ends it with a fallback instead.
	SandboxReplay bool   `envconfig:"SANDBOX_REPLAY" default:"true"`
	Isolation     string `envconfig:"SANDBOX_ISOLATION" default:"auto"`
	// AllowUnisolated lets the local backend run commands unisolated on the
	// host: isolation none, or auto where bubblewrap does not work.
	AllowUnisolated bool `envconfig:"SANDBOX_ALLOW_UNISOLATED" default:"false"`
	Network         bool `envconfig:"SANDBOX_NETWORK" default:"false"`
	// MaxProcs bounds a command's processes: pids.max of its cgroup where
	// the local backend has cgroups, else RLIMIT_NPROC under bwrap (none
	// unisolated); the container's pids limit with Docker.
	MaxProcs int `envconfig:"SANDBOX_MAX_PROCS" default:"512"`
	// MemoryMB bounds a command's memory: memory.max of its cgroup (all its
	// processes together, no swap; an OOM kills the command) where the
	// local backend has cgroups, else each process's address space
	// (RLIMIT_AS); the container's memory with Docker.
	MemoryMB int `envconfig:"SANDBOX_MEMORY_MB" default:"8192"`
	// CPUTime bounds each process's CPU time (RLIMIT_CPU): past it the
	// process is killed (SIGXCPU). The step timeout bounds wall time.
	CPUTime time.Duration `envconfig:"SANDBOX_CPU_TIME" default:"10m"`
	// FileSizeMB bounds any one file a command writes (RLIMIT_FSIZE,
	// local backend): the write past it fails and the writer is killed
	// (SIGXFSZ); the observation names the limit. 0: no limit.
	FileSizeMB int `envconfig:"SANDBOX_FILE_SIZE_MB" default:"1024"`
	// DiskMB bounds what one local sandbox holds on disk, its working copy
	// and its private /tmp together, enforced as ACTLOOP_SANDBOX_DISK says;
	// the observation of a command that reached it names the limit, and
	// the agent can delete files to go on. 0: no limit.
	DiskMB int `envconfig:"SANDBOX_DISK_MB" default:"4096"`
	// Files bounds the files and directories (inodes) one local sandbox
	// holds, its working copy and its private /tmp together, enforced as
	// ACTLOOP_SANDBOX_DISK says (empty files take no bytes: without it a
	// sandbox could hold millions). 0: no limit.
	Files int `envconfig:"SANDBOX_FILES" default:"262144"`
	// Disk says how the local backend enforces ACTLOOP_SANDBOX_DISK_MB and
	// ACTLOOP_SANDBOX_FILES: `tmpfs` (each sandbox on a tmpfs of its own,
	// size- and inode-capped, mounted by the worker, which needs root or
	// CAP_SYS_ADMIN: the kernel refuses a write or a file past a cap with
	// "No space left on device"; the sandbox lives in memory and swap, up
	// to its cap), `watch` (the sandbox measured while a command runs, at
	// least every 2s, and the command killed once it is over a cap: no
	// privilege needed, but a command can overshoot a cap by what it
	// writes between two measurements) or `auto` (tmpfs where the worker
	// can mount, else watch). The worker logs at start which is in force,
	// and why not tmpfs; GET /v1/status on ACTLOOP_ENV_WORKER_ADDR says
	// it too. actloop dev uses `watch`: its sandboxes live under its state
	// directory, which goes when it exits.
	Disk          string   `envconfig:"SANDBOX_DISK" default:"auto"`
	SandboxUID    int      `envconfig:"SANDBOX_UID" default:"65534"`
	ReadOnlyBinds []string `envconfig:"SANDBOX_RO_BINDS"`
	// WorkspaceRoots are the directories (comma-separated) whose
	// subdirectories samples may name as env.workspace: a workspace is
	// resolved with every symlink evaluated and refused when its real path
	// is not inside one of them (the trajectory ends failed, naming this
	// setting); symlinks inside a workspace are copied as links. Empty, the
	// default, allows no workspace at all: a workspace is copied with the
	// worker's privileges, so the operator says where they may come from
	// (for example /workspaces, where they are mounted). The development
	// stack (actloop dev) sets its own. A root inside ACTLOOP_SANDBOX_ROOT
	// is refused at start; a workspace that overlaps ACTLOOP_SANDBOX_ROOT
	// (another trajectory's sandbox, or a directory holding them all) is
	// refused whatever the roots.
	WorkspaceRoots []string `envconfig:"WORKSPACE_ROOTS"`
	// PrivateDirs are directories (comma-separated) besides the sandbox
	// root that no workspace root may lie in and no workspace may
	// overlap: where the host keeps credentials and state a sandbox must
	// not see (a workspace is copied with the worker's privileges).
	PrivateDirs []string `envconfig:"PRIVATE_DIRS"`
	// SetupMaxCommands bounds the setup commands (env.setup) a sample may
	// list: one with more ends failed at its start, naming this setting,
	// before any runs. At most schema.MaxSetupCommands (256), the bound
	// every sample is checked against at submit, so it can only be lower.
	SetupMaxCommands int `envconfig:"SETUP_MAX_COMMANDS" default:"256"`
	// SetupTotalTimeout bounds a sandbox's setup commands together (each
	// is also bounded by the sample's env.setup_timeout_ms): setup still
	// running then is stopped and the trajectory ends failed, naming this
	// setting (an eval sandbox's: scored 0), since the limit is the
	// deployment's, not the sample's. A sample's limits.wall_clock_ms
	// covers its setup too: setup still running when it runs out is
	// stopped, and the trajectory ends limit_exceeded with limit
	// wall_clock, as when the wall clock runs out between turns. 0: no
	// total bound.
	SetupTotalTimeout time.Duration `envconfig:"SETUP_TOTAL_TIMEOUT" default:"1h"`
	// SandboxBackend runs samples with env.backend "local": BackendLocal
	// (bash on this host) or BackendDocker (a container per trajectory).
	SandboxBackend string `envconfig:"SANDBOX_BACKEND" default:"local"`
	DockerHost     string `envconfig:"DOCKER_HOST"`
	DockerImage    string `envconfig:"DOCKER_IMAGE"`
	// SandboxImages lists, for the docker backend, the images a sample's
	// env.image may name besides ACTLOOP_DOCKER_IMAGE: exact references,
	// or prefixes ending in `*` (`python:*`, `ghcr.io/org/*`; `*` alone
	// allows any), compared as written; a sample naming another ends
	// failed, naming this setting.
	SandboxImages []string `envconfig:"SANDBOX_IMAGES"`
	// DockerUser is the numeric `uid:gid` (not root) containers run as;
	// "" is 65534:65534.
	DockerUser string `envconfig:"DOCKER_USER"`
	// DockerWorkDirMB is the size, MiB, of each container's in-memory work
	// dir (0: 4096); its root is read-only.
	DockerWorkDirMB int `envconfig:"DOCKER_WORKDIR_MB"`
	// DockerTmpMB is the size, MiB, of each container's in-memory /tmp (0:
	// 1024).
	DockerTmpMB int `envconfig:"DOCKER_TMP_MB"`
	// CPUs bounds a sandbox's CPU share in cores: the container's with
	// Docker, each command's cgroup (cpu.max) with the local backend where
	// it has cgroups. 0: no limit.
	CPUs             float64       `envconfig:"SANDBOX_CPUS" default:"2"`
	SimStartLatency  time.Duration `envconfig:"SIM_ENV_START_LATENCY" default:"2s"`
	SimExecLatency   time.Duration `envconfig:"SIM_ENV_EXEC_LATENCY" default:"500ms"`
	SimEnvTimeScale  float64       `envconfig:"SIM_ENV_TIME_SCALE" default:"1"`
	SimStartFailures float64       `envconfig:"SIM_ENV_START_FAILURES" default:"0"`
	// SandboxStartAttempts bounds the tries to create a sandbox whose
	// creation fails for a reason a retry may fix (quota, image pull, the
	// container API); SandboxStartBackoff is the wait before the second,
	// doubled before each next (with jitter). Then the trajectory ends with
	// a fallback naming the error.
	SandboxStartAttempts int           `envconfig:"SANDBOX_START_ATTEMPTS" default:"3"`
	SandboxStartBackoff  time.Duration `envconfig:"SANDBOX_START_BACKOFF" default:"1s"`
	Addr                 string        `envconfig:"ENV_WORKER_ADDR" default:":8082"`
	// AgentConfig: the mini-swe-agent YAML configuration, as for the gen-worker.
	AgentConfig   string `envconfig:"AGENT_CONFIG"`
	tokenize.Chat        // ACTLOOP_TOKENIZER, ACTLOOP_CHAT_TEMPLATE: the same in every service
}

// Values of ACTLOOP_REWARD_ON.
const (
	RewardOnSubmitted = "submitted"
	RewardOnAlways    = "always"
)

// Values of ACTLOOP_SANDBOX_BACKEND.
const (
	BackendLocal  = "local"
	BackendDocker = "docker"
)

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// Normalize fills the defaults that depend on the machine.
func (c *Config) Normalize() {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = unsafeName.ReplaceAllString(host, "-")
	}
	if c.SandboxRoot == "" {
		c.SandboxRoot = filepath.Join(os.TempDir(), "actloop-sandboxes", c.ID)
	}
}

// Validate joins every problem with c.
func (c *Config) Validate() error {
	c.Normalize()
	errs := []error{c.Common.Validate()}
	if !bus.ValidName(c.ID) {
		errs = append(errs, fmt.Errorf("ACTLOOP_ENV_WORKER_ID: %q is not a valid name ([A-Za-z0-9_-], not \"start\")", c.ID))
	}
	if c.HeartbeatInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("ACTLOOP_HEARTBEAT_INTERVAL: must be >= 10ms, got %v", c.HeartbeatInterval))
	}
	if c.Slots < 1 {
		errs = append(errs, errors.New("ACTLOOP_ENV_SLOTS: must be >= 1"))
	}
	if c.MaxDiffBytes < 1 {
		errs = append(errs, fmt.Errorf("ACTLOOP_MAX_DIFF_BYTES: must be >= 1, got %d", c.MaxDiffBytes))
	}
	if c.RewardOn != RewardOnSubmitted && c.RewardOn != RewardOnAlways {
		errs = append(errs, fmt.Errorf("ACTLOOP_REWARD_ON: %q is not %q or %q", c.RewardOn, RewardOnSubmitted, RewardOnAlways))
	}
	errs = append(errs, c.validReward()...)
	switch c.SandboxBackend {
	case BackendLocal:
		if err := c.local().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_SANDBOX_*: %w", err))
		}
	case BackendDocker:
		if err := c.docker().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_SANDBOX_*, ACTLOOP_DOCKER_*: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("ACTLOOP_SANDBOX_BACKEND: %q is not %q or %q", c.SandboxBackend, BackendLocal, BackendDocker))
	}
	for _, r := range c.WorkspaceRoots {
		if !filepath.IsAbs(r) {
			errs = append(errs, fmt.Errorf("ACTLOOP_WORKSPACE_ROOTS: %q is not an absolute path", r))
			continue
		}
		if dir, name, ok := c.privateHolding(r); ok {
			errs = append(errs, fmt.Errorf("ACTLOOP_WORKSPACE_ROOTS: %q lies inside %s (%s), where no workspace may come from", r, name, dir))
		}
	}
	if c.SetupMaxCommands < 1 || c.SetupMaxCommands > schema.MaxSetupCommands {
		errs = append(errs, fmt.Errorf("ACTLOOP_SETUP_MAX_COMMANDS: must be in [1, %d] (schema.MaxSetupCommands, "+
			"the bound a sample is checked against at submit), got %d", schema.MaxSetupCommands, c.SetupMaxCommands))
	}
	if c.SetupTotalTimeout < 0 {
		errs = append(errs, fmt.Errorf("ACTLOOP_SETUP_TOTAL_TIMEOUT: must be >= 0, got %v", c.SetupTotalTimeout))
	}
	if c.SimEnvTimeScale < 0 {
		errs = append(errs, errors.New("ACTLOOP_SIM_ENV_TIME_SCALE: must be >= 0"))
	}
	if !(c.SimStartFailures >= 0 && c.SimStartFailures <= 1) {
		errs = append(errs, fmt.Errorf("ACTLOOP_SIM_ENV_START_FAILURES: must be in [0, 1], got %v", c.SimStartFailures))
	}
	if c.SandboxStartAttempts < 1 {
		errs = append(errs, errors.New("ACTLOOP_SANDBOX_START_ATTEMPTS: must be >= 1"))
	}
	if c.SandboxStartBackoff < 0 {
		errs = append(errs, errors.New("ACTLOOP_SANDBOX_START_BACKOFF: must be >= 0"))
	}
	errs = append(errs, c.Chat.Validate())
	return errors.Join(errs...)
}

// validReward checks the reward endpoint settings.
func (c *Config) validReward() []error {
	var errs []error
	if c.RewardURL != "" {
		if err := schema.CheckRewardURL(c.RewardURL); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_REWARD_URL: %w", err))
		}
	}
	for _, p := range c.RewardURLs {
		if err := checkRewardPrefix(p); err != nil {
			errs = append(errs, fmt.Errorf("ACTLOOP_REWARD_URLS: %w", err))
		}
	}
	if c.RewardTimeout <= 0 || c.RewardTimeout > schema.MaxRewardTimeout {
		errs = append(errs, fmt.Errorf("ACTLOOP_REWARD_TIMEOUT: must be in (0, %v] (schema.MaxRewardTimeout), got %v",
			schema.MaxRewardTimeout, c.RewardTimeout))
	}
	if c.RewardRetries < 0 || c.RewardRetries > schema.MaxRewardRetries {
		errs = append(errs, fmt.Errorf("ACTLOOP_REWARD_RETRIES: must be in [0, %d] (schema.MaxRewardRetries), got %d",
			schema.MaxRewardRetries, c.RewardRetries))
	}
	return errs
}

func (c *Config) local() sandbox.LocalConfig {
	return sandbox.LocalConfig{Root: c.SandboxRoot, OutputLimit: c.OutputLimit, Isolation: c.Isolation,
		AllowUnisolated: c.AllowUnisolated, Network: c.Network, SandboxUID: c.SandboxUID, ReadOnlyBinds: c.ReadOnlyBinds,
		CPUs: c.CPUs, Disk: c.Disk, Limits: c.limits()}
}

// limits are the per-sandbox limits, the same for either backend (Docker
// ignores the file size, disk and file limits).
func (c *Config) limits() sandbox.Limits {
	return sandbox.Limits{MaxProcs: c.MaxProcs, MemoryMB: c.MemoryMB, CPUTime: c.CPUTime,
		FileSizeMB: c.FileSizeMB, DiskMB: c.DiskMB, Files: c.Files}
}

// privateDirs are the directories no workspace may overlap: the sandbox
// root and PrivateDirs, each with the setting that names it.
func (c *Config) privateDirs() (dirs, names []string) {
	dirs, names = []string{c.SandboxRoot}, []string{"ACTLOOP_SANDBOX_ROOT"}
	for _, d := range c.PrivateDirs {
		dirs, names = append(dirs, d), append(names, "ACTLOOP_PRIVATE_DIRS")
	}
	return dirs, names
}

// privateHolding returns the private directory (and its name) that root
// lies in, if any; paths are compared with their symlinks evaluated where
// they exist.
func (c *Config) privateHolding(root string) (dir, name string, ok bool) {
	dirs, names := c.privateDirs()
	r := realPath(root)
	for i, d := range dirs {
		if d == "" {
			continue
		}
		if p := realPath(d); p == r || strings.HasPrefix(r, p+string(filepath.Separator)) {
			return d, names[i], true
		}
	}
	return "", "", false
}

// rootsHolding lists the workspace roots that hold a private directory:
// allowed, but every workspace overlapping that directory is refused.
func (c *Config) rootsHolding() []string {
	dirs, _ := c.privateDirs()
	var out []string
	for _, r := range c.WorkspaceRoots {
		for _, d := range dirs {
			if d != "" && sandbox.Overlap(realPath(r), realPath(d)) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// realPath is p, absolute and clean, with its symlinks evaluated as far as
// it exists.
func realPath(p string) string {
	p, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// docker is the Docker backend's configuration; the engine's address
// falls back to DOCKER_HOST, as the docker CLI's does.
func (c *Config) docker() sandbox.DockerConfig {
	host := c.DockerHost
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	return sandbox.DockerConfig{Host: host, Image: c.DockerImage, Images: c.SandboxImages, User: c.DockerUser,
		WorkDirSizeMB: c.DockerWorkDirMB, TmpSizeMB: c.DockerTmpMB, OutputLimit: c.OutputLimit, Network: c.Network,
		CPUs: c.CPUs, Limits: sandbox.Limits{MaxProcs: c.MaxProcs, MemoryMB: c.MemoryMB, CPUTime: c.CPUTime}}
}

func (c *Config) sim() sandbox.SimConfig {
	return sandbox.SimConfig{StartLatency: c.SimStartLatency, ExecLatency: c.SimExecLatency, Jitter: 0.5,
		TimeScale: c.SimEnvTimeScale, StartFailures: c.SimStartFailures}
}
