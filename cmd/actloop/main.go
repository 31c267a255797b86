// Command actloop is actloop for people: `dev` runs everything in one
// process with a demo batch; `submit`, `results` and `status` drive a running
// deployment as a trainer would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/actloop/actloop/internal/launch"
)

const usage = `usage: actloop <command> [flags]

commands:
  dev       run NATS, Redis, the inference simulator and all four services in
            one process, and drive a demo batch of coding tasks through them
  submit    publish samples from a JSONL file (one sample per line)
  results   print finished trajectories as JSONL and acknowledge them
  status    print the coordinator's status: control state, trajectories,
            replicas (--json: the whole /v1/status)
  top       print the status again every few seconds until interrupted
  pause     pause generation for a weight update (--mode abort|drain); returns
            once every gen-worker has paused
  resume    resume generation (--weight-version N)
  control   print the control state and each gen-worker's pause report
  schema    print the JSON Schema of a sample or a result
  serve     run one service (coordinator, gen-worker, env-worker,
            predictor-gw) with its ACTLOOP_* settings, as its own command does
  sim       serve the inference simulator (SGLang's HTTP API and OpenAI
            completions) on --addr, default :30000
  probe     GET a URL; exit 0 if it answers 2xx within --timeout, else 1
            with the reason (container health checks)
  bench     run one simulated workload under several scheduling modes and
            compare makespan, latency, slot use and preemptions
  bench-sync
            pause and resume many times with generations in flight: pause
            latency, tokens kept, throughput lost per weight sync
  bench-pipeline
            the pipeline's own cost with backends that answer at once:
            actions per second, CPU per action, dispatch latency, Redis bytes

Run 'actloop <command> -h' for its flags. Settings come from ACTLOOP_*
environment variables (see README.md).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "actloop:", err)
		}
		os.Exit(exitCode(err))
	}
}

// exitError carries an exit code other than 1.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	if errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &exitError{2, errors.New("no command")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev":
		return runDev(ctx, rest, stdout, stderr)
	case "submit":
		return runSubmit(ctx, rest, stdout, stderr)
	case "results":
		return runResults(ctx, rest, stdout, stderr)
	case "status":
		return runStatus(ctx, rest, stdout, stderr)
	case "top":
		return runTop(ctx, rest, stdout, stderr)
	case "pause", "resume", "control":
		return runControl(ctx, cmd, rest, stdout, stderr)
	case "schema":
		return runSchema(rest, stdout, stderr)
	case "serve":
		if len(rest) != 1 || !launch.Known(rest[0]) {
			return &exitError{2, fmt.Errorf("serve: name one service of %v", launch.Names)}
		}
		return launch.Run(rest[0])
	case "sim":
		return runSim(ctx, rest, stdout, stderr)
	case "probe":
		return runProbe(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "bench-sync":
		return runBenchSync(ctx, rest, stdout, stderr)
	case "bench-pipeline":
		return runBenchPipeline(ctx, rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return &exitError{2, fmt.Errorf("unknown command %q", cmd)}
}
