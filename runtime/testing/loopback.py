"""A stand-in HTTP server on loopback: start, stop, ``with``, and its ``base_url``.

The stand-in LLM servers of :mod:`onboard.testing` each subclass :class:`LoopbackServer` with
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
    """An HTTP server on 127.0.0.1 and a free port, served from a daemon thread."""

    #: the request handler of the subclass
    handler: ClassVar[type[BaseHTTPRequestHandler]]

    def __init__(self) -> None:
        self._httpd: OwnedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        httpd = OwnedHTTPServer(("127.0.0.1", 0), self.handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError(f"{type(self).__name__} not started")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
