"""A hostile OpenAI-compatible endpoint on loopback, for fault-injection tests (stdlib only).

A real threaded HTTP server: it sees only HTTP requests. Each ``POST /v1/chat/completions``
consumes one mode from ``modes`` (then ``after`` for every later request):

* ``"ok"``: a chat completion whose content is ``content``;
* ``"drip_headers"``: a status line, then one header byte every ``drip`` seconds, forever;
* ``"drip_body"``: headers (with the full Content-Length), then one body byte every ``drip``
  seconds;
* ``"hang"``: reads the request and never answers;
* ``"late"``: answers ``"ok"`` after ``late`` seconds;
* ``"huge"``: a chunked 200 of ``huge_bytes`` bytes (a completion whose content is huge);
* ``"reset"``: reads the request and resets the connection (RST);
* ``"429"`` / ``"503"``: that status with ``Retry-After: <retry_after>``;
* ``"malformed"``: a 200 whose body is not JSON;
* ``"echo_key"``: a completion whose content echoes the request's Authorization header;
* ``"echo_key_401"``: a 401 whose body echoes the request's Authorization header.

Drips and hangs end when the client hangs up or the server stops.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_server import completion_json

__all__ = ["MODES", "FaultServer"]

MODES = frozenset(
    {"ok", "drip_headers", "drip_body", "hang", "late", "huge", "reset", "429", "503",
     "malformed", "echo_key", "echo_key_401"}
)  # fmt: skip


class FaultServer(LoopbackServer):
    """Serve ``modes`` in order, then ``after``; ``requests`` lists (monotonic time, mode)."""

    def __init__(
        self,
        modes: Sequence[str] = (),
        *,
        after: str = "ok",
        content: str = '{"action": "Stop and wait."}',
        drip: float = 0.2,
        late: float = 3.0,
        huge_bytes: int = 5_000_000,
        retry_after: str = "1",
    ) -> None:
        unknown = sorted({*modes, after} - MODES)
        if unknown:
            raise ValueError(f"unknown modes {unknown}; allowed: {sorted(MODES)}")
        self.modes = list(modes)
        self.after = after
        self.content = content
        self.drip = drip
        self.late = late
        self.huge_bytes = huge_bytes
        self.retry_after = retry_after
        self.requests: list[tuple[float, str]] = []
        self.asked = threading.Event()  # set at the first request
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        super().__init__()

    def stop(self) -> None:
        self.stopping.set()
        super().stop()

    def next_mode(self) -> str:
        with self._lock:
            mode = self.modes.pop(0) if self.modes else self.after
            self.requests.append((time.monotonic(), mode))
            self.asked.set()
            return mode


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:
        pass

    @property
    def owner(self) -> FaultServer:
        return cast(FaultServer, cast(OwnedHTTPServer, self.server).owner)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        owner = self.owner
        mode = owner.next_mode()
        key = self.headers.get("Authorization", "")
        if mode == "late":
            owner.stopping.wait(owner.late)
            mode = "ok"
        if mode == "ok":
            self._json(200, completion_json("fault", owner.content, 1))
        elif mode == "echo_key":
            self._json(200, completion_json("fault", f"Your header was {key}. Stop and wait.", 1))
        elif mode == "echo_key_401":
            self._json(401, {"error": {"message": f"invalid key in {key}", "code": 401}})
        elif mode in ("429", "503"):
            self._json(int(mode), {"error": {"message": "slow down"}},
                       {"Retry-After": owner.retry_after})  # fmt: skip
        elif mode == "malformed":
            self._raw(200, b"{not json at all")
        elif mode == "hang":
            owner.stopping.wait()
            self.close_connection = True
        elif mode == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
        elif mode == "drip_headers":
            self._drip(b"HTTP/1.1 200 OK\r\nX-Drip: " + b"." * 1_000_000)
        elif mode == "drip_body":
            data = json.dumps(completion_json("fault", owner.content, 1)).encode()
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" \
                   f"Content-Length: {len(data)}\r\n\r\n"  # fmt: skip
            self.wfile.write(head.encode())
            self._drip(data)
        elif mode == "huge":
            self._huge()

    def _json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._raw(status, json.dumps(body).encode(), headers)

    def _raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _drip(self, data: bytes) -> None:
        owner = self.owner
        self.close_connection = True
        try:
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                if owner.stopping.wait(owner.drip):
                    return
        except OSError:
            return  # the client hung up

    def _huge(self) -> None:
        owner = self.owner
        self.close_connection = True
        head = b'{"choices": [{"message": {"role": "assistant", "content": "'
        tail = b'"}}], "model": "fault"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        left = owner.huge_bytes - len(head) - len(tail)
        try:
            self._chunk(head)
            block = b"x" * 65536
            while left > 0 and not owner.stopping.is_set():
                piece = block[: min(left, len(block))]
                self._chunk(piece)
                left -= len(piece)
            self._chunk(tail)
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            return

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


FaultServer.handler = _Handler
