# Regenerate the minisweagent_*.golden.json files with Python Jinja2 3.1 and PyYAML:
#   python3 gen_golden.py ../../../examples/mini-swe-agent/default.yaml minisweagent_cases.json > minisweagent_default.golden.json
#   python3 gen_golden.py ../../../examples/mini-swe-agent/swebench.yaml minisweagent_cases.json > minisweagent_swebench.golden.json
# Renders mini-swe-agent v1 templates with Jinja2 (StrictUndefined), as
# DefaultAgent.render_template does, to produce golden files.
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

def long(n):
    # non-ASCII so that cutting by bytes and by characters differ
    s = "".join("abcdé€😀\n"[i % 8] for i in range(n))
    return s

cases = json.load(open(sys.argv[2]))
cfg = yaml.safe_load(open(sys.argv[1]))["agent"]
cfg.setdefault("timeout_template", TIMEOUT)
out = {}
for c in cases:
    tpl = cfg[c["template"]]
    v = dict(c["vars"])
    def fix(x):
        if isinstance(x, dict) and "__long__" in x:
            return long(x["__long__"])
        if isinstance(x, dict):
            return {k: fix(y) for k, y in x.items()}
        if isinstance(x, list):
            return [fix(y) for y in x]
        return x
    v = fix(v)
    base = dict(cfg)
    base.update(v)
    out[c["name"]] = Template(tpl, undefined=StrictUndefined).render(**base)
json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
