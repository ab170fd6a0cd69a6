"""A stand-in HTTP server on loopback: start, stop, ``with``, and its ``base_url``.

The stand-in LLM servers of :mod:`onboard.testing` (the stand-in, the fault and the schema
servers) each subclass :class:`LoopbackServer` with
their own request handler; the handler reaches its server object as ``self.server.owner``.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Self

__all__ = ["LoopbackServer", "OwnedHTTPServer"]


class OwnedHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: Any

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: clients hang up on these servers all the time."""


class LoopbackServer:
    """An HTTP server on ``host`` (loopback by default) and ``port`` (0: a free one), served
    from a daemon thread."""

    #: the request handler of the subclass
    handler: ClassVar[type[BaseHTTPRequestHandler]]
    #: the server class (a subclass may change how it reports a handler's error)
    http_server: ClassVar[type[OwnedHTTPServer]] = OwnedHTTPServer

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self._port = port
        self._httpd: OwnedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        """Bind and serve in a daemon thread; returns ``self``."""
        if self._httpd is not None:
            raise RuntimeError(f"{type(self).__name__} already started")
        httpd = self.http_server((self.host, self._port), self.handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1`` (after :meth:`start`)."""
        return f"http://{self.host}:{self.port}/v1"
