"""Tests of the actloop client against a running gateway.

They need ACTLOOP_GATEWAY_URL (and ACTLOOP_API_TOKEN) of a stack whose
simulated model and sandboxes run samples of env.backend "sim", as
`actloop dev --serve` starts; the Go test TestPythonClient runs them so.
"""

import json
import os
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))

from actloop import ActloopError, Client, Result, SubmitError  # noqa: E402

URL = os.environ.get("ACTLOOP_GATEWAY_URL")
TOKEN = os.environ.get("ACTLOOP_API_TOKEN")
SUBMIT = "THOUGHT: done.\n\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"


# schema.MaxMetadataDepth: the deepest nesting of arrays and objects a
# sample's metadata may have, so that a result carrying it back decodes
# here (json recurses once per level; the gateway accepted 10,000).
MAX_METADATA_DEPTH = 128


def nested(depth):
    """A JSON value of depth nested objects and arrays, alternating."""
    v = 1
    for i in reversed(range(depth)):
        v = {"a": v} if i % 2 == 0 else [v]
    return v


def sample(sid, **kw):
    s = {"id": sid, "task": "task " + sid, "env": {"backend": "sim", "eval": "exit 0"}, "script": [SUBMIT]}
    s.update(kw)
    return s


@unittest.skipUnless(URL, "ACTLOOP_GATEWAY_URL is not set: no gateway to test against")
class ClientTest(unittest.TestCase):
    def setUp(self):
        self.client = Client(URL, TOKEN, timeout=60)
        self.prefix = "py-" + uuid.uuid4().hex[:8]

    def test_submit_names_the_bad_line_and_stores_nothing(self):
        good = sample(self.prefix + "-0")
        bad = {"id": self.prefix + "-1", "task": "t"}  # no env.backend
        with self.assertRaises(SubmitError) as cm:
            self.client.submit([good, bad])
        e = cm.exception
        self.assertEqual(e.status, 400)
        self.assertEqual(e.accepted, 0)
        self.assertEqual([(x.line, x.id) for x in e.errors], [(2, self.prefix + "-1")])
        self.assertIn("env.backend", e.errors[0].error)

    def test_results_resume_after_reconnect_exactly_once(self):
        ids = [f"{self.prefix}-{i}" for i in range(6)]
        self.assertEqual(self.client.submit(sample(i) for i in ids), 6)
        consumer = self.prefix
        kept = []
        # A trainer reads two results and dies while handling the second:
        # the first is acknowledged, the second is not.
        first = Client(URL, TOKEN)
        it = first.results(consumer)
        for r in it:
            if r.traj_id not in ids:
                continue
            if len(kept) == 1:
                it.close()  # dies before it has kept this one
                break
            kept.append(r.traj_id)
        # It comes back as a new process under the same consumer name and
        # gets the rest, the unfinished one included, each once.
        second = Client(URL, TOKEN)
        deadline = time.monotonic() + 120
        for r in second.results(consumer, wait=2):
            if r.traj_id in ids:
                self.assertTrue(r.trainable, r.reason)
                self.assertEqual(r.status, "submitted")
                self.assertEqual(len(r.tokens), len(r.loss_mask))
                self.assertIn(1, r.loss_mask)
                kept.append(r.traj_id)
            if len(kept) >= len(ids) or time.monotonic() > deadline:
                break
        self.assertEqual(sorted(kept), sorted(ids))

    def test_groups(self):
        ids = [f"{self.prefix}-g-{i}" for i in range(2)]
        self.client.submit(sample(sid, group_id=self.prefix + "-g", group_index=i, group_size=2)
                           for i, sid in enumerate(ids))
        deadline = time.monotonic() + 120
        for g in self.client.groups(self.prefix + "-groups", wait=2):
            if g.group_id == self.prefix + "-g":
                self.assertEqual(g.traj_ids, ids)
                return
            self.assertLess(time.monotonic(), deadline, "no GroupDone")

    def test_grpo_example_writes_training_records(self):
        import grpo_loop

        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "records.jsonl")
            n = grpo_loop.run(URL, TOKEN, prompts=2, rollouts=2, out=out, prefix=self.prefix, consumer=self.prefix)
            self.assertEqual(n, 4)
            with open(out) as f:
                records = [json.loads(line) for line in f]
            # Run again under the same ids: refused, naming each id and the
            # earlier run, instead of waiting for results that never come.
            with self.assertRaises(SubmitError) as cm:
                grpo_loop.run(URL, TOKEN, prompts=2, rollouts=2, out=out, prefix=self.prefix, consumer=self.prefix)
            self.assertEqual(cm.exception.status, 409)
            self.assertEqual(cm.exception.accepted, 0)
            self.assertEqual(sorted(x.id for x in cm.exception.errors), sorted(r["traj_id"] for r in records))
            self.assertIn("already used by an earlier run", cm.exception.errors[0].error)
        by_group = {}
        for r in records:
            self.assertEqual(len(r["tokens"]), len(r["loss_mask"]))
            self.assertEqual(len(r["tokens"]), len(r["logprobs"]))
            by_group.setdefault(r["group_id"], []).append(r)
        self.assertEqual(len(by_group), 2)
        for members in by_group.values():
            self.assertAlmostEqual(sum(m["advantage"] for m in members), 0.0, places=6)
            self.assertEqual(sorted(m["reward"] for m in members), [0.0, 1.0])

    def test_metadata_nesting_is_capped_at_what_the_client_decodes(self):
        sid = self.prefix + "-deep"
        meta = nested(MAX_METADATA_DEPTH)
        with self.assertRaises(SubmitError) as cm:
            self.client.submit([sample(sid, metadata=nested(MAX_METADATA_DEPTH + 1))])
        self.assertEqual(len(cm.exception.errors), 1)
        self.assertIn("metadata", cm.exception.errors[0].error)
        self.assertIn(str(MAX_METADATA_DEPTH), cm.exception.errors[0].error)
        self.assertEqual(self.client.submit([sample(sid, metadata=meta)]), 1)
        deadline = time.monotonic() + 120
        for r in self.client.results(self.prefix + "-deep", wait=2):
            if r.traj_id == sid:
                self.assertEqual(r.metadata, meta)
                return
            self.assertLess(time.monotonic(), deadline, "no result")

    def test_prompt_as_messages_or_token_ids(self):
        msgs = [{"role": "system", "content": "You run shell commands."},
                {"role": "user", "content": "Submit at once."}]
        # Qwen ids of "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", given as a
        # tuple (the client sends any sequence of ints as a list).
        ids = (151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198)
        by_msgs, by_ids = self.prefix + "-msgs", self.prefix + "-ids"
        with self.assertRaises(SubmitError) as cm:
            self.client.submit([sample(by_ids, prompt_ids=ids),
                                sample(by_msgs, task="", messages=msgs + [{"role": "assistant", "content": "a"}])])
        self.assertEqual([x.line for x in cm.exception.errors], [1, 2])
        self.assertIn("exactly one of task, messages, prompt_ids must be set; got task and prompt_ids",
                      cm.exception.errors[0].error)
        self.assertIn("messages[2].role", cm.exception.errors[1].error)
        self.assertEqual(self.client.submit([sample(by_msgs, task="", messages=msgs),
                                             sample(by_ids, task="", prompt_ids=ids)]), 2)
        got = {}
        deadline = time.monotonic() + 120
        for r in self.client.results(self.prefix + "-prompts", wait=2):
            if r.traj_id in (by_msgs, by_ids):
                got[r.traj_id] = r
                if len(got) == 2:
                    break
            self.assertLess(time.monotonic(), deadline, "no result")
        m, i = got[by_msgs], got[by_ids]
        self.assertEqual(m.status, "submitted")
        self.assertEqual(m.messages[:2], msgs)
        self.assertEqual(m.messages[2]["role"], "assistant")
        self.assertEqual(i.status, "submitted")
        self.assertEqual(i.prompt_len, len(ids))
        self.assertEqual(i.tokens[:len(ids)], list(ids))
        self.assertEqual(i.loss_mask[:len(ids)], [0] * len(ids))

    def test_control_calls_and_errors(self):
        self.assertIn("control", self.client.control())
        with self.assertRaises(ActloopError) as cm:
            self.client.abort()
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("traj_ids", cm.exception.reason)
        self.assertEqual(self.client.abort(traj_ids=[self.prefix + "-nobody"])["not_found"], [self.prefix + "-nobody"])


class OfflineTest(unittest.TestCase):
    def test_advantages_are_group_normalised(self):
        sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
        import grpo_loop

        adv = grpo_loop.advantages([1.0, 0.0, 1.0, 0.0])
        self.assertAlmostEqual(sum(adv), 0.0)
        self.assertAlmostEqual(adv[0], 1.0, places=4)
        self.assertEqual(grpo_loop.advantages([1.0, 1.0]), [0.0, 0.0])

    def test_result_with_metadata_at_the_depth_limit_decodes(self):
        # A poll answer as the gateway writes it: the metadata sits a few
        # levels below the top, under the default recursion limit.
        answer = {"deliveries": [{"ack": "a", "result": {"traj_id": "t", "status": "submitted",
                                                         "metadata": nested(MAX_METADATA_DEPTH)}}]}
        text = json.dumps(answer)
        self.assertEqual(text.count("["), MAX_METADATA_DEPTH // 2 + 1)
        r = Result.from_json(json.loads(text)["deliveries"][0]["result"])
        self.assertEqual(r.metadata, nested(MAX_METADATA_DEPTH))

    def test_result_says_output_was_replaced(self):
        r = Result.from_json({"traj_id": "t", "status": "submitted", "replaced_outputs": 2})
        self.assertEqual(r.replaced_outputs, 2)
        self.assertEqual(Result.from_json({"traj_id": "t", "status": "submitted"}).replaced_outputs, 0)

    def test_prompt_ids_are_sent_as_a_list(self):
        from actloop.client import _wire

        self.assertEqual(_wire({"id": "a", "prompt_ids": (1, 2)}), {"v": 1, "id": "a", "prompt_ids": [1, 2]})
        self.assertEqual(_wire({"id": "a", "task": "t"}), {"v": 1, "id": "a", "task": "t"})

    def test_unreachable_gateway_raises(self):
        c = Client("http://127.0.0.1:9", timeout=2)
        with self.assertRaises(OSError):
            c.control()


if __name__ == "__main__":
    unittest.main()
