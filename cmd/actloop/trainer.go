package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/actloop/actloop/internal/bus"
	"github.com/actloop/actloop/internal/service"
	"github.com/actloop/actloop/internal/swebench"
	"github.com/actloop/actloop/pkg/schema"
)

// trainerConfig is what the trainer-side commands read from the environment
// besides the NATS connection settings (service.Common: ACTLOOP_NATS_URL,
// the credentials and TLS), which connect reads.
type trainerConfig struct {
	CoordinatorURL string `envconfig:"COORDINATOR_URL" default:"http://127.0.0.1:8080"`
	// APIToken is sent as the bearer token to the coordinator's HTTP API
	// (its ACTLOOP_API_TOKEN with ACTLOOP_STATUS_OPEN=false).
	APIToken string `envconfig:"API_TOKEN"`
}

func loadTrainerConfig() (trainerConfig, error) {
	var c trainerConfig
	if err := envconfig.Process("ACTLOOP", &c); err != nil {
		return c, fmt.Errorf("settings: %w", err)
	}
	return c, nil
}

// connect connects to NATS as the services do: ACTLOOP_NATS_URL with the
// ACTLOOP_NATS_ credentials and TLS settings (service.Common), and declares
// the streams.
func connect(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
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
	if err := common.Topology().EnsureStreams(ctx, js); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("submit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "native", "`native` (actloop samples) or `swebench` (SWE-bench rows)")
	var sw swebench.Options
	fs.StringVar(&sw.Backend, "backend", schema.BackendLocal, "swebench: the samples' env backend")
	fs.StringVar(&sw.Workspace, "workspace", "", "swebench: directory holding the repository, copied into a local sandbox; {repo} and {instance_id} are replaced")
	fs.StringVar(&sw.TestCommand, "test-cmd", "", "swebench: command that runs the tests, replacing the repo's SWE-bench command (its log format stays)")
	fs.IntVar(&sw.Limits.StepLimit, "step-limit", 0, "swebench: limits.step_limit of every sample (0 = none)")
	fs.IntVar(&sw.Sampling.MaxNewTokens, "max-new-tokens", 0, "swebench: sampling.max_new_tokens of every sample (0 = default)")
	fs.Float64Var(&sw.Sampling.Temperature, "temperature", 1, "swebench: sampling.temperature of every sample")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: actloop submit [--format native|swebench] [flags] FILE.jsonl   (- for standard input)\n\nValidates every sample first; publishes nothing if any line is invalid.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return &exitError{2, errors.New("submit: one file")}
	}
	in := io.Reader(os.Stdin)
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var samples []schema.Sample
	var err error
	switch *format {
	case "native":
		samples, err = readSamples(in)
	case "swebench":
		if samples, err = swebench.Read(in, sw); err != nil {
			err = fmt.Errorf("nothing submitted:\n%w", err)
		}
	default:
		fs.Usage()
		return &exitError{2, fmt.Errorf("submit: --format: unknown format %q (want native or swebench)", *format)}
	}
	if err != nil {
		return err
	}
	nc, js, err := connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	pub := bus.NewPublisher(js)
	for _, s := range samples {
		if err := pub.Publish(ctx, schema.SubjectSamples, s.ID, s); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "submitted %d samples\n", len(samples))
	return nil
}

// readSamples decodes one sample per non-blank line and reports every bad
// line by number.
func readSamples(r io.Reader) ([]schema.Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), schema.MaxSampleBytes+1)
	var out []schema.Sample
	var errs []error
	ids := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		s, err := schema.DecodeSample(line)
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %w", n, err))
			continue
		}
		if prev, dup := ids[s.ID]; dup {
			errs = append(errs, fmt.Errorf("line %d: id: %q repeats line %d", n, s.ID, prev))
			continue
		}
		ids[s.ID] = n
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("read: %w", err))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("nothing submitted:\n%w", errors.Join(errs...))
	}
	return out, nil
}

func runResults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("results", flag.ContinueOnError)
	fs.SetOutput(stderr)
	consumer := fs.String("consumer", "trainer", "durable consumer name: each name sees every result once")
	n := fs.Int("n", 0, "stop after this many results (0: when none are pending)")
	follow := fs.Bool("follow", false, "keep waiting for results")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, js, err := connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	c, err := js.CreateOrUpdateConsumer(ctx, schema.StreamResults, jetstream.ConsumerConfig{
		Durable: *consumer, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: schema.SubjectResults, AckWait: time.Minute})
	if err != nil {
		return fmt.Errorf("results consumer %s: %w", *consumer, err)
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	got := 0
	for ctx.Err() == nil && (*n == 0 || got < *n) {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return err
		}
		k := 0
		for m := range batch.Messages() {
			if *n > 0 && got >= *n {
				_ = m.Nak()
				continue
			}
			if _, err := w.Write(append(bytes.TrimSpace(m.Data()), '\n')); err != nil {
				return err
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if err := m.DoubleAck(ctx); err != nil {
				return fmt.Errorf("ack result: %w", err)
			}
			got++
			k++
		}
		if k == 0 && !*follow && *n == 0 {
			info, err := c.Info(ctx)
			if err == nil && info.NumPending == 0 && info.NumAckPending == 0 {
				break
			}
		}
	}
	return nil
}

func runSchema(args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 || (args[0] != "sample" && args[0] != "result") {
		fmt.Fprintln(stderr, "usage: actloop schema sample|result")
		return &exitError{2, errors.New("schema: sample or result")}
	}
	b := schema.SampleJSONSchema
	if args[0] == "result" {
		b = schema.ResultJSONSchema
	}
	_, err := stdout.Write(b)
	return err
}
