#!/usr/bin/env python3
"""A reference model server for predictor-gw's http backend, on the standard
library only.

It answers POST /predict (any path but /healthz) with a trajectory's predicted
remaining work, reading the request of protocol 2 (see README.md): the
trajectory's progress, its conversation's tail, its group siblings' progress
and its last command's exit code. GET /healthz answers "ok".

    python3 examples/predictor/server.py --port 8090
    ACTLOOP_PREDICTOR=http ACTLOOP_PREDICTOR_URL=http://127.0.0.1:8090/predict actloop serve predictor-gw

Its rule is a baseline to replace with a model, simple enough to check by hand:

1. A reply that submits (command_kind "submit") has nothing left: 0 and 0.
2. Finished siblings that ran longer than this trajectory has so far (more
   turns and more tokens): their mean totals less its own.
3. Else running siblings that are further along (more turns): their mean turns
   plus one, less its own; tokens at its own rate per turn.
4. Else DEFAULT_TURNS in all, at least one more; tokens at its own rate per
   turn (DEFAULT_TOKENS_PER_TURN before its first).
5. Then one more turn (and its tokens) when the last command failed (a non-zero
   last_exit_code) or the newest observation in the conversation shows an
   error (a line starting with "Traceback" or holding "FAILED" or "Error:").

With --port 0 it picks a free port; either way its first line on stdout is
"listening on http://HOST:PORT/predict".
"""

import argparse
import json
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROTOCOL = 2  # the newest protocol this server reads; 1 had no "protocol" field
MAX_BODY_BYTES = 64 << 20  # well above what predictor-gw sends (its tail is at most 4 MiB)
DEFAULT_TURNS = 20
DEFAULT_TOKENS_PER_TURN = 300


class BadRequest(Exception):
    """A request that is not protocol 1 or 2; the text names the field."""


def field(obj, name, kind, path="", required=True, minimum=None):
    """obj[name] checked to be of kind (and >= minimum); None if absent and not required."""
    where = path + name
    if not isinstance(obj, dict):
        raise BadRequest(f"{path.rstrip('.') or 'body'}: want a JSON object")
    v = obj.get(name)
    if v is None:
        if required:
            raise BadRequest(f"{where}: missing")
        return None
    if kind is int and (isinstance(v, bool) or not isinstance(v, int)):
        raise BadRequest(f"{where}: want an integer, got {json.dumps(v)[:40]}")
    if kind is not int and not isinstance(v, kind):
        raise BadRequest(f"{where}: want {kind.__name__}, got {json.dumps(v)[:40]}")
    if minimum is not None and v < minimum:
        raise BadRequest(f"{where}: must be >= {minimum}, got {v}")
    return v


def parse(body):
    """The request's fields a prediction uses, checked."""
    try:
        req = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"body: not JSON: {e}") from None
    if not isinstance(req, dict):
        raise BadRequest("body: want a JSON object")
    if field(req, "v", int) != 1:
        raise BadRequest(f"v: unsupported schema version {req['v']} (this server reads 1)")
    protocol = field(req, "protocol", int, required=False) or 1
    if protocol > PROTOCOL:
        raise BadRequest(f"protocol: {protocol} is newer than this server's {PROTOCOL}")
    r = {
        "traj_id": field(req, "traj_id", str),
        "turns": field(req, "turns", int, required=False, minimum=0) or 0,
        "gen_tokens": field(req, "gen_tokens", int, required=False, minimum=0) or 0,
        "command_kind": field(req, "command_kind", str, required=False) or "",
        "last_exit_code": field(req, "last_exit_code", int, required=False),
        "finished": [],
        "running": [],
        "newest_observation": "",
    }
    conv = field(req, "conversation", dict, required=False)
    if conv is not None:
        msgs = field(conv, "messages", list, "conversation.")
        for i, m in enumerate(msgs):
            p = f"conversation.messages[{i}]."
            role, content = field(m, "role", str, p), field(m, "content", str, p, required=False) or ""
            if role in ("user", "tool"):
                r["newest_observation"] = content
    sib = field(req, "siblings", dict, required=False)
    if sib is not None:
        for name in ("finished", "running"):
            for i, s in enumerate(field(sib, name, list, "siblings.", required=False) or []):
                p = f"siblings.{name}[{i}]."
                r[name].append((field(s, "turns", int, p, minimum=0), field(s, "gen_tokens", int, p, minimum=0)))
    return r


def shows_error(text):
    return any(line.startswith("Traceback") or "FAILED" in line or "Error:" in line for line in text.splitlines())


def predict(r):
    """(remaining_tokens, remaining_turns) of a parsed request, by the rule in this file's docstring."""
    if r["command_kind"] == "submit":
        return 0.0, 0.0
    turns, tokens = r["turns"], r["gen_tokens"]
    rate = tokens / turns if turns > 0 else DEFAULT_TOKENS_PER_TURN
    longer = [(n, t) for n, t in r["finished"] if n > turns and t > tokens]
    ahead = [n for n, _ in r["running"] if n > turns]
    if longer:
        rem_turns = sum(n for n, _ in longer) / len(longer) - turns
        rem_tokens = sum(t for _, t in longer) / len(longer) - tokens
    elif ahead:
        rem_turns = sum(ahead) / len(ahead) + 1 - turns
        rem_tokens = rem_turns * rate
    else:
        rem_turns = max(DEFAULT_TURNS - turns, 1)
        rem_tokens = rem_turns * rate
    if r["last_exit_code"] not in (None, 0) or shows_error(r["newest_observation"]):
        rem_turns += 1
        rem_tokens += rate
    return float(rem_tokens), float(rem_turns)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: predictor-gw reuses its connections
    verbose = False

    def setup(self):
        super().setup()
        # The head and the body go out in two writes: without this, delayed
        # ACKs hold the body back ~40 ms, a fifth of predictor-gw's deadline.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def answer(self, status, obj):
        b = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_GET(self):
        if self.path == "/healthz":
            self.answer(200, "ok")
        else:
            self.answer(404, {"error": "POST a prediction request; GET /healthz only"})

    def do_POST(self):
        try:
            n = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.answer(411, {"error": "Content-Length: missing or not a number"})
            return
        if n < 0 or n > MAX_BODY_BYTES:
            self.close_connection = True
            self.answer(413, {"error": f"body: {n} bytes, more than {MAX_BODY_BYTES}"})
            return
        body = self.rfile.read(n)
        try:
            tokens, turns = predict(parse(body))
        except BadRequest as e:
            self.answer(400, {"error": str(e)})
            return
        self.answer(200, {"remaining_tokens": tokens, "remaining_turns": turns})

    def log_message(self, fmt, *args):
        if self.verbose:
            sys.stderr.write("%s %s\n" % (self.address_string(), fmt % args))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8090, help="0 picks a free port")
    ap.add_argument("--verbose", action="store_true", help="log every request on stderr")
    args = ap.parse_args()
    Handler.verbose = args.verbose
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.daemon_threads = True
    host, port = srv.server_address[:2]
    print(f"listening on http://{host}:{port}/predict", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
