package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

const validSample = `{"v":1,"id":"s-1","group_index":0,"task":"fix it",
 "env":{"backend":"local","workspace":"/tmp/ws","eval":"./check.sh"},
 "limits":{"step_limit":10},"sampling":{"temperature":0.7},"metadata":{"k":[1,2]}}`

func TestDecodeSample(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantField string // "" = valid
	}{
		{"valid", validSample, ""},
		{"malformed json", `{"v":1,"id":`, "(message)"},
		{"not an object", `[1,2]`, "(message)"},
		{"missing version", `{"id":"a","task":"t","env":{"backend":"sim"}}`, "v"},
		{"unknown version", `{"v":7,"id":"a","task":"t","env":{"backend":"sim"}}`, "v"},
		{"version wrong type", `{"v":"1","id":"a","task":"t","env":{"backend":"sim"}}`, "v"},
		{"missing id", `{"v":1,"task":"t","env":{"backend":"sim"}}`, "id"},
		{"bad id", `{"v":1,"id":"a b","task":"t","env":{"backend":"sim"}}`, "id"},
		{"missing task", `{"v":1,"id":"a","env":{"backend":"sim"}}`, "task"},
		{"missing backend", `{"v":1,"id":"a","task":"t","env":{}}`, "env.backend"},
		{"unknown backend", `{"v":1,"id":"a","task":"t","env":{"backend":"k8s"}}`, "env.backend"},
		{"wrong type nested", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeout_ms":"5s"}}`, "env.step_timeout_ms"},
		{"wrong type array", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","setup":"ls"}}`, "env.setup"},
		{"negative limit", `{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"limits":{"step_limit":-1}}`, "limits.step_limit"},
		{"top_p range", `{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"sampling":{"top_p":1.5}}`, "sampling.top_p"},
		{"group index past size", `{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"group_index":4,"group_size":4}`, "group_index"},
		{"oversized", `{"v":1,"id":"a","env":{"backend":"sim"},"task":"` + strings.Repeat("x", MaxSampleBytes) + `"}`, "(message)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := DecodeSample([]byte(tt.in))
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("DecodeSample: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("err = %v, want a FieldError on %q", err, tt.wantField)
			}
			if s.ID != "" {
				t.Fatalf("invalid sample returned non-zero value %+v", s)
			}
		})
	}
}

func TestDecodeSampleReportsEveryProblem(t *testing.T) {
	_, err := DecodeSample([]byte(`{"v":1,"id":"","task":"","env":{"backend":"x"}}`))
	for _, f := range []string{"id:", "task: missing (exactly one of task, messages, prompt_ids must be set; got none)", "env.backend:"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v does not name %s", err, f)
		}
	}
}

func TestSampleNormalize(t *testing.T) {
	s, err := DecodeSample([]byte(validSample))
	if err != nil {
		t.Fatal(err)
	}
	if s.GroupID != "s-1" || s.Env.StepTimeout() != DefaultStepTimeout || s.Sampling.MaxNewTokens != DefaultMaxNewTokens {
		t.Fatalf("defaults not applied: %+v", s)
	}
	if string(s.Metadata) != `{"k":[1,2]}` {
		t.Fatalf("metadata = %s", s.Metadata)
	}
}

func TestDecodeSteps(t *testing.T) {
	if g, err := Decode[GenStep]([]byte(`{"v":1,"traj_id":"t1","seq":3,"replica":"r0"}`)); err != nil || g.Seq != 3 {
		t.Fatalf("GenStep: %+v %v", g, err)
	}
	if _, err := Decode[GenStep]([]byte(`{"v":1,"traj_id":"t1","seq":3}`)); !isField(err, "replica") {
		t.Fatalf("GenStep without replica: %v", err)
	}
	if _, err := Decode[EnvStep]([]byte(`{"v":1,"traj_id":"t1","seq":0,"kind":"dance"}`)); !isField(err, "kind") {
		t.Fatalf("EnvStep bad kind: %v", err)
	}
	if _, err := Decode[Event]([]byte(`{"v":1,"traj_id":"t1","seq":-1,"type":"failed"}`)); !isField(err, "seq") {
		t.Fatalf("Event negative seq: %v", err)
	}
	if _, err := Decode[Result]([]byte(`{"v":1,"traj_id":"t1","status":"submitted","tokens":[1],"logprobs":[],"loss_mask":[1],"versions":[0]}`)); !isField(err, "tokens") {
		t.Fatalf("Result lengths: %v", err)
	}
	if _, err := Decode[Control]([]byte(`{"v":1,"mode":"nap"}`)); !isField(err, "mode") {
		t.Fatalf("Control mode: %v", err)
	}
	if _, err := Decode[Control]([]byte(`{"v":1,"stale_policy":"shrug"}`)); !isField(err, "stale_policy") {
		t.Fatalf("Control stale_policy: %v", err)
	}
	if _, err := DecodeRequest[PauseRequest]([]byte(`{"mode":"abort","timeout_ms":-5}`)); !isField(err, "timeout_ms") {
		t.Fatalf("PauseRequest timeout: %v", err)
	}
	if _, err := DecodeRequest[ResumeRequest]([]byte(`{"weight_version":-2}`)); !isField(err, "weight_version") {
		t.Fatalf("ResumeRequest version: %v", err)
	}
	if _, err := Decode[PauseReport]([]byte(`{"v":1,"epoch":3}`)); !isField(err, "worker") {
		t.Fatalf("PauseReport without worker: %v", err)
	}
	if _, err := Decode[GroupDone]([]byte(`{"v":1,"group_id":"g","size":2,"traj_ids":["a"]}`)); !isField(err, "traj_ids") {
		t.Fatalf("GroupDone short: %v", err)
	}
}

func isField(err error, field string) bool {
	var fe *FieldError
	return errors.As(err, &fe) && fe.Field == field
}

func TestResultRoundTrip(t *testing.T) {
	r := Result{ResultHead: ResultHead{V: Version, TrajID: "t", Status: StatusSubmitted, Reward: 1, NumTokens: 2},
		Tokens: []int32{1, 2}, Logprobs: []float32{0, -0.5}, LossMask: []int8{0, 1}, Versions: []int32{-1, 3}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"loss_mask":[0,1]`) {
		t.Fatalf("loss_mask must be a JSON array of numbers: %s", b)
	}
	got, err := Decode[Result](b)
	if err != nil || !got.Solved() || !slices.Equal(got.Versions, r.Versions) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

// The shipped JSON Schemas must describe exactly the Go types.
func TestJSONSchemaMatchesTypes(t *testing.T) {
	for _, tc := range []struct {
		file []byte
		typ  reflect.Type
		// requiredAll: every field without omitempty is required.
		requiredAll bool
	}{
		{SampleJSONSchema, reflect.TypeFor[Sample](), false},
		{ResultJSONSchema, reflect.TypeFor[Result](), true},
	} {
		var doc schemaNode
		if err := json.Unmarshal(tc.file, &doc); err != nil {
			t.Fatalf("%s: %v", tc.typ, err)
		}
		compareSchema(t, tc.typ.Name(), doc, tc.typ, tc.requiredAll)
	}
}

type schemaNode struct {
	Properties map[string]schemaNode `json:"properties"`
	Required   []string              `json:"required"`
	Items      *schemaNode           `json:"items"`
}

func compareSchema(t *testing.T, path string, n schemaNode, typ reflect.Type, requiredAll bool) {
	t.Helper()
	var names, required []string
	for _, f := range reflect.VisibleFields(typ) { // an embedded struct's fields are the outer one's in JSON
		if f.Anonymous {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		names = append(names, name)
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
		child, ok := n.Properties[name]
		if !ok {
			t.Errorf("%s: schema lacks property %q", path, name)
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && child.Items != nil {
			compareSchema(t, path+"."+name+"[]", *child.Items, ft.Elem(), requiredAll)
		} else if ft.Kind() == reflect.Struct && ft.PkgPath() == typ.PkgPath() {
			compareSchema(t, path+"."+name, child, ft, false)
		}
	}
	for name := range n.Properties {
		if !slices.Contains(names, name) {
			t.Errorf("%s: schema property %q has no Go field", path, name)
		}
	}
	if requiredAll {
		sort.Strings(required)
		got := slices.Clone(n.Required)
		sort.Strings(got)
		if !slices.Equal(got, required) {
			t.Errorf("%s: schema requires %v, Go type always writes %v", path, got, required)
		}
	}
}

func FuzzDecodeSample(f *testing.F) {
	f.Add([]byte(validSample))
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"limits":{"step_limit":1e99}}`))
	// Bounds, ids, unknown and repeated fields (TestDecodeSampleBounds).
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeout_ms":999999999999999}}`))
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeout_ms":86400000,"setup_timeout_ms":86400000,` +
		`"eval_timeout_ms":86400000},"limits":{"step_limit":100000,"token_budget":16777216,"wall_clock_ms":604800000,` +
		`"format_error_limit":100000},"sampling":{"max_new_tokens":1048576,"top_k":1048576,"temperature":100},` +
		`"group_size":4096,"group_index":4095}`))
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"sampling":{"max_new_tokens":2e9}}`))
	f.Add([]byte(`{"v":1,"id":"..","group_id":"-g","task":"t","env":{"backend":"sim"}}`))
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeot_ms":5,"tests":{"fail_to_pass":["x"],"Format":"pytest"}}}`))
	f.Add([]byte(`{"v":1,"id":"a","Task":"t","task":"t","task":"u","env":{"backend":"sim"},"metadata":{"x":{"y":[1,{"z":null}]}}}`))
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim","tests":null},"limits":null,"extra":{"a":[{"b":1}]}}`))
	// Invalid UTF-8 and deep metadata (TestDecodeInvalidUTF8, TestDecodeSampleMetadataDepth).
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"script":["x` + "\xff" + `"],"metadata":{"k":"` + "\xe2\x98" + `"}}`))
	f.Add([]byte(sampleWith(`"metadata":` + nested(MaxMetadataDepth+1))))
	// The prompt as messages or token ids (TestDecodeSamplePrompt).
	f.Add([]byte(`{"v":1,"id":"a","env":{"backend":"sim"},"messages":[{"role":"system","content":"s"},{"role":"user","content":null},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"c","name":"f","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`))
	f.Add([]byte(`{"v":1,"id":"a","env":{"backend":"sim"},"prompt_ids":[151644,872,198,-1,2147483647]}`))
	f.Add([]byte(`{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"prompt_ids":[],"messages":[{"role":"assistant","content":"a","x":1}],"tools":[1]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSample(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		if !utf8.Valid(b) {
			t.Fatalf("accepted invalid UTF-8: %q", b)
		}
		if d := jsonDepth(s.Metadata, MaxMetadataDepth); d > MaxMetadataDepth {
			t.Fatalf("accepted metadata %d deep", d)
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded sample does not validate: %v", err)
		}
		set := 0
		for _, ok := range []bool{s.Task != "", len(s.Messages) > 0, len(s.PromptIDs) > 0} {
			if ok {
				set++
			}
		}
		if n := len(s.Messages); set != 1 || n > 0 && s.Messages[n-1].Role == RoleAssistant ||
			slices.ContainsFunc(s.PromptIDs, func(id int32) bool { return id < 0 }) {
			t.Fatalf("accepted a prompt that is not exactly one of task, messages and prompt_ids, or is bad: %s", b)
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeSample(out); err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
	})
}

func FuzzDecodeEnvStep(f *testing.F) {
	f.Add([]byte(`{"v":1,"traj_id":"t1","seq":2,"kind":"exec"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := Decode[EnvStep](b); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error does not wrap ErrInvalid: %v", err)
		}
	})
}

// check fails a fuzz run whose decode error does not wrap ErrInvalid, or
// whose decoded value v does not validate.
func check(t *testing.T, err error, v interface{ Validate() error }) {
	t.Helper()
	if err != nil {
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("error does not wrap ErrInvalid: %v", err)
		}
		return
	}
	if err := v.Validate(); err != nil {
		t.Fatalf("decoded value does not validate: %v", err)
	}
}

// FuzzDecodeControlMessages covers the control plane's decoders: errors wrap
// ErrInvalid, and what decodes validates.
func FuzzDecodeControlMessages(f *testing.F) {
	f.Add([]byte(`{"v":1,"paused":true,"epoch":2,"weight_version":5,"mode":"abort","max_staleness":1,"stale_policy":"mask"}`))
	f.Add([]byte(`{"mode":"drain","timeout_ms":100}`))
	f.Add([]byte(`{"weight_version":7}`))
	f.Add([]byte(`{"v":1,"weight_version":2147483648}`))
	f.Add([]byte(`{"weight_version":2147483647}`))
	f.Add([]byte(`{"v":1,"worker":"w","replica":"r0","epoch":1,"paused":true,"aborted":3,"kept_tokens":40}`))
	f.Add([]byte(`{"v":1,"group_id":"g","size":1,"traj_ids":["a"]}`))
	f.Add([]byte(`{"traj_ids":["a"],"reason":"r` + "\xff" + `"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode[Control](b)
		check(t, err, &c)
		pr, err := Decode[PauseReport](b)
		check(t, err, &pr)
		pq, err := DecodeRequest[PauseRequest](b)
		check(t, err, &pq)
		rq, err := DecodeRequest[ResumeRequest](b)
		check(t, err, &rq)
		// An empty abort request decodes (as every empty request) and then
		// fails validation, so only its errors are checked here.
		if _, err := DecodeRequest[AbortRequest](b); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("error does not wrap ErrInvalid: %v", err)
		} else if err == nil && !utf8.Valid(b) {
			t.Fatalf("abort request of invalid UTF-8 accepted: %q", b)
		}
		g, err := Decode[GroupDone](b)
		check(t, err, &g)
	})
}

// A result's JSON decodes as its head: every head field keeps its value
// when the arrays and messages are skipped.
func TestResultHeadMatchesResult(t *testing.T) {
	head := reflect.TypeFor[ResultHead]()
	var r Result
	rv := reflect.ValueOf(&r).Elem()
	for i := range head.NumField() { // a distinct non-zero value in every field
		f := rv.FieldByName(head.Field(i).Name)
		switch f.Kind() {
		case reflect.String:
			f.SetString(fmt.Sprint("s", i))
		case reflect.Int, reflect.Int32:
			f.SetInt(int64(i + 1))
		case reflect.Float64:
			f.SetFloat(float64(i) + 0.5)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Struct: // time.Time
			f.Set(reflect.ValueOf(time.Unix(int64(i), 0).UTC()))
		}
	}
	r.Tokens, r.Logprobs, r.LossMask, r.Versions = []int32{1}, []float32{-1}, []int8{1}, []int32{2}
	r.Messages = []Message{{Role: RoleUser, Content: "m"}}
	h := r.ResultHead
	b, _ := json.Marshal(r)
	var decoded ResultHead
	if err := json.Unmarshal(b, &decoded); err != nil || !reflect.DeepEqual(decoded, h) {
		t.Fatalf("a result decoded as a head: %+v %v, want %+v", decoded, err, h)
	}
}

// FuzzDecodeWorkMessages covers the data plane's other decoders: gen steps,
// events, results (whole and head), predictions, heartbeats and dead
// letters. Errors wrap ErrInvalid, and what decodes validates.
func FuzzDecodeWorkMessages(f *testing.F) {
	f.Add([]byte(`{"v":1,"traj_id":"t1","seq":3,"replica":"r0"}`))
	f.Add([]byte(`{"v":1,"type":"failed","traj_id":"t1","seq":3,"worker":"w","reason":"x"}`))
	f.Add([]byte(`{"v":1,"traj_id":"t1","sample_id":"t1","status":"completed","reason":"submitted","tokens":[1,2],` +
		`"logprobs":[0,-0.5],"loss_mask":[0,1],"versions":[-1,0],"min_version":0,"max_version":0,"messages":[]}`))
	f.Add([]byte(`{"v":1,"traj_id":"t1","turn_seq":2,"remaining_tokens":300,"source":"history"}`))
	f.Add([]byte(`{"v":1,"worker":"w","replica":"r0","slots":4,"running":2}`))
	f.Add([]byte(`{"v":1,"subject":"actloop.samples","consumer":"c","reason":"bad","data":"e30="}`))
	f.Add([]byte(`{"v":1,"traj_ids":["t1","t.2"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := Decode[GenStep](b)
		check(t, err, &g)
		e, err := Decode[Event](b)
		check(t, err, &e)
		r, err := Decode[Result](b)
		check(t, err, &r)
		rh, err := Decode[ResultHead](b)
		check(t, err, &rh)
		pq, err := Decode[PredictRequest](b)
		check(t, err, &pq)
		pr, err := Decode[PredictReply](b)
		check(t, err, &pr)
		p, err := Decode[Prediction](b)
		check(t, err, &p)
		h, err := Decode[Heartbeat](b)
		check(t, err, &h)
		d, err := Decode[DLQEntry](b)
		check(t, err, &d)
		c, err := Decode[Cancel](b)
		check(t, err, &c)
	})
}

// A Cancel names at least one trajectory, at most MaxCancelIDs, each a
// valid id; a bad one is refused naming traj_ids.
func TestCancelValidate(t *testing.T) {
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprint("t", i)
		}
		return out
	}
	for _, tc := range []struct {
		ids  []string
		want string // "" : valid
	}{
		{ids(1), ""},
		{ids(MaxCancelIDs), ""},
		{nil, "traj_ids: names no trajectory"},
		{ids(MaxCancelIDs + 1), "exceed the limit"},
		{[]string{"ok", ".."}, "traj_ids: id 1"},
	} {
		err := (&Cancel{V: Version, TrajIDs: tc.ids}).Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%d ids: %v", len(tc.ids), err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%d ids: got %v, want an error with %q", len(tc.ids), err, tc.want)
		}
	}
}
