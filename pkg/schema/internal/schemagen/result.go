package schemagen

import (
	"fmt"
	"reflect"

	"github.com/invopop/jsonschema"

	"github.com/actloop/actloop/pkg/schema"
)

var resultExtensions = map[reflect.Type]extension{
	reflect.TypeFor[schema.Result]():  extendResult,
	reflect.TypeFor[schema.BodyRef](): extendBodyRef,
	reflect.TypeFor[schema.Message](): extendMessage,
}

// testOutcomes are the outcomes a result's tests map holds
// (internal/testlog, which pkg/ does not import).
var testOutcomes = []string{"PASSED", "FAILED", "ERROR", "SKIPPED", "MISSING"}

func extendResult(s *jsonschema.Schema) error {
	s.ID = "https://actloop.dev/schema/v1/result.schema.json"
	s.Title = fmt.Sprintf("actloop result (v%d)", schema.Version)
	s.Description = "A finished trajectory, whole: as `actloop results` prints it and the Go client's Delivery.Result " +
		"returns it. The message on actloop.results is its head: every property but tokens, logprobs, loss_mask, " +
		"versions, messages, diff, tests and metadata, which are in the body, an object in the Object Store bucket " +
		schema.BucketResultBodies + " that body names (docs/trainer-api.md gives its layout). tokens, logprobs, " +
		"loss_mask and versions have num_tokens entries each."
	s.AdditionalProperties = jsonschema.TrueSchema // read leniently: a newer release's field is ignored
	if err := extendResultHead(s); err != nil {
		return err
	}
	return props(s, map[string]func(p *jsonschema.Schema){
		"logprobs": func(p *jsonschema.Schema) {
			p.Description = "Log-prob of each generated token; 0 elsewhere."
		},
		"loss_mask": func(p *jsonschema.Schema) {
			p.Items.Enum = anys(0, 1)
			p.Description = "1 exactly on generated tokens (0 on stale ones under stale_policy mask)."
		},
		"versions": func(p *jsonschema.Schema) {
			weightVersion(p.Items)
			p.Description = fmt.Sprintf("Weight version that generated each token; -1 for tokens not generated. "+
				"An int32 (int32 in the body): weight versions are at most %d.", schema.MaxWeightVersion)
		},
		"segments": func(p *jsonschema.Schema) {
			p.Items.Minimum = num(0)
			p.Description = "Proxy flow only: where each segment of tokens starts, rising from 0 (a new one where " +
				"the agent rewrote its history); absent for the other flows."
		},
		"tests": func(p *jsonschema.Schema) {
			p.AdditionalProperties.Enum = anys(testOutcomes...)
			p.Description = "Each test the sample lists in env.tests, with its outcome in the eval; absent for " +
				"samples scored by exit code."
		},
		"metadata": func(p *jsonschema.Schema) {
			p.Description = "The sample's metadata, unchanged."
		},
	})
}

// extendResultHead says what the schema of a Result holds of its head:
// ResultHead is embedded, so its fields are the Result's.
func extendResultHead(s *jsonschema.Schema) error {
	counts := map[string]string{
		"group_size":   "",
		"stale_tokens": "",
		"prompt_len":   "",
		"gen_tokens":   "",
		"restarts":     "Times the trajectory started again because it went stale (stale_policy restart).",
		"replays":      "Times the sandbox was lost and rebuilt by replaying the commands that had run.",
		"diverged":     "Replayed commands whose outcome (exit code and output) differed from their first run.",
		"replaced_outputs": "Commands whose output held bytes that are not valid UTF-8: their observations hold each " +
			"invalid sequence replaced with U+FFFD and end with a line saying so.",
		"turns":      "Model calls (generation steps).",
		"commands":   "Commands run in the sandbox (environment steps).",
		"num_tokens": "Entries in tokens, logprobs, loss_mask and versions.",
	}
	for name, desc := range counts {
		p, err := prop(s, name)
		if err != nil {
			return err
		}
		p.Minimum = num(0)
		p.Description = desc
	}
	return props(s, map[string]func(p *jsonschema.Schema){
		"v":       func(p *jsonschema.Schema) { p.Const = schema.Version },
		"traj_id": func(p *jsonschema.Schema) { p.Pattern = schema.IDPattern },
		"group_index": func(p *jsonschema.Schema) {
			p.Minimum = num(0)
		},
		"family": func(p *jsonschema.Schema) {
			p.MaxLength = size(schema.MaxFamilyBytes)
			p.Description = "Kind of task (dataset, repository), used for length prediction."
		},
		"purpose": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.ResultPurpose(schema.PurposeValidation))
			p.Description = "validation: a validation rollout (the sample's purpose); absent for training."
		},
		"status": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.Statuses...)
			p.Description = "How the trajectory ended. submitted: scored by the eval; limit_exceeded and " +
				"format_error_limit: a limit ended it (limit names it), reward 0 unless ACTLOOP_REWARD_ON=always; " +
				"failed: the sample's environment failed (setup, prompt) or it was rejected; fallback: actloop " +
				"could not finish it; aborted: the trainer aborted it. Only submitted, limit_exceeded and " +
				"format_error_limit carry trainable tokens."
		},
		"limit": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.LimitStep, schema.LimitTokenBudget, schema.LimitWallClock, schema.LimitFormatError,
				schema.LimitContextLength)
			p.Description = "The limit that ended the trajectory (limit_exceeded, format_error_limit): a sample's " +
				"limit, or context_length: the next model call's input left no room in the inference server's context."
		},
		"reason": func(p *jsonschema.Schema) {
			p.Description = "Why the trajectory ended, in words: submitted, the limit reached, or what went wrong, " +
				"with any note on its scoring."
		},
		"reward_components": func(p *jsonschema.Schema) {
			p.MaxProperties = size(schema.MaxRewardComponents)
			p.PropertyNames = &jsonschema.Schema{MinLength: size(1), MaxLength: size(schema.MaxRewardComponentBytes)}
			p.Description = "The reward's named parts: the other numeric fields of the eval's JSON reward line, or " +
				"of the reward endpoint's answer (docs/agent.md, \"Reward\"); absent when there are none."
		},
		"reward_error": func(p *jsonschema.Schema) {
			p.Description = "Why the reward endpoint gave no reward (a refused URL, a timeout, an error answer): " +
				"the reward is then 0 and status stays the trajectory's. Absent when it answered or none was asked."
		},
		"replica": func(p *jsonschema.Schema) {
			p.Description = "The inference replica it ran on last; absent when it never ran."
		},
		"min_version": func(p *jsonschema.Schema) {
			weightVersion(p)
			p.Description = "The oldest weight version of a generated token; -1 when none."
		},
		"max_version": func(p *jsonschema.Schema) {
			weightVersion(p)
			p.Description = "The newest weight version of a generated token; -1 when none."
		},
		"stale": func(p *jsonschema.Schema) {
			p.Description = "Some generated token is more than max_staleness weight versions old."
		},
		"body": func(p *jsonschema.Schema) {
			p.Description = "Where the body is: an object in the Object Store, with the stored (gzip) size and the " +
				"SHA-256 (hex) of the stored bytes."
		},
	})
}

// weightVersion bounds a token's weight version: -1 (not generated) to
// MaxWeightVersion.
func weightVersion(p *jsonschema.Schema) {
	p.Minimum, p.Maximum = num(-1), num(int64(schema.MaxWeightVersion))
}

func extendBodyRef(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"bucket": func(p *jsonschema.Schema) { p.MinLength = size(1) },
		"name":   func(p *jsonschema.Schema) { p.MinLength = size(1) },
		"size":   func(p *jsonschema.Schema) { p.Minimum = num(1) },
		"sha256": func(p *jsonschema.Schema) { p.Pattern = schema.SHA256Pattern },
	})
}

func extendMessage(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"role": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.RoleSystem, schema.RoleUser, schema.RoleAssistant, schema.RoleTool)
		},
	})
}
