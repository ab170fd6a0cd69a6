"""A JAKA cobot over its TCP/IP control protocol: JSON commands on port 10001, state on 10000.

Each command is one JSON object with a ``cmdName``; the controller answers with an object
carrying ``errorCode`` (``"0"`` is success), ``errorMsg`` and, almost always, the same
``cmdName``. Lengths on the wire are millimetres, angles degrees (SI in the API)::

    power_on, enable_robot, disable_robot, power_off, get_robot_state -> power, enable
    moveL        cartPosition [x, y, z, rx, ry, rz] (mm, deg), speed mm/s, accel mm/s², relFlag
    joint_move   jointPosition [deg...], speed deg/s, accel deg/s², relFlag
    get_tcp_pos -> tcp_pos, get_joint_pos -> joint_pos
    set_digital_output type (0 cabinet, 1 tool, 2 extension), index, value  (the gripper)
    stop_program, wait_complete, setOptionalInfoConfig section, key, value

What a real controller does, from public sources (facts only, no code taken):

- A command is answered when the controller has received it, not when it is done ("TCP/IP
  commands are executed asynchronously", https://www.jaka.com/docs/en/guide/tcpip.html), and
  current clients mark ``wait_complete`` deprecated (Robot-Exp-Platform/libjaka-rs,
  src/types/robot_type.rs). So a motion's end is seen on the status port (10000), which pushes
  ``inpos`` with the positions back to back (``completion = "inpos"``, the default); where the
  stream has no ``inpos`` the driver polls the positions (``"poll"``), as
  nkawa/JAKA_Zu5s_MQTT_Control (src/jaka_control/jaka_robot.py) does; ``"wait_complete"``
  keeps the old way for firmware where it blocks.
- A failing call was answered without ``cmdName`` (``{"errorCode": "1", "errorMsg":
  "Exception:function call failed"}``, firmware 1.5.14, nkawa/JAKA_Zu5s_MQTT_Control
  src/check_jkrc.py). Such a reply goes to the one command awaiting an answer; when several
  await one it cannot be attributed, and all of them fail with an ArmError saying so.
- ``power_on`` is answered at once and the power comes later: clients poll
  ``get_robot_state`` for it (jaka_robot.py above, up to 30 s). The driver polls before
  ``enable_robot``, and after it, within ``power_on_timeout``.
- Outputs are counted from 1 by some firmware and from 0 by others (public clients differ):
  the driver sends ``grip_index + grip_index_base``.
- The optional status fields are pushed only where OptionalInfoConfig.ini asks for them
  (JakaCobot/jaka_robot, JAKAZuRobot.h); a public C# client turns each on with
  ``setOptionalInfoConfig`` (section ``ATTROPTIONALDATA``). ``request_status_fields = true``
  does that on connect; it changes the controller's setting, so it is off by default.

Answers are matched to commands by ``cmdName``, so ``stop()`` from another thread gets through
while a motion runs. ``errorCode != "0"`` raises ``ArmError`` naming the command, the
controller and ``errorMsg``; no answer in time raises ``ArmTimeout``; a dropped socket raises
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from onboard.base.errors import ArmError, ArmTimeout, LinkLost, SafetyError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import JakaArmConfig
from onboard.drivers.device import Device

__all__ = [
    "STATUS_FIELDS",
    "BadFrame",
    "Connector",
    "Frame",
    "JakaArm",
    "JakaArmConfig",
    "JsonStream",
    "truthy",
]

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


#: the fields the driver reads from the status stream, asked for by request_status_fields
STATUS_FIELDS = ("actual_position", "joint_actual_position", "inpos", "errmsg", "protective_stop")
_AT_TARGET_MM = 0.5  # a push this close to the target ends a move never seen running
_AT_TARGET_DEG = 0.05
_STILL = 0.01  # mm or deg: two polled positions this close are an arm at rest


@dataclass
class _Waiter:
    name: str
    done: threading.Event = field(default_factory=threading.Event)
    reply: dict[str, Any] | None = None
    error: str | None = None


@dataclass(frozen=True)
class _Push:
    """One status push: its place in the stream (``seq``), when it came, what it said."""

    seq: int
    at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class _Target:
    """Where a motion goes, in the controller's units, and where to read where the arm is."""

    name: str  # the command
    field: str  # in the status push
    query: str  # the command that reads it
    answer: str  # in that command's reply
    values: tuple[float, ...]
    tolerance: float  # ending farther than this raises
    close: float  # a push this close ends a move never seen running
    cartesian: bool

    @property
    def unit(self) -> str:
        return "mm" if self.cartesian else "deg"

    def off_by(self, here: Sequence[float]) -> float:
        if self.cartesian:
            return math.dist(self.values[:3], here[:3])
        return max((abs(a - b) for a, b in zip(self.values, here, strict=False)), default=0.0)

    def readable(self, here: Sequence[float] | None) -> bool:
        return here is not None and len(here) >= (3 if self.cartesian else len(self.values))


class JakaArm(Device):
    """An :class:`~onboard.drivers.arm.base.Arm` over JAKA's TCP/IP protocol.

    ``connector`` is injectable. :attr:`completion_used` says how the last motion's end was
    seen (``"inpos"``, ``"poll"`` or ``"wait_complete"``); :attr:`status_pushes` counts the
    status pushes read so far.
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
        # the status stream, under _cond: the latest push, how many came, the latest that
        # showed a motion running, whether the stream is open
        self._cond = threading.Condition()
        self._push: _Push | None = None
        self._seq = 0
        self._running_seq = 0
        self._stream_alive = False
        self._settled_after: int | None = 0  # None: the arm is at rest; n: after push n
        self._fresh_from = 0  # state() reads pushes from this one on
        self._stop_count = 0
        self._latched = threading.Event()
        self._motions = 0
        self._gripper_closed = False
        self._last_command: str | None = None
        self._acceleration = (config.accel, config.joint_accel)
        self._warned_no_inpos = ""  # the last reason warned of
        self.completion_used: str | None = None
        self.stray_replies = 0
        self.stream = JsonStream()

    @property
    def status_pushes(self) -> int:
        """How many status pushes have been read (since the driver was made)."""
        return self._seq

    # -- link -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Open both sockets; ask for the status fields (``request_status_fields``); power
        on and enable the robot (``power_on = true``), waiting until it reports each."""
        if self._running.is_set():
            return
        cfg = self.config
        self._lost = None
        self.stream = JsonStream()
        with self._cond:
            self._push, self._stream_alive = None, False
            self._settled_after, self._fresh_from = self._seq, self._seq + 1
        self._sock = self._open(cfg.port)
        self._running.set()
        self._spawn(self._read_loop, self._sock, "jaka-reply")
        if cfg.status_port is not None:
            try:
                self._status_sock = self._open(cfg.status_port)
            except LinkLost as exc:
                log.warning("JakaArm: no status stream (%s); state() and motions will poll", exc)
            else:
                with self._cond:
                    self._stream_alive = True
                self._spawn(self._status_loop, self._status_sock, "jaka-status")
        try:
            if cfg.request_status_fields:
                self._request_status_fields()
            if cfg.power_on:
                self.call("power_on")
                self._await_robot_state("power_on", enabled=False)
                self.call("enable_robot")
                self._await_robot_state("enable_robot", enabled=True)
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
        with self._cond:
            self._push, self._stream_alive = None, False
            self._cond.notify_all()

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

    def _request_status_fields(self) -> None:
        for key in STATUS_FIELDS:
            try:
                self.call("setOptionalInfoConfig", section="ATTROPTIONALDATA", key=key, value=1)
            except (ArmTimeout, LinkLost):
                raise
            except ArmError as exc:
                raise ArmError(
                    f"{exc} (asking for the status field {key}); firmware without "
                    "setOptionalInfoConfig pushes every field: set request_status_fields = false"
                ) from exc

    def _await_robot_state(self, after: str, *, enabled: bool) -> None:
        """Poll get_robot_state until the robot reports power (and, with ``enabled``, the
        enable), within ``power_on_timeout``."""
        cfg = self.config
        deadline = time.monotonic() + cfg.power_on_timeout
        while True:
            powered, on = self.robot_state()
            if powered and (on or not enabled):
                return
            if time.monotonic() >= deadline:
                raise ArmError(
                    f"JakaArm: {cfg.host} did not report {'enabled' if enabled else 'powered on'}"
                    f" within {cfg.power_on_timeout:.1f} s of {after} (get_robot_state: power "
                    f"{'on' if powered else 'off'}, enable {'on' if on else 'off'}); check the "
                    "emergency stop and the cabinet, or raise power_on_timeout"
                )
            time.sleep(cfg.poll_interval)

    # -- the Arm --------------------------------------------------------------------------

    def home(self) -> None:
        if self.config.home_joints is None:
            raise ArmError(
                "JakaArm: home() needs home_joints (radians) in [drivers.arm] of robot.toml"
            )
        self.move_joints(self.config.home_joints, self.config.default_joint_speed)

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        cfg = self.config
        mm_s = 1000.0 * _positive(speed or cfg.default_speed, "speed")
        target = [pose.x * 1000, pose.y * 1000, pose.z * 1000]
        target += [math.degrees(a) for a in (pose.rx, pose.ry, pose.rz)]
        wire = [round(v, 4) for v in target]
        distance = self._distance_mm(wire[:3])
        self._motion(
            {
                "cmdName": "moveL",
                "relFlag": 0,
                "cartPosition": wire,
                "speed": round(mm_s, 3),
                "accel": round(self._acceleration[0] * 1000.0, 3),
            },
            distance / mm_s,
            _Target(
                "moveL",
                "actual_position",
                "get_tcp_pos",
                "tcp_pos",
                tuple(wire),
                cfg.reach_tolerance * 1000.0,
                _AT_TARGET_MM,
                cartesian=True,
            ),
        )

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        cfg = self.config
        rad_s = _positive(speed or cfg.default_joint_speed, "joint speed")
        travel = self._joint_travel(joints)
        wire = [round(math.degrees(q), 4) for q in joints]
        self._motion(
            {
                "cmdName": "joint_move",
                "relFlag": 0,
                "jointPosition": wire,
                "speed": round(math.degrees(rad_s), 3),
                "accel": round(math.degrees(self._acceleration[1]), 3),
            },
            travel / rad_s,
            _Target(
                "joint_move",
                "joint_actual_position",
                "get_joint_pos",
                "joint_pos",
                tuple(wire),
                math.degrees(cfg.joint_tolerance),
                _AT_TARGET_DEG,
                cartesian=False,
            ),
        )

    def grip(self, close: bool) -> None:
        """Set the gripper's output (``grip_index + grip_index_base``) once the answer comes,
        then wait ``grip_settle``: an output has no end to see on the status stream."""
        cfg = self.config
        value = cfg.grip_close_value if close else 1 - cfg.grip_close_value
        stops = self._stop_count
        self._check_latch()
        index = cfg.grip_index + cfg.grip_index_base
        try:
            self._call_motion(
                "set_digital_output", {"type": cfg.grip_io_type, "index": index, "value": value}
            )
            if cfg.completion == "wait_complete":
                self.call("wait_complete", timeout=cfg.motion_timeout)
        finally:
            self._stale_until_next_push()
        self._check_stop(stops, "the grip")
        if cfg.grip_settle:
            with self._cond:
                self._cond.wait_for(lambda: self._stop_count != stops, cfg.grip_settle)
            self._check_stop(stops, "the grip")
        self._gripper_closed = close

    def stop(self) -> None:
        """``stop_program``, from any thread; a lost link is a stopped arm. Motion calls
        raise until :meth:`resume`."""
        self._latched.set()  # before the count: see _motion
        self._stop_count += 1
        with self._cond:
            self._cond.notify_all()
        if self._lost is not None or self._sock is None:
            return
        try:
            self.call("stop_program")
        except LinkLost:
            return
        finally:
            self._unsettle()

    def resume(self) -> None:
        """Clear the stop latch: motion commands are sent again."""
        self._latched.clear()

    def state(self) -> ArmState:
        if self._lost is not None:
            self._check_link()
        cfg = self.config
        with self._cond:
            push, fresh_from = self._push, self._fresh_from
        data = push.data if push is not None else {}
        age = time.monotonic() - push.at if push is not None else math.inf
        tcp = _floats(data.get("actual_position"))
        joints_deg = _floats(data.get("joint_actual_position"))
        # a push from before the last command ended would show the arm on its way
        if (
            push is not None
            and push.seq >= fresh_from
            and age <= cfg.status_max_age
            and tcp is not None
            and joints_deg is not None
        ):
            moving = not truthy(data.get("inpos", True)) or self._motions > 0
            error = str(data.get("errmsg") or "") or None
        else:
            tcp = _floats(self.call("get_tcp_pos").get("tcp_pos")) or ()
            joints_deg = _floats(self.call("get_joint_pos").get("joint_pos")) or ()
            moving, error, age = self._motions > 0, None, 0.0
        if len(tcp) < 6:
            raise ArmError(f"JakaArm: {cfg.host} reported no tool pose ({tcp!r})")
        return ArmState(
            pose=Pose(*(v / 1000.0 for v in tcp[:3]), *(math.radians(a) for a in tcp[3:6])),
            joints=tuple(math.radians(q) for q in joints_deg),
            gripper_closed=self._gripper_closed,
            moving=moving,
            stopped=self._latched.is_set(),
            error=error,
            last_command=self._last_command,
            extra={
                "status_age": age,
                "stray_replies": float(self.stray_replies),
                "status_pushes": float(self._seq),
            },
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

    # -- motions --------------------------------------------------------------------------

    def _motion(self, message: dict[str, Any], seconds: float, target: _Target) -> None:
        """Send a motion and wait until it has ended. The stop count is read before the send
        checks the latch and stop() latches before it counts, so a stop is either refused at
        the send or seen in the count afterwards.

        With ``completion = "inpos"`` the end is a status push showing ``inpos`` true. A
        push read after the send may still have been sampled before the controller took the
        motion: it shows the arm at rest where it was, in position. Such a push cannot end
        the motion, because one of these must hold as well:

        - a push read after the send showed ``inpos`` false, and the one ending it came
          later in the stream. Before the send the arm was at rest (the last motion was seen
          to end, or :meth:`_settle` waited for a push in position after a stop), so any push
          showing it running, however late it comes, shows this motion; and pushes come in
          the order they were sampled, so the later one was sampled after it ran;
        - the push shows the arm within a fraction of a millimetre (or of a degree) of the
          target: whenever it was sampled, there is nothing left to do. This ends a motion
          too short to be sampled running.

        The end seen, the arm must be within ``reach_tolerance`` (``joint_tolerance``) of the
        target, or the motion raises: it was cut short, or the controller answered early.
        """
        cfg = self.config
        stops = self._stop_count
        name = target.name
        budget = min(cfg.timeout + 2.0 * seconds, cfg.motion_timeout)
        deadline = time.monotonic() + budget
        with self._lock:
            self._motions += 1
        try:
            mode: str = cfg.completion
            if mode == "inpos" and not self._settle(target, deadline, stops, budget):
                mode = self._no_inpos()
            with self._cond:
                sent = self._seq
                errcode = self._push.data.get("errcode") if self._push is not None else None
            fields = {k: v for k, v in message.items() if k != "cmdName"}
            self._call_motion(name, fields)
            here: Sequence[float] | None = None
            if mode == "inpos":
                here = self._await_inpos(target, sent, errcode, deadline, stops, budget)
                if here is None:
                    mode = self._no_inpos()
            if mode == "poll":
                here = self._await_still_at(target, deadline, stops, budget)
            elif mode == "wait_complete":
                left = max(deadline - time.monotonic(), cfg.timeout)
                self.call("wait_complete", timeout=left)
                self._check_stop(stops, name)
                here = self._read_position(target)
            assert here is not None
            self.completion_used = mode
            self._check_reached(target, here, mode)
        except ArmTimeout:
            with contextlib.suppress(ArmError):
                self._send_only({"cmdName": "stop_program"})
            self._unsettle()
            raise
        except BaseException:
            self._unsettle()
            raise
        finally:
            with self._lock:
                self._motions -= 1
        self._check_stop(stops, name)

    def _no_inpos(self) -> str:
        with self._cond:
            alive = self._stream_alive
        if self.config.status_port is None:
            why = "there is no status stream (status_port is unset)"
        elif not alive:
            why = "the status stream is closed"
        else:
            why = "its status stream carries no inpos"
        if why != self._warned_no_inpos:
            self._warned_no_inpos = why
            log.warning(
                "JakaArm: %s: %s, so motions end when polled positions are still at the "
                "target (with setOptionalInfoConfig firmware, request_status_fields = true)",
                self.config.host,
                why,
            )
        return "poll"

    def _settle(self, target: _Target, deadline: float, stops: int, budget: float) -> bool:
        """Wait until the arm is at rest after a stop or a failed motion: a push read after
        it that shows ``inpos``. False if the stream cannot tell (none, or no ``inpos``)."""
        with self._cond:
            after, latest, alive = self._settled_after, self._push, self._stream_alive
        if not alive:
            return False
        if after is None:
            return latest is not None and _tells(latest.data, target)
        while True:
            push = self._next_push(after, deadline, stops, target.name, budget)
            if push is None or not _tells(push.data, target):
                return False
            if truthy(push.data["inpos"]):
                with self._cond:
                    self._settled_after = None
                return True
            after = push.seq

    def _await_inpos(
        self,
        target: _Target,
        sent: int,
        errcode: object,
        deadline: float,
        stops: int,
        budget: float,
    ) -> Sequence[float] | None:
        """The position in the push that ends the motion (see :meth:`_motion`); None if the
        stream stops telling (ended, or no ``inpos``): the caller polls."""
        after = sent
        while True:
            push = self._next_push(after, deadline, stops, target.name, budget)
            if push is None or not _tells(push.data, target):
                return None
            after, data = push.seq, push.data
            if not truthy(data["inpos"]):
                continue
            here = _floats(data.get(target.field))
            if not target.readable(here):
                return None
            assert here is not None
            with self._cond:
                seen_running = self._running_seq > sent
            if seen_running or target.off_by(here) <= target.close:
                self._check_faults(data, errcode, target.name)
                with self._cond:
                    self._fresh_from = push.seq
                return here

    def _next_push(
        self, after: int, deadline: float, stops: int, name: str, budget: float
    ) -> _Push | None:
        """The latest push once one later than ``after`` has come; None if the stream has
        ended. Raises for a stop, a lost link or the deadline."""
        with self._cond:
            while True:
                if self._lost is not None:
                    break
                self._check_stop(stops, name)
                push = self._push
                if push is not None and push.seq > after:
                    return push
                if not self._stream_alive:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ArmTimeout(
                        f"JakaArm: {name} did not end within {budget:.1f} s: no status push "
                        f"from {self.config.host}:{self.config.status_port} showed it in "
                        "position; check the controller; reconnect() resets the link"
                    )
                self._cond.wait(left)
        self._check_link()
        return None

    def _await_still_at(
        self, target: _Target, deadline: float, stops: int, budget: float
    ) -> Sequence[float]:
        """Poll the position until two readings agree and are within tolerance of the
        target. A reply comes after the motion's answer on the same connection, so it was
        read after the controller took the motion (a move shorter than the tolerance may
        still be read before it has begun)."""
        cfg = self.config
        previous: Sequence[float] | None = None
        while True:
            self._check_stop(stops, target.name)
            left = deadline - time.monotonic()
            here = self._read_position(target, min(cfg.timeout, max(left, 0.1)))
            if (
                previous is not None
                and target.off_by(here) <= target.tolerance
                and max(abs(a - b) for a, b in zip(here, previous, strict=False)) <= _STILL
            ):
                self._stale_until_next_push()
                return here
            previous = here
            if time.monotonic() >= deadline:
                raise ArmTimeout(
                    f"JakaArm: {target.name} did not end within {budget:.1f} s: polled "
                    f"{target.off_by(here):.1f} {target.unit} from its target on "
                    f"{cfg.host}; check the controller; reconnect() resets the link"
                )
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stop_count != stops or self._lost is not None,
                    cfg.poll_interval,
                )

    def _read_position(self, target: _Target, timeout: float | None = None) -> Sequence[float]:
        reply = self.call(target.query, timeout=timeout)
        here = _floats(reply.get(target.answer))
        if not target.readable(here):
            raise ArmError(
                f"JakaArm: {self.config.host} answered {target.query} without a position "
                f"({str(reply.get(target.answer))[:80]})"
            )
        assert here is not None
        return here

    def _check_reached(self, target: _Target, here: Sequence[float], mode: str) -> None:
        off = target.off_by(here)
        if off > target.tolerance:
            raise ArmError(
                f"JakaArm: {target.name} ended {off:.1f} {target.unit} from its target on "
                f"{self.config.host} (tolerance {target.tolerance:.1f}): cut short, or the "
                f'controller answered before the end (completion = "{mode}")'
            )

    def _check_faults(self, data: dict[str, Any], errcode: object, name: str) -> None:
        host = self.config.host
        for key, what in (
            ("protective_stop", "a protective stop"),
            ("emergency_stop", "an e-stop"),
        ):
            if truthy(data.get(key, 0)):
                raise ArmError(f"JakaArm: {name} ended in {what} on {host}: clear it there")
        code = data.get("errcode")
        if code is not None and not _no_error(code) and code != errcode:
            raise ArmError(
                f"JakaArm: {host} reports error {code} during {name}: {data.get('errmsg') or '-'}"
            )

    def _check_stop(self, stops: int, what: str) -> None:
        if self._stop_count != stops:
            raise ArmError(f"JakaArm: {what} was interrupted by stop()")

    def _unsettle(self) -> None:
        """The arm may still be moving: the next motion waits for a push in position."""
        with self._cond:
            self._settled_after = self._seq
            self._fresh_from = self._seq + 1

    def _stale_until_next_push(self) -> None:
        with self._cond:
            self._fresh_from = self._seq + 1

    # -- commands and replies -------------------------------------------------------------

    def call(self, name: str, timeout: float | None = None, **fields: Any) -> dict[str, Any]:
        """Send ``{"cmdName": name, **fields}``; the reply, or ArmError/ArmTimeout/LinkLost."""
        reply = self._request({"cmdName": name, **fields}, timeout or self.config.timeout)
        return self._checked(reply, name)

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
        if waiter.error is not None:
            raise ArmError(waiter.error)
        if waiter.reply is None:
            raise ArmError(f"JakaArm: {name} got no reply: the link was closed")
        return waiter.reply

    def _checked(self, reply: dict[str, Any], name: str) -> dict[str, Any]:
        where = f"{self.config.host}:{self.config.port}"
        code = reply.get("errorCode")
        if code is None:
            raise ArmError(f"JakaArm: {where} answered {name} without an errorCode: {reply!r:.200}")
        if str(code).strip() != "0":  # "0" or 0: both are seen
            raise ArmError(
                f"JakaArm: {name} failed with errorCode {code} from {where}: "
                f"{reply.get('errorMsg') or '-'}"
            )
        return reply

    def _call_motion(self, name: str, fields: dict[str, Any]) -> None:
        self._checked(self._request({"cmdName": name, **fields}, self.config.timeout, True), name)

    def _check_latch(self) -> None:
        if self._latched.is_set():
            raise ArmError("JakaArm: stopped by stop(): call resume() before the next motion")

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
        name = reply.get("cmdName")
        if not isinstance(name, str) or not name:
            self._on_unnamed(reply)
            return
        with self._lock:
            queue = self._waiters.get(name)
            waiter = queue.popleft() if queue else None
        if waiter is None:
            self.stray_replies += 1
            log.warning("JakaArm: a reply no command awaits: %.200s", reply)
            return
        waiter.reply = reply
        waiter.done.set()

    def _on_unnamed(self, reply: dict[str, Any]) -> None:
        """A reply without ``cmdName`` answers the one command awaiting a reply; with several
        awaiting, it cannot be attributed and every one of them fails."""
        with self._lock:
            pending = [w for queue in self._waiters.values() for w in queue]
            if len(pending) > 1:
                self._waiters.clear()
            elif pending:
                self._waiters[pending[0].name].popleft()
        if not pending:
            self.stray_replies += 1
            log.warning("JakaArm: a reply without cmdName no command awaits: %.200s", reply)
            return
        if len(pending) == 1:
            pending[0].reply = {**reply, "cmdName": pending[0].name}
            pending[0].done.set()
            return
        names = ", ".join(w.name for w in pending)
        error = (
            f"JakaArm: {self.config.host}:{self.config.port} answered without cmdName "
            f"(errorCode {reply.get('errorCode')}: {reply.get('errorMsg') or '-'}) while "
            f"{len(pending)} commands awaited a reply ({names}): it cannot be told which, so "
            "all of them fail"
        )
        for waiter in pending:
            waiter.error = error
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
        with self._cond:
            self._cond.notify_all()

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
                self._on_reply(reply)

    def _status_loop(self, sock: socket.socket) -> None:
        stream = JsonStream(max_frame=_MAX_STATUS)
        while self._running.is_set():
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            for status in stream.feed(data):
                with self._cond:
                    self._seq += 1
                    self._push = _Push(self._seq, time.monotonic(), status)
                    if "inpos" in status and not truthy(status["inpos"]):
                        self._running_seq = self._seq
                    self._cond.notify_all()
        with self._cond:
            self._push, self._stream_alive = None, False
            self._cond.notify_all()

    # -- units ----------------------------------------------------------------------------

    def _latest(self, key: str) -> tuple[float, ...] | None:
        with self._cond:
            push = self._push
        if push is None or time.monotonic() - push.at > self.config.status_max_age:
            return None
        return _floats(push.data.get(key))

    def _distance_mm(self, target: list[float]) -> float:
        here = self._latest("actual_position")
        if here is None or len(here) < 3:
            return 1000.0  # unknown start: allow for a metre of travel
        return math.dist(target, here[:3])

    def _joint_travel(self, joints: tuple[float, ...]) -> float:
        here = self._latest("joint_actual_position")
        if not here:
            return 2 * math.pi
        return max(
            (abs(q - math.radians(h)) for q, h in zip(joints, here, strict=False)), default=0.0
        )


def _tells(data: dict[str, Any], target: _Target) -> bool:
    """The push carries what ends a motion: ``inpos`` and the target's position."""
    return "inpos" in data and target.field in data


def _floats(value: object) -> tuple[float, ...] | None:
    """A list of finite numbers as floats; None for anything else."""
    if not isinstance(value, list):
        return None
    out: list[float] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        out.append(float(v))
    return tuple(out)


def _no_error(code: object) -> bool:
    return str(code).strip().lower() in {"0", "0x0", ""}


def _positive(value: float, what: str) -> float:
    if not (value > 0 and math.isfinite(value)):
        raise ArmError(f"JakaArm: {what} {value} must be positive")
    return value


def _create_connection(address: tuple[str, int], timeout: float) -> socket.socket:
    return socket.create_connection(address, timeout=timeout)
