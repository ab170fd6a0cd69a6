"""A judge's client of sim serve's truth port (:mod:`~onboard.drivers.emulators.truth_server`).

For evaluation code only: the robot's runtime never imports it (a test in
``tests/test_sim_serve_camera.py`` holds that). ::

    with TruthClient("127.0.0.1", 10003) as truth:
        now = truth.truth()
        now.held                                   # "red block" or None
        now.objects["red block"].world.position    # metres, the twin's frame
        truth.move("red block", (0.3, -0.2))       # knocked aside, sliding on the table

Every failure (no server, no answer within ``timeout``, a garbled reply, an error reply) is a
one-line :class:`~onboard.base.errors.DriverError` naming ``host:port``.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onboard.base.errors import DriverError
from onboard.drivers.device import Device
from onboard.drivers.emulators.tcp_service import LineReader

__all__ = ["ObjectTruth", "Placement", "Truth", "TruthClient"]

# as the truth server's (a test holds them equal); not imported, since the server needs PyBullet
VERSION = 1
MAX_LINE = 65536

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


@dataclass(frozen=True)
class Placement:
    position: Vec3  # metres
    orientation: Quat  # x, y, z, w

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Placement:
        x, y, z = (float(v) for v in raw["position"])
        qx, qy, qz, qw = (float(v) for v in raw["orientation"])
        return cls((x, y, z), (qx, qy, qz, qw))


@dataclass(frozen=True)
class ObjectTruth:
    kind: str
    world: Placement  # the twin's frame (z = 0 the table top)
    base: Placement  # the arm's base frame
    opening: float | None = None  # drawers: metres open


@dataclass(frozen=True)
class Truth:
    """The twin at one physics step (see the truth server's reply)."""

    time: float
    step: int
    objects: dict[str, ObjectTruth]
    held: str | None
    gripper_closed: bool
    gripper_width: float
    joints: tuple[float, ...]
    tool_world: Placement
    tool_base: Placement
    camera_to_world: tuple[tuple[float, ...], ...]  # 4x4, OpenCV camera axes

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Truth:
        objects = {
            str(name): ObjectTruth(
                str(o["kind"]),
                Placement.parse(o["world"]),
                Placement.parse(o["base"]),
                None if o.get("opening") is None else float(o["opening"]),
            )
            for name, o in raw["objects"].items()
        }
        arm, gripper, camera = raw["arm"], raw["gripper"], raw["camera"]["to_world"]
        return cls(
            time=float(raw["time"]),
            step=int(raw["step"]),
            objects=objects,
            held=None if raw["held"] is None else str(raw["held"]),
            gripper_closed=bool(gripper["closed"]),
            gripper_width=float(gripper["width"]),
            joints=tuple(float(q) for q in arm["joints"]),
            tool_world=Placement.parse(arm["tool"]["world"]),
            tool_base=Placement.parse(arm["tool"]["base"]),
            camera_to_world=tuple(tuple(float(v) for v in row) for row in camera),
        )


class TruthClient(Device):
    """One connection to the truth port; ``with`` connects and closes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 10003, timeout: float = 5.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.name = f"truth {host}:{port}"
        self._sock: socket.socket | None = None
        self._reader: LineReader | None = None

    def connect(self) -> None:
        try:
            self._sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise DriverError(f"{self.name}: cannot connect: {_why(exc)}") from None
        self._reader = LineReader(self._sock)

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = self._reader = None

    def truth(self) -> Truth:
        """What the twin holds now."""
        raw = self.request({"get": "truth"})
        try:
            return Truth.parse(raw)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DriverError(f"{self.name}: a truth reply without {exc}") from None

    def move(
        self,
        name: str,
        position: Sequence[float],
        orientation: Sequence[float] | None = None,
        frame: str = "world",
    ) -> Placement:
        """Teleport object ``name``; where it now is (world frame). ``position`` of 2 numbers
        keeps its height."""
        request: dict[str, Any] = {"move": name, "position": list(position), "frame": frame}
        if orientation is not None:
            request["orientation"] = list(orientation)
        raw = self.request(request)
        try:
            return Placement.parse(raw["world"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DriverError(f"{self.name}: a move reply without {exc}") from None

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request, return its ``ok`` reply; DriverError for anything else."""
        if self._sock is None or self._reader is None:
            raise DriverError(f"{self.name}: not connected: call connect() first")
        try:
            self._sock.settimeout(self.timeout)
            self._sock.sendall(json.dumps({"v": VERSION, **message}).encode() + b"\n")
            line = self._reader.line(MAX_LINE)
        except TimeoutError:
            self.close()
            raise DriverError(f"{self.name}: no answer within {self.timeout:.3g} s") from None
        except (OSError, ValueError) as exc:
            self.close()
            raise DriverError(f"{self.name}: {_why(exc)}") from None
        if line is None:
            self.close()
            raise DriverError(f"{self.name}: the server closed the connection")
        try:
            reply = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise DriverError(f"{self.name}: a reply that is not JSON: {line[:80]!r}") from None
        if not isinstance(reply, dict) or reply.get("ok") is not True:
            error = reply.get("error") if isinstance(reply, dict) else None
            raise DriverError(f"{self.name}: {error or f'a reply without ok: {line[:80]!r}'}")
        return reply


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(str(exc).split()) or type(exc).__name__
