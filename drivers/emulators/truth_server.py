"""The twin's ground truth for judges (``onboard sim serve --truth-port``), version 1.

For evaluation code only, never the robot's loop: the robot sees the world through its
camera; a judge asks this port what is really there, and may disturb it. JSON lines over TCP,
one request line answered by one reply line, in turn, several clients at once (at most 8).
A request may carry ``"v": 1``; every reply does.

``{"get": "truth"}`` answers the twin at one physics step::

    {"v": 1, "ok": true, "time": T, "step": S,
     "objects": {NAME: {"kind": "block",
                        "world": {"position": [x, y, z], "orientation": [qx, qy, qz, qw]},
                        "base":  {"position": [...], "orientation": [...]}}, ...},
     "held": NAME or null,
     "gripper": {"closed": bool, "width": m, "moving": bool},
     "arm": {"joints": [7 x rad],
             "tool": {"world": {"position", "orientation"}, "base": {...}}},
     "camera": {"to_world": 4x4}}

Positions in metres (an object's centre of mass), orientations quaternions (x, y, z, w):
``world`` is the twin's frame (z = 0 the table top), ``base`` the arm's base frame, the frame
of every arm driver's poses. ``held`` is what the gripper holds (welded, or pinched by both
fingers). Drawers add ``"opening"`` (m). ``camera.to_world`` is the camera's pose (OpenCV
axes: x right, y down, z forward).

``{"move": NAME, "position": [x, y, z], "orientation": [qx, qy, qz, qw], "frame": "world"}``
teleports an object (a disturbance: "the block was knocked off"); ``orientation`` is optional
(kept), ``frame`` is ``"world"`` (default) or ``"base"``, and ``position`` [x, y] keeps the
object's height (it slides). Its velocity is zeroed; physics acts on it when the twin next
steps (the arm's motions step it). A held object is refused: open the gripper first. The
reply is ``{"v": 1, "ok": true, "moved": NAME, "world": {"position", "orientation"}}``.

Anything else gets ``{"v": 1, "ok": false, "error": "one line"}`` and the connection reads on
(a line over 64 KB ends it, after the error line).
"""

from __future__ import annotations

import json
import logging
import math
import socket
from typing import Any

from onboard.drivers.emulators.tcp_service import LineReader, LineTooLong, TcpService
from onboard.drivers.rotations import Quat, Vec3
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.world import Twin

__all__ = ["MAX_LINE", "VERSION", "TruthServer"]

log = logging.getLogger(__name__)

VERSION = 1
MAX_LINE = 65536
REQUESTS = '{"get": "truth"} or {"move": NAME, "position": [x, y, z]}'


class BadRequest(ValueError):
    """A request this server answers with an error line."""


class TruthServer(TcpService):
    """What ``twin`` really holds, on ``host:port``, for judges."""

    what = "truth"

    def __init__(self, twin: Twin, host: str = "127.0.0.1", port: int = 10003) -> None:
        super().__init__(host, port)
        self.twin = twin

    def refusal(self, reason: str) -> bytes:
        return _line(_error(f"sim serve truth: {reason}"))

    def handle(self, sock: socket.socket, reader: LineReader) -> None:
        while True:
            try:
                line = reader.line(MAX_LINE)
            except LineTooLong as exc:
                self.send(sock, _line(_error(f"request line too long: {exc}")))
                return
            if line is None:
                return
            if line.strip():
                self.send(sock, self.reply(line))

    def reply(self, line: bytes) -> bytes:
        """The reply line to one request line; never raises for what a client sends."""
        try:
            return _line(self.answer(line))
        except Exception as exc:  # the twin failed (or gave a NaN): the server serves on
            log.exception("sim serve truth: %.200r failed", line)
            return _line(_error(f"the twin failed: {type(exc).__name__}: {exc}"))

    def answer(self, line: bytes) -> dict[str, Any]:
        """The reply to one request line (an error reply for a bad one)."""
        try:
            request = _request(line)
            if "get" in request:
                if request["get"] != "truth":
                    raise BadRequest(f"unknown get {_show(request['get'])}: ask {REQUESTS}")
                return {"v": VERSION, "ok": True, **self.truth()}
            if "move" in request:
                return {"v": VERSION, "ok": True, **self.move(request)}
            raise BadRequest(f"unknown request {_show(request)}: ask {REQUESTS}")
        except BadRequest as exc:
            return _error(str(exc))

    def truth(self) -> dict[str, Any]:
        twin = self.twin
        with twin.lock:  # one physics step: nothing moves while it is read
            snapshot = twin.snapshot
            base = twin.panda.base
            objects = {name: self._object(name, base) for name in twin.object_names()}
            tool = Transform.from_pose(snapshot.ee_pose)
            camera = twin.camera_pose()
        return {
            "time": snapshot.time,
            "step": snapshot.step,
            "objects": objects,
            "held": snapshot.held,
            "gripper": {
                "closed": snapshot.gripper_closed,
                "width": snapshot.gripper_width,
                "moving": snapshot.gripper_moving,
            },
            "arm": {
                "joints": list(snapshot.joints),
                "tool": {"world": _placement(base @ tool), "base": _placement(tool)},
            },
            "camera": {"to_world": [[float(v) for v in row] for row in camera]},
        }

    def move(self, request: dict[str, Any]) -> dict[str, Any]:
        twin = self.twin
        name = request["move"]
        if not isinstance(name, str) or name not in twin.object_names():
            known = ", ".join(repr(n) for n in twin.object_names()) or "none"
            raise BadRequest(f"no object {_show(name)} in the scene; objects: {known}")
        frame = request.get("frame", "world")
        if frame not in ("world", "base"):
            raise BadRequest(f"frame {_show(frame)}: use 'world' or 'base'")
        with twin.lock:
            if twin.held_object() == name:
                raise BadRequest(f"{name!r} is in the gripper: open it before moving it")
            position, orientation = twin.object_pose(name)
            base = twin.panda.base
            now = Transform(position, orientation)
            if frame == "base":
                now = base.inverse() @ now
            goal = Transform(_position(request, now.position), _orientation(request, now.rotation))
            if frame == "base":
                goal = base @ goal
            twin.set_object_pose(name, goal.position, goal.rotation)
            placed = Transform(*twin.object_pose(name))
        return {"moved": name, "world": _placement(placed)}

    def _object(self, name: str, base: Transform) -> dict[str, Any]:
        world = Transform(*self.twin.object_pose(name))
        kind = self.twin.kind_of(name)
        out: dict[str, Any] = {
            "kind": kind,
            "world": _placement(world),
            "base": _placement(base.inverse() @ world),
        }
        if kind == "drawer":
            out["opening"] = self.twin.drawer_opening(name)
        return out


def _request(line: bytes) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise BadRequest(f"not a line of JSON: {_show(line)}") from None
    if not isinstance(request, dict):
        raise BadRequest(f"not a JSON object: {_show(request)}; ask {REQUESTS}")
    version = request.get("v", VERSION)
    if isinstance(version, bool) or version != VERSION:
        raise BadRequest(f"protocol version {_show(request.get('v'))}; this server speaks 1")
    return request


def _position(request: dict[str, Any], now: Vec3) -> Vec3:
    values = _numbers(request, "position", (2, 3))
    if values is None:
        raise BadRequest("move needs a position: [x, y, z] metres, or [x, y] to keep the height")
    x, y = values[0], values[1]
    return (x, y, values[2] if len(values) == 3 else now[2])


def _orientation(request: dict[str, Any], now: Quat) -> Quat:
    values = _numbers(request, "orientation", (4,))
    if values is None:
        return now
    norm = math.sqrt(sum(v * v for v in values))
    if norm < 1e-6:
        raise BadRequest("orientation is a zero quaternion: give [qx, qy, qz, qw]")
    qx, qy, qz, qw = (v / norm for v in values)
    return (qx, qy, qz, qw)


def _numbers(request: dict[str, Any], key: str, lengths: tuple[int, ...]) -> list[float] | None:
    value = request.get(key)
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) not in lengths
        or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            for v in value
        )
    ):
        sizes = " or ".join(str(n) for n in lengths)
        raise BadRequest(f"{key} is {_show(value)}: give {sizes} finite numbers")
    return [float(v) for v in value]


def _placement(t: Transform) -> dict[str, list[float]]:
    return {"position": list(t.position), "orientation": list(t.rotation)}


def _error(message: str) -> dict[str, Any]:
    return {"v": VERSION, "ok": False, "error": " ".join(message.split())[:500]}


def _line(reply: dict[str, Any]) -> bytes:
    return json.dumps(reply, allow_nan=False).encode() + b"\n"


def _show(value: object) -> str:
    text = "".join(c if c.isprintable() else "?" for c in repr(value))
    return text if len(text) <= 80 else text[:77] + "..."
