# Regenerate the golden files with Python Jinja2 3.1 and PyYAML (from this directory):
#   python3 gen_golden.py ../../../examples/mini-swe-agent/default.yaml minisweagent_cases.json > minisweagent_default.golden.json
#   python3 gen_golden.py ../../../examples/mini-swe-agent/swebench.yaml minisweagent_cases.json > minisweagent_swebench.golden.json
#   python3 gen_golden.py pyvalues.yaml pyvalues_cases.json > pyvalues.golden.json
# Renders mini-swe-agent v1 templates with Jinja2 (StrictUndefined) as
# DefaultAgent.render_template does in mini-swe-agent v1.17.5
# (src/minisweagent/agents/default.py):
#   Template(template, undefined=StrictUndefined).render(
#       **kwargs, **template_vars, **self.extra_template_vars)
# where template_vars = asdict(AgentConfig) | env.get_template_vars()
# | model.get_template_vars(), the model's being its config and
# {"n_model_calls": n_calls, "model_cost": cost}, and extra_template_vars
# holds the task from run(). Configurations are read with yaml.safe_load.
import json, sys, yaml
from jinja2 import StrictUndefined, Template

TIMEOUT = (
    "The last command <command>{{action['action']}}</command> timed out and has been killed.\n"
    "The output of the command was:\n"
    "{% if output | length < 10000 -%}\n"
    "<output>\n{{output}}\n</output>\n"
    "{%- else -%}\n"
    "<warning>Output was too long and has been truncated.</warning>\n"
    "<output_head>\n{{ output[:5000] }}\n</output_head>\n"
    "<elided_chars>{{ output | length - 10000 }} characters elided</elided_chars>\n"
    "<output_tail>\n{{ output[-5000:] }}\n</output_tail>\n"
    "{%- endif %}\n"
    "Please try another command and make sure to avoid those requiring interactive input."
)

# AgentConfig's defaults, v1.17.5.
AGENT_DEFAULTS = {
    "system_template": "You are a helpful assistant that can do anything.",
    "instance_template": (
        "Your task: {{task}}. Please reply with a single shell command in triple backticks. "
        "To finish, the first line of the output of the shell command must be 'COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT'."
    ),
    "timeout_template": TIMEOUT,
    "format_error_template": "Please always provide EXACTLY ONE action in triple backticks.",
    "action_observation_template": "Observation: {{output}}",
    "action_regex": r"```bash\s*\n(.*?)\n```",
    "step_limit": 0,
    "cost_limit": 3.0,
}

# What the Go test passes as the host's uname unless a case sets it.
HOST = {"system": "Linux", "release": "6.1.0", "version": "#1 SMP", "machine": "x86_64"}
CALL_VARS = {"output", "actions", "action"}
TASK = "Fix the bug."  # the task of a case that names none


def long(n):
    # non-ASCII so that cutting by bytes and by characters differ
    s = "".join("abcdé€😀\n"[i % 8] for i in range(n))
    return s


def fix(x):
    if isinstance(x, dict) and "__long__" in x:
        return long(x["__long__"])
    if isinstance(x, dict):
        return {k: fix(y) for k, y in x.items()}
    if isinstance(x, list):
        return [fix(y) for y in x]
    return x


doc = yaml.safe_load(open(sys.argv[1]))
cases = json.load(open(sys.argv[2]))
agent = AGENT_DEFAULTS | doc["agent"]
env = dict(doc.get("environment") or {})
env.pop("environment_class", None)  # get_environment pops it
out = {}
for c in cases:
    v = fix(dict(c["vars"]))
    kwargs = {k: y for k, y in v.items() if k in CALL_VARS}
    host = HOST | {k: y for k, y in v.items() if k in HOST or k in ("node", "processor")}
    model = {"n_model_calls": v.get("n_model_calls", 0), "model_cost": 0.0}
    template_vars = agent | env | host | model
    extra = {"task": v.get("task", TASK)}
    out[c["name"]] = Template(agent[c["template"]], undefined=StrictUndefined).render(
        **kwargs, **template_vars, **extra
    )
json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
