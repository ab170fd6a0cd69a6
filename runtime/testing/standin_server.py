"""Stand-in OpenAI-compatible chat server for tests and evaluation (stdlib only).

Endpoints (``base_url`` = ``http://HOST:PORT/v1``):

* ``POST /v1/chat/completions`` -- answers from :mod:`onboard.testing.standin_policy`
  (the policy table lives in that module's docstring).  Reply: a standard
  ``chat.completion`` object; ``model`` echoes the request (``"standin"`` when
  absent); ``finish_reason`` is always ``"stop"``; ``max_tokens`` and
  ``temperature`` are accepted and ignored.  ``usage`` is approximate:
  ``prompt_tokens`` = whitespace-separated words over all message contents,
  ``completion_tokens`` = words of the reply content.  Header
  ``Server-Timing: policy;dur=<ms>`` = time from reading the body to sending the
  reply, including the simulated ``latency`` / ``timeout`` sleeps.
* ``GET /v1/models`` -- one model, ``"standin"``.
* anything else -> 404 JSON error; a body that is not a JSON object with a
  ``messages`` list -> 400 JSON error.

Faults (``faults`` constructor argument) are consumed one per chat-completion
request, in order; when exhausted every request is answered normally:

* ``"500"`` -> HTTP 500 JSON error;  ``"429"`` -> HTTP 429 JSON error with
  ``Retry-After: 1``;
* ``"timeout"`` -> sleep ``fault_sleep`` seconds (default 2.0), then answer
  normally;
* ``"garbage"`` -> HTTP 200 whose content is ``"I am not sure what to do."``;
* ``"ok"`` -> normal answer.

Faulted requests (500/429/garbage) do not consume policy randomness.  Fault
selection and the policy call happen under one lock (deterministic for a given
request order); sleeps happen outside the lock.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from types import FrameType
from typing import Any, cast

from onboard.base.listen import check_port, listen_error
from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_policy import StandInPolicy

MODEL_NAME = "standin"
GARBAGE_CONTENT = "I am not sure what to do."
FAULTS = frozenset({"500", "429", "timeout", "garbage", "ok"})


def _word_count(text: str) -> int:
    return len(text.split())


def _prompt_words(messages: list[Any]) -> int:
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += _word_count(content)
    return total


def completion_json(model: str, content: str, prompt_tokens: int) -> dict[str, Any]:
    """A ``chat.completion`` response object."""
    completion_tokens = _word_count(content)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def error_json(message: str, kind: str, code: int) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": kind, "code": code}}


class _Reply:
    """What the handler sends back: status, JSON body, extra headers, sleep."""

    def __init__(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or {}
        self.sleep = 0.0


class StandInServer(LoopbackServer):
    """Threaded local HTTP server answering chat completions from the stand-in policy."""

    def __init__(
        self,
        seed: int = 0,
        noise: float = 0.15,
        format_noise: float = 0.1,
        off_set_rate: float = 0.0,
        latency: float = 0.0,
        faults: Sequence[str] = (),
        host: str = "127.0.0.1",
        port: int = 0,
        fault_sleep: float = 2.0,
    ) -> None:
        unknown = [f for f in faults if f not in FAULTS]
        if unknown:
            raise ValueError(f"unknown faults {unknown}; allowed: {sorted(FAULTS)}")
        if latency < 0 or fault_sleep < 0:
            raise ValueError("latency and fault_sleep must be >= 0")
        self.policy = StandInPolicy(seed, noise, format_noise, off_set_rate)
        self.latency = float(latency)
        self.fault_sleep = float(fault_sleep)
        self._faults = list(faults)
        self._lock = threading.Lock()
        self._requests: list[dict[str, Any]] = []
        super().__init__(host, port)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Copy of the chat-completion request bodies received so far."""
        with self._lock:
            return list(self._requests)

    # ------------------------------------------------------------------ handling

    def handle_completion(self, body: dict[str, Any]) -> _Reply:
        """Record the request, consume one fault and answer (under the lock)."""
        with self._lock:
            self._requests.append(body)
            fault = self._faults.pop(0) if self._faults else "ok"
            reply = self._answer(body, fault)
        reply.sleep = self.latency + (self.fault_sleep if fault == "timeout" else 0.0)
        return reply

    def _answer(self, body: dict[str, Any], fault: str) -> _Reply:
        if fault == "500":
            return _Reply(500, error_json("injected server error", "server_error", 500))
        if fault == "429":
            err = error_json("injected rate limit", "rate_limit_exceeded", 429)
            return _Reply(429, err, {"Retry-After": "1"})
        content = GARBAGE_CONTENT if fault == "garbage" else self.policy.reply(body)
        model = body.get("model")
        name = model if isinstance(model, str) and model else MODEL_NAME
        return _Reply(200, completion_json(name, content, _prompt_words(body["messages"])))


class _HTTPServer(OwnedHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """Stay quiet when a client hung up (e.g. after its own timeout)."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else ~40 ms delayed-ACK stalls on keep-alive
    server_version = "StandIn/1.0"

    def log_message(self, *args: Any, **kwargs: Any) -> None:
        """Quiet: no per-request logging."""

    @property
    def _owner(self) -> StandInServer:
        return cast(StandInServer, cast(_HTTPServer, self.server).owner)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            models = {"object": "list", "data": [_model_entry()]}
            self._send(_Reply(200, models), time.perf_counter())
        else:
            self._not_found()

    def do_POST(self) -> None:
        started = time.perf_counter()
        raw = self._read_body()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._not_found()
            return
        body = _parse_body(raw)
        if body is None:
            msg = "body must be a JSON object with a 'messages' list"
            self._send(_Reply(400, error_json(msg, "invalid_request_error", 400)), started)
            return
        try:
            reply = self._owner.handle_completion(body)
        except Exception as exc:  # report as 500, never drop the connection
            reply = _Reply(500, error_json(f"stand-in failure: {exc}", "server_error", 500))
        if reply.sleep > 0:
            time.sleep(reply.sleep)
        self._send(reply, started)

    def _read_body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0  # answered with 400: the (unread) body is not JSON
        return self.rfile.read(length) if length > 0 else b""

    def _not_found(self) -> None:
        err = error_json(f"unknown path {self.path}", "not_found", 404)
        self._send(_Reply(404, err), time.perf_counter())

    def _send(self, reply: _Reply, started: float) -> None:
        data = json.dumps(reply.body).encode("utf-8")
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Server-Timing", f"policy;dur={elapsed_ms:.3f}")
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


StandInServer.handler = _Handler
StandInServer.http_server = _HTTPServer


def _model_entry() -> dict[str, Any]:
    return {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "onboard"}


def _parse_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return None
    return body


# ---------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="onboard standin", description="Stand-in OpenAI-compatible chat server."
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.15)
    p.add_argument("--format-noise", type=float, default=0.1)
    p.add_argument("--off-set-rate", type=float, default=0.0)
    p.add_argument("--latency", type=float, default=0.0, help="seconds slept per reply")
    p.add_argument("--faults", default="", help="comma list of 500,429,timeout,garbage,ok")
    p.add_argument("--fault-sleep", type=float, default=2.0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Serve in the foreground until SIGINT/SIGTERM; prints the base_url."""
    args = _parser().parse_args(argv)
    check_port("--port", args.port)
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    server = StandInServer(
        seed=args.seed,
        noise=args.noise,
        format_noise=args.format_noise,
        off_set_rate=args.off_set_rate,
        latency=args.latency,
        faults=faults,
        host=args.host,
        port=args.port,
        fault_sleep=args.fault_sleep,
    )
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server.start()
        except OSError as exc:
            raise listen_error("standin", args.host, str(args.port), exc) from exc
        try:
            print(server.base_url, flush=True)
            while not stop.wait(0.5):
                pass
        finally:
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
