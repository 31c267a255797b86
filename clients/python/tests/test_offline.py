"""Tests of the actloop client that need no actloop: retries against a local
http.server that fails and then answers, run scoping, the async client,
serve_reward, the dataset helpers and the package's build.

They poll with deadlines and never assert on time taken: they run on a
loaded machine too.
"""

import asyncio
import io
import json
import os
import socket
import sys
import tempfile
import threading
import unittest
import urllib.error
import urllib.parse
import urllib.request
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

import actloop  # noqa: E402
from localserver import LocalServer  # noqa: E402
from actloop import (ActloopError, AsyncClient, Client, GatewayUnreachable, Result, SubmitError,  # noqa: E402
                     serve_reward)
from actloop.datasets import chat_sample, chat_samples, rollouts, swebench_sample, swebench_samples  # noqa: E402

FAST = dict(backoff_base=0.001, backoff_cap=0.01)


class FakeGateway(LocalServer):
    """A stand-in for the gateway on http.server: each request is recorded
    and answered by script[(method, path)], a list of answers used in turn
    (the last one over and over): (status, body) or "drop" (the connection
    closed without an answer). GET /v1/results and /v1/groups serve
    self.results / self.groups as a consumer would, ack and nak included."""

    def __init__(self):
        self.requests = []
        self.script = {}
        self.results = []  # result dicts, in order
        self.handed = {}  # ack token -> index, handed out and not settled
        self.acked = set()
        self.lock = threading.Lock()

        def handle(method, path, headers, body):
            u = urllib.parse.urlsplit(path)
            with self.lock:
                self.requests.append((method, u.path, urllib.parse.parse_qs(u.query), body))
                answer = self.answer(method, u.path, urllib.parse.parse_qs(u.query), body)
            if answer == "drop":
                return None
            status, out = answer
            return status, json.dumps(out).encode()

        super().__init__(handle)

    def answer(self, method, path, query, body):
        key = (method, path)
        if key in self.script:
            answers = self.script[key]
            return answers.pop(0) if len(answers) > 1 else answers[0]
        if path in ("/v1/results", "/v1/groups"):
            out = []
            for i, r in enumerate(self.results):
                tok = f"$JS.ACK.ACTLOOP_RESULTS.c.{i}"
                if i in self.acked or tok in self.handed:
                    continue
                run = query.get("run", [""])[0]
                if run and not r["traj_id"].startswith(run + "."):
                    continue
                self.handed[tok] = i
                out.append({"ack": tok, "result": r})
                if len(out) >= int(query.get("max", ["16"])[0]):
                    break
            return 200, {"deliveries": out}
        if path in ("/v1/ack", "/v1/nak"):
            acks = json.loads(body)["acks"]
            for a in acks:
                i = self.handed.pop(a, None)
                if path == "/v1/ack" and i is not None:
                    self.acked.add(i)
            return 200, {"settled": len(acks)}
        return 404, {"error": "not found"}

    def paths(self, method=None, path=None):
        return [r for r in self.requests if (method is None or r[0] == method) and (path is None or r[1] == path)]


def result(tid, **kw):
    r = {"traj_id": tid, "sample_id": tid, "group_id": tid, "status": "submitted", "reward": 1.0}
    r.update(kw)
    return r


class GatewayTest(unittest.TestCase):
    def setUp(self):
        self.gw = FakeGateway()
        self.addCleanup(self.gw.close)


class RetryTest(GatewayTest):
    def test_server_errors_then_success(self):
        self.gw.script[("GET", "/v1/control")] = [(503, {"error": "nats down"}), (502, {"error": "proxy"}),
                                                  (200, {"control": {"paused": False}})]
        c = Client(self.gw.url, "t", retries=5, **FAST)
        self.assertEqual(c.control(), {"control": {"paused": False}})
        self.assertEqual(len(self.gw.paths("GET", "/v1/control")), 3)

    def test_dropped_connection_then_success(self):
        self.gw.script[("GET", "/v1/status")] = ["drop", (200, {"ok": True})]
        c = Client(self.gw.url, "t", retries=3, **FAST)
        self.assertEqual(c.status(), {"ok": True})
        self.assertEqual(len(self.gw.paths("GET", "/v1/status")), 2)

    def test_attempts_are_bounded(self):
        self.gw.script[("GET", "/v1/control")] = [(503, {"error": "still down"})]
        c = Client(self.gw.url, "t", retries=2, **FAST)
        with self.assertRaises(ActloopError) as cm:
            c.control()
        self.assertEqual(cm.exception.status, 503)
        self.assertIn("still down", str(cm.exception))
        self.assertIn("after 3 attempts", str(cm.exception))
        self.assertEqual(len(self.gw.paths("GET", "/v1/control")), 3)

    def test_client_errors_are_not_retried(self):
        self.gw.script[("POST", "/v1/abort")] = [(400, {"error": "traj_ids: none given"})]
        c = Client(self.gw.url, "t", retries=5, **FAST)
        with self.assertRaises(ActloopError) as cm:
            c.abort()
        self.assertEqual(cm.exception.status, 400)
        self.assertEqual(len(self.gw.paths("POST", "/v1/abort")), 1)

    def test_a_pause_that_timed_out_is_an_answer(self):
        self.gw.script[("POST", "/v1/pause")] = [(504, {"error": "timed out", "missing": ["r0"]})]
        c = Client(self.gw.url, "t", retries=5, **FAST)
        with self.assertRaises(ActloopError) as cm:
            c.pause()
        self.assertEqual(cm.exception.body["missing"], ["r0"])
        self.assertEqual(len(self.gw.paths("POST", "/v1/pause")), 1)

    def test_unreachable_names_the_url_and_its_setting(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        url = f"http://127.0.0.1:{port}"
        with self.assertRaises(GatewayUnreachable) as cm:
            Client(url, retries=1, **FAST).control()
        msg = str(cm.exception)
        self.assertIn(url, msg)
        self.assertIn("url argument", msg)
        self.assertIn("ACTLOOP_GATEWAY_URL", msg)
        self.assertIn("after 2 attempts", msg)
        self.assertIsInstance(cm.exception, OSError)
        old = os.environ.get("ACTLOOP_GATEWAY_URL")
        os.environ["ACTLOOP_GATEWAY_URL"] = url
        try:
            with self.assertRaises(GatewayUnreachable) as cm:
                Client(retries=0).control()
            self.assertIn("the ACTLOOP_GATEWAY_URL environment variable", str(cm.exception))
            del os.environ["ACTLOOP_GATEWAY_URL"]
            with self.assertRaises(ValueError) as ve:
                Client()
            self.assertIn("ACTLOOP_GATEWAY_URL", str(ve.exception))
        finally:
            if old is not None:
                os.environ["ACTLOOP_GATEWAY_URL"] = old
            else:
                os.environ.pop("ACTLOOP_GATEWAY_URL", None)

    def test_submit_after_a_lost_answer_resubmits(self):
        # The first attempt reached the gateway (which stored the batch) but
        # its answer was lost; the second says it is a retry, and the
        # gateway counts what the first stored.
        self.gw.script[("POST", "/v1/samples")] = ["drop", (200, {"accepted": 3, "already": ["x"]})]
        c = Client(self.gw.url, "t", run="rA", retries=3, **FAST)
        self.assertEqual(c.submit({"id": f"s{i}", "task": "t", "env": {"backend": "sim"}} for i in range(3)), 3)
        reqs = self.gw.paths("POST", "/v1/samples")
        self.assertEqual(len(reqs), 2)
        self.assertEqual(reqs[0][2], {})
        self.assertEqual(reqs[1][2], {"resubmit": ["true"]})
        self.assertEqual(reqs[0][3], reqs[1][3])
        self.assertEqual([json.loads(line)["id"] for line in reqs[1][3].splitlines()], ["rA.s0", "rA.s1", "rA.s2"])

    def test_submit_after_a_partial_503_sends_the_rest(self):
        self.gw.script[("POST", "/v1/samples")] = [(503, {"accepted": 2, "error": "stream: timeout"}),
                                                   (200, {"accepted": 2})]
        c = Client(self.gw.url, "t", run="rA", retries=3, **FAST)
        self.assertEqual(c.submit({"id": f"s{i}", "task": "t", "env": {"backend": "sim"}} for i in range(4)), 4)
        reqs = self.gw.paths("POST", "/v1/samples")
        self.assertEqual([json.loads(line)["id"] for line in reqs[1][3].splitlines()], ["rA.s2", "rA.s3"])
        self.assertEqual(reqs[1][2], {"resubmit": ["true"]})

    def test_submit_error_lists_lines_and_fields(self):
        self.gw.script[("POST", "/v1/samples")] = [(400, {
            "accepted": 0, "error": "2 of 3 samples are invalid; none was submitted", "omitted": 1,
            "errors": [{"line": 2, "id": "rA.b", "error": "env.backend: missing"},
                       {"line": 3, "error": "id: must match ..."}]})]
        c = Client(self.gw.url, "t", run="rA", **FAST)
        with self.assertRaises(SubmitError) as cm:
            c.submit([{"id": "a"}, {"id": "b"}, {"id": ""}])
        e = cm.exception
        self.assertEqual([(x.line, x.id) for x in e.errors], [(2, "b"), (3, "")])
        msg = str(e)
        self.assertIn("400: 2 of 3 samples are invalid", msg)
        self.assertIn("line 2 (b): env.backend: missing", msg)
        self.assertIn("line 3: id: must match", msg)
        self.assertIn("1 more", msg)
        self.assertEqual(len(self.gw.paths("POST", "/v1/samples")), 1)


class RunTest(GatewayTest):
    def test_ids_are_prefixed_and_given_back(self):
        c = Client(self.gw.url, "t", run="rA", **FAST)
        self.gw.script[("POST", "/v1/samples")] = [(200, {"accepted": 2})]
        c.submit([{"id": "p0-0", "group_id": "p0", "group_index": 0, "group_size": 2, "task": "t"},
                  {"id": "solo", "task": "t"}])
        sent = [json.loads(line) for line in self.gw.paths("POST", "/v1/samples")[0][3].splitlines()]
        self.assertEqual([(s["id"], s.get("group_id")) for s in sent], [("rA.p0-0", "rA.p0"), ("rA.solo", None)])
        self.gw.results = [result("rA.p0-0", group_id="rA.p0"), result("rB.p0-0", group_id="rB.p0"),
                           result("rA.solo")]
        seen = []
        got = c.collect(on_progress=lambda done, total: seen.append((done, total)), timeout=60, wait=0.05)
        self.assertEqual([(r.traj_id, r.group_id) for r in got], [("p0-0", "p0"), ("solo", "solo")])
        self.assertEqual(got[0].raw["traj_id"], "rA.p0-0")
        self.assertEqual(seen, [(0, 2), (1, 2), (2, 2)])
        reads = self.gw.paths("GET", "/v1/results")
        self.assertTrue(reads)
        for r in reads:
            self.assertEqual(r[2]["run"], ["rA"])
            self.assertEqual(r[2]["consumer"], ["rA-results"])
        self.assertEqual(self.gw.acked, {0, 2})

    def test_abort_names_this_runs_ids(self):
        self.gw.script[("POST", "/v1/abort")] = [(200, {"aborted": ["rA.x"], "not_found": ["rA.y"]})]
        c = Client(self.gw.url, "t", run="rA", **FAST)
        self.assertEqual(c.abort(traj_ids=["x", "y"]), {"aborted": ["x"], "not_found": ["y"]})
        self.assertEqual(json.loads(self.gw.paths("POST", "/v1/abort")[0][3])["traj_ids"], ["rA.x", "rA.y"])

    def test_runs_are_new_and_valid(self):
        a, b = Client(self.gw.url), Client(self.gw.url)
        self.assertNotEqual(a.run, b.run)
        for run in (a.run, b.run):
            self.assertRegex(run, actloop.RUN_PATTERN)
            self.assertNotIn(".", run)
        with self.assertRaises(ValueError):
            Client(self.gw.url, run="a.b")

    def test_without_a_run_ids_go_as_given(self):
        c = Client(self.gw.url, "t", run="", **FAST)
        self.gw.results = [result("x")]
        got = list(c.results(until_idle=True, wait=0))
        self.assertEqual([r.traj_id for r in got], ["x"])
        q = self.gw.paths("GET", "/v1/results")[0][2]
        self.assertNotIn("run", q)
        self.assertEqual(q["consumer"], ["trainer"])

    def test_results_progress(self):
        c = Client(self.gw.url, "t", run="rA", **FAST)
        self.gw.script[("POST", "/v1/samples")] = [(200, {"accepted": 2})]
        c.submit([{"id": "a"}, {"id": "b"}])
        self.gw.results = [result("rA.a"), result("rA.b")]
        seen = []
        list(c.results(until_idle=True, wait=0, on_progress=lambda d, t: seen.append((d, t))))
        self.assertEqual(seen, [(1, 2), (2, 2)])

    def test_results_until_done(self):
        c = Client(self.gw.url, "t", run="rA", **FAST)
        self.gw.script[("POST", "/v1/samples")] = [(200, {"accepted": 2})]
        c.submit([{"id": "a"}, {"id": "b"}])
        self.gw.results = [result("rA.b"), result("rA.x"), result("rA.a"), result("rA.y")]
        seen = []
        got = [r.traj_id for r in c.results(until_done=True, wait=0.05, on_progress=lambda d, t: seen.append((d, t)))]
        self.assertEqual(got, ["b", "x", "a"])
        self.assertEqual(seen, [(1, 2), (2, 2)])
        self.assertEqual(self.gw.acked, {0, 1, 2})  # the last one acknowledged, the rest handed back
        self.assertEqual(list(c.results(until_done=True)), [])
        with self.assertRaises(ValueError):
            Client(self.gw.url, run="").results(until_done=True)

    def test_result_reward_fields(self):
        r = Result.from_json(result("t", reward_components={"format": 1, "tests": 0.5}, reward_error=""))
        self.assertEqual(r.reward_components, {"format": 1.0, "tests": 0.5})
        r = Result.from_json(result("t", reward_error="endpoint: 500"))
        self.assertEqual((r.reward_components, r.reward_error), ({}, "endpoint: 500"))


class AsyncTest(GatewayTest):
    def test_async_client(self):
        self.gw.script[("POST", "/v1/samples")] = ["drop", (200, {"accepted": 2})]
        self.gw.results = [result("rA.a"), result("rA.b"), result("rZ.c")]

        async def main():
            async with AsyncClient(self.gw.url, "t", run="rA", **FAST) as c:
                self.assertEqual(await c.submit([{"id": "a"}, {"id": "b"}]), 2)
                got = []
                async for r in c.results(until_idle=True, wait=0):
                    got.append(r.traj_id)
                control = asyncio.ensure_future(c.status())
                return got, control

        self.gw.script[("GET", "/v1/status")] = [(200, {"ok": 1})]
        got, control = asyncio.run(self._with_status(main))
        self.assertEqual(got, ["a", "b"])
        self.assertEqual(control, {"ok": 1})
        self.assertEqual(self.gw.acked, {0, 1})

    async def _with_status(self, main):
        got, fut = await main()
        return got, await fut

    def test_async_collect(self):
        self.gw.results = [result("rA.a")]
        seen = []

        async def main():
            c = AsyncClient(self.gw.url, "t", run="rA", **FAST)
            return await c.collect(["a"], on_progress=lambda d, t: seen.append((d, t)), timeout=60, wait=0.05)

        got = asyncio.run(main())
        self.assertEqual([r.traj_id for r in got], ["a"])
        self.assertEqual(seen, [(0, 1), (1, 1)])


def post(url, body, content_type="application/json"):
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


TRAJ = {"traj_id": "r.a", "sample_id": "r.a", "status": "submitted", "reason": "", "messages": [],
        "diff": "diff --git a/x b/x\n", "eval": {"exit_code": 0, "output": "ok", "reward": 1.0},
        "tests": {"test_a": "passed"}, "metadata": {"k": 1}}


class RewardTest(unittest.TestCase):
    def test_round_trip(self):
        got = []

        def fn(t):
            got.append(t)
            if t["metadata"].get("boom"):
                raise RuntimeError("no reward for you")
            if t["metadata"].get("parts"):
                return {"reward": 0.5, "format": 1, "tests": 0.0}
            if t["metadata"].get("bad"):
                return "high"
            return 1.0 if t["eval"]["exit_code"] == 0 else 0.0

        with serve_reward(fn) as srv:
            self.assertTrue(srv.url.startswith("http://127.0.0.1:"))
            self.assertEqual(post(srv.url, json.dumps(TRAJ).encode()), (200, {"reward": 1.0}))
            self.assertEqual(got[0], TRAJ)
            self.assertEqual(post(srv.url, json.dumps({**TRAJ, "metadata": {"parts": 1}}).encode()),
                             (200, {"reward": 0.5, "format": 1.0, "tests": 0.0}))
            st, body = post(srv.url, json.dumps({**TRAJ, "metadata": {"boom": 1}}).encode())
            self.assertEqual(st, 500)
            self.assertIn("RuntimeError: no reward for you", body["error"])
            st, body = post(srv.url, json.dumps({**TRAJ, "metadata": {"bad": 1}}).encode())
            self.assertEqual(st, 500)
            self.assertIn("reward", body["error"])
            st, body = post(srv.url, json.dumps({**TRAJ, "metadata": {"parts": 1}, "eval": None}).encode())
            self.assertEqual(st, 200)
            self.assertIsNone(got[-1]["eval"])
            st, body = post(srv.url, b"{not json")
            self.assertEqual(st, 400)
            self.assertIn("not JSON", body["error"])
            st, body = post(srv.url, b"[1, 2]")
            self.assertEqual(st, 400)
            self.assertIn("JSON object", body["error"])
        with self.assertRaises(OSError):  # closed
            post(srv.url, json.dumps(TRAJ).encode())


SWE_ROW = {
    "instance_id": "astropy__astropy-12907", "repo": "astropy/astropy", "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "problem_statement": "Modeling's separability_matrix does not compute separability correctly",
    "FAIL_TO_PASS": json.dumps(["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"]),
    "PASS_TO_PASS": ["astropy/modeling/tests/test_separable.py::test_coord_matrix"],
    "version": "4.3", "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    "test_patch": "diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py\n"
                  "--- a/astropy/modeling/tests/test_separable.py\n+++ b/astropy/modeling/tests/test_separable.py\n"
                  "@@ -1 +1 @@\n-x\n+y\n",
    "image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907",
}


class RewardAnswerTest(unittest.TestCase):
    def test_answers(self):
        from actloop.reward import reward_answer

        self.assertEqual(reward_answer(1), {"reward": 1.0})
        self.assertEqual(reward_answer({"reward": 0.25, "judge": 1}), {"reward": 0.25, "judge": 1.0})
        for bad, says in [(True, "reward"), (float("nan"), "finite"), ({"judge": 1}, "without"),
                          ({"reward": 1, "note": "x"}, "note"), ({"reward": 1, "": 1}, "component name"),
                          ({"reward": 1, **{f"c{i}": i for i in range(65)}}, "65 components")]:
            with self.assertRaises((TypeError, ValueError)) as cm:
                reward_answer(bad)
            self.assertIn(says, str(cm.exception))


class DatasetTest(unittest.TestCase):
    def test_swebench_row(self):
        s = swebench_sample(SWE_ROW, backend="sim", workspace="repos/{repo}", limits={"step_limit": 30})
        self.assertEqual(s["id"], "astropy__astropy-12907")
        self.assertEqual(s["family"], "astropy/astropy")
        self.assertEqual(s["task"], SWE_ROW["problem_statement"])
        env = s["env"]
        self.assertEqual(env["backend"], "sim")
        self.assertEqual(env["image"], SWE_ROW["image"])
        self.assertEqual(env["workspace"], "repos/astropy__astropy")
        self.assertEqual(env["setup"], ["git -c advice.detachedHead=false checkout -q " + SWE_ROW["base_commit"]])
        self.assertEqual(env["tests"], {"fail_to_pass": json.loads(SWE_ROW["FAIL_TO_PASS"]),
                                        "pass_to_pass": SWE_ROW["PASS_TO_PASS"], "format": "pytest"})
        self.assertTrue(env["eval"].startswith("set -o pipefail\ngit checkout -q d16bfe05a744909de4b27f5875fe0d4ed41ce607 -- "
                                               "'astropy/modeling/tests/test_separable.py' 2>/dev/null || rm -f -- "))
        self.assertIn("pytest -rA 'astropy/modeling/tests/test_separable.py' 2>&1 | grep -E ", env["eval"])
        self.assertTrue(env["eval"].endswith("\nexit 0\n"))
        self.assertEqual(s["limits"], {"step_limit": 30})
        self.assertEqual(s["metadata"]["environment_setup_commit"], SWE_ROW["environment_setup_commit"])

    def test_swebench_django_and_sympy(self):
        row = {**SWE_ROW, "repo": "django/django", "test_patch": "", "version": "3.0",
               "FAIL_TO_PASS": ["test_a (migrations.test_x.T)"], "PASS_TO_PASS": []}
        s = swebench_sample(row)
        self.assertEqual(s["env"]["backend"], "local")
        self.assertEqual(s["env"]["tests"]["format"], "django")
        self.assertIn("./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 'migrations.test_x.T.test_a'",
                      s["env"]["eval"])
        s = swebench_sample({**row, "repo": "sympy/sympy"})
        self.assertEqual(s["env"]["tests"]["format"], "sympy")
        self.assertIn("bin/test -C --verbose 2>&1", s["env"]["eval"])

    def test_swebench_bad_rows_name_the_field(self):
        for field, value, says in [("instance_id", "-x", "instance_id"), ("repo", "astropy", "repo"),
                                   ("base_commit", "HEAD", "base_commit"), ("problem_statement", " ", "problem_statement"),
                                   ("FAIL_TO_PASS", "[oops", "FAIL_TO_PASS"), ("test_patch", "not a diff", "test_patch")]:
            with self.assertRaises(ValueError) as cm:
                swebench_sample({**SWE_ROW, field: value})
            self.assertIn(says, str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            list(swebench_samples([SWE_ROW, {**SWE_ROW, "FAIL_TO_PASS": [], "PASS_TO_PASS": []}]))
        self.assertIn("row 2: FAIL_TO_PASS", str(cm.exception))

    def test_chat_rows(self):
        tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
        rows = [{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}], "tools": tools},
                {"id": "mine", "messages": [{"role": "user", "content": "v"}], "tools": json.dumps(tools)},
                {"messages": [{"role": "user", "content": "w"}]}]
        out = list(chat_samples(rows, env={"backend": "sim"}, flow="tool_call", id_prefix="c-"))
        self.assertEqual([s["id"] for s in out], ["c-0", "mine", "c-2"])
        self.assertEqual(out[0]["messages"], rows[0]["messages"])
        self.assertEqual(out[0]["tools"], tools)
        self.assertEqual(out[1]["tools"], tools)
        self.assertNotIn("tools", out[2])
        self.assertNotIn("task", out[0])
        self.assertEqual(out[0]["flow"], "tool_call")
        with self.assertRaises(ValueError) as cm:
            chat_sample({"messages": [{"content": "x"}]}, id="x", env={"backend": "sim"})
        self.assertIn("messages[0].role", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            chat_sample({"messages": [{"role": "user", "content": "x"}]}, id="x", env={})
        self.assertIn("env.backend", str(cm.exception))

    def test_rollouts(self):
        g = rollouts({"id": "p0", "task": "t"}, 3)
        self.assertEqual([(s["id"], s["group_id"], s["group_index"], s["group_size"]) for s in g],
                         [("p0-0", "p0", 0, 3), ("p0-1", "p0", 1, 3), ("p0-2", "p0", 2, 3)])


FIXTURE = os.environ.get("ACTLOOP_SWEBENCH_FIXTURE")


@unittest.skipUnless(FIXTURE, "ACTLOOP_SWEBENCH_FIXTURE is not set: the Go test TestPythonClient writes it")
class SwebenchMatchesGoTest(unittest.TestCase):
    """swebench_sample makes what internal/swebench makes of the same rows
    (the fixture is the Go converter's output)."""

    def test_same_samples(self):
        with open(FIXTURE, encoding="utf-8") as f:
            fx = json.load(f)
        opts = fx["options"]
        for pair in fx["pairs"]:
            go = pair["sample"]
            py = swebench_sample(pair["row"], backend=opts["backend"], workspace=opts["workspace"])
            with self.subTest(pair["row"]["instance_id"]):
                for k in ("id", "family", "task", "metadata"):
                    self.assertEqual(py[k], go[k], k)
                for k in ("backend", "image", "workspace", "setup", "eval", "tests"):
                    self.assertEqual(py["env"].get(k), go["env"].get(k), "env." + k)


class PackageTest(unittest.TestCase):
    ROOT = os.path.join(HERE, "..")

    def test_backend_builds_a_typed_wheel_matching_pyproject(self):
        sys.path.insert(0, os.path.join(self.ROOT, "_build"))
        try:
            import backend
        finally:
            sys.path.pop(0)
        with open(os.path.join(self.ROOT, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
        for key, value in (("name", backend.NAME), ("version", backend.VERSION), ("description", backend.SUMMARY),
                           ("requires-python", backend.REQUIRES_PYTHON)):
            self.assertIn(f'{key} = {json.dumps(value)}', text)
        self.assertIn("dependencies = []", text)
        self.assertEqual(actloop.__version__, backend.VERSION)
        with tempfile.TemporaryDirectory() as d:
            name = backend.build_wheel(d)
            with zipfile.ZipFile(os.path.join(d, name)) as z:
                names = z.namelist()
                meta = z.read(f"actloop-{backend.VERSION}.dist-info/METADATA").decode()
                record = z.read(f"actloop-{backend.VERSION}.dist-info/RECORD").decode()
        for f in ("actloop/__init__.py", "actloop/client.py", "actloop/reward.py", "actloop/datasets.py",
                  "actloop/py.typed"):
            self.assertIn(f, names)
            self.assertIn(f + ",sha256=", record)
        self.assertIn("Name: actloop", meta)
        self.assertNotIn("Requires-Dist", meta)
        self.assertFalse(any("__pycache__" in n for n in names))


if __name__ == "__main__":
    unittest.main()
