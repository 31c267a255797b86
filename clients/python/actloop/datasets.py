"""Samples from dataset rows: SWE-bench rows (as `actloop swebench` and
internal/swebench make them) and chat-format rows ({"messages": [...],
"tools": [...]}); rollouts() turns a sample into a group of N.

Each helper returns plain dicts in actloop's sample format
(docs/trainer-api.md, "Sample"), ready for Client.submit, and raises
ValueError naming the row's field at fault.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

__all__ = ["DEFAULT_TEST_COMMAND", "chat_sample", "chat_samples", "rollouts", "swebench_sample", "swebench_samples",
           "swebench_spec"]

# What a sample, group or trajectory id must match (pkg/schema IDPattern).
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_id_re = re.compile(ID_PATTERN)
_repo_re = re.compile(r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+$")
_commit_re = re.compile(r"^[0-9a-fA-F]{7,64}$")
_django_id = re.compile(r"^(\w+) \(([\w.]+)\)$")

# SWE-bench's test commands (MAP_REPO_VERSION_TO_SPECS) and log formats,
# as internal/swebench has them.
DEFAULT_TEST_COMMAND = "pytest -rA"
_ASTROPY_PYTEST = "pytest -rA -vv -o console_output_style=classic --tb=no"
_DJANGO = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
_DJANGO_NO_PARALLEL = "./tests/runtests.py --verbosity 2"
_SPECS: Dict[str, Tuple[str, str]] = {
    "django/django": (_DJANGO, "django"),
    "mwaskom/seaborn": ("pytest --no-header -rA", "pytest"),
    "sphinx-doc/sphinx": ("tox --current-env -epy39 -v --", "pytest"),
    "sympy/sympy": ("PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose", "sympy"),
}
# The lines of each format's output its parser reads (internal/testlog Filter).
_FILTERS = {
    "django": r" \.\.\. |^(FAIL|ERROR):|^[[:space:]]*ok|--version is equivalent to version",
    "sympy": r"^[[:space:]]*test_|_* .*\.py:.* _*",
    "pytest": r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)|short test summary info",
}
_NON_TEST_EXTS = (".json", ".png", "csv", ".txt", ".md", ".jpg", ".jpeg", ".pkl", ".yml", ".yaml", ".toml")


def swebench_spec(repo: str, version: str = "") -> Tuple[str, str]:
    """repo's test command and log format ("pytest", "django", "sympy") at
    version, as SWE-bench runs them."""
    if repo == "django/django" and version == "1.9":
        return _DJANGO_NO_PARALLEL, "django"
    if repo == "astropy/astropy" and version in ("0.1", "0.2", "0.3", "0.4", "1.1", "1.2", "1.3"):
        return _ASTROPY_PYTEST, "pytest"
    return _SPECS.get(repo, (DEFAULT_TEST_COMMAND, "pytest"))


def _fail(field: str, msg: str) -> ValueError:
    return ValueError(f"{field}: {msg}" if field else msg)


def _clip(s: Any) -> str:
    s = str(s)
    return s[:64] + "…" if len(s) > 64 else s


def _test_list(row: Mapping[str, Any], field: str) -> List[str]:
    v = row.get(field)
    if v is None:
        return []
    if isinstance(v, str):  # SWE-bench's datasets hold a string holding a JSON list
        try:
            v = json.loads(v)
        except ValueError as e:
            raise _fail(field, f"string does not hold a JSON list of strings: {e}") from None
    if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
        raise _fail(field, "want a list of test ids or a string holding a JSON list")
    for i, t in enumerate(v):
        if not t.strip() or "\n" in t or "\r" in t:
            raise _fail(field, f"test {i} is empty or spans lines")
    return list(v)


def _patch_files(patch: str) -> List[str]:
    files: List[str] = []
    for line in patch.splitlines():
        if not line.startswith("diff --git a/"):
            continue
        rest = line[len("diff --git a/"):]
        i = rest.find(" b/")
        if i <= 0:
            raise _fail("test_patch", f"cannot read the file names of {_clip(line)!r}")
        for f in (rest[:i], rest[i + 3:]):
            if not f or f.startswith("/") or ".." in f:
                raise _fail("test_patch", f"unsafe file name {_clip(f)!r}")
            if f not in files:
                files.append(f)
    if patch and not files:
        raise _fail("test_patch", 'no "diff --git" header')
    return files


def _django_test_file(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name == "tests.py" or name.startswith("test_") or "/tests/" in path or "/test_" in path


def _directives(f2p: Sequence[str], p2p: Sequence[str], files: Sequence[str], fmt: str) -> List[str]:
    out: List[str] = []
    for f in files:
        if f.endswith(_NON_TEST_EXTS):
            continue
        if fmt == "django":
            if not _django_test_file(f):
                continue
            f = f[:-3] if f.endswith(".py") else f
            f = (f[len("tests/"):] if f.startswith("tests/") else f).replace("/", ".")
        out.append(f)
    if files:
        return out
    ids = list(f2p) + list(p2p)
    if fmt == "sympy":
        return []
    if fmt == "django":
        for t in ids:
            m = _django_id.match(t)
            if not m:
                continue
            label = m.group(2)
            if not label.endswith("." + m.group(1)):
                label += "." + m.group(1)
            if label not in out:
                out.append(label)
        return out
    return ids


def _quote(s: str) -> str:
    """s as one bash word, as internal/swebench quotes it."""
    return "'" + s.replace("'", "'\\''") + "'"


def _eval_script(commit: str, test_patch: str, files: Sequence[str], cmd: str, fmt: str,
                 f2p: Sequence[str], p2p: Sequence[str]) -> str:
    b = ["set -o pipefail\n"]
    for f in files:
        q = _quote(f)
        b.append(f"git checkout -q {commit} -- {q} 2>/dev/null || rm -f -- {q}\n")
    if test_patch:
        enc = base64.b64encode(test_patch.encode()).decode()
        b.append(f"printf '%s' {_quote(enc)} | base64 -d | git apply --whitespace=nowarn - || "
                 "{ echo 'actloop: test_patch does not apply'; exit 2; }\n")
    b.append(cmd)
    for t in _directives(f2p, p2p, files, fmt):
        b.append(" " + _quote(t))
    b.append(f" 2>&1 | grep -E {_quote(_FILTERS[fmt])}\nexit 0\n")
    return "".join(b)


def swebench_sample(row: Mapping[str, Any], *, backend: str = "local", workspace: str = "",
                    test_command: str = "", limits: Optional[Mapping[str, Any]] = None,
                    sampling: Optional[Mapping[str, Any]] = None, **fields: Any) -> Dict[str, Any]:
    """The sample of a SWE-bench row (instance_id, repo, base_commit,
    problem_statement, FAIL_TO_PASS, PASS_TO_PASS, and optionally image,
    version, environment_setup_commit, test_patch, test_cmd), as
    `actloop swebench` makes it: id instance_id, family repo, task the
    problem statement; env.setup checks out base_commit; env.eval restores
    the test files, applies test_patch and runs the repository's SWE-bench
    test command on its directives; env.tests lists FAIL_TO_PASS and
    PASS_TO_PASS in the repository's log format, so the reward is 1 when
    all pass. workspace ({repo} → owner__name, {instance_id}) is the
    directory a local sandbox copies; a container backend's image holds
    the repository. fields (group_id, metadata, …) are set over the
    result."""
    iid = row.get("instance_id")
    repo = row.get("repo")
    commit = row.get("base_commit")
    problem = row.get("problem_statement")
    if not isinstance(iid, str) or not _id_re.match(iid):
        raise _fail("instance_id", f"must match {ID_PATTERN}, got {_clip(iid)!r}")
    if not isinstance(repo, str) or not _repo_re.match(repo):
        raise _fail("repo", f"want owner/name, got {_clip(repo)!r}")
    if not isinstance(commit, str) or not _commit_re.match(commit):
        raise _fail("base_commit", f"want a hex commit id, got {_clip(commit)!r}")
    if not isinstance(problem, str) or not problem.strip():
        raise _fail("problem_statement", "missing")
    f2p, p2p = _test_list(row, "FAIL_TO_PASS"), _test_list(row, "PASS_TO_PASS")
    if not f2p and not p2p:
        raise _fail("FAIL_TO_PASS", "no test in FAIL_TO_PASS or PASS_TO_PASS")
    for k in ("image", "version", "environment_setup_commit", "test_patch", "test_cmd"):
        if row.get(k) is not None and not isinstance(row.get(k), str):
            raise _fail(k, f"want a string, got {type(row.get(k)).__name__}")
    test_patch = row.get("test_patch") or ""
    files = _patch_files(test_patch)
    version = row.get("version") or ""
    cmd, fmt = swebench_spec(repo, version)
    cmd = row.get("test_cmd") or test_command or cmd
    env: Dict[str, Any] = {
        "backend": backend,
        "setup": ["git -c advice.detachedHead=false checkout -q " + commit],
        "eval": _eval_script(commit, test_patch, files, cmd, fmt, f2p, p2p),
        "tests": {"fail_to_pass": f2p, "pass_to_pass": p2p, "format": fmt},
    }
    for k in ("fail_to_pass", "pass_to_pass"):  # as the Go sample's JSON leaves an empty list out
        if not env["tests"][k]:
            del env["tests"][k]
    if row.get("image"):
        env["image"] = row["image"]
    if workspace:
        env["workspace"] = workspace.replace("{repo}", repo.replace("/", "__")).replace("{instance_id}", iid)
    s: Dict[str, Any] = {
        "v": 1, "id": iid, "family": repo, "task": problem, "env": env,
        "metadata": {"instance_id": iid, "repo": repo, "base_commit": commit, "version": version,
                     "environment_setup_commit": row.get("environment_setup_commit") or ""},
    }
    if limits:
        s["limits"] = dict(limits)
    if sampling:
        s["sampling"] = dict(sampling)
    s.update(fields)
    return s


def swebench_samples(rows: Iterable[Mapping[str, Any]], **kw: Any) -> Iterator[Dict[str, Any]]:
    """swebench_sample of each row; a bad row raises ValueError naming its
    1-based number and field."""
    for n, row in enumerate(rows, 1):
        try:
            yield swebench_sample(row, **kw)
        except ValueError as e:
            raise ValueError(f"row {n}: {e}") from None


def chat_sample(row: Mapping[str, Any], *, id: str, env: Mapping[str, Any], flow: str = "",
                **fields: Any) -> Dict[str, Any]:
    """The sample of a chat-format row: {"messages": [{"role", "content"},
    …], "tools": [OpenAI tool definitions]} (tools optional), its prompt
    rendered by the model's chat template. id names the sample, env says
    where it runs and how it is scored (env.backend at least); flow
    "tool_call" has the model call the tools (actloop's default flow runs
    bash commands from its replies). fields (group_id, limits, sampling,
    metadata, …) are set over the result."""
    msgs = row.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise _fail("messages", "want a non-empty list of chat messages")
    out_msgs = []
    for i, m in enumerate(msgs):
        if not isinstance(m, Mapping):
            raise _fail(f"messages[{i}]", f"want an object, got {type(m).__name__}")
        if not isinstance(m.get("role"), str) or not m.get("role"):
            raise _fail(f"messages[{i}].role", "missing")
        if not isinstance(m.get("content", ""), str):
            raise _fail(f"messages[{i}].content", "want a string")
        out_msgs.append(dict(m))
    if not isinstance(env, Mapping) or not env.get("backend"):
        raise _fail("env.backend", "missing: say where the sample runs (e.g. {\"backend\": \"local\"})")
    s: Dict[str, Any] = {"v": 1, "id": id, "messages": out_msgs, "env": dict(env)}
    tools = row.get("tools")
    if tools is not None:
        if isinstance(tools, str):  # some datasets hold the list as a JSON string
            try:
                tools = json.loads(tools)
            except ValueError as e:
                raise _fail("tools", f"string does not hold a JSON list: {e}") from None
        if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
            raise _fail("tools", "want a list of tool definitions (objects)")
        if tools:
            s["tools"] = [dict(t) for t in tools]
    if flow:
        s["flow"] = flow
    s.update(fields)
    return s


def chat_samples(rows: Iterable[Mapping[str, Any]], *, env: Mapping[str, Any], id_prefix: str = "chat-",
                 **kw: Any) -> Iterator[Dict[str, Any]]:
    """chat_sample of each row, with id row["id"] if the row has one, else
    id_prefix + its 0-based number; a bad row raises ValueError naming its
    1-based number and field."""
    for n, row in enumerate(rows):
        try:
            rid = row.get("id")
            yield chat_sample(row, id=str(rid) if rid is not None else f"{id_prefix}{n}", env=env, **kw)
        except ValueError as e:
            raise ValueError(f"row {n + 1}: {e}") from None


def rollouts(sample: Mapping[str, Any], n: int) -> List[Dict[str, Any]]:
    """n rollouts of sample as one group (GRPO's): ids "<id>-<i>", group_id
    the sample's id, group_index i, group_size n."""
    if n < 1:
        raise ValueError(f"n: want at least 1 rollout, got {n}")
    sid = sample["id"]
    return [{**sample, "id": f"{sid}-{i}", "group_id": sid, "group_index": i, "group_size": n} for i in range(n)]
