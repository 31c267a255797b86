"""Tests of the actloop client against a running gateway.

They need ACTLOOP_GATEWAY_URL (and ACTLOOP_API_TOKEN) of a stack whose
simulated model and sandboxes run samples of env.backend "sim", as
`actloop dev --serve` starts; the Go test TestPythonClient runs them so.
"""

import asyncio
import json
import os
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))

from localserver import LocalServer  # noqa: E402
from actloop import ActloopError, AsyncClient, Client, Result, SubmitError, serve_reward  # noqa: E402

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
        first = Client(URL, TOKEN, run=self.client.run)
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
        second = Client(URL, TOKEN, run=self.client.run)
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
            seen = []
            n = grpo_loop.run(URL, TOKEN, prompts=2, rollouts=2, out=out, progress=lambda d, t: seen.append((d, t)))
            self.assertEqual(n, 4)
            self.assertEqual(seen[-1], (4, 4))
            with open(out) as f:
                records = [json.loads(line) for line in f]
            run = records[0]["run"]
            # A second step is a new run: the same prompt ids again, its own
            # results only.
            out2 = os.path.join(d, "records2.jsonl")
            self.assertEqual(grpo_loop.run(URL, TOKEN, prompts=2, rollouts=2, out=out2), 4)
            with open(out2) as f:
                second = [json.loads(line) for line in f]
            self.assertNotEqual(second[0]["run"], run)
            self.assertEqual(sorted(r["traj_id"] for r in second), sorted(r["traj_id"] for r in records))
            # Run again under the same run: refused, naming each id and the
            # earlier run, instead of waiting for results that never come.
            with self.assertRaises(SubmitError) as cm:
                grpo_loop.run(URL, TOKEN, prompts=2, rollouts=2, out=out, run=run)
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
        self.assertIn("prompt_ids: set beside task (exactly one of task, messages, prompt_ids must be set)",
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


class DropFirstSubmitAnswer(LocalServer):
    """A proxy to the gateway that forwards every request but, for the first
    POST /v1/samples, closes the connection instead of giving the answer:
    the batch is stored, and the client does not know."""

    def __init__(self, upstream):
        self.submits = 0

        def handle(method, path, headers, body):
            req = urllib.request.Request(upstream + path, data=body or None, method=method)
            for k in ("Authorization", "Content-Type"):
                if headers.get(k):
                    req.add_header(k, headers[k])
            try:
                with urllib.request.urlopen(req, timeout=300) as resp:
                    status, data = resp.status, resp.read()
            except urllib.error.HTTPError as e:
                status, data = e.code, e.read()
            if method == "POST" and path.startswith("/v1/samples"):
                self.submits += 1
                if self.submits == 1:
                    return None
            return status, data

        super().__init__(handle)


@unittest.skipUnless(URL, "ACTLOOP_GATEWAY_URL is not set: no gateway to test against")
class RunTest(unittest.TestCase):
    """Runs against a gateway: each reads only its own results."""

    def test_two_runs_with_the_same_ids_read_only_their_own(self):
        a, b = Client(URL, TOKEN, timeout=60), Client(URL, TOKEN, timeout=60)
        ids = ["x-0", "x-1", "x-2"]
        for c in (a, b):
            self.assertEqual(c.submit(sample(i) for i in ids), 3)
        for c in (a, b):
            progress = []
            got = c.collect(timeout=120, wait=2, on_progress=lambda d, t: progress.append((d, t)))
            self.assertEqual([r.traj_id for r in got], ids)
            self.assertEqual([r.raw["traj_id"] for r in got], [f"{c.run}.{i}" for i in ids])
            self.assertEqual(progress[0], (0, 3))
            self.assertEqual(progress[-1], (3, 3))
            self.assertEqual(c._stash, {}, "a result of another run was read")
        # Nothing of the other run, or any other, comes to a run's reader.
        self.assertEqual(list(a.results(until_idle=True, wait=1)), [])
        # A consumer name is one run's: another run using it is refused.
        with self.assertRaises(ActloopError) as cm:
            list(b.results(f"{a.run}-results", until_idle=True, wait=0))
        self.assertEqual(cm.exception.status, 409)
        self.assertIn(f"of run {a.run}", cm.exception.reason)

    @unittest.skipUnless(os.environ.get("ACTLOOP_TEST_REWARD_PORT"), "no reward port the stack allows")
    def test_reward_endpoint_served_from_a_function(self):
        # The stack allows reward URLs under http://127.0.0.1:<this port>/
        # (ACTLOOP_REWARD_URLS), as a deployment names its reward service.
        port = int(os.environ["ACTLOOP_TEST_REWARD_PORT"])
        seen = []

        def score(traj):
            seen.append(traj)
            return {"reward": 0.25 if traj["eval"]["exit_code"] == 0 else 0.0, "style": 0.5}

        with serve_reward(score, port=port) as srv:
            c = Client(URL, TOKEN, timeout=60)
            self.assertEqual(c.submit([sample("rw-0", reward={"url": srv.url + "/score"})]), 1)
            got = c.collect(timeout=120, wait=2)
        self.assertEqual(len(got), 1)
        r = got[0]
        self.assertEqual((r.status, r.reward, r.reward_components, r.reward_error), ("submitted", 0.25, {"style": 0.5}, ""),
                         r.raw)
        self.assertEqual(len(seen), 1)
        t = seen[0]
        self.assertEqual((t["traj_id"], t["status"], t["eval"]["exit_code"]), (f"{c.run}.rw-0", "submitted", 0))
        self.assertTrue(t["messages"], t)

    def test_a_submit_whose_answer_was_lost_is_not_refused(self):
        proxy = DropFirstSubmitAnswer(URL)
        self.addCleanup(proxy.close)
        c = Client(proxy.url, TOKEN, timeout=60, backoff_base=0.01)
        ids = [f"lost-{i}" for i in range(4)]
        self.assertEqual(c.submit(sample(i) for i in ids), 4)
        self.assertEqual(proxy.submits, 2)
        got = c.collect(timeout=120, wait=2)
        self.assertEqual([r.traj_id for r in got], ids)
        self.assertTrue(all(r.status == "submitted" for r in got), [(r.status, r.reason) for r in got])

    def test_async_client(self):
        async def main():
            async with AsyncClient(URL, TOKEN, timeout=60) as c:
                self.assertEqual(await c.submit([sample("a-0"), sample("a-1")]), 2)
                got = set()
                async for r in c.results(wait=2):
                    got.add(r.traj_id)
                    if len(got) == 2:
                        break
                return got

        self.assertEqual(asyncio.run(main()), {"a-0", "a-1"})


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
        c = Client("http://127.0.0.1:9", timeout=2, retries=0)
        with self.assertRaises(OSError):
            c.control()


if __name__ == "__main__":
    unittest.main()
