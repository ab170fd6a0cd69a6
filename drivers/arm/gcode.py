"""A desktop arm that speaks the Marlin/GRBL G-code dialect over a serial line.

The link is a pyserial port opened with ``serial.serial_for_url``, so the same driver runs on
``/dev/ttyUSB0``, ``socket://host:port``, ``loop://`` and a pty path such as ``/dev/pts/3``
(the emulator in :mod:`onboard.drivers.emulators.gcode_pty`). A test may hand in its own port.

The dialect, in millimetres and mm/min on the wire (SI in the API)::

    G21 / G90                      millimetres, absolute positions (sent on connect)
    G0|G1 X Y Z F                  linear move of the tool
    G0|G1 A B C U V W I J K F      joint move, degrees and deg/min (``joint_axes``)
    G28                            home
    M400                           wait until every queued motion is done
    M3 / M5 (configurable)         suction or gripper on / off; e.g. M280 P0 S<angle> for a servo
    M204 S<mm/s²>                  acceleration cap
    M114                           position: "X:.. Y:.. Z:.. A:.. ... Count ..." then "ok"
    M112                           emergency stop (handled on receipt, not answered)

Every line is answered by ``ok`` or ``error:<msg>``, in order (with ``error_then_ok``, as
Marlin does, ``Error:<msg>`` comes before the line's ``ok``). At most ``in_flight`` lines wait
for their answer at once. A line that is neither an answer nor a position report is skipped,
logged and counted (``state().extra["garbage_lines"]``). A lost link raises ``LinkLost`` and
the arm is taken as stopped; ``reconnect()`` reopens it (without homing).

``stop()`` writes the e-stop at once and latches: a motion line is never written after it
until ``resume()`` (the check and the write share the write lock, so a stop either comes
before a motion line on the wire and the line is refused, or after it and the controller
cancels it and the motion call raises). A timeout also writes the e-stop, without latching:
the link then needs ``reconnect()``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import serial

from onboard.base.errors import ArmError, ArmTimeout, LinkLost, SafetyError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import GcodeArmConfig
from onboard.drivers.device import Device

__all__ = ["WORD_LIMITS", "GcodeArm", "GcodeArmConfig", "fixed", "parse_position", "word_range"]

log = logging.getLogger(__name__)

_POLL = 0.05  # seconds: the reader thread's read timeout, so close() is prompt
_MAX_LINE = 4096  # bytes: a longer "line" is noise
_OK = re.compile(r"^ok(\s|$)", re.IGNORECASE)
_ERROR = re.compile(r"^error\s*:?\s*(.*)$", re.IGNORECASE)
_POSITION = re.compile(r"^X:\s*-?\d")
_AXIS_VALUE = re.compile(r"([A-Z]):\s*(\S*)")
_PLAIN = re.compile(r"-?(?:\d+\.?\d*|\.\d+)")
_INFO = ("echo:", "//", "busy:", "start", "wait", "grbl", "marlin", "[")


#: the values a G-code word may carry, both ways (the emulator refuses the rest with error:):
#: millimetres, degrees, mm/min and deg/min, mm/s², seconds or ms; other letters: +-1e6
WORD_LIMITS: dict[str, tuple[float, float]] = {
    **dict.fromkeys("XYZ", (-10_000.0, 10_000.0)),
    **dict.fromkeys("ABCUVWIJK", (-3_600.0, 3_600.0)),
    "F": (1.0, 1e6),  # a feed rate is positive (and written in whole mm/min)
    "S": (0.0, 1e6),  # accelerations, dwells, servo angles: never negative
    "P": (0.0, 1e6),
}
_ANY = (-1e6, 1e6)


def word_range(letter: str) -> tuple[float, float]:
    """The range a word's value must lie in (inclusive)."""
    return WORD_LIMITS.get(letter.upper(), _ANY)


def fixed(letter: str, value: float, digits: int = 3) -> str:
    """``letter`` and ``value`` as a G-code word, always a fixed-point decimal (never an
    exponent, which firmware reads as its mantissa: X1e9 moves to X1). A value that is not
    finite or out of :func:`word_range` raises SafetyError before anything is written."""
    low, high = word_range(letter)
    if not (math.isfinite(value) and low <= value <= high):
        raise SafetyError(
            f"GcodeArm: refusing to write {letter}{value!r}: {letter} must be a finite number "
            f"in [{low:g}, {high:g}]"
        )
    text = f"{value:.{digits}f}"
    if text.lstrip("-").strip("0.") == "":
        text = text.lstrip("-")  # -0.000 is 0.000
    return letter + text


@dataclass
class _Pending:
    line: str
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    info: list[str] = field(default_factory=list)


def parse_position(line: str) -> dict[str, float]:
    """``"X:1.00 Y:2.00 Z:3.00 E:0.00 Count X:..."`` -> ``{"X": 1.0, "Y": 2.0, ...}``; a value
    that is not a plain decimal (an exponent, nan) raises ArmError."""
    head = line.split("Count", 1)[0]
    position = {}
    for axis, value in _AXIS_VALUE.findall(head):
        if not (_PLAIN.fullmatch(value) and math.isfinite(float(value))):  # 1e9 is not 1
            raise ArmError(f"GcodeArm: the position report has {axis}:{value[:20]!r}: {line!r}")
        position[axis] = float(value)
    return position


class GcodeArm(Device):
    """An :class:`~onboard.drivers.arm.base.Arm` over a G-code serial link.

    ``port`` may be injected (any pyserial port, open or not; the driver sets its read
    timeout); otherwise ``connect()`` opens ``config.url`` with ``serial.serial_for_url``.
    """

    def __init__(self, config: GcodeArmConfig, port: serial.SerialBase | None = None) -> None:
        self.config = config
        self._port = port
        self._write_lock = threading.Lock()
        self._counter_lock = threading.Lock()
        self._fifo: deque[_Pending] = deque()
        self._window = threading.BoundedSemaphore(config.in_flight)
        self._reader: threading.Thread | None = None
        self._running = threading.Event()
        self._lost: str | None = None
        self._desync: str | None = None
        self._stop_count = 0
        self._latched = threading.Event()
        self._resume_needed = False
        self._motions = 0
        self._gripper_closed = False
        self._last_command: str | None = None
        self._position: dict[str, float] = {}
        self.garbage_lines = 0
        self.stray_answers = 0

    # -- link -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the port, start the reader, send the startup lines. Does not home."""
        if self._running.is_set():
            return
        port = self._open_port()
        self._lost = None
        self._desync = None
        self._fifo.clear()
        self._window = threading.BoundedSemaphore(self.config.in_flight)
        self._running.set()
        self._reader = threading.Thread(
            target=self._read_loop, args=(port,), name="gcode-reader", daemon=True
        )
        self._reader.start()
        if self.config.boot_wait:
            time.sleep(self.config.boot_wait)
        try:
            for line in self.config.startup:
                self.command(line)
        except ArmError:
            self.close()
            raise

    def close(self) -> None:
        self._running.clear()
        port = self._port
        if port is not None and port.is_open and hasattr(port, "cancel_read"):
            with contextlib.suppress(OSError, serial.SerialException):
                port.cancel_read()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2.0)
        self._reader = None
        if port is not None:
            port.close()
        self._fail_pending("the port was closed")

    def reconnect(self) -> None:
        """Close and reopen the link (after a timeout or a lost link). Does not home."""
        self.close()
        self.connect()

    def _open_port(self) -> serial.SerialBase:
        cfg = self.config
        try:
            if self._port is None:
                self._port = serial.serial_for_url(
                    cfg.url, baudrate=cfg.baudrate, timeout=_POLL, write_timeout=cfg.timeout
                )
            elif not self._port.is_open:
                self._port.open()
            self._port.timeout = _POLL  # the reader polls, so close() is prompt
            self._port.reset_input_buffer()
        except (serial.SerialException, OSError, ValueError) as exc:
            raise LinkLost(
                f"GcodeArm: cannot open {cfg.url!r}: {exc}; check the cable and the url "
                "in [drivers.arm]"
            ) from exc
        return self._port

    # -- the Arm --------------------------------------------------------------------------

    def home(self) -> None:
        self._before_motion()
        cfg = self.config
        self._run([cfg.home_command, "M400"], cfg.timeout, motion=cfg.motion_timeout)
        self._position = {}

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        feed = self._feed(speed)
        x, y, z = (round(v * 1000.0, 3) for v in pose.position())
        words = [fixed(a, v) for a, v in zip("XYZ", (x, y, z), strict=True)]
        line = f"G1 {' '.join(words)} {fixed('F', feed, 0)}"
        if not {"X", "Y", "Z"} <= self._position.keys() and self._motions == 0:
            self.state()  # where from, for the time the move may take
        distance = self._distance_mm((x, y, z))
        self._before_motion()
        self._run([line, "M400"], self.config.timeout, motion=self._motion_timeout(distance / feed))
        self._position.update(X=x, Y=y, Z=z)

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        axes = self.config.joint_axes
        if not 0 < len(joints) <= len(axes):
            raise ArmError(
                f"GcodeArm: move_joints got {len(joints)} joints; joint_axes {axes!r} names "
                f"{len(axes)}: add axis letters to joint_axes in [drivers.arm]"
            )
        degrees = [math.degrees(q) for q in joints]
        feed = self._joint_feed(speed)
        words = " ".join(fixed(a, d) for a, d in zip(axes, degrees, strict=False))
        used = axes[: len(joints)]
        if not set(used) <= self._position.keys() and self._motions == 0:
            self.state()  # where from, for the time the move may take
        travel = max(
            abs(d - self._position.get(a, d + 360.0)) for a, d in zip(used, degrees, strict=True)
        )
        self._before_motion()
        timeout = self._motion_timeout(travel / feed)
        line = f"G1 {words} {fixed('F', feed, 0)}"
        self._run([line, "M400"], self.config.timeout, motion=timeout)

    def grip(self, close: bool) -> None:
        code = self.config.grip_on if close else self.config.grip_off
        self._before_motion()
        self._run(["M400", code, "M400"], self.config.timeout, motion=self.config.motion_timeout)
        if self.config.grip_settle:
            time.sleep(self.config.grip_settle)
        self._gripper_closed = close

    def stop(self) -> None:
        """Emergency stop: written at once, past the window of lines awaiting ``ok``; motion
        calls raise until :meth:`resume`."""
        self._latched.set()  # before the count: see _run
        self._stop_count += 1
        self._estop()

    def resume(self) -> None:
        """Clear the stop latch; ``estop_resume`` (e.g. M999) goes before the next motion."""
        self._latched.clear()

    def _estop(self) -> None:
        self._resume_needed = self.config.estop_resume is not None
        port = self._port
        if self._lost is not None or port is None or not port.is_open:
            return  # a lost link is a stopped arm
        try:
            with self._write_lock:
                port.write((self.config.estop + "\n").encode())
                port.flush()
        except (serial.SerialException, OSError) as exc:
            self._link_lost(f"write failed: {exc}")
        self._last_command = self.config.estop

    def state(self) -> ArmState:
        """Position from M114; while a motion runs, the last known one (M114 would queue
        behind M400), with ``moving=True`` and ``extra["stale"] = 1``."""
        stale = self._motions > 0 or self._lost is not None
        if not stale:
            info = self._run(["M114"], self.config.timeout)
            position = next((parse_position(i) for i in info if _POSITION.match(i)), None)
            if position is None or not {"X", "Y", "Z"} <= position.keys():
                raise ArmError(
                    "GcodeArm: M114 was answered without a position line: check that the "
                    "firmware reports 'X:.. Y:.. Z:..'"
                )
            self._position.update(position)
        p = self._position
        return ArmState(
            pose=Pose(
                p.get("X", 0.0) / 1000.0,
                p.get("Y", 0.0) / 1000.0,
                p.get("Z", 0.0) / 1000.0,
                *self.config.orientation,
            ),
            joints=tuple(math.radians(p[a]) for a in self.config.joint_axes if a in p),
            gripper_closed=self._gripper_closed,
            moving=self._motions > 0,
            stopped=self._latched.is_set(),
            error=self._lost,
            last_command=self._last_command,
            extra={
                "garbage_lines": float(self.garbage_lines),
                "stray_answers": float(self.stray_answers),
                "stale": float(stale),
            },
        )

    def set_acceleration(self, linear: float, joint: float) -> None:
        """Cap the acceleration (``linear`` in m/s²); ``joint`` is not in the dialect."""
        del joint
        if self.config.acceleration is not None:
            mm_s2 = linear * 1000.0
            fixed("S", mm_s2)  # refuses a negative or non-finite one before it is written
            if not mm_s2 > 0:
                raise SafetyError(f"GcodeArm: acceleration {linear!r} m/s² must be positive")
            line = self.config.acceleration.format(mm_s2=mm_s2)
            if re.search(r"\d[eE][-+]?\d|nan|inf", line, re.IGNORECASE):
                raise SafetyError(f"GcodeArm: {line!r} has a number in exponent form")
            self.command(line)

    # -- lines and answers ----------------------------------------------------------------

    def command(self, line: str, timeout: float | None = None) -> list[str]:
        """Send one line and wait for its ``ok``; returns the report lines that came before."""
        return self._run([line], timeout or self.config.timeout)

    def stream(self, lines: list[str], timeout: float | None = None) -> None:
        """Send a program, keeping at most ``in_flight`` lines awaiting ``ok``."""
        self._run(lines, timeout or self.config.timeout)

    def _run(self, lines: list[str], timeout: float, *, motion: float | None = None) -> list[str]:
        """Send ``lines`` and wait for each answer: ``timeout`` s each, or ``motion`` s for
        the lines that wait for motion (M400, homing); ``motion`` also marks the arm moving
        and refuses to send after a stop.

        The stop count is read before any line is sent and stop() latches before it counts,
        so a stop either is seen by :meth:`_send` (nothing more is sent) or changes the count
        (the call raises): it cannot fall between the two unnoticed."""
        self._check_link()
        stops = self._stop_count
        moving = motion is not None
        slow = max(timeout, motion or 0.0)
        waits_for_motion = {"M400", self.config.home_command.split()[0].upper()}
        with self._counter_lock:
            self._motions += moving
        try:
            pending = [self._send(line, slow, moving) for line in lines]
            for p in pending:
                head = p.line.split()[0].upper() if p.line.strip() else ""
                self._wait(p, slow if head in waits_for_motion else timeout)
        finally:
            with self._counter_lock:
                self._motions -= moving
        if moving and self._stop_count != stops:
            raise ArmError(f"GcodeArm: {lines[0]!r} was interrupted by stop()")
        return [i for p in pending for i in p.info]

    def _send(self, line: str, timeout: float, motion: bool = False) -> _Pending:
        if not self._window.acquire(timeout=timeout):
            self._timed_out(line, timeout, "a free slot in the window")
        pending = _Pending(line)
        try:
            with self._write_lock:
                self._check_link()
                if motion:
                    self._check_latch()
                port = self._port
                if port is None:  # pragma: no cover - _check_link covers it
                    raise ArmError("GcodeArm: not connected: call connect() first")
                self._fifo.append(pending)
                port.write((line + "\n").encode())
                self._last_command = line
        except (serial.SerialException, OSError) as exc:
            self._link_lost(f"write failed: {exc}")
            self._check_link()
        except ArmError:
            self._window.release()
            raise
        return pending

    def _wait(self, pending: _Pending, timeout: float) -> None:
        if not pending.done.wait(timeout):
            self._timed_out(pending.line, timeout, "its ok")
        self._check_link()
        if pending.error is not None:
            raise ArmError(f"GcodeArm: the controller refused {pending.line!r}: {pending.error}")

    def _timed_out(self, line: str, timeout: float, what: str) -> None:
        self._desync = line
        self._estop()
        raise ArmTimeout(
            f"GcodeArm: no answer to {line!r} within {timeout:.1f} s (waiting for {what}); "
            "stop was sent; call reconnect() before the next command"
        )

    def _check_link(self) -> None:
        if self._lost is not None:
            raise LinkLost(
                f"GcodeArm: the link to {self.config.url!r} is lost ({self._lost}); the arm "
                "is taken as stopped: call reconnect()"
            )
        if self._port is None or not self._running.is_set():
            raise ArmError("GcodeArm: not connected: call connect() first")
        if self._desync is not None:
            raise ArmTimeout(
                f"GcodeArm: {self._desync!r} was never answered, so answers may be out of step:"
                " call reconnect()"
            )

    def _check_latch(self) -> None:
        if self._latched.is_set():
            raise ArmError("GcodeArm: stopped by stop(): call resume() before the next motion")

    def _before_motion(self) -> None:
        self._check_latch()
        if self._resume_needed and self.config.estop_resume is not None:
            self._resume_needed = False
            self.command(self.config.estop_resume)

    # -- the reader thread ----------------------------------------------------------------

    def _read_loop(self, port: serial.SerialBase) -> None:
        buffer = b""
        while self._running.is_set():
            try:
                chunk = port.read(max(1, port.in_waiting))
            except (serial.SerialException, OSError, TypeError, AttributeError) as exc:
                if self._running.is_set():
                    self._link_lost(f"read failed: {exc}")
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > _MAX_LINE:  # noise without an end of line
                lines.append(buffer)
                buffer = b""
            for raw in lines:
                self._on_line(raw.decode("ascii", errors="replace").strip())

    def _on_line(self, line: str) -> None:
        if not line:
            return
        error = _ERROR.match(line)
        if error and self.config.error_then_ok:  # Marlin: "Error:..." and then "ok"
            if self._fifo:
                self._fifo[0].error = error.group(1).strip() or "error"
        elif _OK.match(line) or error:
            self._answer(line, error.group(1).strip() if error else None)
        elif _POSITION.match(line):
            if self._fifo:
                self._fifo[0].info.append(line)
        elif line.lower().startswith(_INFO):
            log.debug("gcode: %s", line)
        else:
            self.garbage_lines += 1
            log.warning("GcodeArm: skipped an unreadable line from the controller: %r", line)

    def _answer(self, line: str, error: str | None) -> None:
        try:
            pending = self._fifo.popleft()
        except IndexError:
            self.stray_answers += 1
            log.warning("GcodeArm: an answer with no line awaiting it: %r", line)
            return
        if error is not None:
            pending.error = error or "error"
        self._window.release()
        pending.done.set()

    def _link_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
            log.error("GcodeArm: link to %s lost: %s", self.config.url, reason)
        self._fail_pending(reason)

    def _fail_pending(self, reason: str) -> None:
        while self._fifo:
            try:
                pending = self._fifo.popleft()
            except IndexError:
                break
            pending.error = reason
            with contextlib.suppress(ValueError):  # released already
                self._window.release()
            pending.done.set()

    # -- units ----------------------------------------------------------------------------

    def _feed(self, speed: float | None) -> float:
        if speed is None:
            return min(self.config.default_feed, self.config.feed_max)
        if speed <= 0 or not math.isfinite(speed):
            raise ArmError(f"GcodeArm: speed {speed} m/s must be positive")
        return min(speed * 60_000.0, self.config.feed_max)

    def _joint_feed(self, speed: float | None) -> float:
        if speed is None:
            return self.config.joint_feed_max / 2
        if speed <= 0 or not math.isfinite(speed):
            raise ArmError(f"GcodeArm: joint speed {speed} rad/s must be positive")
        return min(math.degrees(speed) * 60.0, self.config.joint_feed_max)

    def _distance_mm(self, target: tuple[float, float, float]) -> float:
        here = [self._position.get(a) for a in "XYZ"]
        if any(v is None for v in here):
            return 1000.0  # unknown start: allow for a metre of travel
        return math.dist(target, [v or 0.0 for v in here])

    def _motion_timeout(self, minutes: float) -> float:
        """Seconds to allow for a motion the feed rate says takes ``minutes``."""
        return min(self.config.timeout + 120.0 * minutes, self.config.motion_timeout)
