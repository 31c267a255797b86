#!/usr/bin/env python3
"""A small coding agent written only against the OpenAI HTTP API.

It runs in a sandbox under actloop's proxy flow (docs/agent.md, "The proxy
flow"): actloop starts it with OPENAI_BASE_URL and OPENAI_API_KEY naming an
endpoint for this trajectory alone, and the task in ACTLOOP_TASK. Every
chat completion it asks for is one generation step of actloop's scheduler;
the time between them is the trajectory's environment time.

The loop is mini-swe-agent's: the model answers with a THOUGHT and exactly
one ```bash block, the agent runs it and sends back its exit code and
output, and the task is done when a command's output starts with
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT. Exit 0 submits (actloop then takes
the diff and runs the eval); any other exit fails the trajectory.

Standard library only, so it runs wherever python3 does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

SYSTEM = """You are a helpful assistant that can interact with a computer shell to solve programming tasks.

Your response must contain exactly ONE bash code block with ONE command (or commands connected with && or ||), preceded by a THOUGHT section that explains your reasoning:

THOUGHT: your reasoning here

```bash
your_command_here
```

When you are done, submit your changes by running:

```bash
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached
```"""

FORMAT_ERROR = (
    "Please always provide EXACTLY ONE action in triple backticks, found {n} actions.\n\n"
    "Reply with a THOUGHT and exactly one ```bash block."
)

SUBMITTED = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)


def chat(base_url: str, api_key: str, messages: list[dict]) -> str:
    """One chat completion: the reply's text."""
    body = json.dumps(
        {
            "model": os.environ.get("OPENAI_MODEL", "actloop"),
            "messages": messages,
            "temperature": float(os.environ.get("AGENT_TEMPERATURE", "1.0")),
            "max_tokens": int(os.environ.get("AGENT_MAX_TOKENS", "1024")),
        }
    ).encode()
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + api_key},
    )
    try:
        with urllib.request.urlopen(req, timeout=float(os.environ.get("AGENT_CALL_TIMEOUT", "3600"))) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as e:
        # actloop answers a call past the trajectory's limits with an
        # error: the run is over.
        raise SystemExit(f"model call refused: {e.code} {e.read().decode(errors='replace')}")
    return answer["choices"][0]["message"]["content"] or ""


def run(command: str, timeout: float) -> tuple[int, str]:
    """Runs command with bash: its exit code and its output (stdout and
    stderr in order)."""
    try:
        p = subprocess.run(
            ["bash", "-c", command],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        out = (e.output or b"").decode(errors="replace")
        return -1, out + f"\n(the command timed out after {timeout:g} s)"
    return p.returncode, p.stdout.decode(errors="replace")


def main() -> int:
    base_url = os.environ["OPENAI_BASE_URL"]
    api_key = os.environ.get("OPENAI_API_KEY", "")
    task = os.environ["ACTLOOP_TASK"]
    steps = int(os.environ.get("AGENT_STEP_LIMIT", "50"))
    timeout = float(os.environ.get("AGENT_COMMAND_TIMEOUT", "60"))
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for _ in range(steps):
        reply = chat(base_url, api_key, messages)
        messages.append({"role": "assistant", "content": reply})
        actions = ACTION.findall(reply)
        if len(actions) != 1:
            messages.append({"role": "user", "content": FORMAT_ERROR.format(n=len(actions))})
            continue
        code, output = run(actions[0].strip(), timeout)
        if code == 0 and output.lstrip().startswith(SUBMITTED):
            return 0
        messages.append(
            {"role": "user", "content": f"<returncode>{code}</returncode>\n<output>\n{output}</output>"}
        )
    print(f"no submission within {steps} steps", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
