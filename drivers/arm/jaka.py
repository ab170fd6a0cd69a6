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

from onboard.base.errors import ArmError, ArmTimeout, LinkLost
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import JakaArmConfig
from onboard.drivers.device import Device

__all__ = ["Connector", "JakaArm", "JakaArmConfig", "JsonStream", "truthy"]

log = logging.getLogger(__name__)

#: opens a TCP connection: ``(host, port), timeout -> socket``; tests may hand in their own
Connector = Callable[[tuple[str, int], float], socket.socket]

_MAX_OBJECT = 1 << 20  # bytes: a buffer this long without a whole object is noise


class JsonStream:
    """Splits a byte stream into JSON objects, with or without separators between them.

    Noise is skipped and counted in :attr:`skipped`: bytes outside an object, an object that
    does not parse, and a stray ``{`` that would swallow the objects after it (an unfinished
    object is taken as noise once a whole object follows it at the top level).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.skipped = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        objects: list[dict[str, Any]] = []
        while self._skip_to_object():
            end = _object_end(self._buffer)
            if end < 0 and not self._drop_unfinished():
                break
            if end < 0:
                continue
            value = _parse(bytes(self._buffer[:end]))
            if value is None:  # not JSON: drop the "{" and look again from the next one
                self.skipped += 1
                del self._buffer[:1]
                continue
            objects.append(value)
            del self._buffer[:end]
        return objects

    def _skip_to_object(self) -> bool:
        start = self._buffer.find(b"{")
        noise = self._buffer if start < 0 else self._buffer[:start]
        if noise.strip():
            self.skipped += 1
        del self._buffer[: len(self._buffer) if start < 0 else start]
        return start >= 0

    def _drop_unfinished(self) -> bool:
        """Drop the unfinished object at the start if it cannot be one; True if dropped."""
        buffer = self._buffer
        if len(buffer) > _MAX_OBJECT:
            self.skipped += 1
            del buffer[:1]
            return True
        later = buffer.find(b"{", 1)
        while later > 0:
            end = _object_end(buffer[later:])
            rest = bytes(buffer[later + end :]).lstrip() if end > 0 else b""
            # a whole object followed by another is at the top level; one at the end of the
            # data may be nested in the unfinished one, unless that one is not JSON text
            top_level = end > 0 and (
                rest.startswith(b"{") or (not rest and not _is_text(bytes(buffer[:later])))
            )
            if top_level and _parse(bytes(buffer[later : later + end])) is not None:
                self.skipped += 1
                del buffer[:later]
                return True
            later = buffer.find(b"{", later + 1)
        return False


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _is_text(raw: bytes) -> bool:
    """Could be (part of) JSON text: UTF-8 without control characters."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(raw) is None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _object_end(buffer: bytearray) -> int:
    """The end of the JSON object at the start of ``buffer``, or -1 if it is not whole yet."""
    depth = 0
    in_string = escaped = False
    for i, byte in enumerate(buffer):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte == 0x7B:  # {
            depth += 1
        elif byte == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


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
        data = json.dumps(message, separators=(",", ":")).encode()
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
        stream = JsonStream()
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
