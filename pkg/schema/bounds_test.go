package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// sampleWith is a valid minimal sample with extra (a JSON object body
// without braces, e.g. `"limits":{"step_limit":1}`) added.
func sampleWith(extra string) string {
	s := `{"v":1,"id":"a","task":"t","env":{"backend":"sim"}`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// setupList is n setup commands, as the inside of a JSON array.
func setupList(n int) string { return strings.TrimSuffix(strings.Repeat(`"true",`, n), ",") }

// Every number, id and field name a sample holds is bounded or checked;
// each bad input is refused naming its field, and the value at a bound is
// accepted.
func TestDecodeSampleBounds(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		wantField string // "" = valid
		wantIn    string // part of the error text
	}{
		// Numbers: at the bound and past it.
		{"step timeout at bound", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeout_ms":86400000}}`, "", ""},
		{"step timeout huge", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeout_ms":999999999999999}}`,
			"env.step_timeout_ms", "env.step_timeout_ms: must be <= 86400000 (24 h), got 999999999999999"},
		{"setup timeout", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","setup_timeout_ms":86400001}}`, "env.setup_timeout_ms", "(24 h)"},
		{"eval timeout", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","eval_timeout_ms":86400001}}`, "env.eval_timeout_ms", "(24 h)"},
		{"negative timeout", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","eval_timeout_ms":-1}}`, "env.eval_timeout_ms", ">= 0"},
		{"wall clock at bound", sampleWith(`"limits":{"wall_clock_ms":604800000}`), "", ""},
		{"wall clock", sampleWith(`"limits":{"wall_clock_ms":604800001}`), "limits.wall_clock_ms", "must be <= 604800000 (7 days)"},
		{"step limit at bound", sampleWith(`"limits":{"step_limit":100000}`), "", ""},
		{"step limit", sampleWith(`"limits":{"step_limit":100001}`), "limits.step_limit", "<= 100000"},
		{"token budget at bound", sampleWith(`"limits":{"token_budget":16777216}`), "", ""},
		{"token budget", sampleWith(`"limits":{"token_budget":16777217}`), "limits.token_budget", "<= 16777216"},
		{"format error limit", sampleWith(`"limits":{"format_error_limit":100001}`), "limits.format_error_limit", "<= 100000"},
		{"max new tokens at bound", sampleWith(`"sampling":{"max_new_tokens":1048576}`), "", ""},
		{"max new tokens", sampleWith(`"sampling":{"max_new_tokens":2000000000}`), "sampling.max_new_tokens", "<= 1048576"},
		{"max new tokens exponent", sampleWith(`"sampling":{"max_new_tokens":2e9}`), "sampling.max_new_tokens", "must be an integer"},
		{"max new tokens overflow", sampleWith(`"sampling":{"max_new_tokens":99999999999999999999}`), "sampling.max_new_tokens", "out of range"},
		{"max new tokens fraction", sampleWith(`"sampling":{"max_new_tokens":1.5}`), "sampling.max_new_tokens", "must be an integer"},
		{"top k", sampleWith(`"sampling":{"top_k":1048577}`), "sampling.top_k", "<= 1048576"},
		{"temperature", sampleWith(`"sampling":{"temperature":100.5}`), "sampling.temperature", "[0, 100]"},
		{"min p", sampleWith(`"sampling":{"min_p":-0.1}`), "sampling.min_p", "[0, 1]"},
		{"group at bound", sampleWith(`"group_size":4096,"group_index":4095`), "", ""},
		{"group size", sampleWith(`"group_size":4097`), "group_size", "<= 4096"},
		{"group index without size", sampleWith(`"group_index":4096`), "group_index", "< 4096"},
		{"group index huge with huge size", sampleWith(`"group_size":100000,"group_index":99999`), "group_size", "<= 4096"},
		{"family", sampleWith(`"family":"` + strings.Repeat("f", 257) + `"`), "family", "256"},
		{"setup at bound", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","setup":[` + setupList(MaxSetupCommands) + `]}}`, "", ""},
		{"setup commands", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","setup":[` + setupList(MaxSetupCommands+1) + `]}}`,
			"env.setup", "env.setup: lists 257 commands, more than 256"},
		// The reward endpoint.
		{"reward at bounds", sampleWith(`"reward":{"url":"http://judge:8000/score","timeout_ms":3600000,"retries":10}`), "", ""},
		{"reward timeout", sampleWith(`"reward":{"timeout_ms":3600001}`), "reward.timeout_ms", "must be <= 3600000 (1 h)"},
		{"reward retries", sampleWith(`"reward":{"retries":11}`), "reward.retries", "must be <= 10, got 11"},
		{"reward retries negative", sampleWith(`"reward":{"retries":-1}`), "reward.retries", ">= 0"},
		{"reward url scheme", sampleWith(`"reward":{"url":"file:///etc/passwd"}`), "reward.url", "must be an http or https URL"},
		{"reward url host", sampleWith(`"reward":{"url":"http:/score"}`), "reward.url", "must name a host"},
		{"reward url length", sampleWith(`"reward":{"url":"http://j/` + strings.Repeat("a", MaxRewardURLBytes) + `"}`),
			"reward.url", "longer than 2048 bytes"},
		{"reward unknown field", sampleWith(`"reward":{"timeout":5}`), "reward.timeout", "unknown field"},
		// Ids.
		{"id dot", `{"v":1,"id":".","task":"t","env":{"backend":"sim"}}`, "id", IDPattern},
		{"id dot dot", `{"v":1,"id":"..","task":"t","env":{"backend":"sim"}}`, "id", `got ".."`},
		{"id hidden", `{"v":1,"id":".git","task":"t","env":{"backend":"sim"}}`, "id", ""},
		{"id option", `{"v":1,"id":"-rf","task":"t","env":{"backend":"sim"}}`, "id", ""},
		{"id slash", `{"v":1,"id":"a/../b","task":"t","env":{"backend":"sim"}}`, "id", ""},
		{"id too long", `{"v":1,"id":"` + strings.Repeat("a", 129) + `","task":"t","env":{"backend":"sim"}}`, "id", ""},
		{"id longest", `{"v":1,"id":"` + strings.Repeat("a", 128) + `","task":"t","env":{"backend":"sim"}}`, "", ""},
		{"id with dots inside", `{"v":1,"id":"django__django-1.11.x_2","task":"t","env":{"backend":"sim"}}`, "", ""},
		{"group id dot dot", sampleWith(`"group_id":".."`), "group_id", ""},
		{"group id option", sampleWith(`"group_id":"-g"`), "group_id", ""},
		// Unknown and repeated fields, by JSON path.
		{"unknown nested", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeot_ms":5}}`,
			"env.step_timeot_ms", `env.step_timeot_ms: unknown field (did you mean "step_timeout_ms"?)`},
		{"unknown top", sampleWith(`"prompt":"x"`), "prompt", `own data goes in "metadata"`},
		{"unknown top typo", sampleWith(`"grop_id":"g"`), "grop_id", `did you mean "group_id"`},
		{"unknown in tests", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","tests":{"fail_to_pass":["t"],"FAIL_TO_PASS":["u"]}}}`,
			"env.tests.FAIL_TO_PASS", "case-sensitive"},
		{"unknown in limits", sampleWith(`"limits":{"steps":3}`), "limits.steps", "unknown field"},
		{"unknown in sampling", sampleWith(`"sampling":{"top_k":3,"repetition_penalty":1.1}`), "sampling.repetition_penalty", "unknown field"},
		{"wrong case", `{"v":1,"id":"a","Task":"t","task":"t","env":{"backend":"sim"}}`, "Task", "case-sensitive"},
		{"given twice", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","step_timeout_ms":1000,"step_timeout_ms":9}}`,
			"env.step_timeout_ms", "given twice"},
		{"escaped key", `{"v":1,"id":"a","t\u0061sk":"t","env":{"backend":"sim"}}`, "", ""},
		{"long unknown key", sampleWith(`"` + strings.Repeat("k", 1000) + `":1`), strings.Repeat("k", 64) + "…", "unknown field"},
		{"many unknown keys", sampleWith(manyKeys(40)), "k0", "more unknown or repeated fields, not listed"},
		{"metadata holds anything", sampleWith(`"metadata":{"anything":{"step_timeot_ms":1},"x":[{"y":null}]}`), "", ""},
		{"null objects", sampleWith(`"limits":null,"sampling":null`), "", ""},
		{"another version's fields", `{"v":2,"id":"a","task":"t","env":{"backend":"sim"},"priority":3}`, "v", "unsupported schema version 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeSample([]byte(tt.in))
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("DecodeSample: %v", err)
				}
				return
			}
			if !isField(err, tt.wantField) {
				t.Fatalf("err = %v, want a FieldError on %q", err, tt.wantField)
			}
			if !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("err = %q, want it to contain %q", err, tt.wantIn)
			}
		})
	}
}

func TestDecodeSampleReportsUnknownAndInvalidTogether(t *testing.T) {
	_, err := DecodeSample([]byte(sampleWith(`"limits":{"step_limt":3,"step_limit":-1},"sampling":{"max_new_token":5}`)))
	for _, f := range []string{"limits.step_limt: unknown field", "sampling.max_new_token: unknown field", "limits.step_limit: must be >= 0"} {
		if err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("error %v does not say %s", err, f)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"a": true, "0": true, "s-1": true, "a.b": true, "a..b": true, "a_": true, "A9._-": true,
		"": false, ".": false, "..": false, ".a": false, "-a": false, "_a": false, "a b": false, "a/b": false,
		"a:b": false, "a*": false, "a>": false, "é": false, strings.Repeat("x", 128): true, strings.Repeat("x", 129): false,
	} {
		if got := ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestWeightVersionBounds(t *testing.T) {
	for _, tt := range []struct {
		in      string
		wantErr bool
	}{
		{`{"weight_version":0}`, false},
		{`{"weight_version":2147483647}`, false},
		{`{"weight_version":2147483648}`, true},
		{`{"weight_version":9007199254740993}`, true},
		{`{"weight_version":-1}`, true},
	} {
		_, err := DecodeRequest[ResumeRequest]([]byte(tt.in))
		if tt.wantErr != (err != nil) || (err != nil && !isField(err, "weight_version")) {
			t.Errorf("ResumeRequest %s: %v", tt.in, err)
		}
		c := `{"v":1,` + tt.in[1:]
		_, err = Decode[Control]([]byte(c))
		if tt.wantErr != (err != nil) || (err != nil && !isField(err, "weight_version")) {
			t.Errorf("Control %s: %v", c, err)
		}
	}
	if MaxWeightVersion != math.MaxInt32 {
		t.Fatal("a result stores versions as int32")
	}
}

// schemaDoc is a JSON Schema node, as much of it as the agreement test reads.
type schemaDoc struct {
	Type                 any                  `json:"type"`
	Properties           map[string]schemaDoc `json:"properties"`
	AdditionalProperties *bool                `json:"additionalProperties"`
	Pattern              string               `json:"pattern"`
	Maximum              *float64             `json:"maximum"`
	MaxLength            *int                 `json:"maxLength"`
	MaxItems             *int                 `json:"maxItems"`
	Enum                 []any                `json:"enum"`
	Items                *schemaDoc           `json:"items"`
}

// sample.schema.json states the Go rules: the id pattern, every bound,
// every enum, and no field beyond the listed ones at any level but metadata.
func TestSampleJSONSchemaAgreesWithValidate(t *testing.T) {
	var doc schemaDoc
	if err := json.Unmarshal(SampleJSONSchema, &doc); err != nil {
		t.Fatal(err)
	}
	prop := func(path string) schemaDoc {
		t.Helper()
		n := doc
		for name := range strings.SplitSeq(path, ".") {
			c, ok := n.Properties[name]
			if !ok {
				t.Fatalf("schema has no %s", path)
			}
			n = c
		}
		return n
	}
	for _, f := range []string{"id", "group_id"} {
		if p := prop(f).Pattern; p != IDPattern {
			t.Errorf("%s pattern %q, Go's IDPattern is %q", f, p, IDPattern)
		}
	}
	for path, want := range map[string]int64{
		"env.step_timeout_ms":       MaxStepTimeout.Milliseconds(),
		"env.setup_timeout_ms":      MaxSetupTimeout.Milliseconds(),
		"env.eval_timeout_ms":       MaxEvalTimeout.Milliseconds(),
		"limits.wall_clock_ms":      MaxWallClock.Milliseconds(),
		"limits.step_limit":         MaxStepLimit,
		"limits.token_budget":       MaxTokenBudget,
		"limits.format_error_limit": MaxFormatErrorLimit,
		"sampling.max_new_tokens":   MaxNewTokens,
		"sampling.top_k":            MaxTopK,
		"sampling.temperature":      MaxTemperature,
		"sampling.top_p":            1,
		"sampling.min_p":            1,
		"group_size":                MaxGroupSize,
		"group_index":               MaxGroupSize - 1,
		"reward.timeout_ms":         MaxRewardTimeout.Milliseconds(),
		"reward.retries":            MaxRewardRetries,
	} {
		if m := prop(path).Maximum; m == nil || *m != float64(want) {
			t.Errorf("%s maximum %v, Go's bound is %d", path, m, want)
		}
	}
	if m := prop("family").MaxLength; m == nil || *m != MaxFamilyBytes {
		t.Errorf("family maxLength %v, want %d", m, MaxFamilyBytes)
	}
	if m := prop("task").MaxLength; m == nil || *m != MaxTaskBytes {
		t.Errorf("task maxLength %v, want %d", m, MaxTaskBytes)
	}
	if m := prop("reward.url").MaxLength; m == nil || *m != MaxRewardURLBytes {
		t.Errorf("reward.url maxLength %v, want %d", m, MaxRewardURLBytes)
	}
	if m := prop("env.setup").MaxItems; m == nil || *m != MaxSetupCommands {
		t.Errorf("env.setup maxItems %v, want %d", m, MaxSetupCommands)
	}
	for path, want := range map[string][]string{
		"env.tests.format": TestLogs,
		"flow":             Flows,
		"purpose":          {PurposeTrain, PurposeValidation},
		"env.backend":      {BackendLocal, BackendSim},
	} {
		var got []string
		for _, e := range prop(path).Enum {
			got = append(got, fmt.Sprint(e))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s enum %v, Go accepts %v", path, got, want)
		}
	}
	// Every object (every node with properties) is closed.
	var closed func(path string, n schemaDoc)
	closed = func(path string, n schemaDoc) {
		if n.Properties != nil && (n.AdditionalProperties == nil || *n.AdditionalProperties) {
			t.Errorf("%s: additionalProperties is not false", path)
		}
		for name, c := range n.Properties {
			closed(strings.TrimPrefix(path+"."+name, "."), c)
		}
	}
	closed("", doc)
}

// A trainer's request is read as strictly as a sample: a misspelt
// weight_version would otherwise resume without changing the version.
func TestDecodeRequestRefusesUnknownFields(t *testing.T) {
	for _, tt := range []struct {
		name, in, wantField, wantIn string
	}{
		{"resume typo", `{"weight_verison":3}`, "weight_verison", `did you mean "weight_version"`},
		{"resume twice", `{"weight_version":3,"weight_version":4}`, "weight_version", "given twice"},
		{"resume with v", `{"v":1,"weight_version":3}`, "", ""},
		{"pause unknown", `{"mode":"abort","timeout":5}`, "timeout", "unknown field"},
		{"pause other", `{"mode":"abort","force":true}`, "force", "known: mode, timeout_ms"},
		{"abort unknown", `{"traj_ids":["a"],"trajectories":["b"]}`, "trajectories", "unknown field"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			switch {
			case strings.HasPrefix(tt.name, "resume"):
				_, err = DecodeRequest[ResumeRequest]([]byte(tt.in))
			case strings.HasPrefix(tt.name, "pause"):
				_, err = DecodeRequest[PauseRequest]([]byte(tt.in))
			default:
				_, err = DecodeRequest[AbortRequest]([]byte(tt.in))
			}
			if tt.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !isField(err, tt.wantField) || !strings.Contains(err.Error(), tt.wantIn) {
				t.Fatalf("err = %v, want a FieldError on %q saying %q", err, tt.wantField, tt.wantIn)
			}
		})
	}
}

// The scanner finds the keys and values json.Decoder finds, in any JSON
// object encoding/json accepts that is valid UTF-8 (json.Decoder reads a
// key of invalid UTF-8 with U+FFFD in place of the bad bytes; the decoders
// refuse such a message before they scan it, with checkUTF8).
func FuzzObjectScanner(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":"x\"}{[","c":{"d":[1,{"e":"\\"}]},"t\u0061sk":null, "f" : true }`))
	f.Add([]byte(`{"v":1,"id":"a","task":"\\\\\"","env":{"backend":"sim"},"metadata":[[],{},"]"]}`))
	f.Add([]byte(` {} `))
	f.Add([]byte(`{"a":-1.5e+3,"b":false,"a":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) || !utf8.Valid(b) {
			return
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			return
		}
		sc := scanner{b: b}
		if !sc.open() {
			t.Fatalf("scanner does not open %s", b)
		}
		for dec.More() {
			tok, _ := dec.Token()
			var want json.RawMessage
			if err := dec.Decode(&want); err != nil {
				t.Fatal(err)
			}
			key, value, ok := sc.member()
			if !ok || key != tok.(string) || string(value) != string(want) && !jsonEqualText(value, want) {
				t.Fatalf("member = %q %s %v, want %q %s in %s", key, value, ok, tok, want, b)
			}
		}
		if key, _, ok := sc.member(); ok {
			t.Fatalf("scanner found %q past the end of %s", key, b)
		}
	})
}

// jsonEqualText reports whether a and b are the same JSON text but for
// whitespace outside strings (json.RawMessage keeps it as written).
func jsonEqualText(a, b []byte) bool {
	var ca, cb bytes.Buffer
	_ = json.Compact(&ca, a)
	_ = json.Compact(&cb, b)
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// manyKeys is n members "k0":0,"k1":1,….
func manyKeys(n int) string {
	var ks []string
	for i := range n {
		ks = append(ks, fmt.Sprintf(`"k%d":%d`, i, i))
	}
	return strings.Join(ks, ",")
}
