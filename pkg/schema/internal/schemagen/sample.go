package schemagen

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/invopop/jsonschema"

	"github.com/actloop/actloop/pkg/schema"
)

var sampleExtensions = map[reflect.Type]extension{
	reflect.TypeFor[schema.Sample]():         extendSample,
	reflect.TypeFor[schema.Env]():            extendEnv,
	reflect.TypeFor[schema.Tests]():          extendTests,
	reflect.TypeFor[schema.Limits]():         extendLimits,
	reflect.TypeFor[schema.Sampling]():       extendSampling,
	reflect.TypeFor[schema.PromptMessage]():  extendPromptMessage,
	reflect.TypeFor[schema.ToolCall]():       extendToolCall,
	reflect.TypeFor[schema.FunctionCall]():   extendFunctionCall,
	reflect.TypeFor[schema.RewardEndpoint](): extendRewardEndpoint,
}

func extendSample(s *jsonschema.Schema) error {
	s.ID = "https://actloop.dev/schema/v1/sample.schema.json"
	s.Title = fmt.Sprintf("actloop sample (v%d)", schema.Version)
	promptOneOf(s)
	s.Description = "One rollout request a trainer publishes on actloop.samples. " +
		"A field not listed here is refused, at any depth but inside metadata. Every string must be valid UTF-8 " +
		"(the decoder refuses invalid bytes, which JSON Schema validators see only after their parser replaced them)."
	return props(s, map[string]func(p *jsonschema.Schema){
		"v": func(p *jsonschema.Schema) {
			p.Const = schema.Version
			p.Description = "Schema version."
		},
		"id": func(p *jsonschema.Schema) {
			p.Pattern = schema.IDPattern
			p.Description = "Unique sample id; also the trajectory id."
		},
		"group_id": func(p *jsonschema.Schema) {
			p.Pattern = schema.IDPattern
			p.Description = "Rollouts of one prompt share it; defaults to id."
		},
		"group_index": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxGroupSize-1)
			p.Description = "Below group_size when that is set."
		},
		"group_size": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxGroupSize)
			p.Description = "Rollouts in the group; 0 = unknown."
		},
		"family": func(p *jsonschema.Schema) {
			p.MaxLength = size(schema.MaxFamilyBytes)
			p.Description = "Kind of task (dataset, repository), used for length prediction."
		},
		"purpose": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.PurposeTrain, schema.PurposeValidation)
			p.Default = schema.PurposeTrain
			p.Description = "validation: run through the same loop, not training data: outside the staleness bound " +
				"and stale_policy, counted towards no group, marked in its result."
		},
		"flow": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.Flows...)
			p.Default = schema.FlowBash
			p.Description = "Agent flow: bash (one ```bash block per reply, mini-swe-agent's), tool_call " +
				"(bash and submit as tools, Qwen3-style <tool_call>; needs ACTLOOP_CHAT_TEMPLATE=qwen3 or qwen3-nothink) " +
				"or proxy (the sample's own agent, agent.command, calling an OpenAI-compatible endpoint; needs agent, " +
				"a task and env.backend local; docs/agent.md, \"The proxy flow\")."
		},
		"agent": func(p *jsonschema.Schema) {
			p.Description = "The proxy flow's agent (flow proxy only, and then required)."
			if c, ok := p.Properties.Get("command"); ok {
				c.MaxLength = size(schema.MaxAgentCommandBytes)
				c.Description = "The agent's command line, run with bash in the trajectory's sandbox with " +
					"OPENAI_BASE_URL, OPENAI_API_KEY and ACTLOOP_TASK set."
			}
		},
		"task": func(p *jsonschema.Schema) {
			p.MaxLength = size(schema.MaxTaskBytes)
			p.Description = "The task text, rendered by the agent configuration's system and instance templates. " +
				"Exactly one of task, messages and prompt_ids is set (an empty one counts as unset)."
		},
		"messages": func(p *jsonschema.Schema) {
			p.MaxItems = size(schema.MaxPromptMessages)
			p.Description = fmt.Sprintf("The opening as OpenAI chat messages, rendered by the model's chat template "+
				"with the generation prompt; the agent's system and instance templates are not applied. The last "+
				"message is not the assistant's. At most %d messages, their text (contents and arguments) at most %d bytes.",
				schema.MaxPromptMessages, schema.MaxMessagesBytes)
		},
		"tools": func(p *jsonschema.Schema) {
			p.MaxItems = size(schema.MaxTools)
			p.Items = toolDefinition()
			p.Description = "OpenAI tool definitions, rendered with messages (only with messages)."
		},
		"prompt_ids": func(p *jsonschema.Schema) {
			p.MaxItems = size(schema.MaxPromptIDs)
			between(p.Items, 0, math.MaxInt32)
			p.Description = fmt.Sprintf("The opening's token ids, used as given (loss mask 0), as a reference "+
				"loop's raw_prompt_ids; at most %d.", schema.MaxPromptIDs)
		},
		"script": func(p *jsonschema.Schema) {
			nullable(p.Items) // a null reply is "", as encoding/json reads it
			p.Description = "Scripted model replies, one per turn (simulator only)."
		},
		"reward": func(p *jsonschema.Schema) {
			p.Description = "A reward endpoint: after the eval, the env-worker POSTs the finished trajectory to it " +
				"and takes the reward from its answer (docs/agent.md, \"Reward\"). Absent: the deployment's " +
				"ACTLOOP_REWARD_URL, if set."
		},
		"metadata": func(p *jsonschema.Schema) {
			p.Description = fmt.Sprintf("Any JSON, arrays and objects nested at most %d deep (a limit "+
				"JSON Schema cannot express; the decoder refuses deeper); passed through to the result. "+
				"A trainer's own data goes here.", schema.MaxMetadataDepth)
		},
	})
}

// promptOneOf says that exactly one of task, messages and prompt_ids is
// set, where "" and [] count as unset, and that tools go with messages.
func promptOneOf(s *jsonschema.Schema) {
	set := func(name string, p *jsonschema.Schema) *jsonschema.Schema {
		props := jsonschema.NewProperties()
		props.Set(name, p)
		return &jsonschema.Schema{Required: []string{name}, Properties: props}
	}
	s.OneOf = []*jsonschema.Schema{
		set("task", &jsonschema.Schema{Type: "string", MinLength: size(1)}),
		set("messages", &jsonschema.Schema{Type: "array", MinItems: size(1)}),
		set("prompt_ids", &jsonschema.Schema{Type: "array", MinItems: size(1)}),
	}
	s.If = set("tools", &jsonschema.Schema{Type: "array", MinItems: size(1)})
	s.Then = set("messages", &jsonschema.Schema{Type: "array", MinItems: size(1)})
}

// toolDefinition is an OpenAI tool definition: an object whose function
// has a name; the rest is the model's to read.
func toolDefinition() *jsonschema.Schema {
	name := jsonschema.NewProperties()
	name.Set("name", &jsonschema.Schema{Type: "string", MinLength: size(1)})
	fn := &jsonschema.Schema{Type: "object", Required: []string{"name"}, Properties: name}
	props := jsonschema.NewProperties()
	props.Set("type", &jsonschema.Schema{Enum: anys(schema.ToolTypeFunction)})
	props.Set("function", fn)
	return &jsonschema.Schema{Type: "object", Required: []string{"function"}, Properties: props}
}

func extendPromptMessage(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"role": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.RoleSystem, schema.RoleUser, schema.RoleAssistant, schema.RoleTool)
		},
		"content": func(p *jsonschema.Schema) {
			p.Description = "The message's text; null reads as \"\"."
		},
		"tool_calls": func(p *jsonschema.Schema) {
			p.Description = "An assistant message's function calls."
		},
		"tool_call_id": func(p *jsonschema.Schema) {
			p.Description = "The call a tool message answers."
		},
	})
}

func extendToolCall(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"type": func(p *jsonschema.Schema) { p.Enum = anys(schema.ToolTypeFunction) },
	})
}

func extendFunctionCall(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"name": func(p *jsonschema.Schema) { p.MinLength = size(1) },
		"arguments": func(p *jsonschema.Schema) {
			p.Description = "The arguments as JSON text, as the model wrote them."
		},
	})
}

func extendEnv(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"backend": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.BackendLocal, schema.BackendSim)
		},
		"image": func(p *jsonschema.Schema) {
			p.Description = "Container image, for container backends."
		},
		"workspace": func(p *jsonschema.Schema) {
			p.Description = "Directory copied into the sandbox (local backend)."
		},
		"setup": func(p *jsonschema.Schema) {
			p.Items.MinLength = size(1)
			p.MaxItems = size(schema.MaxSetupCommands)
			p.Description = fmt.Sprintf("Commands run once when the sandbox starts; at most %d (an env-worker's "+
				"ACTLOOP_SETUP_MAX_COMMANDS may allow fewer).", schema.MaxSetupCommands)
		},
		"eval": func(p *jsonschema.Schema) {
			p.Description = "Command run in a fresh sandbox with the trajectory's diff applied; without tests, exit 0 = reward 1. " +
				"A last output line that is a JSON object with a numeric reward ({\"reward\": 0.8, …}) gives the reward " +
				"instead, its other numeric fields the components (docs/agent.md, \"Reward\")."
		},
		"step_timeout_ms": func(p *jsonschema.Schema) {
			duration(p, schema.MaxStepTimeout, schema.DefaultStepTimeout, "Per command")
		},
		"setup_timeout_ms": func(p *jsonschema.Schema) {
			duration(p, schema.MaxSetupTimeout, schema.DefaultSetupTimeout, "Per setup command")
		},
		"eval_timeout_ms": func(p *jsonschema.Schema) {
			duration(p, schema.MaxEvalTimeout, schema.DefaultEvalTimeout, "")
		},
		"tests": func(p *jsonschema.Schema) {
			p.Description = "Tests the eval must pass (SWE-bench FAIL_TO_PASS, PASS_TO_PASS); when set, reward 1 " +
				"exactly when the eval's output reports every one PASSED (unless it prints a JSON reward line)."
		},
	})
}

func extendTests(s *jsonschema.Schema) error {
	// At least one test is listed, in either list.
	for _, name := range []string{"fail_to_pass", "pass_to_pass"} {
		p := jsonschema.NewProperties()
		p.Set(name, &jsonschema.Schema{Type: "array", MinItems: size(1)})
		s.AnyOf = append(s.AnyOf, &jsonschema.Schema{Required: []string{name}, Properties: p})
	}
	return props(s, map[string]func(p *jsonschema.Schema){
		"fail_to_pass": func(p *jsonschema.Schema) { p.Items.Pattern = notSpace() },
		"pass_to_pass": func(p *jsonschema.Schema) { p.Items.Pattern = notSpace() },
		"format": func(p *jsonschema.Schema) {
			p.Enum = anys(schema.TestLogs...)
			p.Default = schema.TestLogPytest
			p.Description = "How the eval reports each test: pytest -rA summary lines (PASSED/FAILED/ERROR <test id>), " +
				"Django runtests.py --verbosity 2 lines, or sympy bin/test --verbose lines."
		},
	})
}

func extendRewardEndpoint(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"url": func(p *jsonschema.Schema) {
			p.MaxLength = size(schema.MaxRewardURLBytes)
			p.Pattern = "^[hH][tT][tT][pP][sS]?://[^/?#]"
			p.Description = "An absolute http or https URL; absent: the deployment's ACTLOOP_REWARD_URL. The env-worker " +
				"calls it only when it is ACTLOOP_REWARD_URL or starts with a prefix in ACTLOOP_REWARD_URLS; " +
				"otherwise the reward is 0 and reward_error says why."
		},
		"timeout_ms": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxRewardTimeout.Milliseconds())
			p.Description = "One attempt; 0 = the deployment's ACTLOOP_REWARD_TIMEOUT; at most " +
				human(schema.MaxRewardTimeout) + "."
		},
		"retries": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxRewardRetries)
			p.Description = "Attempts after the first, on a connection error, a 5xx answer or a timeout (never " +
				"on a 4xx); absent = the deployment's ACTLOOP_REWARD_RETRIES."
		},
	})
}

func extendLimits(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"step_limit": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxStepLimit)
			p.Description = "Model calls; 0 = unlimited."
		},
		"token_budget": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxTokenBudget)
			p.Description = "Generated tokens; 0 = unlimited."
		},
		"wall_clock_ms": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxWallClock.Milliseconds())
			p.Description = "Since admission; 0 = unlimited; at most " + human(schema.MaxWallClock) + "."
		},
		"format_error_limit": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxFormatErrorLimit)
			p.Description = "Model replies in a row without a valid action; 0 = unlimited."
		},
	})
}

func extendSampling(s *jsonschema.Schema) error {
	return props(s, map[string]func(p *jsonschema.Schema){
		"max_new_tokens": func(p *jsonschema.Schema) {
			between(p, 0, schema.MaxNewTokens)
			p.Default = schema.DefaultMaxNewTokens
			p.Description = "Per generation."
		},
		"temperature": func(p *jsonschema.Schema) { between(p, 0, schema.MaxTemperature) },
		"top_p":       func(p *jsonschema.Schema) { between(p, 0, 1) },
		"top_k":       func(p *jsonschema.Schema) { between(p, 0, schema.MaxTopK) },
		"min_p":       func(p *jsonschema.Schema) { between(p, 0, 1) },
		"stop":        func(p *jsonschema.Schema) { nullable(p.Items) },
	})
}

func between[T int | int64](p *jsonschema.Schema, lo, hi T) {
	p.Minimum, p.Maximum = num(lo), num(hi)
}

// duration bounds a field in milliseconds by limit and gives its default.
func duration(p *jsonschema.Schema, limit, def time.Duration, what string) {
	between(p, 0, limit.Milliseconds())
	p.Default = def.Milliseconds()
	if what == "" {
		p.Description = "At most " + human(limit) + "."
	} else {
		p.Description = what + "; at most " + human(limit) + "."
	}
}

// human writes d as Validate's errors do: "24 h", "7 days".
func human(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	}
	return fmt.Sprintf("%g h", d.Hours())
}

// notSpace is a pattern matching a string with a character that is not
// white space as strings.TrimSpace trims it (unicode.White_Space): a
// test id of spaces alone is refused. The class names the ASCII spaces by
// escape and the others as themselves, which both ECMA-262 and RE2 read.
func notSpace() string {
	var b strings.Builder
	b.WriteString("[^")
	var spaces []rune
	for _, r16 := range unicode.White_Space.R16 {
		for r := rune(r16.Lo); r <= rune(r16.Hi); r += rune(r16.Stride) {
			spaces = append(spaces, r)
		}
	}
	for _, r32 := range unicode.White_Space.R32 {
		for r := rune(r32.Lo); r <= rune(r32.Hi); r += rune(r32.Stride) {
			spaces = append(spaces, r)
		}
	}
	for _, r := range spaces {
		{
			switch r {
			case '\t':
				b.WriteString(`\t`)
			case '\n':
				b.WriteString(`\n`)
			case '\v':
				b.WriteString(`\v`)
			case '\f':
				b.WriteString(`\f`)
			case '\r':
				b.WriteString(`\r`)
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteString("]")
	return b.String()
}
