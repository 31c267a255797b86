package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/swebench"
	"github.com/actloop/actloop/pkg/client"
	"github.com/actloop/actloop/pkg/schema"
)

// trainerConfig is what the trainer-side commands read from the environment
// besides the NATS connection settings (service.Common: ACTLOOP_NATS_URL,
// the credentials and TLS), which connect reads.
type trainerConfig struct {
	// CoordinatorURL must be set when APIToken is (errTokenWithoutURL).
	CoordinatorURL string `envconfig:"COORDINATOR_URL" default:"http://127.0.0.1:8080"`
	// APIToken is sent as the bearer token to the coordinator's HTTP API
	// (its ACTLOOP_API_TOKEN with ACTLOOP_STATUS_OPEN=false).
	APIToken string `envconfig:"API_TOKEN"`
}

// errTokenWithoutURL: the CLI sends its API token only to a coordinator it
// was pointed at, never to the default address, where any program may
// listen (an `actloop dev` that fell back to another port, say).
var errTokenWithoutURL = errors.New("settings: ACTLOOP_API_TOKEN is set but ACTLOOP_COORDINATOR_URL is not: " +
	"set ACTLOOP_COORDINATOR_URL to the coordinator's HTTP address (the token is not sent to the default, http://127.0.0.1:8080)")

func loadTrainerConfig() (trainerConfig, error) {
	var c trainerConfig
	if err := envconfig.Process("ACTLOOP", &c); err != nil {
		return c, fmt.Errorf("settings: %w", err)
	}
	if c.APIToken != "" && os.Getenv("ACTLOOP_COORDINATOR_URL") == "" {
		return c, errTokenWithoutURL
	}
	return c, nil
}

// connect connects to NATS as the services do: ACTLOOP_NATS_URL with the
// ACTLOOP_NATS_ credentials and TLS settings (service.Common), creates the
// streams that do not exist yet (bus.Topology.CreateStreams), and returns a
// trainer's client over the connection.
func connect(ctx context.Context) (*nats.Conn, *client.Client, error) {
	common := service.CommonDefaults()
	if err := envconfig.Process("ACTLOOP", &common); err != nil {
		return nil, nil, fmt.Errorf("settings: %w", err)
	}
	nc, err := common.ConnectNATS("cli")
	if err != nil {
		return nil, nil, err // names the setting at fault, or the URL without its user info
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	if err := common.Topology().CreateStreams(ctx, js); err != nil {
		nc.Close()
		return nil, nil, err
	}
	c, err := client.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

func newSubmitCmd() *cobra.Command {
	var format string
	var sw swebench.Options
	cmd := &cobra.Command{
		Use:   "submit [--format native|swebench] [flags] FILE.jsonl",
		Short: "Publish samples from a JSONL file (one sample per line)",
		Long: `Publish samples from a JSONL file, one sample per line (- for standard input).

Validates every sample first (a line holds at most 512 KiB, schema.MaxSampleBytes;
a field the sample format lacks is refused by name); publishes nothing if any
line is invalid (two members of a group sharing a group_index or disagreeing
on group_size included), and names every bad line (the first 100). Each sample
is published with its id as Nats-Msg-Id. A sample id names one run: an id an
earlier run used (its result is on the results stream, or its sample was
stored within the last 2 minutes) is refused, naming the earlier run; when the
results stream shows it, nothing is submitted. With --format swebench the lines are SWE-bench rows, turned into
samples with the swebench flags.`,
		Example: "  actloop submit samples.jsonl\n  actloop submit --format swebench --workspace /repos/{repo} swe.jsonl",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
				return usageError(errors.New("submit: one file"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSubmit(cmd.Context(), cmd, format, sw, args[0])
		},
	}
	f := cmd.Flags()
	f.StringVar(&format, "format", "native", "`native` (actloop samples) or `swebench` (SWE-bench rows)")
	f.StringVar(&sw.Backend, "backend", schema.BackendLocal, "swebench: the samples' env backend")
	f.StringVar(&sw.Workspace, "workspace", "", "swebench: directory holding the repository, copied into a local sandbox; {repo} and {instance_id} are replaced")
	f.StringVar(&sw.TestCommand, "test-cmd", "", "swebench: command that runs the tests, replacing the repo's SWE-bench command (its log format stays)")
	f.IntVar(&sw.Limits.StepLimit, "step-limit", 0, "swebench: limits.step_limit of every sample (0 = none)")
	f.IntVar(&sw.Sampling.MaxNewTokens, "max-new-tokens", 0, "swebench: sampling.max_new_tokens of every sample (0 = default)")
	f.Float64Var(&sw.Sampling.Temperature, "temperature", 1, "swebench: sampling.temperature of every sample")
	return cmd
}

func runSubmit(ctx context.Context, cmd *cobra.Command, format string, sw swebench.Options, name string) error {
	if format != "native" && format != "swebench" {
		fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
		return usageError(fmt.Errorf("submit: --format: unknown format %q (want native or swebench)", format))
	}
	in := cmd.InOrStdin()
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var samples []schema.Sample
	var err error
	if format == "native" {
		samples, err = readSamples(in)
	} else if samples, err = swebench.Read(in, sw); err != nil {
		err = fmt.Errorf("nothing submitted:\n%w", err)
	}
	if err != nil {
		return err
	}
	nc, c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := c.Submit(ctx, samples...); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "submitted %d samples\n", len(samples))
	return nil
}

// readSamples decodes one sample per non-blank line and reports every bad
// line by number. A line longer than a sample may be (schema.MaxSampleBytes)
// is reported as such and skipped; the lines after it are still read.
func readSamples(r io.Reader) ([]schema.Sample, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []schema.Sample
	var errs []error
	var groups schema.GroupCheck
	ids := map[string]int{}
	for n := 1; ; n++ {
		raw, size, err := readLine(br, schema.MaxSampleBytes+lineSlack)
		if err != nil && err != io.EOF {
			errs = append(errs, fmt.Errorf("read line %d: %w", n, err))
			break
		}
		line := bytes.TrimSpace(raw)
		switch {
		case size > len(raw) || len(line) > schema.MaxSampleBytes:
			errs = append(errs, fmt.Errorf("line %d: %d bytes, over the limit of %d bytes for one sample (schema.MaxSampleBytes)",
				n, size, schema.MaxSampleBytes))
		case len(line) == 0:
		default:
			s, derr := schema.DecodeSample(line)
			switch prev, dup := ids[s.ID]; {
			case derr != nil:
				errs = append(errs, fmt.Errorf("line %d: %w", n, derr))
			case dup:
				errs = append(errs, fmt.Errorf("line %d: id: %q repeats line %d", n, s.ID, prev))
			default:
				ids[s.ID] = n
				if gerr := groups.Add(&s); gerr != nil {
					errs = append(errs, fmt.Errorf("line %d (%s): %w", n, s.ID, gerr))
					continue
				}
				out = append(out, s)
			}
		}
		if err == io.EOF {
			break
		}
	}
	if len(errs) > maxLineErrors {
		errs = append(errs[:maxLineErrors], fmt.Errorf("%d more bad lines left out", len(errs)-maxLineErrors))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("nothing submitted:\n%w", errors.Join(errs...))
	}
	return out, nil
}

// maxLineErrors bounds the bad lines submit lists: a large file that is
// wrong throughout would otherwise print as much as it holds.
const maxLineErrors = 100

// lineSlack is room past schema.MaxSampleBytes for a line's end ("\r") and
// blanks around a sample of the largest size.
const lineSlack = 64

// readLine reads one line of br without its "\n": its first limit bytes,
// and its whole size in bytes, which is more than len(line) when it was cut.
// The error is io.EOF after the last line.
func readLine(br *bufio.Reader, limit int) (line []byte, size int, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		size += len(chunk)
		if room := limit - len(line); room > 0 {
			line = append(line, chunk[:min(len(chunk), room)]...)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == nil:
			if len(line) < size { // cut: size counts the "\n" as well
				return line, size - 1, nil
			}
			return line[:len(line)-1], size - 1, nil
		default:
			return line, size, err
		}
	}
}

func newResultsCmd() *cobra.Command {
	var consumer string
	var n int
	var follow, heads bool
	cmd := &cobra.Command{
		Use:   "results",
		Short: "Print finished trajectories as JSONL and acknowledge them",
		Long: `Print finished trajectories (results) as JSONL, one per line, acknowledging
each once written. A result is published as a head whose body (token arrays,
messages, diff) is in the object store: each line is the whole result, its
body fetched and checked against the head's size and SHA-256 (--heads prints
the heads alone). A result that does not decode, or whose body is gone or does not match, is reported
on stderr and taken off the consumer, and the command then exits 1.

Each durable consumer name (--consumer) sees every result once: results
acknowledged under a name are not printed again for it. A result published
twice (after a crash) is printed once per run: a late copy of a traj_id
acknowledged before is acknowledged unseen. Without -n or --follow
it stops when none are pending.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runResults(cmd.Context(), consumer, n, follow, heads, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&consumer, "consumer", "trainer", "durable consumer name: each name sees every result once")
	f.IntVarP(&n, "n", "n", 0, "stop after this many results (0: when none are pending)")
	f.BoolVar(&follow, "follow", false, "keep waiting for results")
	f.BoolVar(&heads, "heads", false, "print each result's head only (no token arrays, messages or diff)")
	return cmd
}

func runResults(ctx context.Context, consumer string, n int, follow, heads bool, stdout, stderr io.Writer) error {
	if n < 0 {
		return usageError(fmt.Errorf("results: -n: must be >= 0, got %d", n))
	}
	nc, c, err := connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := c.Results(ctx, consumer)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	render := func(d *client.Delivery) ([]byte, error) {
		if heads {
			if _, err := d.Head(); err != nil {
				return nil, err
			}
			return append(bytes.TrimSpace(d.Data()), '\n'), nil
		}
		r, err := d.Result(ctx)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(r)
		return append(b, '\n'), err
	}
	got, skipped := 0, 0
	for ctx.Err() == nil && (n == 0 || got < n) {
		batch := 100
		if n > 0 {
			batch = min(batch, n-got)
		}
		k := 0
		for d, err := range res.Fetch(ctx, batch, time.Second) {
			if err != nil {
				if ctx.Err() != nil {
					return nil // interrupted: what was printed is acknowledged
				}
				return err
			}
			line, err := render(d)
			if errors.Is(err, client.ErrBodyGone) || errors.Is(err, schema.ErrBodyMismatch) || errors.Is(err, schema.ErrInvalid) {
				// It will not come back: say so, take it off the consumer, go on.
				fmt.Fprintf(stderr, "actloop: result skipped: %v\n", err)
				skipped++
				_ = d.Term()
				continue
			}
			if err != nil {
				return fmt.Errorf("result: %w", err)
			}
			if _, err := w.Write(line); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if err := d.Ack(ctx); err != nil {
				return fmt.Errorf("result: %w", err)
			}
			got++
			k++
		}
		if k == 0 && !follow && n == 0 {
			b, err := res.Backlog(ctx)
			if err == nil && b == (client.Backlog{}) {
				break
			}
		}
	}
	if skipped > 0 {
		return fmt.Errorf("results: %d skipped (see above)", skipped)
	}
	return nil
}

func newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema sample|result",
		Short: "Print the JSON Schema of a sample or a result",
		Long: `Print the JSON Schema of a sample or of a result (pkg/schema, generated from
its Go types), for trainers in other languages.`,
		ValidArgs: []string{"sample", "result"},
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || (args[0] != "sample" && args[0] != "result") {
				fmt.Fprintln(cmd.ErrOrStderr(), "usage: actloop schema sample|result")
				return usageError(errors.New("schema: sample or result"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			b := schema.SampleJSONSchema
			if args[0] == "result" {
				b = schema.ResultJSONSchema
			}
			_, err := cmd.OutOrStdout().Write(b)
			return err
		},
	}
}
