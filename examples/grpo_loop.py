#!/usr/bin/env python3
"""A GRPO-style trainer step against actloop, on the standard library only.

It submits a batch of prompts x N rollouts, collects each group as its
rollouts finish, computes group-normalised advantages ((reward - mean) /
(std + eps) within the group), and writes one training record per rollout as
JSON lines: token ids, loss mask, log-probs, advantage. A real trainer
replaces make_samples with its dataset and the file with its update step.

    actloop dev --serve            # prints ACTLOOP_GATEWAY_URL and ACTLOOP_API_TOKEN
    python3 examples/grpo_loop.py --prompts 4 --rollouts 4 --out records.jsonl

The samples here run on actloop's simulated model and sandboxes (env.backend
"sim"): each rollout's scripted reply submits at once and its eval passes or
fails by rollout, so the rewards within a group differ.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

from actloop import Client, SubmitError  # noqa: E402


def make_samples(prompts, rollouts, prefix):
    """prompts x rollouts samples; the rollouts of a prompt form a group."""
    submit = "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"
    for p in range(prompts):
        for i in range(rollouts):
            yield {
                "id": f"{prefix}-{p}-{i}", "group_id": f"{prefix}-{p}", "group_index": i, "group_size": rollouts,
                "task": f"Prompt {p}: make the check pass.",
                "env": {"backend": "sim", "eval": "exit 0" if (p + i) % 2 == 0 else "exit 1"},
                "script": [submit],
            }


def advantages(rewards, eps=1e-6):
    """Group-normalised advantages (GRPO)."""
    mean = statistics.fmean(rewards)
    std = statistics.pstdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def run(url, token, prompts, rollouts, out, prefix="grpo", consumer="grpo"):
    client = Client(url, token)
    client.submit(make_samples(prompts, rollouts, prefix))
    groups, written = {}, 0
    with open(out, "w") as f:
        for r in client.results(consumer):
            if not r.group_id.startswith(prefix + "-"):
                continue  # another trainer's result on this consumer
            members = groups.setdefault(r.group_id, [])
            members.append(r)
            if len(members) < r.group_size:
                continue
            for m, adv in zip(members, advantages([m.reward if m.trainable else 0.0 for m in members])):
                f.write(json.dumps({"traj_id": m.traj_id, "group_id": m.group_id, "status": m.status,
                                    "reward": m.reward, "advantage": adv, "tokens": m.tokens,
                                    "loss_mask": m.loss_mask if m.trainable else [0] * len(m.tokens),
                                    "logprobs": m.logprobs}) + "\n")
                written += 1
            if written == prompts * rollouts:
                return written
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("ACTLOOP_GATEWAY_URL", "http://127.0.0.1:8084"))
    ap.add_argument("--token", default=os.environ.get("ACTLOOP_API_TOKEN"))
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--rollouts", type=int, default=4)
    # A sample id names one run: ids an earlier run used are refused. The
    # default prefix is new for each run; one given must be too.
    ap.add_argument("--prefix", default=f"grpo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}",
                    help="sample ids start with it (default: new for each run); an id used before is refused")
    ap.add_argument("--out", default="records.jsonl")
    a = ap.parse_args()
    try:
        n = run(a.url, a.token, a.prompts, a.rollouts, a.out, a.prefix, consumer=a.prefix)
    except SubmitError as e:
        print(f"submit refused: {e}", file=sys.stderr)
        for le in e.errors:
            print(f"  line {le.line} ({le.id}): {le.error}", file=sys.stderr)
        if e.omitted:
            print(f"  ... and {e.omitted} more", file=sys.stderr)
        sys.exit(1)
    print(f"{n} training records in {a.out}")


if __name__ == "__main__":
    main()
