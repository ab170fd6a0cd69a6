"""What the chat stand-ins (:mod:`onboard.testing.team_standin`,
:mod:`onboard.testing.vlm_standin`) share: the OpenAI-compatible request handler, the command
line that serves one until SIGINT or SIGTERM, and running one in its own process.

A stand-in is a :class:`SeededStandIn` (seed, competence, per-key request counts, a JSON-lines
log) with ``answer(body) -> str`` (the reply's content for a request body; :class:`BadRequest`
when it cannot be read) and a handler subclassing :class:`ChatHandler` that names its model
and server version. Its ``__main__`` is :func:`standin_parser` plus :func:`serve`; its
``process`` module wraps :func:`start_standin_process`.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Protocol, cast

from onboard.base.errors import LLMError, OnboardError
from onboard.base.listen import check_port, listen_error
from onboard.llm.content import message_text
from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_server import completion_json, error_json

__all__ = [
    "BadRequest",
    "ChatHandler",
    "SeededStandIn",
    "response_schema",
    "serve",
    "standin_parser",
    "start_standin_process",
]


class BadRequest(ValueError):
    """What is wrong with a request, one line (answered with HTTP 400)."""


class _Answers(Protocol):
    def answer(self, body: Any) -> str: ...


class SeededStandIn(LoopbackServer):
    """A stand-in whose replies draw from ``seed`` at ``competence`` (0..1), counting the
    requests it has seen by key and appending one JSON line per reply to ``log``."""

    def __init__(
        self, seed: int, competence: float, log: Path | None, host: str, port: int
    ) -> None:
        if not 0.0 <= competence <= 1.0:
            raise ValueError(f"competence {competence}: not between 0 and 1")
        self.seed, self.competence, self.log = seed, competence, log
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        super().__init__(host, port)

    def count(self, key: str) -> int:
        """How many requests with ``key`` came before this one (this one is counted)."""
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
        return n

    def write_log(self, record: Mapping[str, Any]) -> None:
        """Append ``record`` to the log as one JSON line (no log: nothing)."""
        if self.log is None:
            return
        with self._lock, self.log.open("a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")


def response_schema(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema of a request's ``response_format`` (either spelling), if any."""
    form = body.get("response_format")
    if not isinstance(form, dict):
        return None
    if isinstance(form.get("schema"), dict):
        return cast(Mapping[str, Any], form["schema"])
    inner = form.get("json_schema")
    if isinstance(inner, dict) and isinstance(inner.get("schema"), dict):
        return cast(Mapping[str, Any], inner["schema"])
    return None


class ChatHandler(BaseHTTPRequestHandler):
    """``GET /v1/models`` and ``POST /v1/chat/completions``, answered by the server's owner;
    a body that is not JSON or a :class:`BadRequest` gets a 400, the owner's own failure a 500."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    #: the one model listed, and the reply's ``model`` when the request names none
    model_name: ClassVar[str]

    def log_message(self, *args: Any, **kwargs: Any) -> None:
        """Quiet."""

    @property
    def _owner(self) -> _Answers:
        return cast(_Answers, cast(OwnedHTTPServer, self.server).owner)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            entry = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "onboard"}
            self._send(200, {"object": "list", "data": [entry]})
        else:
            self._send(404, error_json(f"unknown path {self.path}", "not_found", 404))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, error_json(f"unknown path {self.path}", "not_found", 404))
            return
        try:
            body = json.loads(raw.decode("utf-8"))
            content = self._owner.answer(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._bad(f"the body is not JSON: {exc}")
            return
        except BadRequest as exc:
            self._bad(str(exc))
            return
        except Exception as exc:  # the stand-in's own failure: a 500, never a dropped line
            message = " ".join(f"stand-in failure: {type(exc).__name__}: {exc}".split())
            self._send(500, error_json(message, "server_error", 500))
            return
        model = body.get("model") if isinstance(body.get("model"), str) else self.model_name
        words = sum(len(message_text(m).split()) for m in body["messages"])
        self._send(200, completion_json(model or self.model_name, content, words))

    def _bad(self, message: str) -> None:
        self._send(400, error_json(" ".join(message.split()), "invalid_request_error", 400))

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def standin_parser(module: str, description: str, competence: float) -> argparse.ArgumentParser:
    """A stand-in's command line: ``--host``, ``--port``, ``--seed``, ``--competence`` (default
    ``competence``) and ``--log``; the stand-in adds its own options."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=description)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--competence", type=float, default=competence, help="0..1")
    p.add_argument("--log", type=Path, default=None, help="append one JSON line per reply")
    return p


def serve(label: str, host: str, port: int, make: Callable[[], LoopbackServer]) -> int:
    """A stand-in's ``main``: check ``port``, ``make`` the server (OnboardError or ValueError:
    one line ``LABEL: why`` on stderr, exit 2), listen, print its base URL on one line and
    serve until SIGINT or SIGTERM (exit 0)."""
    try:
        check_port("--port", port)
        server = make()
        stop = threading.Event()

        def _on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _on_signal)
        try:
            server.start()
        except OSError as exc:
            raise listen_error(label, host, str(port), exc) from exc
    except (OnboardError, ValueError) as exc:
        print(f"{label}: {exc}", file=sys.stderr)
        return 2
    try:
        print(server.base_url, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


def start_standin_process(
    module: str,
    args: Sequence[str],
    label: str,
    startup: float,
    python: Sequence[str] = (sys.executable,),
    stderr: Path | None = None,
) -> tuple[str, Callable[[], None]]:
    """``python -m MODULE ARGS`` in its own process: (the URL line it prints once it listens,
    an idempotent stop). ``python``: the interpreter command (a test may add ``-X
    importtime``); ``stderr``: a file for the child's standard error (default: kept for a
    failed start). LLMError ``the LABEL did not start: <its last stderr line>`` when no URL
    comes within ``startup`` seconds."""
    command = [*python, "-m", module, *args]
    errors = stderr.open("w", encoding="utf-8") if stderr is not None else subprocess.PIPE
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, bufsize=1)
    stopped = threading.Lock()

    def stop() -> None:
        if not stopped.acquire(blocking=False):
            return  # idempotent
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
        if stderr is not None and not isinstance(errors, int):
            errors.close()

    try:
        return _first_line(child, startup, label), stop
    except BaseException:
        stop()
        raise


def _first_line(child: subprocess.Popen[str], timeout: float, label: str) -> str:
    """The child's first stdout line (its URL), read in a thread so the wait is bounded."""
    got: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        got.append(child.stdout.readline().strip())
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(timeout) or not got[0].startswith("http://"):
        child.kill()
        _, err = child.communicate()
        last = (err or "").strip().splitlines()[-1:] or ["no output on its standard error"]
        raise LLMError(f"the {label} did not start: {last[0]}")
    return got[0]
