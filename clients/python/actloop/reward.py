"""A reward endpoint served from a plain function (serve_reward), on the
standard library's http.server.

The contract (docs/agent.md, "Reward endpoint"; ACTLOOP_REWARD_URL or a
sample's reward.url names the endpoint): actloop POSTs each
finished trajectory as one JSON object (Content-Type: application/json)
with at least traj_id, sample_id, status, reason, messages, diff, eval
({exit_code, output, reward}, or null when no eval ran), tests ({name:
outcome}) and metadata; the
endpoint answers 200 {"reward": <float>} and, optionally, other numeric
fields, each a named reward component. A malformed body is answered 400, a
function that raises 500, each with {"error": <why>}.
"""

from __future__ import annotations

import json
import math
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Mapping, Union

__all__ = ["RewardFn", "RewardServer", "reward_answer", "serve_reward"]

# What a reward function returns: the reward, or a dict of it ("reward")
# and named components.
RewardFn = Callable[[Dict[str, Any]], Union[float, int, Mapping[str, Any]]]

# The largest body the server reads (a trajectory with its messages).
MAX_BODY_BYTES = 256 << 20
# What actloop takes of an answer's components (docs/agent.md, "Reward
# endpoint"): at most 64, each named by 1 to 128 bytes.
MAX_COMPONENTS = 64
MAX_COMPONENT_NAME_BYTES = 128


def _number(name: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"{name}: want a number, got {type(v).__name__} {v!r}")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{name}: want a finite number, got {f}")
    return f


def reward_answer(value: Union[float, int, Mapping[str, Any]]) -> Dict[str, float]:
    """The endpoint's answer to what a reward function returned: a number
    becomes {"reward": value}; a mapping must hold "reward" and may hold
    other numbers, the named components. Raises TypeError or ValueError
    naming what is wrong."""
    if isinstance(value, Mapping):
        if "reward" not in value:
            raise ValueError(f"the function returned a dict without \"reward\": keys {sorted(map(str, value))}")
        if len(value) - 1 > MAX_COMPONENTS:
            raise ValueError(f"{len(value) - 1} components: at most {MAX_COMPONENTS}")
        for k in value:
            if not isinstance(k, str) or not 1 <= len(k.encode()) <= MAX_COMPONENT_NAME_BYTES:
                raise ValueError(f"component name {k!r}: want a string of 1 to {MAX_COMPONENT_NAME_BYTES} bytes")
        return {k: _number(k, v) for k, v in value.items()}
    return {"reward": _number("reward", value)}


class RewardServer:
    """A running reward endpoint: POST to url. close() stops it (also on
    leaving a with block)."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread, url: str):
        self._server = server
        self._thread = thread
        self.url = url

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stops serving and waits for the server's thread."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> "RewardServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RewardServer({self.url!r})"


def serve_reward(fn: RewardFn, host: str = "127.0.0.1", port: int = 0) -> RewardServer:
    """Serves fn as a reward endpoint on host:port (port 0: a free one) in a
    daemon thread, each request in a thread of its own (fn must be safe to
    call from several threads at once), and returns it running:

        with actloop.serve_reward(lambda t: 1.0 if t["eval"]["exit_code"] == 0 else 0.0) as srv:
            print(srv.url)  # the endpoint to give actloop

    fn gets the trajectory (a dict) and returns a float, or a dict with
    "reward" and other numbers (named components). A body that is not a JSON
    object is answered 400, fn raising (or returning something else) 500,
    with {"error": <why>}."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(405, {"error": "POST the trajectory as a JSON object"})

        def do_POST(self) -> None:
            try:
                n = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                n = -1
            if n < 0 or n > MAX_BODY_BYTES:
                self.close_connection = True
                self._answer(400, {"error": f"Content-Length: want 0 to {MAX_BODY_BYTES} bytes"})
                return
            body = self.rfile.read(n)
            try:
                traj = json.loads(body)
            except ValueError as e:
                self._answer(400, {"error": f"body: not JSON: {e}"})
                return
            if not isinstance(traj, dict):
                self._answer(400, {"error": f"body: want a JSON object (the trajectory), got {type(traj).__name__}"})
                return
            try:
                answer = reward_answer(fn(traj))
            except Exception as e:  # the function's failure is the answer
                self._answer(500, {"error": f"{type(e).__name__}: {e}"})
                return
            self._answer(200, answer)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True

    server = Server((host, port), Handler)
    bound_host, bound_port = server.server_address[0], server.server_address[1]
    shown = f"[{bound_host}]" if ":" in str(bound_host) else str(bound_host)
    thread = threading.Thread(target=server.serve_forever, name=f"actloop-reward-{bound_port}", daemon=True)
    thread.start()
    return RewardServer(server, thread, f"http://{shown}:{bound_port}/")

