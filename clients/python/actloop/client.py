"""A client of actloop's HTTP trainer API (the gateway), on the standard library.

The API is internal/gateway/openapi.yaml in the actloop repository (served at
GET /v1/openapi.yaml); the messages are those of docs/trainer-api.md.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import random
import re
import secrets
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from typing import (Any, AsyncIterator, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set,
                    TypeVar)

__all__ = [
    "ActloopError",
    "AsyncClient",
    "Client",
    "GatewayUnreachable",
    "GroupDone",
    "LineError",
    "Result",
    "SubmitError",
    "TRAINABLE",
    "URL_ENV",
    "TOKEN_ENV",
    "RUN_PATTERN",
    "new_run",
]

# The statuses of a run to its end: their loss mask covers every generated
# token (docs/trainer-api.md, "Statuses").
TRAINABLE = frozenset({"submitted", "limit_exceeded", "format_error_limit"})

# Where Client takes the gateway's address and token when not given them
# (`actloop dev --serve` prints both).
URL_ENV = "ACTLOOP_GATEWAY_URL"
TOKEN_ENV = "ACTLOOP_API_TOKEN"

# What a run may be called (the gateway's run parameter, pkg/client
# RunPattern): an id token without '.', at most 48 characters.
RUN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$"
_run_re = re.compile(RUN_PATTERN)

ProgressFn = Callable[[int, Optional[int]], None]
T = TypeVar("T")


def new_run() -> str:
    """A new run name, unique in practice: "r" + UTC time to the second +
    "-" + 6 random hex digits (e.g. r20261207T054400-3fa9c2)."""
    return "r" + time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class ActloopError(Exception):
    """A call the gateway refused or could not complete: its HTTP status and
    the server's reason (which names the field at fault)."""

    def __init__(self, status: int, reason: str, body: Optional[Mapping[str, Any]] = None):
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason
        self.body: Dict[str, Any] = dict(body or {})


class GatewayUnreachable(ActloopError, ConnectionError):
    """The gateway could not be reached (status 0) after the Client's
    retries: the message names the URL and where it was set."""

    def __init__(self, reason: str):
        ActloopError.__init__(self, 0, reason)
        self.args = (reason,)

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class LineError:
    """A sample that could not be submitted: its 1-based line (or index + 1)
    and, when it could be read, its id (as the caller gave it, without the
    Client's run prefix)."""

    line: int
    error: str
    id: str = ""


class SubmitError(ActloopError):
    """A submit refused: invalid samples (400: nothing was stored; errors
    names each bad line, the first 100, and omitted counts the rest), ids
    taken by earlier runs (409: errors names each id and the earlier run; a
    sample id names one run, so give the samples new ids, or a new run), or
    the stream failed part-way (503, after the Client's retries). accepted
    says how many of the batch, in order, were stored. str() lists every
    line and its error."""

    def __init__(self, status: int, reason: str, errors: Sequence[LineError], accepted: int, omitted: int = 0):
        super().__init__(status, reason)
        self.errors = list(errors)
        self.accepted = accepted
        self.omitted = omitted

    def __str__(self) -> str:
        lines = [f"{self.status}: {self.reason}"]
        for e in self.errors:
            lines.append(f"  line {e.line}" + (f" ({e.id})" if e.id else "") + f": {e.error}")
        if self.omitted:
            lines.append(f"  … and {self.omitted} more")
        return "\n".join(lines)


@dataclass(frozen=True)
class Result:
    """A finished trajectory (the whole result; raw keeps every field as the
    gateway sent it, ids with the run prefix)."""

    traj_id: str
    sample_id: str
    group_id: str
    group_index: int
    group_size: int
    status: str
    reason: str
    reward: float
    tokens: List[int]
    logprobs: List[float]
    loss_mask: List[int]
    versions: List[int]
    prompt_len: int
    turns: int
    purpose: str = ""
    limit: str = ""
    replica: str = ""
    diff: str = ""
    # Commands whose output held invalid UTF-8, replaced with U+FFFD in
    # their observations (docs/trainer-api.md, "Result").
    replaced_outputs: int = 0
    messages: List[Dict[str, Any]] = field(default_factory=list)
    # A proxy-flow trajectory's segments: where each starts in tokens (the
    # first at 0); empty for the built-in flows, whose stream is one.
    segments: List[int] = field(default_factory=list)
    metadata: Any = None
    # The reward endpoint's named components (its answer's numeric fields
    # other than reward), and why it gave no reward, when it failed.
    reward_components: Dict[str, float] = field(default_factory=dict)
    reward_error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

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
            segments=list(d.get("segments") or []),
            metadata=d.get("metadata"),
            reward_components={str(k): float(v) for k, v in (d.get("reward_components") or {}).items()},
            reward_error=d.get("reward_error", ""),
            raw=dict(d),
        )


@dataclass(frozen=True)
class GroupDone:
    """Every rollout of a group has its result; or, with reason set, the
    group ended without that and never will (a member was refused), and
    traj_ids is empty."""

    group_id: str
    size: int
    traj_ids: List[str]
    reason: str = ""

    @property
    def complete(self) -> bool:
        """Whether every member has its result (traj_ids lists them)."""
        return not self.reason

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "GroupDone":
        return cls(group_id=d["group_id"], size=d["size"], traj_ids=list(d.get("traj_ids") or []),
                   reason=d.get("reason", ""))


# What a failed attempt that may be made again is: no answer (connection
# refused or reset, a timeout, a broken answer) or a server error.
_RETRY_STATUS = frozenset({500, 502, 503, 504})
_NETWORK_ERRORS = (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, http.client.HTTPException)


class _Retryable(Exception):
    """One failed attempt that may be made again; err is what to raise if
    none is left, accepted how many samples a submit stored (503)."""

    def __init__(self, err: Exception, accepted: Optional[int] = None):
        super().__init__(str(err))
        self.err = err
        self.accepted = accepted


class Client:
    """Talks to a gateway at url (e.g. http://127.0.0.1:8084; default: the
    ACTLOOP_GATEWAY_URL environment variable) with token (default:
    ACTLOOP_API_TOKEN), the deployment's API token.

    Runs. A Client works for one run (run; by default a new one each,
    new_run()): it submits its samples under ids "<run>.<id>" (and group
    ids "<run>.<group_id>"; a sample without group_id is its own group,
    "<run>.<id>"), reads only the results and groups of those ids, and
    gives every id back as the caller wrote it (Result.raw keeps the ids
    as sent). A sample id names one run, so the same ids can be submitted
    again under another run. Pass run="" for none: ids go as given and
    reads see every run's results. Give the run (run=...) to take a run up
    again from another process: a reader that stops and starts again
    under the same run and consumer name goes on where it stopped.

    Reads go through durable consumers: a consumer's name is its position,
    kept by the server (by default "<run>-results" and "<run>-groups";
    "trainer" and "trainer-groups" without a run). A consumer name is for
    one run and one of results or groups: used for another, the gateway
    refuses it (409). results() and groups() acknowledge each item once the
    loop body that received it is done with it (when the loop asks for the
    next); an item not acknowledged comes again, and within a Client's life
    an item acknowledged once is never yielded twice.

    Retries. A call that gets no answer (connection refused or reset, a
    timeout) or a server error (HTTP 500, 502, 503, 504) is made again, up
    to retries more times within retry_time seconds of the first attempt,
    after a pause drawn uniformly from [0, min(backoff_cap, backoff_base *
    2**attempt)] (full jitter). A submit made again after an attempt whose
    answer was lost says so (resubmit=true): the gateway counts the
    samples that attempt stored as accepted, not as ids taken by an
    earlier run; the run prefix makes every id of the batch this Client's
    own, so that is exact. (Keep retry_time well under 2 minutes, the
    stream's duplicate window. Without a run, run="", a submit is not
    marked so: a retry whose ids the lost attempt stored raises
    SubmitError 409, since they could as well be an earlier run's.) If no attempt is left, a call that got no
    answer raises GatewayUnreachable naming the URL and where it was set.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 120.0, *,
                 run: Optional[str] = None, retries: int = 5, retry_time: float = 60.0,
                 backoff_base: float = 0.5, backoff_cap: float = 10.0):
        if url is None:
            url = os.environ.get(URL_ENV)
            self._url_from = f"the {URL_ENV} environment variable"
            if not url:
                raise ValueError(f"no gateway URL: pass Client(url=...) or set {URL_ENV} "
                                 "(`actloop dev --serve` prints it)")
        else:
            self._url_from = "the url argument of Client"
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        if run is None:
            run = new_run()
        if run and not _run_re.match(run):
            raise ValueError(f"run {run!r}: want {RUN_PATTERN} (no '.')")
        if retries < 0 or retry_time < 0 or backoff_base < 0 or backoff_cap < 0:
            raise ValueError("retries, retry_time, backoff_base and backoff_cap must not be negative")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.run = run
        self.retries = retries
        self.retry_time = retry_time
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self._prefix = run + "." if run else ""
        self._acked: Dict[str, Set[str]] = {}
        self._submitted: List[str] = []  # ids as the caller wrote them, in order
        self._submitted_set: Set[str] = set()
        self._done: Dict[str, int] = {}  # by consumer: submitted ids read and acknowledged
        self._collected: Set[str] = set()
        self._stash: Dict[str, Result] = {}  # read by collect for none of its ids

    # -- ids ------------------------------------------------------------------

    def wire_id(self, id: str) -> str:
        """The id the gateway knows a sample or group of this Client by:
        "<run>.<id>" (id itself without a run)."""
        return self._prefix + id

    def local_id(self, wire: str) -> str:
        """The id as the caller wrote it: wire without the run prefix."""
        return wire[len(self._prefix):] if self._prefix and wire.startswith(self._prefix) else wire

    # -- HTTP ---------------------------------------------------------------

    def _attempt(self, method: str, path: str, data: Optional[bytes], content_type: str, timeout: float) -> Any:
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            text = e.read()
            try:
                answer = json.loads(text)
            except ValueError:
                answer = {"error": text.decode(errors="replace").strip() or e.reason}
            if not isinstance(answer, dict):
                answer = {"error": str(answer)}
            err: ActloopError
            if path.startswith("/v1/samples") and "accepted" in answer:
                errs = [LineError(line=x["line"], error=x["error"], id=self.local_id(x.get("id", "")))
                        for x in answer.get("errors") or []]
                err = SubmitError(e.code, answer.get("error", ""), errs, answer["accepted"], answer.get("omitted", 0))
            else:
                err = ActloopError(e.code, answer.get("error", ""), answer)
            # A pause that timed out (504 naming the missing workers) is an
            # answer, not a failure.
            if e.code in _RETRY_STATUS and not (e.code == 504 and "missing" in answer):
                raise _Retryable(err, answer.get("accepted") if path.startswith("/v1/samples") else None) from None
            raise err from None
        except _NETWORK_ERRORS as e:
            reason = getattr(e, "reason", e)
            raise _Retryable(GatewayUnreachable(
                f"cannot reach the actloop gateway at {self.url} ({method} {path}): {reason}; "
                f"the URL comes from {self._url_from} (set it with Client(url=...) or {URL_ENV})")) from None

    def _call(self, method: str, path: str, body: Any = None, *, raw: Optional[bytes] = None,
              content_type: str = "application/json", timeout: Optional[float] = None) -> Any:
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        return self._retrying(lambda attempt: self._attempt(method, path, data, content_type,
                                                            timeout or self.timeout))

    def _retrying(self, attempt_fn: Callable[[int], T], on_fail: Optional[Callable[[_Retryable], None]] = None) -> T:
        """attempt_fn(attempt) until it returns, raises an answer, or no
        attempt is left (retries, retry_time): then the last failure's
        error, which says how many attempts were made."""
        start = time.monotonic()
        attempt = 0
        while True:
            try:
                return attempt_fn(attempt)
            except _Retryable as r:
                if on_fail is not None:
                    on_fail(r)
                pause = random.uniform(0, min(self.backoff_cap, self.backoff_base * 2 ** attempt))
                attempt += 1
                if attempt > self.retries or time.monotonic() - start + pause > self.retry_time:
                    err = r.err
                    if attempt > 1:
                        note = f" (after {attempt} attempts in {time.monotonic() - start:.1f} s)"
                        err.reason += note
                        if isinstance(err, GatewayUnreachable):
                            err.args = (err.reason,)
                        else:
                            err.args = (f"{err.status}: {err.reason}",)
                    raise err from None
                time.sleep(pause)

    # -- samples ------------------------------------------------------------

    def submit(self, samples: Iterable[Mapping[str, Any]]) -> int:
        """Submits samples (dicts in actloop's sample format; `v` defaults to
        1), under this Client's run (their id and group_id prefixed
        "<run>."): all are validated first, and none is stored unless all
        are valid (SubmitError names each bad line). Returns how many were
        stored.

        A sample's prompt is exactly one of "task" (text for the agent's
        templates), "messages" (OpenAI chat messages, with "tools" if any,
        rendered by the model's chat template) and "prompt_ids" (the
        opening's token ids as given: any sequence of ints, such as a
        tokenizer's output or a NumPy array, is sent as a list).

        Made again after a lost answer or a server error, the batch is
        resubmitted (see Client): what an earlier attempt stored counts as
        accepted. A 503 that says how many were stored part-way sends the
        rest only."""
        wire = [self._wire(s) for s in samples]
        if not wire:
            return 0
        ids = [str(s.get("id", "")) for s in wire]
        lines = [json.dumps(s) for s in wire]
        state = {"from": 0, "resubmit": False}

        def on_fail(r: _Retryable) -> None:
            if r.accepted is not None:  # stored up to there: send the rest
                state["from"] += r.accepted
            state["resubmit"] = True  # an attempt may have stored more than it said

        def attempt(_: int) -> int:
            rest = lines[state["from"]:]
            path = "/v1/samples" + ("?resubmit=true" if state["resubmit"] and self.run else "")
            try:
                answer = self._attempt("POST", path, "\n".join(rest).encode(), "application/x-ndjson", self.timeout)
            except SubmitError as e:  # lines and accepted of the whole batch
                off = state["from"]
                raise SubmitError(e.status, e.reason, [replace(x, line=x.line + off) for x in e.errors],
                                  e.accepted + off, e.omitted) from None
            return state["from"] + answer["accepted"]

        n = self._retrying(attempt, on_fail)
        local = [self.local_id(i) for i in ids]
        self._submitted.extend(local)
        self._submitted_set.update(local)
        return n

    def _wire(self, sample: Mapping[str, Any]) -> Dict[str, Any]:
        s = _wire(sample)
        if self._prefix:
            if "id" in s:
                s["id"] = self.wire_id(str(s["id"]))
            if s.get("group_id"):
                s["group_id"] = self.wire_id(str(s["group_id"]))
        return s

    # -- results and groups ---------------------------------------------------

    def results(self, consumer: Optional[str] = None, *, batch: int = 16, wait: float = 5.0,
                until_idle: bool = False, until_done: bool = False,
                on_progress: Optional[ProgressFn] = None) -> Iterator[Result]:
        """Yields this run's finished trajectories from the durable
        consumer (default "<run>-results"), each once, acknowledging it when
        the loop asks for the next. With until_idle the iteration ends after
        a read of `wait` seconds brings nothing; else it goes on. Breaking
        out of the loop leaves the current item unacknowledged: it comes
        again (at once: it is handed back). With until_done (a Client with
        a run) it ends once a result of every sample this Client submitted
        has been read and acknowledged. on_progress(done, total) is called
        after each result of a sample this Client submitted: how many of
        them it has read on this consumer, of how many it submitted (None
        without a run)."""
        name = consumer or (f"{self.run}-results" if self.run else "trainer")
        stop = None
        if until_done:
            if not self.run:
                raise ValueError("until_done needs a Client with a run: without one, every run's results come")
            done_key = "/v1/results\x00" + name
            stop = lambda: self._done.get(done_key, 0) >= len(self._submitted_set)  # noqa: E731
        return self._read("/v1/results", name, batch, wait, until_idle,
                          lambda d: self._local_result(Result.from_json(d["result"])), lambda r: r.traj_id,
                          on_progress, stop)

    def _acked_set(self, path: str, consumer: str) -> Set[str]:
        return self._acked.setdefault(path + "\x00" + consumer + "\x00" + self.run, set())

    def groups(self, consumer: Optional[str] = None, *, batch: int = 64, wait: float = 5.0,
               until_idle: bool = False) -> Iterator[GroupDone]:
        """As results(), for this run's completed groups (default consumer
        "<run>-groups")."""
        name = consumer or (f"{self.run}-groups" if self.run else "trainer-groups")
        return self._read("/v1/groups", name, batch, wait, until_idle,
                          lambda d: self._local_group(GroupDone.from_json(d["group"])), lambda g: g.group_id, None)

    def collect(self, ids: Optional[Iterable[str]] = None, *, consumer: Optional[str] = None,
                timeout: Optional[float] = None, on_progress: Optional[ProgressFn] = None,
                wait: float = 5.0) -> List[Result]:
        """Reads results until those of ids (default: every sample this
        Client submitted and has not collected yet) are in, and returns
        them in the order of ids (as submitted, without the run prefix).
        on_progress(done, total) is called once at the start and after each
        result of ids. Raises TimeoutError,
        saying how many are missing, after timeout seconds (None: no
        limit); what was read by then is acknowledged and not read again
        by this Client. This run's other results read meanwhile are kept
        for a later collect (not for results())."""
        want = list(ids) if ids is not None else [i for i in self._submitted if i not in self._collected]
        pending = set(want)
        got: Dict[str, Result] = {i: self._stash.pop(i) for i in want if i in self._stash}
        pending -= set(got)
        deadline = None if timeout is None else time.monotonic() + timeout
        self._collected.update(got)
        if on_progress:
            on_progress(len(got), len(want))
        name = consumer or (f"{self.run}-results" if self.run else "trainer")

        def stop() -> bool:
            return not pending or (deadline is not None and time.monotonic() > deadline)

        while not stop():
            poll = wait if deadline is None else max(0.0, min(wait, deadline - time.monotonic()))
            it = self._read("/v1/results", name, 16, poll, True,
                            lambda d: self._local_result(Result.from_json(d["result"])), lambda r: r.traj_id,
                            None, stop)
            for r in it:
                if r.traj_id in pending:
                    pending.discard(r.traj_id)
                    got[r.traj_id] = r
                    self._collected.add(r.traj_id)
                    if on_progress:
                        on_progress(len(got), len(want))
                else:  # another of this run's: kept for a later collect
                    self._stash[r.traj_id] = r
        if pending:
            raise TimeoutError(f"{len(pending)} of {len(want)} results not in after {timeout} s "
                               f"(e.g. {sorted(pending)[:3]}); run {self.run!r}")
        return [got[i] for i in want]

    def _local_result(self, r: Result) -> Result:
        if not self._prefix:
            return r
        return replace(r, traj_id=self.local_id(r.traj_id), sample_id=self.local_id(r.sample_id),
                       group_id=self.local_id(r.group_id))

    def _local_group(self, g: GroupDone) -> GroupDone:
        if not self._prefix:
            return g
        return replace(g, group_id=self.local_id(g.group_id), traj_ids=[self.local_id(t) for t in g.traj_ids])

    def _read(self, path: str, consumer: str, batch: int, wait: float, until_idle: bool,
              decode: Callable[[Mapping[str, Any]], Any], key: Callable[[Any], str],
              on_progress: Optional[ProgressFn], stop: Optional[Callable[[], bool]] = None) -> Iterator[Any]:
        """The items of path's deliveries; with stop, the iteration ends
        (the rest of a read handed back) once an item is acknowledged and
        stop() says so."""
        acked = self._acked_set(path, consumer)
        done_key = path + "\x00" + consumer
        params: Dict[str, Any] = {"consumer": consumer, "max": batch, "wait_ms": int(wait * 1000)}
        if self.run:
            params["run"] = self.run
        query = urllib.parse.urlencode(params)
        total = len(self._submitted) if self.run else None
        if stop is not None and stop():
            return
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
                if k in self._submitted_set:
                    done = self._done[done_key] = self._done.get(done_key, 0) + 1
                    if on_progress:
                        on_progress(done, total)
                if stop is not None and stop():
                    self._settle("/v1/nak", [x["ack"] for x in deliveries[i + 1:]])
                    return

    def _settle(self, path: str, acks: List[str]) -> None:
        if not acks:
            return
        tries: List[int] = []

        def attempt(n: int) -> Any:
            tries.append(n)
            return self._attempt("POST", path, json.dumps({"acks": acks}).encode(), "application/json", self.timeout)

        answer = self._retrying(attempt)
        failed = answer.get("failed") or []
        # After a lost answer the acknowledgement may have been made: one
        # that was not only means the item comes again, which this Client
        # acknowledges unseen.
        if failed and path == "/v1/ack" and len(tries) == 1:
            raise ActloopError(409, "not acknowledged (it will come again): " + failed[0]["error"], answer)

    # -- control --------------------------------------------------------------

    def pause(self, mode: str = "abort", timeout: Optional[float] = None) -> Dict[str, Any]:
        """Pauses generation for a weight update; returns once every live
        gen-worker has paused (or raises naming those that did not)."""
        body: Dict[str, Any] = {"mode": mode}
        if timeout is not None:
            body["timeout_ms"] = int(timeout * 1000)
        return self._call("POST", "/v1/pause", body)

    def resume(self, weight_version: Optional[int] = None) -> Dict[str, Any]:
        """Resumes generation; weight_version, when given, becomes current."""
        return self._call("POST", "/v1/resume", {} if weight_version is None else {"weight_version": weight_version})

    def abort(self, traj_ids: Sequence[str] = (), group_ids: Sequence[str] = (), reason: str = "") -> Dict[str, Any]:
        """Ends trajectories, or whole groups, of this run before they finish
        (status aborted); ids as submitted (the run prefix is added)."""
        answer = self._call("POST", "/v1/abort", {"traj_ids": [self.wire_id(t) for t in traj_ids],
                                                  "group_ids": [self.wire_id(g) for g in group_ids],
                                                  "reason": reason})
        if self._prefix and isinstance(answer, dict):
            for k, v in list(answer.items()):
                if isinstance(v, list) and all(isinstance(x, str) for x in v):
                    answer[k] = [self.local_id(x) for x in v]
        return answer

    def control(self) -> Dict[str, Any]:
        """The control state and each gen-worker's newest pause report."""
        return self._call("GET", "/v1/control")

    def status(self) -> Dict[str, Any]:
        """The coordinator's status."""
        return self._call("GET", "/v1/status")


class AsyncClient:
    """Client for asyncio: the same calls, each run in a worker thread
    (asyncio.to_thread), so an event loop goes on while they wait. The
    arguments are Client's; .client is the Client underneath (its run,
    wire_id, local_id).

        async with AsyncClient(url, token) as c:
            await c.submit(samples)
            async for r in c.results(until_idle=True):
                ...
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 120.0,
                 **kw: Any):
        self.client = Client(url, token, timeout, **kw)

    @property
    def run(self) -> str:
        return self.client.run

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def submit(self, samples: Iterable[Mapping[str, Any]]) -> int:
        """Client.submit."""
        return await asyncio.to_thread(self.client.submit, list(samples))

    async def collect(self, ids: Optional[Iterable[str]] = None, **kw: Any) -> List[Result]:
        """Client.collect; on_progress is called from the worker thread."""
        return await asyncio.to_thread(self.client.collect, None if ids is None else list(ids), **kw)

    def results(self, consumer: Optional[str] = None, **kw: Any) -> AsyncIterator[Result]:
        """Client.results as an async iterator: each item is acknowledged when
        the loop asks for the next. Close it (aclose, or
        contextlib.aclosing) to hand back the current item at once."""
        return self._aiter(self.client.results(consumer, **kw))

    def groups(self, consumer: Optional[str] = None, **kw: Any) -> AsyncIterator[GroupDone]:
        """Client.groups as an async iterator."""
        return self._aiter(self.client.groups(consumer, **kw))

    async def _aiter(self, it: Iterator[T]) -> AsyncIterator[T]:
        done = object()
        try:
            while True:
                item = await asyncio.to_thread(next, it, done)
                if item is done:
                    return
                yield item  # type: ignore[misc]
        finally:
            await asyncio.to_thread(it.close)

    async def pause(self, mode: str = "abort", timeout: Optional[float] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self.client.pause, mode, timeout)

    async def resume(self, weight_version: Optional[int] = None) -> Dict[str, Any]:
        return await asyncio.to_thread(self.client.resume, weight_version)

    async def abort(self, traj_ids: Sequence[str] = (), group_ids: Sequence[str] = (),
                    reason: str = "") -> Dict[str, Any]:
        return await asyncio.to_thread(self.client.abort, list(traj_ids), list(group_ids), reason)

    async def control(self) -> Dict[str, Any]:
        return await asyncio.to_thread(self.client.control)

    async def status(self) -> Dict[str, Any]:
        return await asyncio.to_thread(self.client.status)


def _wire(sample: Mapping[str, Any]) -> Dict[str, Any]:
    """The sample as JSON takes it: v defaults to 1, and prompt_ids given as
    any sequence of ints (a tuple, a NumPy array) is a list of Python ints."""
    s = {"v": 1, **sample}
    ids = s.get("prompt_ids")
    if ids is not None and not isinstance(ids, list):
        s["prompt_ids"] = [int(i) for i in ids]
    return s
