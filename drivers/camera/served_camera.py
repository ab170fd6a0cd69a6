"""The camera ``onboard sim serve`` serves (``kind = "sim-serve"``): frames of its arm's twin.

Speaks :mod:`onboard.drivers.camera.frame_wire` over one TCP connection. Every ``read`` asks
the server for a frame and the server renders the twin as it is at that moment, so every frame
is new; ``latest(max_age)`` re-uses the last frame while it is young enough, as the twin's
in-process camera does.

Every socket step is bounded: ``connect()`` by ``timeout``, a read by its own timeout (the
whole exchange: reconnect, request, header and pixels). What goes wrong is one line naming
the server's ``host:port``: no answer in time is :class:`~onboard.base.errors.StaleFrame`;
a refused or lost connection, a header that is not the protocol's, a payload cut short are
:class:`~onboard.base.errors.CameraError`. After any of them the connection is dropped and
the next read connects again, so a restarted ``sim serve`` is picked up.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from onboard.base.errors import CameraError, StaleFrame
from onboard.drivers.camera import frame_wire
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.camera.config import SimServeCameraConfig
from onboard.drivers.device import Device

__all__ = ["ServedCamera"]

_CHUNK = 1 << 20
T = TypeVar("T")


class _Lost(Exception):
    """The connection closed or failed mid-exchange (the message says how)."""


class ServedCamera(Device):
    """Implements :class:`~onboard.drivers.camera.base.Camera` over the camera port of
    ``onboard sim serve``."""

    def __init__(self, config: SimServeCameraConfig) -> None:
        self.config = config
        self.name = f"sim-serve camera {config.host}:{config.port}"
        self._sock: socket.socket | None = None
        self._buffer = bytearray()
        self._connected = False
        self._intrinsics: Intrinsics | None = None
        self._last: Frame | None = None
        self._twin_time: float | None = None
        self._lock = threading.Lock()  # one exchange at a time on the connection

    def connect(self) -> None:
        """Connect and ask for the stream's size and intrinsics, within ``timeout``."""
        with self._lock:
            self._intrinsics = self._exchange("info", self.config.timeout, self._read_info)
            self._connected = True

    def close(self) -> None:
        with self._lock:
            self._connected = False
            self._drop()

    def read(self) -> Frame:
        """A frame rendered for this call, within ``timeout`` seconds, else StaleFrame."""
        return self.read_timeout(self.config.timeout)

    def read_timeout(self, timeout: float) -> Frame:
        with self._lock:
            self._require_connected()
            frame, twin_time = self._exchange("frame", timeout, self._read_frame)
            self._last, self._twin_time = frame, twin_time
            return frame

    def latest(self, max_age: float) -> Frame:
        self._require_connected()
        frame = self._last
        if frame is None:
            raise StaleFrame(f"{self.name}: no frame yet; call read() first")
        age = time.monotonic() - frame.timestamp
        if age > max_age:
            raise StaleFrame(
                f"{self.name}: the latest frame is {age:.3f} s old (max_age {max_age:.3f} s)"
            )
        return frame

    def intrinsics(self) -> Intrinsics:
        self._require_connected()
        assert self._intrinsics is not None
        return self._intrinsics

    @property
    def twin_time(self) -> float | None:
        """The twin's simulated seconds when the last frame was rendered (None before one)."""
        return self._twin_time

    # -- one exchange ---------------------------------------------------------------------

    def _exchange(self, get: str, timeout: float, read: Callable[[socket.socket, float], T]) -> T:
        """Send one request and read its reply within ``timeout`` s; one-line errors, and the
        connection dropped after any of them (its stream may be out of step)."""
        deadline = time.monotonic() + timeout
        try:
            sock = self._open(deadline)
            self._settimeout(sock, deadline)
            sock.sendall(frame_wire.encode_request(get))
            return read(sock, deadline)
        except TimeoutError:
            self._drop()
            what = "no frame" if get == "frame" else "no answer to 'info'"
            raise StaleFrame(
                f"{self.name}: {what} within {timeout:.3g} s: the server did not answer "
                "(is sim serve stalled?)"
            ) from None
        except ValueError as exc:
            self._drop()
            raise CameraError(f"{self.name}: bad reply to {get!r}: {exc}") from None
        except (_Lost, OSError) as exc:
            self._drop()
            raise CameraError(f"{self.name}: {_describe(exc)}") from None

    def _open(self, deadline: float) -> socket.socket:
        if self._sock is not None:
            return self._sock
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            sock = socket.create_connection((self.config.host, self.config.port), timeout=left)
        except ConnectionRefusedError:
            raise _Lost(
                "connection refused: is `onboard sim serve` running with this --camera-port?"
            ) from None
        except socket.gaierror as exc:
            raise _Lost(f"host does not resolve ({exc.strerror})") from None
        except UnicodeError:
            raise _Lost("host does not resolve (not a host name)") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._buffer = sock, bytearray()
        return sock

    def _read_info(self, sock: socket.socket, deadline: float) -> Intrinsics:
        return frame_wire.parse_info(self._line(sock, deadline))

    def _read_frame(self, sock: socket.socket, deadline: float) -> tuple[Frame, float]:
        header = frame_wire.parse_header(self._line(sock, deadline))
        payload = self._exactly(sock, header.color_bytes + header.depth_bytes, deadline)
        color, depth = frame_wire.decode_images(header, payload)
        frame = Frame(color, depth, header.intrinsics, time.monotonic(), header.index)
        return frame, header.twin_time

    def _line(self, sock: socket.socket, deadline: float) -> bytes:
        limit = frame_wire.MAX_HEADER
        while True:
            end = self._buffer.find(b"\n", 0, limit)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) >= limit:
                raise ValueError(f"no line break in the first {limit} bytes of the header")
            self._buffer += self._recv(sock, deadline, "the header")

    def _exactly(self, sock: socket.socket, size: int, deadline: float) -> bytearray:
        out = bytearray(size)
        view = memoryview(out)
        got = min(size, len(self._buffer))
        view[:got] = self._buffer[:got]
        del self._buffer[:got]
        while got < size:
            self._settimeout(sock, deadline)
            n = sock.recv_into(view[got:], min(_CHUNK, size - got))
            if n == 0:
                raise _Lost(
                    f"short payload: the server closed after {got} of {size} bytes of the frame"
                )
            got += n
        return out

    def _recv(self, sock: socket.socket, deadline: float, what: str) -> bytes:
        self._settimeout(sock, deadline)
        data = sock.recv(_CHUNK)
        if not data:
            got = f" after {len(self._buffer)} bytes" if self._buffer else ""
            raise _Lost(f"the server closed the connection{got} while sending {what}")
        return data

    @staticmethod
    def _settimeout(sock: socket.socket, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)

    def _drop(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock, self._buffer = None, bytearray()

    def _require_connected(self) -> None:
        if not self._connected:
            raise CameraError(f"{self.name}: not connected: call connect() first")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _Lost):
        return str(exc)
    if isinstance(exc, ConnectionResetError | BrokenPipeError):
        return "the server dropped the connection (did sim serve stop?)"
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return f"connection failed: {' '.join(text.split()) or type(exc).__name__}"
