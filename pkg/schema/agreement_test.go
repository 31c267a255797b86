package schema_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/actloop/actloop/pkg/schema"
)

// knownDifferences are the rules on which sample.schema.json and
// DecodeSample disagree, each with the reason; a corpus case names the one
// it shows. schemaAccepts says which way: true where the schema accepts a
// sample the decoder refuses.
var knownDifferences = map[string]struct {
	schemaAccepts bool
	reason        string
}{
	"repeated key": {true, "JSON Schema validates the parsed value, in which a repeated key is one already " +
		"(the last); DecodeSample refuses the second by name."},
	"group_index below group_size": {true, "a rule between two fields' values; JSON Schema has no keyword " +
		"that compares one value with another (the schema bounds group_index by the largest group_size)."},
	"integer spelling": {true, "JSON Schema's integer is a number without a fraction, however written " +
		"(1.0, 1e3); encoding/json refuses a fraction or exponent for a Go int."},
	"bytes, not characters": {true, "family and task are bounded in bytes of UTF-8; JSON Schema's maxLength " +
		"counts characters, so a string of multi-byte characters can be within it and over the byte limit."},
	"rules between messages": {true, "the last message is not the assistant's, tool_calls only on an assistant message, " +
		"tool_call_id only on a tool message, a call's arguments JSON text, the messages' text in bytes: rules across " +
		"items and fields, or on a string's content, which the schema does not spell out."},
	"reward url": {true, "reward.url must parse as a URL (Go's net/url: a port of digits, escapes well formed); " +
		"the schema checks its scheme and that a host follows, not the whole URL grammar."},
	"proxy flow rules": {true, "flow \"proxy\" needs agent.command, a local backend and a task of at most " +
		"MaxAgentTaskBytes, and agent goes with that flow only: rules between fields, which the schema does not spell out."},
	"message size": {true, "MaxSampleBytes bounds the message's bytes, an encoding JSON Schema does not see."},
	"empty or null enum": {false, "purpose, flow and env.tests.format given as \"\" or null, and group_id " +
		"as \"\", are read as absent (the default) by the decoder; the schema's enums and pattern are Go's " +
		"values and IDPattern alone, so a writer omits the field. The schema is the stricter."},
}

type agreementCase struct {
	name string
	in   string
	ok   bool // DecodeSample accepts it
	// known names the entry of knownDifferences this case shows; "" when
	// the schema and the decoder must agree.
	known string
}

// The sample schema, compiled by an independent validator, and
// DecodeSample accept and refuse the same samples, but for the listed
// known differences.
func TestSampleSchemaAgreesWithDecodeSample(t *testing.T) {
	sch := compileSampleSchema(t)
	used := map[string]bool{}
	for _, tc := range sampleCorpus() {
		schemaErr := validate(sch, tc.in)
		_, goErr := schema.DecodeSample([]byte(tc.in))
		schemaOK, goOK := schemaErr == nil, goErr == nil
		if goOK != tc.ok {
			t.Errorf("%s: DecodeSample accepts: %v (%v), the corpus says %v\n%s", tc.name, goOK, goErr, tc.ok, clipped(tc.in))
			continue
		}
		if tc.known == "" {
			if schemaOK != goOK {
				t.Errorf("%s: schema accepts: %v (%v), DecodeSample accepts: %v (%v)\n%s",
					tc.name, schemaOK, oneLine(schemaErr), goOK, goErr, clipped(tc.in))
			}
			continue
		}
		kd, ok := knownDifferences[tc.known]
		if !ok {
			t.Fatalf("%s: no known difference %q", tc.name, tc.known)
		}
		used[tc.known] = true
		if schemaOK != kd.schemaAccepts || goOK == schemaOK {
			t.Errorf("%s: known difference %q no longer holds (schema accepts: %v, DecodeSample accepts: %v); "+
				"if they agree now, drop it from knownDifferences\n%s", tc.name, tc.known, schemaOK, goOK, clipped(tc.in))
		}
	}
	for name := range knownDifferences {
		if !used[name] {
			t.Errorf("known difference %q has no case in the corpus", name)
		}
	}
}

func compileSampleSchema(t testing.TB) *jsonschema.Schema {
	return compileSchema(t, schema.SampleJSONSchema, "https://actloop.dev/schema/v1/sample.schema.json")
}

// compileSchema compiles the schema file b, whose $id is url.
func compileSchema(t testing.TB, b []byte, url string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// sampleCorpus is good and bad samples: every field's bounds at and past
// the edge, enums, patterns, unknown and repeated fields, wrong types,
// missing required fields, nested objects and metadata of any JSON.
func sampleCorpus() []agreementCase {
	var cs []agreementCase
	yes := func(name, in string) { cs = append(cs, agreementCase{name: name, in: in, ok: true}) }
	no := func(name, in string) { cs = append(cs, agreementCase{name: name, in: in, ok: false}) }
	// known is a case of a known difference: the decoder accepts it where
	// the schema does not, and the other way round.
	known := func(name, in, difference string) {
		cs = append(cs, agreementCase{name: name, in: in, ok: !knownDifferences[difference].schemaAccepts, known: difference})
	}
	with := sampleAt

	yes("minimal", minimal)
	yes("full", `{"v":1,"id":"s-1","group_id":"g.1","group_index":3,"group_size":4,"family":"swe","purpose":"validation",
		"flow":"tool_call","task":"fix it","env":{"backend":"local","image":"img","workspace":"/w","setup":["pip install ."],
		"eval":"pytest","step_timeout_ms":1000,"setup_timeout_ms":2000,"eval_timeout_ms":3000,
		"tests":{"fail_to_pass":["t::a"],"pass_to_pass":["t::b"],"format":"django"}},
		"limits":{"step_limit":10,"token_budget":1000,"wall_clock_ms":60000,"format_error_limit":3},
		"sampling":{"max_new_tokens":512,"temperature":0.7,"top_p":0.9,"top_k":40,"min_p":0.05,"stop":["</s>"]},
		"script":["a","b"],"metadata":{"k":[1,2]}}`)

	// Numbers: at each bound, past it, and other spellings and types.
	for _, b := range []struct {
		path   string
		lo, hi int64
	}{
		{"group_index", 0, schema.MaxGroupSize - 1},
		{"group_size", 0, schema.MaxGroupSize},
		{"env.step_timeout_ms", 0, schema.MaxStepTimeout.Milliseconds()},
		{"env.setup_timeout_ms", 0, schema.MaxSetupTimeout.Milliseconds()},
		{"env.eval_timeout_ms", 0, schema.MaxEvalTimeout.Milliseconds()},
		{"limits.step_limit", 0, schema.MaxStepLimit},
		{"limits.token_budget", 0, schema.MaxTokenBudget},
		{"limits.wall_clock_ms", 0, schema.MaxWallClock.Milliseconds()},
		{"limits.format_error_limit", 0, schema.MaxFormatErrorLimit},
		{"sampling.max_new_tokens", 0, schema.MaxNewTokens},
		{"sampling.top_k", 0, schema.MaxTopK},
	} {
		yes(b.path+" at min", with(b.path, fmt.Sprint(b.lo)))
		yes(b.path+" at max", with(b.path, fmt.Sprint(b.hi)))
		no(b.path+" below min", with(b.path, fmt.Sprint(b.lo-1)))
		no(b.path+" past max", with(b.path, fmt.Sprint(b.hi+1)))
		no(b.path+" far past max", with(b.path, "99999999999999999999"))
		no(b.path+" fraction", with(b.path, "1.5"))
		no(b.path+" string", with(b.path, `"1"`))
		no(b.path+" bool", with(b.path, "true"))
		no(b.path+" object", with(b.path, "{}"))
		yes(b.path+" null", with(b.path, "null"))
		yes(b.path+" minus zero", with(b.path, "-0"))
		known(b.path+" as 1.0", with(b.path, "1.0"), "integer spelling")
		known(b.path+" as 1e1", with(b.path, "1e1"), "integer spelling")
	}
	for _, b := range []struct {
		path string
		hi   float64
	}{
		{"sampling.temperature", schema.MaxTemperature},
		{"sampling.top_p", 1},
		{"sampling.min_p", 1},
	} {
		yes(b.path+" at min", with(b.path, "0"))
		yes(b.path+" at max", with(b.path, fmt.Sprint(b.hi)))
		yes(b.path+" at max, exponent", with(b.path, fmt.Sprintf("%e", b.hi)))
		yes(b.path+" inside", with(b.path, fmt.Sprint(b.hi/2)))
		no(b.path+" below min", with(b.path, "-0.001"))
		no(b.path+" past max", with(b.path, fmt.Sprint(b.hi+0.001)))
		no(b.path+" past float64", with(b.path, "1e400"))
		no(b.path+" string", with(b.path, `"0.5"`))
		yes(b.path+" null", with(b.path, "null"))
	}

	// Ids: IDPattern.
	for _, f := range []string{"id", "group_id"} {
		for _, id := range []string{"a", "0", "s-1", "a.b", "a..b", "a_", "A9._-", "django__django-1.11.x_2",
			strings.Repeat("x", schema.MaxIDBytes)} {
			yes(f+" "+clipped(id), with(f, quote(id)))
		}
		for _, id := range []string{".", "..", ".git", "-x", "-rf", "_a", "a b", "a/b", "a/../b", "a:b", "a*", "a>",
			"é", "a\n", strings.Repeat("x", schema.MaxIDBytes+1)} {
			no(f+" "+clipped(id), with(f, quote(id)))
		}
		no(f+" number", with(f, "5"))
		yes(f+" escaped", with(f, `"\u0061b"`))
	}
	no("id empty", with("id", `""`))
	no("id null", with("id", "null"))
	known("group_id empty", with("group_id", `""`), "empty or null enum")
	yes("group_id null", with("group_id", "null"))

	// Strings with a length.
	yes("family at max", with("family", quote(strings.Repeat("f", schema.MaxFamilyBytes))))
	no("family past max", with("family", quote(strings.Repeat("f", schema.MaxFamilyBytes+1))))
	yes("family of 2-byte characters at max", with("family", quote(strings.Repeat("é", schema.MaxFamilyBytes/2))))
	known("family of 2-byte characters past max bytes", with("family", quote(strings.Repeat("é", schema.MaxFamilyBytes/2+1))),
		"bytes, not characters")
	yes("family null", with("family", "null"))
	no("family number", with("family", "1"))
	yes("task at max", with("task", quote(strings.Repeat("t", schema.MaxTaskBytes))))
	no("task past max", with("task", quote(strings.Repeat("t", schema.MaxTaskBytes+1))))
	known("task of 2-byte characters past max bytes", with("task", quote(strings.Repeat("é", schema.MaxTaskBytes/2+1))),
		"bytes, not characters")
	no("task empty", with("task", `""`))
	no("task null", with("task", "null"))
	no("task array", with("task", `["t"]`))
	known("message past MaxSampleBytes", sampleAt("script", `[`+quote(strings.Repeat("s", schema.MaxSampleBytes))+`]`),
		"message size")
	for _, f := range []string{"env.image", "env.workspace", "env.eval"} {
		yes(f, with(f, `"x"`))
		yes(f+" empty", with(f, `""`))
		yes(f+" null", with(f, "null"))
		no(f+" number", with(f, "1"))
	}

	// Enums.
	for _, e := range []struct {
		path      string
		good, bad []string
	}{
		{"purpose", []string{schema.PurposeTrain, schema.PurposeValidation}, []string{"Train", "eval", " train"}},
		{"flow", schema.Flows, []string{"python", "BASH"}},
		{"env.tests.format", schema.TestLogs, []string{"junit", "Pytest"}},
	} {
		for _, v := range e.good {
			if v == schema.FlowProxy {
				known(e.path+" "+v+" without an agent", withTests(e.path, quote(v)), "proxy flow rules")
				continue
			}
			yes(e.path+" "+v, withTests(e.path, quote(v)))
		}
		for _, v := range e.bad {
			no(e.path+" "+v, withTests(e.path, quote(v)))
		}
		no(e.path+" number", withTests(e.path, "1"))
		known(e.path+" empty", withTests(e.path, `""`), "empty or null enum")
		known(e.path+" null", withTests(e.path, "null"), "empty or null enum")
	}
	proxy := `{"v":1,"id":"a","task":"t","flow":"proxy","agent":{"command":"python3 agent.py"},"env":{"backend":"local"}}`
	yes("proxy flow", proxy)
	no("proxy agent without command", strings.Replace(proxy, `"command":"python3 agent.py"`, "", 1))
	no("proxy agent command a number", strings.Replace(proxy, `"python3 agent.py"`, "1", 1))
	known("proxy flow on sim", strings.Replace(proxy, `"local"`, `"sim"`, 1), "proxy flow rules")
	known("agent without the proxy flow", strings.Replace(proxy, `"flow":"proxy",`, "", 1), "proxy flow rules")
	yes("backend local", with("env.backend", `"local"`))
	no("backend k8s", with("env.backend", `"k8s"`))
	no("backend empty", with("env.backend", `""`))
	no("backend null", with("env.backend", "null"))
	no("backend missing", `{"v":1,"id":"a","task":"t","env":{}}`)

	// Lists.
	yes("setup", with("env.setup", `["ls","make"]`))
	yes("setup empty list", with("env.setup", `[]`))
	yes("setup null", with("env.setup", "null"))
	no("setup empty command", with("env.setup", `["ls",""]`))
	no("setup null command", with("env.setup", `[null]`))
	no("setup a string", with("env.setup", `"ls"`))
	no("setup numbers", with("env.setup", `[1]`))
	setup := func(n int) string { return "[" + strings.TrimSuffix(strings.Repeat(`"true",`, n), ",") + "]" }
	yes("setup at max", with("env.setup", setup(schema.MaxSetupCommands)))
	no("setup past max", with("env.setup", setup(schema.MaxSetupCommands+1)))
	for _, f := range []string{"sampling.stop", "script"} {
		yes(f, with(f, `["a",""]`))
		yes(f+" null item", with(f, `[null]`))
		yes(f+" null", with(f, "null"))
		no(f+" numbers", with(f, `[1]`))
		no(f+" object", with(f, `{}`))
	}

	// env.tests: at least one test, none blank, no other field.
	for _, tt := range []struct {
		name, raw string
		ok        bool
	}{
		{"fail_to_pass", `{"fail_to_pass":["t::a"]}`, true},
		{"pass_to_pass", `{"pass_to_pass":["t::a"]}`, true},
		{"both", `{"fail_to_pass":["a"],"pass_to_pass":["b"],"format":"sympy"}`, true},
		{"null list and a test", `{"fail_to_pass":null,"pass_to_pass":["b"]}`, true},
		{"id with spaces inside", `{"fail_to_pass":[" a b "]}`, true},
		{"id of a BOM", `{"fail_to_pass":["\ufeff"]}`, true},
		{"null", `null`, true},
		{"no test", `{}`, false},
		{"empty lists", `{"fail_to_pass":[],"pass_to_pass":[]}`, false},
		{"null lists", `{"fail_to_pass":null,"pass_to_pass":null}`, false},
		{"format alone", `{"format":"pytest"}`, false},
		{"empty id", `{"fail_to_pass":[""]}`, false},
		{"blank id", `{"fail_to_pass":["a"],"pass_to_pass":[" \t"]}`, false},
		{"id of unicode spaces", `{"fail_to_pass":["\u00a0\u3000\u2028\u0085\u000b"]}`, false},
		{"null id", `{"fail_to_pass":[null]}`, false},
		{"a string", `"t::a"`, false},
		{"unknown field", `{"fail_to_pass":["a"],"FAIL_TO_PASS":["b"]}`, false},
	} {
		cs = append(cs, agreementCase{name: "tests " + tt.name, in: with("env.tests", tt.raw), ok: tt.ok})
	}

	// Objects: types, null, unknown and repeated fields at every level.
	yes("null objects", sampleAt("limits", "null", "sampling", "null"))
	yes("empty objects", sampleAt("limits", "{}", "sampling", "{}"))
	no("env null", with("env", "null"))
	no("env a string", with("env", `"sim"`))
	no("limits a list", with("limits", "[]"))
	no("sampling a number", with("sampling", "1"))
	no("not an object", `[1,2]`)
	no("a string", `"sample"`)
	no("null", `null`)
	for _, u := range []struct{ path, raw string }{
		{"prompt", `"x"`},
		{"Task", `"t"`},
		{"grop_id", `"g"`},
		{"env.step_timeot_ms", "5"},
		{"env.tests.FAIL_TO_PASS", `["a"]`},
		{"limits.steps", "3"},
		{"sampling.repetition_penalty", "1.1"},
		{"metadata_", "{}"},
	} {
		no("unknown "+u.path, withTests(u.path, u.raw))
	}
	yes("escaped key", `{"v":1,"id":"a","t\u0061sk":"t","env":{"backend":"sim"}}`)
	known("repeated task", `{"v":1,"id":"a","task":"t","task":"u","env":{"backend":"sim"}}`, "repeated key")
	known("repeated in env", `{"v":1,"id":"a","task":"t","env":{"backend":"sim","backend":"sim"}}`, "repeated key")
	known("repeated object", `{"v":1,"id":"a","task":"t","env":{"backend":"sim"},"limits":{},"limits":{"step_limit":1}}`,
		"repeated key")
	yes("repeated inside metadata", with("metadata", `{"a":1,"a":2}`))

	// Metadata: any JSON.
	for _, m := range []string{`{}`, `[]`, `1`, `-1.5e300`, `"x"`, `true`, `null`,
		`{"anything":{"step_timeot_ms":1},"x":[{"y":null}]}`, `[[[[[[{"v":2}]]]]]]`} {
		yes("metadata "+m, with("metadata", m))
	}

	// Version and required fields.
	no("v missing", `{"id":"a","task":"t","env":{"backend":"sim"}}`)
	no("v 2", with("v", "2"))
	no("v 0", with("v", "0"))
	no("v string", with("v", `"1"`))
	no("v null", with("v", "null"))
	known("v 1.0", with("v", "1.0"), "integer spelling")
	no("id missing", `{"v":1,"task":"t","env":{"backend":"sim"}}`)
	no("task missing", `{"v":1,"id":"a","env":{"backend":"sim"}}`)
	no("env missing", `{"v":1,"id":"a","task":"t"}`)

	// The prompt: exactly one of task, messages and prompt_ids.
	const user = `[{"role":"user","content":"u"}]`
	yes("messages", sampleAt("task", `""`, "messages", `[{"role":"system","content":"s"},{"role":"user","content":null}]`))
	yes("messages with tools", sampleAt("task", "null", "messages", `[{"role":"user","content":"u"},`+
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},`+
		`{"role":"tool","tool_call_id":"c","content":"r"}]`, "tools", `[{"type":"function","function":{"name":"f"}}]`))
	yes("prompt_ids", sampleAt("task", `""`, "prompt_ids", `[0,1,2147483647]`))
	yes("prompt_ids with empty messages", sampleAt("task", `""`, "messages", "[]", "prompt_ids", `[5]`))
	no("task and messages", sampleAt("messages", user))
	no("task and prompt_ids", sampleAt("prompt_ids", `[1]`))
	no("messages and prompt_ids", sampleAt("task", `""`, "messages", user, "prompt_ids", `[1]`))
	no("no prompt", sampleAt("task", `""`))
	no("tools without messages", sampleAt("tools", `[{"type":"function","function":{"name":"f"}}]`))
	no("tool without name", sampleAt("task", `""`, "messages", user, "tools", `[{"function":{}}]`))
	no("message role unknown", sampleAt("task", `""`, "messages", `[{"role":"developer","content":"u"}]`))
	no("message role missing", sampleAt("task", `""`, "messages", `[{"content":"u"}]`))
	no("message unknown field", sampleAt("task", `""`, "messages", `[{"role":"user","content":"u","x":1}]`))
	no("call without name", sampleAt("task", `""`, "messages", `[{"role":"assistant","tool_calls":[{"function":{}}]},{"role":"user"}]`))
	no("prompt_ids negative", sampleAt("task", `""`, "prompt_ids", `[-1]`))
	no("prompt_ids past int32", sampleAt("task", `""`, "prompt_ids", `[2147483648]`))
	known("messages end with the assistant", sampleAt("task", `""`, "messages", `[{"role":"user","content":"u"},{"role":"assistant","content":"a"}]`),
		"rules between messages")

	// The reward endpoint.
	yes("reward", sampleAt("reward", `{"url":"https://judge:8000/score?x=1","timeout_ms":3600000,"retries":10}`))
	yes("reward without url", sampleAt("reward", `{"timeout_ms":0,"retries":0}`))
	yes("reward null", sampleAt("reward", `null`))
	yes("reward url upper case scheme", sampleAt("reward", `{"url":"HTTP://judge/"}`))
	no("reward timeout past", sampleAt("reward", `{"timeout_ms":3600001}`))
	no("reward retries past", sampleAt("reward", `{"retries":11}`))
	no("reward retries negative", sampleAt("reward", `{"retries":-1}`))
	no("reward url ftp", sampleAt("reward", `{"url":"ftp://judge/"}`))
	no("reward url relative", sampleAt("reward", `{"url":"/score"}`))
	no("reward url without host", sampleAt("reward", `{"url":"http:///score"}`))
	no("reward url too long", sampleAt("reward", `{"url":"http://j/`+strings.Repeat("a", schema.MaxRewardURLBytes)+`"}`))
	no("reward unknown field", sampleAt("reward", `{"urls":["http://j/"]}`))
	known("reward url unparsable", sampleAt("reward", `{"url":"http://j:port/"}`), "reward url")

	// Groups: group_index below group_size when that is set.
	yes("group index below size", sampleAt("group_size", "4", "group_index", "3"))
	yes("group index without size", sampleAt("group_size", "0", "group_index", "4095"))
	known("group index at size", sampleAt("group_size", "4", "group_index", "4"), "group_index below group_size")
	known("group index past size", sampleAt("group_size", "1", "group_index", "4095"), "group_index below group_size")
	no("group index past size and largest", sampleAt("group_size", "4", "group_index", "4096"))
	return cs
}

// manyComponents is a reward_components object of n components.
func manyComponents(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"c%d":%d`, i, i)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

const minimal = `{"v":1,"id":"a","task":"t","env":{"backend":"sim"}}`

// sampleAt is the minimal sample with each raw JSON value set at its path
// (names joined by dots), given as pairs; objects on the way are made.
func sampleAt(pairs ...string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(minimal), &m); err != nil {
		panic(err)
	}
	for i := 0; i < len(pairs); i += 2 {
		names := strings.Split(pairs[i], ".")
		obj := m
		for _, n := range names[:len(names)-1] {
			next, ok := obj[n].(map[string]any)
			if !ok {
				next = map[string]any{}
				obj[n] = next
			}
			obj = next
		}
		obj[names[len(names)-1]] = json.RawMessage(pairs[i+1])
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		panic(fmt.Sprintf("%v: %v", pairs, err))
	}
	return strings.TrimSpace(b.String())
}

// withTests is sampleAt for one value, with env.tests listing a test when
// the path is inside it (env.tests needs one).
func withTests(path, raw string) string {
	if strings.HasPrefix(path, "env.tests.") {
		return sampleAt("env.tests.fail_to_pass", `["t"]`, path, raw)
	}
	return sampleAt(path, raw)
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func clipped(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

func oneLine(err error) string {
	if err == nil {
		return "ok"
	}
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// What actloop writes as a result, and a trainer reads back from a head
// and its body, is valid under result.schema.json; an unknown field is
// allowed there (results are read leniently) and a broken rule is not.
func TestResultSchemaAcceptsResults(t *testing.T) {
	sch := compileSchema(t, schema.ResultJSONSchema, "https://actloop.dev/schema/v1/result.schema.json")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	head := schema.ResultHead{V: schema.Version, TrajID: "t-1", SampleID: "t-1", GroupID: "g", GroupIndex: 1, GroupSize: 2,
		Family: "swe", Purpose: schema.ResultPurpose(schema.PurposeValidation), Status: schema.StatusLimitExceeded,
		Limit: schema.LimitStep, Reason: "step_limit 3", Reward: 0, Replica: "r0", MinVersion: 2, MaxVersion: 3,
		Stale: true, Restarts: 1, Replays: 1, Diverged: 1, Turns: 3, Commands: 2, GenTokens: 2, NumTokens: 3,
		PromptLen: 1, StaleTokens: 1, AdmittedAt: at, FinishedAt: at.Add(time.Minute),
		RewardComponents: map[string]float64{"judge": 0.5, "len": -3}, RewardError: "",
		Body: &schema.BodyRef{Bucket: schema.BucketResultBodies, Name: "t-1", Size: 10, SHA256: strings.Repeat("0f", 32)}}
	full := schema.Result{ResultHead: head, Tokens: []int32{1, 2, 3}, Logprobs: []float32{0, -0.5, -1},
		LossMask: []int8{0, 1, 1}, Versions: []int32{-1, 2, 3},
		Messages: []schema.Message{{Role: schema.RoleSystem, Content: "s"}, {Role: schema.RoleUser, Content: "u"},
			{Role: schema.RoleAssistant, Content: "a"}, {Role: schema.RoleTool, Content: "o"}},
		Diff: "--- a\n+++ b\n", Tests: map[string]string{"t::a": "PASSED", "t::b": "MISSING"},
		Metadata: json.RawMessage(`{"k":[1,{"x":null}]}`)}

	// A fallback, read back from its body as a trainer does.
	fallback := schema.Result{ResultHead: schema.ResultHead{V: schema.Version, TrajID: "t-2", SampleID: "t-2", GroupID: "t-2",
		Status: schema.StatusFallback, Reason: "lost", MinVersion: -1, MaxVersion: -1, AdmittedAt: at, FinishedAt: at}}
	body, err := schema.EncodeBody(&fallback)
	if err != nil {
		t.Fatal(err)
	}
	var readBack schema.Result
	readBack.ResultHead = fallback.ResultHead
	if err := schema.DecodeBody(body, &readBack); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]schema.Result{"full": full, "fallback read back": readBack} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(sch, string(b)); err != nil {
			t.Errorf("%s: %v\n%s", name, oneLine(err), b)
		}
		if _, err := schema.Decode[schema.Result](b); err != nil {
			t.Errorf("%s: Decode: %v", name, err)
		}
	}

	fullJSON, _ := json.Marshal(full)
	edit := func(key, raw string) string { // full with key set to raw ("" deletes it)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(fullJSON, &m); err != nil {
			t.Fatal(err)
		}
		if raw == "" {
			delete(m, key)
		} else {
			m[key] = json.RawMessage(raw)
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"a newer release's field", edit("priority", "3"), true},
		{"a newer release's body field", edit("body", `{"bucket":"b","name":"n","size":1,"sha256":"`+
			strings.Repeat("a", 64)+`","etag":"x"}`), true},
		{"unknown status", edit("status", `"done"`), false},
		{"bad traj_id", edit("traj_id", `".."`), false},
		{"version past int32", edit("max_version", "2147483648"), false},
		{"loss mask of 2", edit("loss_mask", "[0,2,1]"), false},
		{"unknown test outcome", edit("tests", `{"t::a":"OK"}`), false},
		{"unknown role", edit("messages", `[{"role":"robot","content":"x"}]`), false},
		{"bad sha256", edit("body", `{"bucket":"b","name":"n","size":1,"sha256":"ABC"}`), false},
		{"no status", edit("status", ""), false},
		{"reward_error", edit("reward_error", `"reward endpoint: http status 500"`), true},
		{"reward component not a number", edit("reward_components", `{"a":"1"}`), false},
		{"reward component unnamed", edit("reward_components", `{"":1}`), false},
		{"reward components past the bound", edit("reward_components", manyComponents(schema.MaxRewardComponents+1)), false},
		{"v 2", edit("v", "2"), false},
	} {
		if err := validate(sch, tc.in); (err == nil) != tc.ok {
			t.Errorf("%s: schema accepts: %v, want %v (%v)", tc.name, err == nil, tc.ok, oneLine(err))
		}
	}
}

func validate(sch *jsonschema.Schema, in string) error {
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(in))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// Every sample DecodeSample accepts, written back by Go (as the Go client
// sends it), is valid under the schema: the schema never refuses a sample
// a Go trainer can send.
func FuzzSampleSchemaAcceptsDecodedSamples(f *testing.F) {
	for _, tc := range sampleCorpus() {
		if len(tc.in) < 4<<10 {
			f.Add([]byte(tc.in))
		}
	}
	sch := compileSampleSchema(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := schema.DecodeSample(b)
		if err != nil {
			return
		}
		out, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(sch, string(out)); err != nil {
			t.Fatalf("schema refuses %s, decoded from %s: %v", clipped(string(out)), clipped(string(b)), oneLine(err))
		}
	})
}
