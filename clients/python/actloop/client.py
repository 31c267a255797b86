"""A client of actloop's HTTP trainer API (the gateway), on the standard library.

The API is internal/gateway/openapi.yaml in the actloop repository (served at
GET /v1/openapi.yaml); the messages are those of docs/trainer-api.md.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

__all__ = [
    "ActloopError",
    "Client",
    "GroupDone",
    "LineError",
    "Result",
    "SubmitError",
    "TRAINABLE",
]

# The statuses of a run to its end: their loss mask covers every generated
# token (docs/trainer-api.md, "Statuses").
TRAINABLE = frozenset({"submitted", "limit_exceeded", "format_error_limit"})


class ActloopError(Exception):
    """A call the gateway refused or could not complete: its HTTP status and
    the server's reason (which names the field at fault)."""

    def __init__(self, status: int, reason: str, body: Optional[Mapping[str, Any]] = None):
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.body = dict(body or {})


@dataclass(frozen=True)
class LineError:
    """A sample that could not be submitted: its 1-based line (or index + 1)."""

    line: int
    error: str
    id: str = ""


class SubmitError(ActloopError):
    """A submit refused: invalid samples (400: nothing was stored; errors
    names each bad line, the first 100, and omitted counts the rest), ids
    taken by earlier runs (409: errors names each id and the earlier run; a
    sample id names one run, so give the samples new ids), or the stream
    failed part-way (503). accepted says how many of the batch, in order,
    were stored."""

    def __init__(self, status: int, reason: str, errors: Sequence[LineError], accepted: int, omitted: int = 0):
        super().__init__(status, reason)
        self.errors = list(errors)
        self.accepted = accepted
        self.omitted = omitted


@dataclass(frozen=True)
class Result:
    """A finished trajectory (the whole result; raw keeps every field)."""

    traj_id: str
    sample_id: str
    group_id: str
    group_index: int
    group_size: int
    status: str
    reason: str
    reward: float
    tokens: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    versions: list[int]
    prompt_len: int
    turns: int
    purpose: str = ""
    limit: str = ""
    replica: str = ""
    diff: str = ""
    # Commands whose output held invalid UTF-8, replaced with U+FFFD in
    # their observations (docs/trainer-api.md, "Result").
    replaced_outputs: int = 0
    messages: list[dict] = field(default_factory=list)
    metadata: Any = None
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def trainable(self) -> bool:
        """Whether the run went to its end, so its tokens are training data."""
        return self.status in TRAINABLE

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Result":
        return cls(
            traj_id=d["traj_id"],
            sample_id=d.get("sample_id", d["traj_id"]),
            group_id=d.get("group_id", ""),
            group_index=d.get("group_index", 0),
            group_size=d.get("group_size", 0),
            status=d["status"],
            reason=d.get("reason", ""),
            reward=float(d.get("reward", 0)),
            tokens=list(d.get("tokens") or []),
            logprobs=list(d.get("logprobs") or []),
            loss_mask=list(d.get("loss_mask") or []),
            versions=list(d.get("versions") or []),
            prompt_len=d.get("prompt_len", 0),
            turns=d.get("turns", 0),
            purpose=d.get("purpose", ""),
            limit=d.get("limit", ""),
            replica=d.get("replica", ""),
            diff=d.get("diff", ""),
            replaced_outputs=d.get("replaced_outputs", 0),
            messages=list(d.get("messages") or []),
            metadata=d.get("metadata"),
            raw=dict(d),
        )


@dataclass(frozen=True)
class GroupDone:
    """Every rollout of a group has its result; or, with reason set, the
    group ended without that and never will (a member was refused), and
    traj_ids is empty."""

    group_id: str
    size: int
    traj_ids: list[str]
    reason: str = ""

    @property
    def complete(self) -> bool:
        """Whether every member has its result (traj_ids lists them)."""
        return not self.reason

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GroupDone":
        return cls(group_id=d["group_id"], size=d["size"], traj_ids=list(d.get("traj_ids") or []),
                   reason=d.get("reason", ""))


class Client:
    """Talks to a gateway at url (e.g. http://127.0.0.1:8084) with token, the
    deployment's ACTLOOP_API_TOKEN.

    Reads go through durable consumers named by the caller: a consumer's name
    is its position, kept by the server, so a trainer that stops and starts
    again under the same name goes on where it stopped. results() and
    groups() acknowledge each item once the loop body that received it is
    done with it (when the loop asks for the next); an item not acknowledged
    comes again, and within a Client's life an item acknowledged once is
    never yielded twice.
    """

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._acked: dict[str, set[str]] = {}

    # -- HTTP ---------------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, *, raw: Optional[bytes] = None,
              content_type: str = "application/json", timeout: Optional[float] = None) -> Any:
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {"error": text.decode(errors="replace").strip()}
            if path == "/v1/samples" and isinstance(answer, dict) and "accepted" in answer:
                errs = [LineError(line=x["line"], error=x["error"], id=x.get("id", ""))
                        for x in answer.get("errors") or []]
                raise SubmitError(e.code, answer.get("error", ""), errs, answer["accepted"],
                                  answer.get("omitted", 0)) from None
            reason = answer.get("error", "") if isinstance(answer, dict) else str(answer)
            raise ActloopError(e.code, reason, answer if isinstance(answer, dict) else None) from None

    # -- samples ------------------------------------------------------------

    def submit(self, samples: Iterable[Mapping[str, Any]]) -> int:
        """Submits samples (dicts in actloop's sample format; `v` defaults to 1):
        all are validated first, and none is stored unless all are valid
        (SubmitError names each bad line). Returns how many were stored.

        A sample's prompt is exactly one of "task" (text for the agent's
        templates), "messages" (OpenAI chat messages, with "tools" if any,
        rendered by the model's chat template) and "prompt_ids" (the
        opening's token ids as given: any sequence of ints, such as a
        tokenizer's output or a NumPy array, is sent as a list)."""
        lines = [json.dumps(_wire(s)) for s in samples]
        if not lines:
            return 0
        answer = self._call("POST", "/v1/samples", raw="\n".join(lines).encode(),
                            content_type="application/x-ndjson")
        return answer["accepted"]

    # -- results and groups ---------------------------------------------------

    def results(self, consumer: str = "trainer", *, batch: int = 16, wait: float = 5.0,
                until_idle: bool = False) -> Iterator[Result]:
        """Yields finished trajectories from the durable consumer, each once,
        acknowledging it when the loop asks for the next. With until_idle the
        iteration ends after a read of `wait` seconds brings nothing; else it
        goes on. Breaking out of the loop leaves the current item
        unacknowledged: it comes again (at once: it is handed back)."""
        return self._read("/v1/results", consumer, batch, wait, until_idle,
                          lambda d: Result.from_json(d["result"]), lambda r: r.traj_id)

    def groups(self, consumer: str = "trainer-groups", *, batch: int = 64, wait: float = 5.0,
               until_idle: bool = False) -> Iterator[GroupDone]:
        """As results(), for completed groups (use a consumer name of its own)."""
        return self._read("/v1/groups", consumer, batch, wait, until_idle,
                          lambda d: GroupDone.from_json(d["group"]), lambda g: g.group_id)

    def _read(self, path, consumer, batch, wait, until_idle, decode, key):
        acked = self._acked.setdefault(path + "\x00" + consumer, set())
        query = urllib.parse.urlencode({"consumer": consumer, "max": batch, "wait_ms": int(wait * 1000)})
        while True:
            answer = self._call("GET", f"{path}?{query}", timeout=wait + self.timeout)
            deliveries = answer["deliveries"]
            if not deliveries and until_idle:
                return
            for i, d in enumerate(deliveries):
                item = decode(d)
                k = key(item)
                if k in acked:  # a late copy of one already kept
                    self._settle("/v1/ack", [d["ack"]])
                    continue
                try:
                    yield item
                except GeneratorExit:
                    self._settle("/v1/nak", [x["ack"] for x in deliveries[i:]])
                    raise
                self._settle("/v1/ack", [d["ack"]])
                acked.add(k)

    def _settle(self, path: str, acks: list[str]) -> None:
        if not acks:
            return
        answer = self._call("POST", path, {"acks": acks})
        failed = answer.get("failed") or []
        if failed and path == "/v1/ack":
            raise ActloopError(409, "not acknowledged (it will come again): " + failed[0]["error"], answer)

    # -- control --------------------------------------------------------------

    def pause(self, mode: str = "abort", timeout: Optional[float] = None) -> dict:
        """Pauses generation for a weight update; returns once every live
        gen-worker has paused (or raises naming those that did not)."""
        body: dict[str, Any] = {"mode": mode}
        if timeout is not None:
            body["timeout_ms"] = int(timeout * 1000)
        return self._call("POST", "/v1/pause", body)

    def resume(self, weight_version: Optional[int] = None) -> dict:
        """Resumes generation; weight_version, when given, becomes current."""
        return self._call("POST", "/v1/resume", {} if weight_version is None else {"weight_version": weight_version})

    def abort(self, traj_ids: Sequence[str] = (), group_ids: Sequence[str] = (), reason: str = "") -> dict:
        """Ends trajectories, or whole groups, before they finish (status aborted)."""
        return self._call("POST", "/v1/abort", {"traj_ids": list(traj_ids), "group_ids": list(group_ids),
                                                "reason": reason})

    def control(self) -> dict:
        """The control state and each gen-worker's newest pause report."""
        return self._call("GET", "/v1/control")

    def status(self) -> dict:
        """The coordinator's status."""
        return self._call("GET", "/v1/status")


def _wire(sample: Mapping[str, Any]) -> dict:
    """The sample as JSON takes it: v defaults to 1, and prompt_ids given as
    any sequence of ints (a tuple, a NumPy array) is a list of Python ints."""
    s = {"v": 1, **sample}
    ids = s.get("prompt_ids")
    if ids is not None and not isinstance(ids, list):
        s["prompt_ids"] = [int(i) for i in ids]
    return s
