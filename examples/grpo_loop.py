#!/usr/bin/env python3
"""A GRPO-style trainer step against actloop, on the standard library only.

It submits a batch of prompts x N rollouts, collects each group as its
rollouts finish, computes group-normalised advantages ((reward - mean) /
(std + eps) within the group), and writes one training record per rollout as
JSON lines: token ids, loss mask, log-probs, advantage. A real trainer
replaces make_samples with its dataset (actloop.swebench_samples,
actloop.chat_samples) and the file with its update step.

    actloop dev --serve            # prints ACTLOOP_GATEWAY_URL and ACTLOOP_API_TOKEN
    python3 examples/grpo_loop.py --prompts 4 --rollouts 4 --out records.jsonl

Each run is a run of its own (actloop.Client's run, new every time, or
--run): its sample ids go to actloop as
"<run>.p<prompt>-<rollout>", so the same prompt ids can be submitted again
by the next step, and it reads only its own results. The samples here run
on actloop's simulated model and sandboxes (env.backend "sim"): each
rollout's scripted reply submits at once and its eval passes or fails by
rollout, so the rewards within a group differ.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

from actloop import Client, SubmitError, rollouts  # noqa: E402


def make_samples(prompts, rollouts_per_prompt):
    """prompts x rollouts samples; the rollouts of a prompt form a group."""
    submit = "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
    for p in range(prompts):
        prompt = {"id": f"p{p}", "task": f"Prompt {p}: make the check pass.", "env": {"backend": "sim"},
                  "script": [submit]}
        for s in rollouts(prompt, rollouts_per_prompt):
            s["env"] = {"backend": "sim", "eval": "exit 0" if (p + s["group_index"]) % 2 == 0 else "exit 1"}
            yield s


def advantages(rewards, eps=1e-6):
    """Group-normalised advantages (GRPO)."""
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def run(url, token, prompts, rollouts, out, run=None, progress=None):
    """One step: submits, waits for every group, writes the records;
    returns how many. run names the run (default: a new one)."""
    client = Client(url, token, run=run)
    client.submit(make_samples(prompts, rollouts))
    groups, written = {}, 0
    with open(out, "w") as f:
        # Every result of this run's samples, each once; then the loop ends.
        for r in client.results(until_done=True, on_progress=progress):
            members = groups.setdefault(r.group_id, [])
            members.append(r)
            if len(members) < r.group_size:
                continue
            members.sort(key=lambda m: m.group_index)
            for m, adv in zip(members, advantages([m.reward if m.trainable else 0.0 for m in members])):
                f.write(json.dumps({"run": client.run, "traj_id": m.traj_id, "group_id": m.group_id,
                                    "status": m.status, "reward": m.reward, "advantage": adv, "tokens": m.tokens,
                                    "loss_mask": m.loss_mask if m.trainable else [0] * len(m.tokens),
                                    "logprobs": m.logprobs}) + "\n")
                written += 1
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("ACTLOOP_GATEWAY_URL", "http://127.0.0.1:8084"))
    ap.add_argument("--token", default=os.environ.get("ACTLOOP_API_TOKEN"))
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--run", default=None,
                    help="the run's name (default: new for each run); a run submits its ids once: named again, "
                         "its submit is refused (409)")
    ap.add_argument("--out", default="records.jsonl")
    a = ap.parse_args()

    def progress(done, total):
        print(f"\r{done}/{total} rollouts", end="", file=sys.stderr, flush=True)

    try:
        n = run(a.url, a.token, a.prompts, a.rollouts, a.out, a.run, progress)
    except SubmitError as e:
        print(f"submit refused: {e}", file=sys.stderr)  # lists each line and its error
        sys.exit(1)
    print(f"\n{n} training records in {a.out}")


if __name__ == "__main__":
    main()
