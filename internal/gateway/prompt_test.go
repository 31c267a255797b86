package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/actloop/actloop/internal/testkit"
	"github.com/actloop/actloop/internal/tokenize"
	"github.com/actloop/actloop/pkg/schema"
)

// A sample's prompt as messages or as token ids runs end to end: bad ones
// are refused by line and field; good ones open with the chat template's
// rendering of the messages, or with the ids as given, under a loss mask
// of 0, and their results carry the messages.
func TestSubmitPromptForms(t *testing.T) {
	a := newAPI(t)
	// The dev stack's default model: the Qwen tokenizer under ChatML.
	tmpl, err := tokenize.Chat{Tokenizer: tokenize.TokenizerQwen, ChatTemplate: tokenize.TemplateChatML}.Template()
	if err != nil {
		t.Fatal(err)
	}
	submit := []string{"```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"}
	line := func(s schema.Sample) string {
		s.V, s.Env = schema.Version, schema.Env{Backend: schema.BackendSim, Eval: "exit 0"}
		s.Script = submit
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	given := []schema.PromptMessage{
		{Role: schema.RoleSystem, Content: "You run shell commands."},
		{Role: schema.RoleUser, Content: "Submit at once."},
	}
	ids := tmpl.Tokenizer().Encode("<|im_start|>user\nSubmit at once, from ids.<|im_end|>\n<|im_start|>assistant\n")

	var bad SubmitReply
	batch := line(schema.Sample{ID: "p-both", Task: "t", PromptIDs: ids}) + "\n" +
		line(schema.Sample{ID: "p-ends", Messages: append(slices.Clone(given), schema.PromptMessage{Role: schema.RoleAssistant, Content: "a"})}) + "\n" +
		line(schema.Sample{ID: "p-neg", PromptIDs: []int32{1, -1}}) + "\n"
	if st := a.call("POST", "/v1/samples", batch, &bad); st != http.StatusBadRequest || len(bad.Errors) != 3 || bad.Accepted != 0 {
		t.Fatalf("bad prompts: %d %+v", st, bad)
	}
	for i, want := range []string{
		"prompt_ids: set beside task (exactly one of task, messages, prompt_ids must be set)",
		"messages[2].role: the last message is the assistant's",
		"prompt_ids[1]: must be >= 0, got -1",
	} {
		if e := bad.Errors[i]; e.Line != i+1 || !strings.Contains(e.Error, want) {
			t.Errorf("line %d: %+v, want it to say %q", i+1, e, want)
		}
	}

	var ok SubmitReply
	good := line(schema.Sample{ID: "p-msgs", Messages: given}) + "\n" + line(schema.Sample{ID: "p-ids", PromptIDs: ids})
	if st := a.call("POST", "/v1/samples", good, &ok); st != http.StatusOK || ok.Accepted != 2 {
		t.Fatalf("submit: %d %+v", st, ok)
	}
	results := map[string]schema.Result{}
	testkit.Eventually(t, wait, "both results", func() bool {
		var rr ReadReply
		if st := a.call("GET", "/v1/results?consumer=trainer&max=4&wait_ms=2000", nil, &rr); st != http.StatusOK {
			t.Fatalf("read: %d", st)
		}
		var acks []string
		for _, d := range rr.Deliveries {
			results[d.Result.TrajID] = *d.Result
			acks = append(acks, d.Ack)
		}
		if len(acks) > 0 {
			a.call("POST", "/v1/ack", SettleRequest{Acks: acks}, nil)
		}
		return len(results) == 2
	})
	rendered := tmpl.Tokenizer().Encode(tmpl.Render([]tokenize.Msg{
		{Role: given[0].Role, Content: given[0].Content}, {Role: given[1].Role, Content: given[1].Content}}, true))
	for id, opening := range map[string][]int32{"p-msgs": rendered, "p-ids": ids} {
		r := results[id]
		if !r.Solved() || r.PromptLen != len(opening) || len(r.Tokens) <= len(opening) || !slices.Equal(r.Tokens[:len(opening)], opening) {
			t.Errorf("%s: %s %q, prompt_len %d: does not open with its %d ids", id, r.Status, r.Reason, r.PromptLen, len(opening))
			continue
		}
		if slices.ContainsFunc(r.LossMask[:len(opening)], func(m int8) bool { return m != 0 }) {
			t.Errorf("%s: the opening is not under a loss mask of 0", id)
		}
	}
	if m := results["p-msgs"].Messages; len(m) < 3 || m[0] != (schema.Message{Role: given[0].Role, Content: given[0].Content}) ||
		m[1] != (schema.Message{Role: given[1].Role, Content: given[1].Content}) || m[2].Role != schema.RoleAssistant {
		t.Errorf("p-msgs: messages %+v do not start with the given ones", m)
	}
	if m := results["p-ids"].Messages; len(m) < 2 || m[0].Role != schema.RoleUser || m[0].Content != tmpl.Tokenizer().Decode(ids) {
		t.Errorf("p-ids: messages %+v do not start with the ids' text", m)
	}
}
