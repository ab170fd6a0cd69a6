"""The TCP plumbing of sim serve's camera and truth ports: a listener, one thread per connection
(at most ``max_clients`` at once), requests read one line at a time.

A subclass answers a connection in :meth:`TcpService.handle`; it reads with a
:class:`LineReader` (bounded lines) and writes with :meth:`TcpService.send` (bounded by
``send_timeout``, so a client that stops reading frees its thread). A handler that fails is
logged and ends its connection only; the service keeps serving.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from typing import Self

__all__ = ["LineReader", "LineTooLong", "TcpService"]

log = logging.getLogger(__name__)


class LineTooLong(ValueError):
    """A line ran past its limit without a line break."""


class LineReader:
    """Lines from a socket, each at most ``limit`` bytes with its ``\\n``; the socket's own
    timeout bounds each wait (``socket.timeout`` is a TimeoutError)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()

    def line(self, limit: int) -> bytes | None:
        """The next line with its ``\\n``; None when the peer closed first (a partial line
        at the close is dropped); LineTooLong past ``limit``."""
        while True:
            end = self._buffer.find(b"\n", 0, limit)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) >= limit:
                raise LineTooLong(f"no line break within {limit} bytes")
            data = self._sock.recv(65536)
            if not data:
                return None
            self._buffer += data


class TcpService:
    """Serves ``host:port``; ``address`` says where once :meth:`start` returned."""

    #: the name in log lines and refusals ("camera", "truth")
    what = "service"

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_clients: int = 8,
        send_timeout: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.max_clients = max_clients
        self.send_timeout = send_timeout
        self._listener: socket.socket | None = None
        self._clients: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._running = threading.Event()

    def handle(self, sock: socket.socket, reader: LineReader) -> None:
        """Answer requests on one connection until it ends (return to close it)."""
        raise NotImplementedError

    def refusal(self, reason: str) -> bytes:
        """The line sent to a connection refused before any request (too many clients)."""
        raise NotImplementedError

    @property
    def address(self) -> tuple[str, int]:
        if self._listener is None:
            raise RuntimeError(f"{type(self).__name__}: not started: call start() first")
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    def start(self) -> Self:
        self._listener = socket.create_server((self.host, self.port))
        self._running.set()
        self._spawn(self._accept_loop, self._listener)
        return self

    def close(self) -> None:
        self._running.clear()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        with self._lock:
            clients, self._clients = list(self._clients), set()
        for sock in clients:
            _hang_up(sock)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        self._threads.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, sock: socket.socket, *chunks: bytes | memoryview) -> None:
        """Write ``chunks`` in order within ``send_timeout`` s each (OSError otherwise)."""
        sock.settimeout(self.send_timeout)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        finally:
            sock.settimeout(None)

    @property
    def clients(self) -> int:
        """Connections being served now."""
        with self._lock:
            return len(self._clients)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"{self.what}-tcp")
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                full = len(self._clients) >= self.max_clients
                if not full:
                    self._clients.add(sock)
            if not self._running.is_set():  # accepted as close() ran: it hung up the others
                _hang_up(sock)
                return
            if full:
                why = f"{self.max_clients} clients connected already (at most {self.max_clients})"
                with contextlib.suppress(OSError):
                    sock.settimeout(1.0)
                    sock.sendall(self.refusal(why))
                _hang_up(sock)
                continue
            self._spawn(self._serve, sock)

    def _serve(self, sock: socket.socket) -> None:
        try:
            self.handle(sock, LineReader(sock))
        except OSError:
            pass  # the client went away, or close() hung up
        except Exception:  # a handler bug must end this connection only
            log.exception("sim serve %s: a connection failed", self.what)
        finally:
            with self._lock:
                self._clients.discard(sock)
            _hang_up(sock)


def _hang_up(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
