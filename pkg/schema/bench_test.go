package schema

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// benchResult is a result of a 20-turn trajectory: 8,000 tokens.
func benchResult() Result {
	const n = 8000
	r := Result{ResultHead: ResultHead{V: Version, TrajID: "swe-0001-2", SampleID: "swe-0001-2", GroupID: "swe-0001",
		GroupSize: 4, Status: StatusSubmitted, Reason: "submitted", Reward: 1, MinVersion: 3, MaxVersion: 4, Turns: 20,
		AdmittedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC()},
		Tokens: make([]int32, n), Logprobs: make([]float32, n), LossMask: make([]int8, n), Versions: make([]int32, n)}
	for i := range n {
		r.Tokens[i], r.Logprobs[i], r.LossMask[i], r.Versions[i] = int32(i%150000), -0.25, int8(i%2), 3
	}
	for range 20 {
		r.Messages = append(r.Messages, Message{Role: RoleAssistant, Content: "THOUGHT: look at the file.\n\n```bash\nls\n```"})
	}
	return r
}

func BenchmarkEncodeResult(b *testing.B) {
	r := benchResult()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeResult(b *testing.B) {
	r := benchResult()
	data, _ := json.Marshal(r)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode[Result](data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeResultHead is what the coordinator and the history
// predictor pay per result.
func BenchmarkDecodeResultHead(b *testing.B) {
	r := benchResult()
	data, _ := json.Marshal(r)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode[ResultHead](data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeGenStep(b *testing.B) {
	data := []byte(`{"v":1,"traj_id":"swe-0001-2","seq":41,"replica":"r0","at":"2026-12-02T10:00:00Z"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode[GenStep](data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSample decodes a sample with a 64 KiB task, every section
// set: the strict read (unknown and repeated fields) walks it a second time.
func BenchmarkDecodeSample(b *testing.B) {
	s := Sample{V: Version, ID: "swe-0001-2", GroupID: "swe-0001", GroupIndex: 2, GroupSize: 4, Family: "django",
		Task: strings.Repeat("Fix the failing test in the ORM. ", 2000),
		Env: Env{Backend: BackendLocal, Workspace: "/repos/django", Setup: []string{"pip install -e ."}, Eval: "./runtests.py",
			Tests: &Tests{FailToPass: []string{"test_a", "test_b"}, Format: TestLogDjango}},
		Limits:   Limits{StepLimit: 250, TokenBudget: 131072, WallClockMS: 3_600_000},
		Sampling: Sampling{MaxNewTokens: 4096, Temperature: 1, TopP: 0.95},
		Metadata: []byte(`{"instance_id":"django__django-11099","split":"test"}`)}
	data, _ := json.Marshal(s)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeSample(data); err != nil {
			b.Fatal(err)
		}
	}
}
