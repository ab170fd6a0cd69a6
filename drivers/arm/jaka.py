"""A JAKA cobot over its TCP/IP control protocol: JSON commands on port 10001, state on 10000.

Each command is one JSON object with a ``cmdName``; the controller answers with an object
carrying the same ``cmdName``, ``errorCode`` (``"0"`` is success) and ``errorMsg``. Lengths on
the wire are millimetres, angles degrees (SI in the API)::

    power_on, enable_robot, disable_robot, power_off
    moveL        cartPosition [x, y, z, rx, ry, rz] (mm, deg), speed mm/s, accel mm/s², relFlag
    joint_move   jointPosition [deg...], speed deg/s, accel deg/s², relFlag
    end_move     endPosition [x, y, z, rx, ry, rz], speed/accel in joint space (deg/s, deg/s²)
    wait_complete                      answered when the motion is done
    get_tcp_pos -> tcp_pos, get_joint_pos -> joint_pos, get_robot_state -> power, enable
    set_digital_output type (0 cabinet, 1 tool, 2 extension), index, value  (the gripper)
    stop_program

The status port pushes a JSON object several times a second (``actual_position``,
``joint_actual_position``, ``inpos``, ``errcode``...); ``state()`` reads it while it is fresh
and asks ``get_tcp_pos``/``get_joint_pos`` otherwise.

Answers are matched to commands by ``cmdName``, so ``stop()`` from another thread gets through
while a ``wait_complete`` is outstanding. ``errorCode != "0"`` raises ``ArmError`` naming the
command and ``errorMsg``; no answer in time raises ``ArmTimeout``; a dropped socket raises
``LinkLost`` and the arm is taken as stopped.

``stop()`` latches: no motion command (``moveL``, ``joint_move``, ``set_digital_output`` for
the gripper) is sent after it until ``resume()``. The latch is checked under the write lock
that ``stop_program`` is sent under, so a stop either precedes the motion command on the wire
(nothing is sent) or follows it (the controller stops it and the motion call raises).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from onboard.base.errors import ArmError, ArmTimeout, LinkLost, SafetyError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import JakaArmConfig
from onboard.drivers.device import Device

__all__ = ["BadFrame", "Connector", "Frame", "JakaArm", "JakaArmConfig", "JsonStream", "truthy"]

log = logging.getLogger(__name__)

#: opens a TCP connection: ``(host, port), timeout -> socket``; tests may hand in their own
Connector = Callable[[tuple[str, int], float], socket.socket]

MAX_FRAME = 64 * 1024  # bytes: a longer frame is refused (error) and skipped to a resync point
MAX_DEPTH = 32  # nesting: deeper is refused before json.loads can recurse
_MAX_STATUS = 1 << 20  # bytes: the status push is one large object; still bounded

_TOP, _FRAME, _STRING, _SKIP = range(4)
_OPEN_OBJECT, _OPEN_ARRAY, _SEPARATOR, _VALUE = range(4)  # the last token seen in a frame
_TOP_STOP = re.compile(rb"[{\[\n]")
_FRAME_STOP = re.compile(rb'[{}\[\]":,\n]')
_STRING_STOP = re.compile(rb'["\\\n]')
_SKIP_STOP = re.compile(rb"[{}\n]")
_SPACE = b" \t\r\n"


@dataclass(frozen=True)
class BadFrame:
    """A frame that is not a JSON object, or not one the splitter accepts: what was wrong."""

    reason: str


Frame = dict[str, Any] | BadFrame


class JsonStream:
    """Splits a byte stream into JSON objects, with or without separators between them.

    One pass over each byte (linear time), tracking strings, nesting and the last token; no
    frame is held past :data:`MAX_FRAME` bytes or nested past :data:`MAX_DEPTH`. What is not a
    JSON object comes out of :meth:`frames` as a :class:`BadFrame` (and is counted in
    :attr:`skipped`): bytes outside an object, an object that does not parse, a top-level
    array or scalar, a number that overflows a float, an oversized or over-deep frame. After a
    bad frame the stream resyncs at a line break or where a new object visibly begins (``{``
    right after a value or a ``}``): a stray ``{`` cannot swallow the objects after it. With
    ``lines=True`` (the emulator) a line break also ends an unfinished frame: commands are
    one-line JSON. A raw line break inside a string is never JSON, so it always ends the frame.
    """

    def __init__(
        self, *, lines: bool = False, max_frame: int = MAX_FRAME, max_depth: int = MAX_DEPTH
    ) -> None:
        self.lines = lines
        self.max_frame = max_frame
        self.max_depth = max_depth
        self.skipped = 0
        self._frame = bytearray()  # the current frame's bytes so far (or a noise run's)
        self._mode = _TOP
        self._stack = bytearray()  # open brackets of the current frame
        self._last = _OPEN_OBJECT
        self._escaped = False
        self._noise = False  # a run of non-space bytes at the top level
        self._closed = False  # skipping: a "}" was the last non-space byte

    @property
    def pending(self) -> int:
        """Bytes held for the frame under way (at most ``max_frame`` between feeds)."""
        return len(self._frame)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The whole objects in ``data`` (and what came before it); the rest is skipped."""
        return [f for f in self.frames(data) if isinstance(f, dict)]

    def frames(self, data: bytes) -> list[Frame]:
        """Every frame that ``data`` completes, in order: objects and bad frames."""
        out: list[Frame] = []
        i, n = 0, len(data)
        while i < n:
            if self._mode == _TOP:
                i = self._top(data, i, out)
            elif self._mode == _STRING:
                i = self._string(data, i, out)
            elif self._mode == _FRAME:
                i = self._in_frame(data, i, out)
            else:
                i = self._skip(data, i, out)
        if self._mode == _TOP and self._noise:
            self._bad(out, "not JSON: bytes outside an object")
        elif self._mode in (_FRAME, _STRING) and len(self._frame) > self.max_frame:
            self._bad(out, f"a frame longer than {self.max_frame} bytes")
            self._mode, self._closed = _SKIP, False
        return out

    # -- states: each takes the position and returns where it stopped ---------------------

    def _top(self, data: bytes, i: int, out: list[Frame]) -> int:
        m = _TOP_STOP.search(data, i)
        end = m.start() if m else len(data)
        if data[i:end].strip():
            self._noise = True
        if m is None:
            return end
        if self._noise:
            self._bad(out, "not JSON: bytes outside an object")
        if data[end] != 0x0A:
            self._begin()
        return end + (data[end] == 0x0A)

    def _begin(self) -> None:
        self._mode, self._frame, self._stack = _FRAME, bytearray(), bytearray()
        self._last = _SEPARATOR  # the opening bracket is a value where one may begin

    def _in_frame(self, data: bytes, i: int, out: list[Frame]) -> int:
        m = _FRAME_STOP.search(data, i)
        end = m.start() if m else len(data)
        if data[i:end].strip(_SPACE):
            self._last = _VALUE  # a number, true, false, null (or junk json.loads refuses)
        self._frame += data[i:end]
        if m is None:
            return end
        byte = data[end]
        if byte == 0x22:  # quote
            self._frame.append(byte)
            self._mode, self._escaped = _STRING, False
            return end + 1
        if byte == 0x0A:
            if self.lines:
                self._bad(out, "an unfinished frame at a line break")
                self._mode = _TOP
            return end + 1
        if byte in b"{[":
            if self._last == _VALUE:  # a new object after a value: the frame was unfinished
                self._bad(out, "an unfinished frame before a new one")
                self._begin()
            elif self._last == _OPEN_OBJECT:  # "{{": not JSON; skip it
                return self._abandon(out, "not JSON: a bracket where a key belongs", end)
            if len(self._stack) >= self.max_depth:
                return self._abandon(out, f"nested deeper than {self.max_depth}", end)
            self._stack.append(byte)
            self._last = _OPEN_OBJECT if byte == 0x7B else _OPEN_ARRAY
        elif byte in b"}]":
            if not self._stack or self._stack[-1] != byte - 2:  # "{" + 2 == "}", "[" + 2 == "]"
                return self._abandon(out, "not JSON: mismatched brackets", end)
            self._stack.pop()
            self._last = _VALUE
        else:  # ":" or ","
            self._last = _SEPARATOR
        self._frame.append(byte)
        if not self._stack:
            self._mode = _TOP
            out.append(self._parse())
        return end + 1

    def _string(self, data: bytes, i: int, out: list[Frame]) -> int:
        if self._escaped:
            self._escaped = False
            if data[i] == 0x0A:
                return self._abandon(out, "not JSON: a line break in a string", i, skip=False)
            self._frame.append(data[i])
            return i + 1
        m = _STRING_STOP.search(data, i)
        end = m.start() if m else len(data)
        self._frame += data[i:end]
        if m is None:
            return end
        byte = data[end]
        if byte == 0x0A:
            return self._abandon(out, "not JSON: a line break in a string", end, skip=False)
        self._frame.append(byte)
        if byte == 0x5C:  # backslash
            self._escaped = True
        else:
            self._mode, self._last = _FRAME, _VALUE
        return end + 1

    def _skip(self, data: bytes, i: int, out: list[Frame]) -> int:
        m = _SKIP_STOP.search(data, i)
        end = m.start() if m else len(data)
        if data[i:end].strip(_SPACE):
            self._closed = False
        if m is None:
            return end
        byte = data[end]
        if byte == 0x0A:
            self._mode = _TOP
        elif byte == 0x7B and self._closed:  # "}" then "{": the next object begins here
            self._begin()
            return end
        else:
            self._closed = byte == 0x7D
        return end + 1

    def _abandon(self, out: list[Frame], reason: str, at: int, *, skip: bool = True) -> int:
        """The frame is bad: report it and skip to a resync point (or to the top level at a
        line break, which is itself the resync point)."""
        self._bad(out, reason)
        self._frame, self._stack = bytearray(), bytearray()
        self._mode, self._closed = (_SKIP, False) if skip else (_TOP, False)
        return at + 1

    def _bad(self, out: list[Frame], reason: str) -> None:
        self.skipped += 1
        self._noise = False
        out.append(BadFrame(reason))

    def _parse(self) -> Frame:
        raw, self._frame = bytes(self._frame), bytearray()
        if len(raw) > self.max_frame:
            self.skipped += 1
            return BadFrame(f"a frame longer than {self.max_frame} bytes")
        try:
            value = json.loads(raw, parse_constant=_no_constant, parse_float=_float, parse_int=_int)
        except ValueError as exc:  # UnicodeDecodeError included
            self.skipped += 1
            return BadFrame(f"not JSON: {exc}")
        if not isinstance(value, dict):
            self.skipped += 1
            return BadFrame(f"a command must be a JSON object, not {type(value).__name__}")
        return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:40]} does not fit in a float")
    return value


def _int(text: str) -> int:
    value = int(text)  # Python refuses more than 4300 digits (ValueError)
    try:
        float(value)
    except OverflowError:
        raise ValueError(f"{text[:40]}... does not fit in a float") from None
    return value


def truthy(value: object) -> bool:
    """JAKA reports flags as booleans, 0/1 or words such as ``"powered_on"``."""
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "on", "powered_on", "robot_enabled"}
    return bool(value)


@dataclass
class _Waiter:
    name: str
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] | None = None


class JakaArm(Device):
    """An :class:`~onboard.drivers.arm.base.Arm` over JAKA's TCP/IP protocol.

    ``connector`` is injectable.
    """

    def __init__(self, config: JakaArmConfig, connector: Connector | None = None) -> None:
        self.config = config
        self._connector: Connector = connector or _create_connection
        self._sock: socket.socket | None = None
        self._status_sock: socket.socket | None = None
        self._write_lock = threading.Lock()
        self._lock = threading.Lock()
        self._waiters: dict[str, deque[_Waiter]] = {}
        self._threads: list[threading.Thread] = []
        self._running = threading.Event()
        self._lost: str | None = None
        self._status: dict[str, Any] = {}
        self._status_at = 0.0
        self._changed_at = 0.0
        self._stop_count = 0
        self._latched = threading.Event()
        self._motions = 0
        self._gripper_closed = False
        self._last_command: str | None = None
        self._acceleration = (config.accel, config.joint_accel)
        self.stray_replies = 0
        self.stream = JsonStream()

    # -- link -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Open both sockets, then power on and enable the robot (``power_on = true``)."""
        if self._running.is_set():
            return
        cfg = self.config
        self._lost = None
        self.stream = JsonStream()
        self._sock = self._open(cfg.port)
        self._running.set()
        self._spawn(self._read_loop, self._sock, "jaka-reply")
        if cfg.status_port is not None:
            try:
                self._status_sock = self._open(cfg.status_port)
            except LinkLost as exc:
                log.warning("JakaArm: no status stream (%s); state() will ask", exc)
            else:
                self._spawn(self._status_loop, self._status_sock, "jaka-status")
        if cfg.power_on:
            try:
                self.call("power_on")
                self.call("enable_robot")
            except ArmError:
                self.close()
                raise

    def close(self) -> None:
        if self._running.is_set() and self._lost is None and self.config.disable_on_close:
            with contextlib.suppress(ArmError):
                self.call("disable_robot")
        self._running.clear()
        for sock in (self._sock, self._status_sock):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        self._threads.clear()
        self._sock = self._status_sock = None
        self._fail_waiters()

    def reconnect(self) -> None:
        """Close and reopen both sockets (power on and enable again). Does not home."""
        self.close()
        self.connect()

    def _open(self, port: int) -> socket.socket:
        address = (self.config.host, port)
        try:
            sock = self._connector(address, self.config.timeout)
        except OSError as exc:
            raise LinkLost(
                f"JakaArm: cannot connect to {address[0]}:{port}: {exc}; check that the "
                "controller is on and the host in [drivers.arm]"
            ) from exc
        sock.settimeout(None)
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _spawn(
        self, target: Callable[[socket.socket], None], sock: socket.socket, name: str
    ) -> None:
        thread = threading.Thread(target=target, args=(sock,), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- the Arm --------------------------------------------------------------------------

    def home(self) -> None:
        if self.config.home_joints is None:
            raise ArmError(
                "JakaArm: home() needs home_joints (radians) in [drivers.arm] of robot.toml"
            )
        self.move_joints(self.config.home_joints, self.config.default_joint_speed)

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        mm_s = 1000.0 * _positive(speed or self.config.default_speed, "speed")
        target = [pose.x * 1000, pose.y * 1000, pose.z * 1000]
        target += [math.degrees(a) for a in (pose.rx, pose.ry, pose.rz)]
        distance = self._distance_mm(target[:3])
        self._motion(
            {
                "cmdName": "moveL",
                "relFlag": 0,
                "cartPosition": [round(v, 4) for v in target],
                "speed": round(mm_s, 3),
                "accel": round(self._acceleration[0] * 1000.0, 3),
            },
            distance / mm_s,
        )

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        rad_s = _positive(speed or self.config.default_joint_speed, "joint speed")
        travel = self._joint_travel(joints)
        self._motion(
            {
                "cmdName": "joint_move",
                "relFlag": 0,
                "jointPosition": [round(math.degrees(q), 4) for q in joints],
                "speed": round(math.degrees(rad_s), 3),
                "accel": round(math.degrees(self._acceleration[1]), 3),
            },
            travel / rad_s,
        )

    def grip(self, close: bool) -> None:
        cfg = self.config
        value = cfg.grip_close_value if close else 1 - cfg.grip_close_value
        stops = self._stop_count
        self._check_latch()
        self.call("wait_complete", timeout=cfg.motion_timeout)
        output = {"type": cfg.grip_io_type, "index": cfg.grip_index, "value": value}
        self._call_motion("set_digital_output", output)
        self.call("wait_complete", timeout=cfg.motion_timeout)
        if self._stop_count != stops:
            raise ArmError("JakaArm: the grip was interrupted by stop()")
        if cfg.grip_settle:
            time.sleep(cfg.grip_settle)
        self._gripper_closed = close
        self._changed_at = time.monotonic()

    def stop(self) -> None:
        """``stop_program``, from any thread; a lost link is a stopped arm. Motion calls
        raise until :meth:`resume`."""
        self._latched.set()  # before the count: see _motion
        self._stop_count += 1
        if self._lost is not None or self._sock is None:
            return
        try:
            self.call("stop_program")
        except LinkLost:
            return
        finally:
            self._changed_at = time.monotonic()

    def resume(self) -> None:
        """Clear the stop latch: motion commands are sent again."""
        self._latched.clear()

    def state(self) -> ArmState:
        status, at = self._status, self._status_at
        age = time.monotonic() - at
        # a push from before the last command finished would show the arm on its way
        if status and age <= self.config.status_max_age and at >= self._changed_at:
            tcp = status.get("actual_position") or []
            joints_deg = status.get("joint_actual_position") or []
            moving = not truthy(status.get("inpos", True)) or self._motions > 0
            error = status.get("errmsg") or None
        else:
            tcp = self.call("get_tcp_pos").get("tcp_pos") or []
            joints_deg = self.call("get_joint_pos").get("joint_pos") or []
            moving, error, age = self._motions > 0, None, 0.0
        if len(tcp) < 6:
            raise ArmError(f"JakaArm: the controller reported no tool pose ({tcp!r})")
        return ArmState(
            pose=Pose(*(v / 1000.0 for v in tcp[:3]), *(math.radians(a) for a in tcp[3:6])),
            joints=tuple(math.radians(q) for q in joints_deg),
            gripper_closed=self._gripper_closed,
            moving=moving,
            stopped=self._latched.is_set(),
            error=self._lost or error,
            last_command=self._last_command,
            extra={"status_age": age, "stray_replies": float(self.stray_replies)},
        )

    def set_acceleration(self, linear: float, joint: float) -> None:
        """Cap ``accel`` in later moves: ``linear`` m/s², ``joint`` rad/s²."""
        self._acceleration = (
            min(linear, self.config.accel),
            min(joint, self.config.joint_accel),
        )

    def robot_state(self) -> tuple[bool, bool]:
        """``(powered, enabled)`` from ``get_robot_state``."""
        reply = self.call("get_robot_state")
        return truthy(reply.get("power")), truthy(reply.get("enable"))

    # -- commands and replies -------------------------------------------------------------

    def call(self, name: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send ``{"cmdName": name, **fields}``; the reply, or ArmError/ArmTimeout/LinkLost."""
        return _checked(self._request({"cmdName": name, **fields}, timeout or self.config.timeout))

    def _request(
        self, message: dict[str, Any], timeout: float, motion: bool = False
    ) -> dict[str, Any]:
        """Send ``message`` and wait for its reply; a ``motion`` is refused after a stop."""
        name = str(message["cmdName"])
        waiter = _Waiter(name)
        self._check_link()
        try:  # NaN and Infinity are not JSON: a controller would misread or refuse them
            data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        except ValueError as exc:
            raise SafetyError(f"JakaArm: refusing to send {name} with a non-finite number") from exc
        try:
            with self._write_lock:
                if motion:
                    self._check_latch()
                with self._lock:
                    self._waiters.setdefault(name, deque()).append(waiter)
                sock = self._sock
                if sock is None:
                    raise OSError("not connected")
                sock.sendall(data)
                if name not in ("get_tcp_pos", "get_joint_pos", "get_robot_state"):
                    self._last_command = data.decode()
        except OSError as exc:
            self._forget(waiter)
            self._link_lost(f"send failed: {exc}")
            self._check_link()
        if not waiter.done.wait(timeout):
            self._forget(waiter)
            raise ArmTimeout(
                f"JakaArm: no reply to {name} within {timeout:.1f} s from "
                f"{self.config.host}:{self.config.port}: check the controller; "
                "reconnect() resets the link"
            )
        self._check_link()
        if waiter.reply is None:
            raise ArmError(f"JakaArm: {name} got no reply: the link was closed")
        return waiter.reply

    def _call_motion(self, name: str, fields: dict[str, Any]) -> None:
        _checked(self._request({"cmdName": name, **fields}, self.config.timeout, motion=True))

    def _check_latch(self) -> None:
        if self._latched.is_set():
            raise ArmError("JakaArm: stopped by stop(): call resume() before the next motion")

    def _motion(self, message: dict[str, Any], seconds: float) -> None:
        """Send a motion and wait for it. The stop count is read before the send checks the
        latch and stop() latches before it counts, so a stop is either refused at the send or
        seen in the count afterwards."""
        stops = self._stop_count
        name = str(message["cmdName"])
        with self._lock:
            self._motions += 1
        try:
            fields = {k: v for k, v in message.items() if k != "cmdName"}
            self._call_motion(name, fields)
            timeout = min(self.config.timeout + 2.0 * seconds, self.config.motion_timeout)
            self.call("wait_complete", timeout=timeout)
        except ArmTimeout:
            with contextlib.suppress(ArmError):
                self._send_only({"cmdName": "stop_program"})
            raise
        finally:
            with self._lock:
                self._motions -= 1
            self._changed_at = time.monotonic()
        if self._stop_count != stops:
            raise ArmError(f"JakaArm: {name} was interrupted by stop()")

    def _send_only(self, message: dict[str, Any]) -> None:
        with self._write_lock:
            if self._sock is not None:
                try:
                    self._sock.sendall(json.dumps(message).encode())
                except OSError as exc:
                    raise LinkLost(f"JakaArm: send failed: {exc}") from exc

    def _check_link(self) -> None:
        if self._lost is not None:
            raise LinkLost(
                f"JakaArm: the link to {self.config.host}:{self.config.port} is lost "
                f"({self._lost}); the arm is taken as stopped: call reconnect()"
            )
        if self._sock is None or not self._running.is_set():
            raise ArmError("JakaArm: not connected: call connect() first")

    def _forget(self, waiter: _Waiter) -> None:
        with self._lock:
            queue = self._waiters.get(waiter.name)
            if queue is not None and waiter in queue:
                queue.remove(waiter)

    def _on_reply(self, reply: dict[str, Any]) -> None:
        name = str(reply.get("cmdName", ""))
        with self._lock:
            queue = self._waiters.get(name)
            waiter = queue.popleft() if queue else None
        if waiter is None:
            self.stray_replies += 1
            log.warning("JakaArm: a reply no command awaits: %.200s", reply)
            return
        waiter.reply = reply
        waiter.done.set()

    def _fail_waiters(self) -> None:
        with self._lock:
            waiters = [w for queue in self._waiters.values() for w in queue]
            self._waiters.clear()
        for waiter in waiters:
            waiter.done.set()

    def _link_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            log.error("JakaArm: link to %s lost: %s", self.config.host, reason)
        self._fail_waiters()

    # -- reader threads -------------------------------------------------------------------

    def _read_loop(self, sock: socket.socket) -> None:
        while self._running.is_set():
            try:
                data = sock.recv(65536)
            except OSError as exc:
                data, reason = b"", str(exc)
            else:
                reason = "the controller closed the connection"
            if not data:
                if self._running.is_set():
                    self._link_lost(reason)
                return
            for reply in self.stream.feed(data):
                if "cmdName" in reply:
                    self._on_reply(reply)
                else:
                    self.stray_replies += 1

    def _status_loop(self, sock: socket.socket) -> None:
        stream = JsonStream(max_frame=_MAX_STATUS)
        while self._running.is_set():
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                self._status = {}
                return
            for status in stream.feed(data):
                if "actual_position" in status:
                    self._status, self._status_at = status, time.monotonic()

    # -- units ----------------------------------------------------------------------------

    def _distance_mm(self, target: list[float]) -> float:
        here = self._status.get("actual_position")
        if not here or time.monotonic() - self._status_at > self.config.status_max_age:
            return 1000.0  # unknown start: allow for a metre of travel
        return math.dist(target, here[:3])

    def _joint_travel(self, joints: tuple[float, ...]) -> float:
        here = self._status.get("joint_actual_position")
        if not here or time.monotonic() - self._status_at > self.config.status_max_age:
            return 2 * math.pi
        return max(
            (abs(q - math.radians(h)) for q, h in zip(joints, here, strict=False)), default=0.0
        )


def _checked(reply: dict[str, Any]) -> dict[str, Any]:
    code = str(reply.get("errorCode", "0"))
    if code != "0":
        raise ArmError(
            f"JakaArm: {reply.get('cmdName')} failed with errorCode {code}: "
            f"{reply.get('errorMsg') or '-'}"
        )
    return reply


def _positive(value: float, what: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ArmError(f"JakaArm: {what} {value} must be positive")
    return value


def _create_connection(address: tuple[str, int], timeout: float) -> socket.socket:
    return socket.create_connection(address, timeout=timeout)
