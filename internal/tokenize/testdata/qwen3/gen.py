"""Writes golden.json: awkward conversations rendered by Qwen3's chat
template (chat_template.jinja) with Jinja2, the way transformers'
apply_chat_template(tokenize=False) renders it, in thinking mode (the
template's default: enable_thinking not given) and with
enable_thinking=False, with and without the generation prompt.

Each conversation also says in which modes ("append") the ids actloop
appends turn by turn (system or tools message, user and tool messages,
generation prompts, each assistant turn's "generated" text and the end of
its turn) are expected to equal the whole rendering tokenized; see
../../template_qwen3.go for why they differ elsewhere.

Run from this directory with python3 and jinja2 (3.11 and 3.1.6 made it):
    python3 gen.py > golden.json
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


# The environment of transformers' _compile_jinja_template
# (src/transformers/utils/chat_template_utils.py); its AssistantTracker
# extension only adds {% generation %}, which this template does not use.
def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
with open("chat_template.jinja", encoding="utf-8") as f:
    template = env.from_string(f.read())

# The special tokens apply_chat_template passes (Qwen3's tokenizer_config).
SPECIAL = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None, "unk_token": None}

BASH = """{"type": "function", "function": {"name": "bash", "description": "Run a bash command in the repository and return its exit code and output.", "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command to run."}, "timeout_s": {"type": "integer", "description": "Seconds before the command is killed.", "default": 120, "minimum": 1}}, "required": ["command"]}}}"""
SUBMIT = """{
  "type": "function",
  "function": {
    "name": "submit",
    "description": "Submit the repository as it is and end the task.",
    "parameters": {"type": "object", "properties": {}, "required": []}
  }
}"""
# Compact, escaped, unicode, numbers of every spelling: json.dumps rewrites them.
WEIRD = r"""{"type":"function","function":{"name":"weird","description":"quotes \" backslash \\ slash \/ newline \n tab \t ctrl \u0001\u001f del \u007f <b>&amp;</b> \u2028 ü 日本 \ud83d\ude00 😀","parameters":{"type":"object","properties":{"x":{"type":"number","minimum":-0,"maximum":1.0,"multipleOf":1e-7,"examples":[1E400,-1e400,2.5e20,1e16,1e15,123456789012345678,0.0001,0.00001,1.5,-0.0,100,3.141592653589793,1e-320]},"flag":{"type":"boolean","default":false,"const":true},"nothing":{"default":null},"empty":{"enum":[[],{}]}},"required":[]}}}"""


def sys_(c):
    return {"role": "system", "content": c}


def user(c):
    return {"role": "user", "content": c}


def tool(c):
    return {"role": "tool", "content": c}


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def asst(content, *calls):
    """An assistant message and the text the model generated for it: its
    content, then each call as Qwen3 writes one (as the template's tools
    instruction shows), on a line of its own after any reply text (a think
    block ends with a blank line already)."""
    reply = content.split("</think>")[-1].lstrip("\n")
    generated = content
    for i, c in enumerate(calls):
        if i > 0 or reply:
            generated += "\n"
        f = c["function"]
        generated += '<tool_call>\n{"name": "' + f["name"] + '", "arguments": ' + f["arguments"] + "}\n</tool_call>"
    m = {"role": "assistant", "content": content, "generated": generated}
    if calls:
        m["tool_calls"] = list(calls)
    return m


def think(reasoning, reply):
    return "<think>\n" + reasoning + "\n</think>\n\n" + reply


SYSTEM = "You are a helpful assistant that can interact with a computer.\n"
TASK = "Please solve this issue: the parser drops the last line.\n\n  Steps:\n1. run `go test`\n"
OBS = "<returncode>0</returncode>\n<output>\npackage parse\n\n\tfunc Parse(s string) {}  \n</output>\n\n"
LOG = "".join(f"=== RUN   TestParse/case_{i:04d}\n    parse_test.go:{40 + i % 300}: got {i * 7919 % 10007}, want {i}\n--- FAIL: TestParse/case_{i:04d} (0.00s)\n" for i in range(80))
ZALGO = "e\u0301" + "".join("\u0301\u0316\u0327\u031b\u0334\u0345"[i % 6] for i in range(40))

LS = call("bash", '{"command": "ls -la"}')
TEST = call("bash", '{"command": "go test ./...", "timeout_s": 600}')
ODD = call("bash", '{"command":"grep -rn \\"Parse\\" .",  "timeout_s" : 5 , "note": "日本 😀"}')
SUB = call("submit", "{}")

convs = [
    # No assistant turn yet: every opening appends as it renders.
    ("system-user", None, [sys_(SYSTEM), user(TASK)], ["thinking", "nothink"]),
    ("user-only", None, [user("hi")], ["thinking", "nothink"]),
    ("second-system", None, [sys_("one"), user("a"), sys_("two"), user("b")], ["thinking", "nothink"]),
    ("unknown-role-dropped", None, [sys_("s"), {"role": "developer", "content": "dropped"}, user("u")], []),
    # One reply: thinking mode keeps a well-formed think block, non-thinking
    # mode renders the empty block its prompt ended with.
    ("reply-thinking", None, [sys_(SYSTEM), user(TASK), asst(think("Let me look at the parser first.", "THOUGHT: look.\n\n```bash\nsed -n '1,40p' parse.go\n```"))], ["thinking"]),
    ("reply-plain", None, [sys_(SYSTEM), user(TASK), asst("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")], ["nothink"]),
    ("reply-empty", None, [user(""), asst("")], ["nothink"]),
    ("reply-empty-think", None, [user("x"), asst(think("", "answer"))], ["thinking"]),
    ("reply-odd-think", None, [user("x"), asst("preamble <think>\n\n\nreasoning\n\n</think>\n\n\nreply")], []),
    ("reply-two-closes", None, [user("x"), asst("<think>a</think>b</think>\n\nc")], []),
    ("reply-without-think", None, [user("x"), asst("no reasoning")], ["nothink"]),
    # Observations as user messages (actloop's text actions): the template
    # drops earlier turns' think blocks, and their empty ones.
    ("text-turns-thinking", None, [sys_(SYSTEM), user(TASK), asst(think("First look.", "```bash\nls\n```")), user(OBS),
                                   asst(think("Now fix.", "```bash\necho done\n```")), user("   leading spaces, trailing newlines\n\n\n")], []),
    ("text-turns-plain", None, [sys_(SYSTEM), user(TASK), asst("```bash\nls\n```"), user(OBS), asst("THOUGHT: 修正します — 3 × 4 = 12.\n\n```bash\necho done\n```\n"),
                                user("obs")], ["thinking"]),
    ("text-turns-plain-ending-in-reply", None, [sys_(SYSTEM), user(TASK), asst("```bash\nls\n```"), user(OBS), asst("done")], []),
    ("empty-contents", None, [sys_(""), user(""), asst(""), user(""), asst(""), user("")], ["thinking"]),
    ("unicode", None, [sys_("système 日本語 😀👍🏽🇫🇷"), user("Zalgo: " + ZALGO + " and e\u0301 (not NFC), \u2028 line sep, \u00a0nbsp"),
                       asst(think("考えています… " + ZALGO, "réponse 😀"))], ["thinking"]),
    ("think-tags-in-user", None, [user("<think>\nnot mine\n</think>\n\n</think> stray"), asst(think("mine", "ok")), user("<think>")], []),
    ("user-wrapped-tool-response", None, [user(TASK), asst(think("run it", "running")), user("<tool_response>\nout\n</tool_response>"),
                                          asst(think("done", "finished"))], ["thinking"]),
    ("long-text-observation", None, [sys_(SYSTEM), user(TASK), asst("```bash\ngo test ./...\n```"), user(LOG)], ["thinking"]),
    # Tools.
    ("tools-opening", [BASH, SUBMIT], [sys_(SYSTEM), user(TASK)], ["thinking", "nothink"]),
    ("tools-no-system", [BASH], [user(TASK)], ["thinking", "nothink"]),
    ("tools-empty-system", [BASH], [sys_(""), user(TASK)], []),
    ("tools-weird-json", [WEIRD, BASH], [sys_(SYSTEM), user(TASK)], ["thinking", "nothink"]),
    ("tool-loop-thinking", [BASH, SUBMIT], [
        sys_(SYSTEM), user(TASK),
        asst(think("I should list the files.", "I'll list the files."), LS), tool(OBS),
        asst(think("Run the tests.", ""), TEST), tool(LOG),
        asst(think("All good.", "Submitting."), SUB), tool(""),
    ], ["thinking"]),
    ("tool-loop-merged-results", [BASH], [
        sys_(SYSTEM), user(TASK),
        asst(think("Two at once.", "Listing and testing."), LS, TEST), tool(OBS), tool("second <tool_response>nested</tool_response> <|im_end|> text"),
        asst(think("Odd arguments.", ""), ODD), tool("x"),
    ], ["thinking"]),
    ("tool-loop-skipped-reasoning", [BASH, SUBMIT], [
        sys_(SYSTEM), user(TASK),
        asst("No reasoning this turn.", LS), tool(OBS),
        asst(think("Now reasoning.", "Done."), SUB),
    ], ["thinking"]),
    ("tool-loop-ends-without-reasoning", [BASH, SUBMIT], [
        sys_(SYSTEM), user(TASK),
        asst(think("Look first.", ""), LS), tool(OBS),
        asst("", SUB),
    ], []),
    ("tool-loop-plain", [BASH, SUBMIT], [sys_(SYSTEM), user(TASK), asst("Listing.", LS), tool(OBS)], ["thinking"]),
    ("tool-call-plain-last", [BASH, SUBMIT], [sys_(SYSTEM), user(TASK), asst("Listing.", LS)], ["nothink"]),
    ("tool-call-no-content-last", [BASH, SUBMIT], [user(TASK), asst("", SUB)], ["nothink"]),
    ("tool-first", None, [tool("orphan result"), user("y")], ["thinking", "nothink"]),
    ("tool-results-then-user", [BASH], [sys_(SYSTEM), user(TASK), asst(think("ls", ""), LS), tool(""), tool("<|im_end|>"),
                                        user("a new query"), asst(think("again", "sure"))], []),
]

out = []
for name, tools_json, messages, append in convs:
    tools = [json.loads(t) for t in tools_json] if tools_json else None
    chat = [{k: v for k, v in m.items() if k != "generated"} for m in messages]
    renders, prompts = [], []
    for thinking in (True, False):
        kwargs = {} if thinking else {"enable_thinking": False}
        for gp in (False, True):
            text = template.render(messages=chat, tools=tools, documents=None, add_generation_prompt=gp, **SPECIAL, **kwargs)
            renders.append({"thinking": thinking, "generation_prompt": gp, "text": text})
        # The prompt of each assistant turn: the conversation before it.
        for i, m in enumerate(chat):
            if m["role"] == "assistant":
                text = template.render(messages=chat[:i], tools=tools, documents=None, add_generation_prompt=True, **SPECIAL, **kwargs)
                prompts.append({"thinking": thinking, "index": i, "text": text})
    out.append({"name": name, "tools": tools_json, "messages": messages, "append": append, "renders": renders, "prompts": prompts})

json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
sys.stdout.write("\n")
