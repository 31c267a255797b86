"""Render the golden cases with Python's Jinja2 as transformers does.

For each <model>.json written by gen.mjs, renders the same inputs with the
model's template in the environment transformers' apply_chat_template builds
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
its tojson, raise_exception and strftime_now) and writes <model>.jinja2.json.
It also renders constructs.json (small templates exercising single Jinja2
constructs) into constructs.jinja2.json.

Usage: python3 gen_jinja2.py   (needs jinja2; tested with 3.1.6)
"""

import json
import os
from datetime import datetime

import jinja2
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["qwen3", "qwen2_5", "llama3_1", "gemma3", "deepseek_v3"]
SPECIAL = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]
# strftime_now reads this instant so the goldens are stable.
NOW = datetime(2026, 7, 26, 9, 5, 3)


class AssistantTracker(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def compile_template(source):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def token_content(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def render(source, variables):
    try:
        return {"output": compile_template(source).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e), "raised": type(e) is jinja2.exceptions.TemplateError}
    except Exception as e:  # TypeError and the like, as transformers would raise them
        return {"error": f"{type(e).__name__}: {e}"}


def models():
    for model in MODELS:
        with open(os.path.join(HERE, f"{model}.json"), encoding="utf-8") as f:
            golden = json.load(f)
        with open(os.path.join(HERE, "..", "models", model, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        special = {k: token_content(config.get(k)) for k in SPECIAL}
        special = {k: v for k, v in special.items() if v}
        template = config["chat_template"]
        out = []
        for case in golden["cases"]:
            source = template
            if isinstance(source, list):
                named = {t["name"]: t["template"] for t in source}
                source = named.get("tool_use") if case["tools"] and "tool_use" in named else named["default"]
            variables = {
                **special,
                **case["kwargs"],
            }
            rec = {"name": case["name"]}
            rec.update(
                render(
                    source,
                    dict(
                        messages=case["messages"],
                        tools=case["tools"],
                        documents=case["documents"],
                        add_generation_prompt=case["add_generation_prompt"],
                        **variables,
                    ),
                )
            )
            out.append(rec)
        with open(os.path.join(HERE, f"{model}.jinja2.json"), "w", encoding="utf-8") as f:
            json.dump({"model": model, "renderer": f"jinja2=={jinja2.__version__}", "cases": out}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"{model}: {len(out)} cases, {sum(1 for r in out if 'error' in r)} errors")


def constructs():
    with open(os.path.join(HERE, "constructs.json"), encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        rec = {"name": case["name"]}
        rec.update(render(case["template"], case.get("vars", {})))
        out.append(rec)
    with open(os.path.join(HERE, "constructs.jinja2.json"), "w", encoding="utf-8") as f:
        json.dump({"renderer": f"jinja2=={jinja2.__version__}", "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"constructs: {len(out)} cases, {sum(1 for r in out if 'error' in r)} errors")


if __name__ == "__main__":
    models()
    constructs()
