"""A desktop arm on a serial line, speaking Marlin's or GRBL's G-code (``dialect``).

The link is a pyserial port opened with ``serial.serial_for_url``, so the same driver runs on
``/dev/ttyUSB0``, ``socket://host:port``, ``loop://`` and a pty path such as ``/dev/pts/3``
(the emulators in :mod:`onboard.drivers.emulators`). A test may hand in its own port.

What the driver sends, in millimetres and mm/min (SI in the API)::

    G21 / G90                      millimetres, absolute positions (sent on connect)
    G1 X Y Z F                     linear move of the tool
    G1 <joint_axes> F              joint move, degrees and deg/min, only on axes the
                                   configuration says the machine has
    then, until the motion is done:  M400 (Marlin) | G4 P0, then ? until Idle (GRBL)
    home:                          G28 + M400 (Marlin) | $H (GRBL)
    grip:                          grip_on / grip_off (Marlin M106 S255 / M107, GRBL M3 / M5),
                                   sent at connect once (grip_off) to check the firmware has it
    position:                      M114 (Marlin, not while moving) | ? (GRBL, any time but
                                   while homing); read back after every move (reach check)
    acceleration:                  M204 S (Marlin) | $120-$122 lowered to the cap where
                                   higher, put back on close (GRBL)
    stop():                        M410 (Marlin) | feed hold !, then reset; ctrl-x while
                                   homing (GRBL)
    emergency_stop():              M112 (Marlin: halts the board until reset) | ctrl-x (GRBL)

With ``kinematics = "joints"`` every axis is a joint of the arm (X Y Z included) and onboard
does the kinematics (:mod:`~onboard.drivers.arm.gcode_joints`): ``move_to`` streams
``G1 <every joint axis> F`` waypoints along the straight line, all solved before the first is
written; ``move_joints`` names every joint's axis; ``state()`` reads the axes and computes the
tool's pose from them.

Moves are refused ("home() before the next motion") once the position is lost: Marlin's
M410 stopped a motion, the controller rebooted (a reconnect that resets the board), or GRBL
raised an alarm; a successful ``home()`` clears it. After every move the position the firmware
reports is checked against the target (``reach_tolerance``, ``joint_tolerance``): Marlin
clamps a move to its soft endstops, or drops it before homing, and says so only in an echo.

Answers are matched to lines in order by :class:`~onboard.drivers.arm.gcode_link.SerialLink`;
the dialect (:mod:`~onboard.drivers.arm.gcode_dialects`) says what each line from the
controller is. A line that is neither an answer nor a report is skipped, logged and counted
(``state().extra["garbage_lines"]``). A lost link raises ``LinkLost`` and the arm is taken as
stopped; ``reconnect()`` reopens it (without homing).

``stop()`` writes the recoverable stop at once and latches: a motion line is never written
after it until ``resume()`` (the check and the write share the write lock, so a stop either
comes before a motion line on the wire and the line is refused, or after it and the motion
call raises). A timeout also stops the machine recoverably, never with ``M112``; on Marlin the
link then needs ``reconnect()``. A motion is bounded by ``motion_timeout`` whatever the
controller says meanwhile; Marlin's keepalives (``echo:busy``) only allow ``silence_timeout``
between two of them.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections.abc import Callable

import serial

from onboard.base.errors import ArmError, ArmTimeout, SafetyError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import GcodeArmConfig
from onboard.drivers.arm.gcode_dialects import Dialect, Grbl, Marlin, parse_position
from onboard.drivers.arm.gcode_joints import JointSpace, Waypoint
from onboard.drivers.arm.gcode_link import SerialLink
from onboard.drivers.device import Device

__all__ = ["WORD_LIMITS", "GcodeArm", "GcodeArmConfig", "fixed", "parse_position", "word_range"]

log = logging.getLogger(__name__)


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


#: commands that move the machine (the position is in doubt until one is seen to end)
_MOVES = frozenset({"G0", "G1", "G2", "G3", "G28", "G29", "G30", "$H"})


def _pairs(waypoints: list[Waypoint]) -> list[tuple[Waypoint, dict[str, float] | None]]:
    """Each waypoint with the axes of the one before it (None: the first)."""
    return [(w, waypoints[i - 1].axes if i else None) for i, w in enumerate(waypoints)]


def _head(line: str) -> str:
    return line.split()[0].upper() if line.strip() else ""


class GcodeArm(Device):
    """An :class:`~onboard.drivers.arm.base.Arm` over a G-code serial link.

    ``port`` may be injected (any pyserial port, open or not; the driver sets its read
    timeout); otherwise ``connect()`` opens ``config.url`` with ``serial.serial_for_url``.
    """

    def __init__(self, config: GcodeArmConfig, port: serial.SerialBase | None = None) -> None:
        self.config = config
        self.dialect: Dialect = Grbl(self) if config.dialect == "grbl" else Marlin(self)
        self.link = SerialLink(
            url=config.url,
            baudrate=config.baud,
            in_flight=1 if config.numbered else config.in_flight,
            rx_buffer=config.rx_buffer,
            classify=self.dialect.classify,
            on_status=self.dialect.on_status,
            on_alarm=self.dialect.on_alarm,
            on_boot=self._on_boot,
            on_answer=self._on_answer,
            resync=self.dialect.resync if config.numbered else None,
            port=port,
        )
        self._counter_lock = threading.Lock()
        self._stop_count = 0
        self._latched = threading.Event()
        self._motions = 0
        self._gripper_closed = False
        self._position: dict[str, float] = {}
        self._homing = False
        self._connecting = False
        self._connected_before = False
        self._at_rest = True  # no motion sent since the last one was seen to end
        #: why the position is lost (moves are refused until home()), or None
        self._home_first: str | None = None
        #: kinematics = "joints": the arm's joints and their DH chain, else None
        self.joint_space = JointSpace(config) if config.kinematics == "joints" else None

    def forward(self, joints: tuple[float, ...]) -> Pose:
        """The tool's pose for ``joints`` (kinematics = "joints" only), for SafeArm."""
        if self.joint_space is None:
            raise ArmError('GcodeArm: forward kinematics needs kinematics = "joints"')
        return self.joint_space.chain.forward(joints)

    @property
    def gripper_closed(self) -> bool:
        return self._gripper_closed

    @property
    def homing(self) -> bool:
        return self._homing

    def regrip(self) -> None:
        self.command(self.config.grip_codes[0])
        self._gripper_closed = True

    def _on_boot(self) -> None:
        """The controller restarted (reader thread): its outputs are off; unless the driver
        reset it (a reset it waits for) or is connecting, it lost its position too."""
        self._gripper_closed = False
        expected, self.dialect.resetting = self.dialect.resetting, False
        if not (expected or self._connecting):
            self._home_first = "the controller restarted: its position is lost"

    def _on_answer(self, line: str) -> None:
        """(the link's reader) A move answered while a stop is latched was written before the
        stop (none is written after it), and the firmware may have planned it after the stop:
        stop again at once, whichever thread is waiting for what."""
        if self._latched.is_set() and _head(line) in ("G0", "G1"):
            self.dialect.stop_again()

    # -- link -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Open the port, wait for the controller to boot, check it, send the startup
        lines and switch the gripper output off. Does not home."""
        if self.link.is_open:
            return
        self._connecting = True
        self.link.open()
        try:
            if self.dialect.connect() and self._connected_before:
                self._home_first = (
                    "the controller restarted when the link was reopened: its position is lost"
                )
            if self.dialect.stopped_leftover:
                self._home_first = (
                    "M410 at connect stopped what an earlier host left running: Marlin's "
                    "position is likely out of step with the steppers"
                )
            self._connected_before = True
            if not self.dialect.locked:
                self._prepare()
        except ArmError:
            self.close()
            raise
        finally:
            self._connecting = False

    def _prepare(self) -> None:
        """The startup lines and the gripper check: G-code a locked controller (GRBL in
        alarm) refuses, so they wait for home()."""
        for line in self.config.startup:
            self.command(line)
        if self.config.check_gripper:
            self._check_gripper()
        self.dialect.locked = False

    def _check_gripper(self) -> None:
        open_code = self.config.grip_codes[1]
        try:
            self.command(open_code)
        except ArmError as exc:
            raise ArmError(
                f"GcodeArm: the firmware refused the gripper's {open_code!r} ({exc}): set "
                f"grip_on/grip_off in [drivers.arm] to commands this {self.config.dialect} "
                "build has (e.g. M106 S255/M107 for a fan output, M280 for a servo)"
            ) from None
        self._gripper_closed = False

    def close(self) -> None:
        """Put back the controller settings the driver changed (GRBL's accelerations), if
        the link still takes lines, then close it."""
        link = self.link
        if link.is_open and not (link.lost or link.halted or link.desync):
            try:
                for line in self.dialect.restore_lines():
                    self.command(line)
            except ArmError as exc:
                log.warning("GcodeArm: could not put the controller's settings back: %s", exc)
        link.close()

    def reconnect(self) -> None:
        """Close and reopen the link (after a timeout or a lost link). Does not home."""
        self.close()
        self.connect()

    # -- the Arm --------------------------------------------------------------------------

    def home(self) -> None:
        """Home (G28 / $H); success clears a lost position and an old alarm."""
        self._check_latch()
        locked = self.dialect.locked
        self._homing = True
        try:
            self._run(self.dialect.home_lines(), motion=self.config.motion_timeout)
        finally:
            self._homing = False
        self._position = {}
        self.link.alarm = None
        self._home_first = None
        if locked:
            self._prepare()

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        if self.joint_space is not None:
            self._move_to_in_joints(self.joint_space, pose, speed)
            return
        feed = self._feed(speed)
        x, y, z = (round(v * 1000.0, 3) for v in pose.position())
        words = [fixed(a, v) for a, v in zip("XYZ", (x, y, z), strict=True)]
        line = f"G1 {' '.join(words)} {fixed('F', feed, 0)}"
        self._check_latch()
        self._check_position()
        if not {"X", "Y", "Z"} <= self._position.keys() and self._motions == 0:
            self.state()  # where from, for the time the move may take
        distance = self._distance_mm((x, y, z))
        said = self._motion(line, distance / feed)
        self._check_reach(line, dict(zip("XYZ", (x, y, z), strict=True)), said)

    def _move_to_in_joints(self, space: JointSpace, pose: Pose, speed: float | None) -> None:
        """Straight-line waypoints, each solved (and checked against the joint limits) before
        the first line is written."""
        tool_speed = self._feed(speed) / 60_000.0
        self._check_latch()
        self._check_position()
        here = self._joints_now(space)
        waypoints = space.line_to(here, pose, tool_speed, self.config.joint_feed_max)
        lines = [
            f"G1 {' '.join(fixed(a, v) for a, v in w.axes.items())} {fixed('F', w.feed, 0)}"
            for w in waypoints
        ]
        minutes = sum(self._travel(w.axes, before) / w.feed for w, before in _pairs(waypoints))
        said = self._motion_lines(lines, minutes)
        self._check_joint_reach(space, lines[-1], waypoints[-1].axes, said)

    def _joints_now(self, space: JointSpace) -> tuple[float, ...]:
        if not set(space.letters) <= self._position.keys():
            self.state()
        return space.from_axes(self._position)

    def _travel(self, target: dict[str, float], before: dict[str, float] | None) -> float:
        start = before if before is not None else self._position
        return math.dist([start.get(a, v) for a, v in target.items()], list(target.values()))

    def _move_joints_in_joints(
        self, space: JointSpace, joints: tuple[float, ...], speed: float | None
    ) -> None:
        if not 0 < len(joints) <= len(space.joints):
            raise ArmError(
                f"GcodeArm: move_joints got {len(joints)} joints; the arm has "
                f"{len(space.joints)} ([[drivers.arm.joints]] {space.letters})"
            )
        target = space.to_axes(joints)
        feed = self._joint_feed(speed)
        line = f"G1 {' '.join(fixed(a, v) for a, v in target.items())} {fixed('F', feed, 0)}"
        self._check_latch()
        self._check_position()
        self._joints_now(space)
        travel = max(abs(v - self._position.get(a, v + 360.0)) for a, v in target.items())
        said = self._motion(line, travel / feed)
        self._check_joint_reach(space, line, target, said)

    def _check_joint_reach(
        self, space: JointSpace, line: str, target: dict[str, float], said: list[str]
    ) -> None:
        reached = self.dialect.position()
        self._position.update(reached)
        off = {a: abs(v - reached.get(a, math.inf)) for a, v in target.items()}
        if all(off[a] <= space.tolerance(a) for a in target):
            return
        where = " ".join(f"{a}:{reached[a]:.3f}" for a in target if a in reached)
        echo = [s for s in said if s.lower().startswith(("echo:", "error:", "[msg:"))]
        why = f"it said {'; '.join(echo)!r}" if echo else "it clamped the move or dropped it"
        worst = max(off, key=lambda a: off[a] / space.tolerance(a))
        raise ArmError(
            f"GcodeArm: {line!r} did not reach its target: the firmware reports {where} "
            f"({worst} {off[worst]:.3f} off; joint_tolerance {self.config.joint_tolerance} rad, "
            f"reach_tolerance {self.config.reach_tolerance} m); {why}"
        )

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        if self.joint_space is not None:
            self._move_joints_in_joints(self.joint_space, joints, speed)
            return
        axes = self.config.joint_axes
        if not 0 < len(joints) <= len(axes):
            raise ArmError(
                f"GcodeArm: move_joints got {len(joints)} joints; joint_axes {axes!r} names "
                f"{len(axes)}: list the machine's rotational axes in joint_axes in "
                "[drivers.arm] (none: this arm moves in X Y Z only)"
            )
        degrees = [math.degrees(q) for q in joints]
        feed = self._joint_feed(speed)
        words = " ".join(fixed(a, d) for a, d in zip(axes, degrees, strict=False))
        used = axes[: len(joints)]
        line = f"G1 {words} {fixed('F', feed, 0)}"
        self._check_latch()
        self._check_position()
        if not set(used) <= self._position.keys() and self._motions == 0:
            self.state()  # where from, for the time the move may take
        travel = max(
            abs(d - self._position.get(a, d + 360.0)) for a, d in zip(used, degrees, strict=True)
        )
        said = self._motion(line, travel / feed)
        self._check_reach(line, dict(zip(used, degrees, strict=True)), said)

    def grip(self, close: bool) -> None:
        code = self.config.grip_codes[0 if close else 1]
        sync = list(self.dialect.sync_lines)
        self._check_latch()
        self._run([*sync, code, *sync], motion=self.config.motion_timeout)
        if self.config.grip_settle:
            time.sleep(self.config.grip_settle)
        self._gripper_closed = close

    def stop(self) -> None:
        """Stop now, recoverably (Marlin ``M410``, GRBL feed hold), and latch: motion calls
        raise until :meth:`resume`. Never ``M112``."""
        self._latched.set()  # before the count: see _run
        self._stop_count += 1
        if self.dialect.stop_loses_position and not self._at_rest:
            self._home_first = (
                "M410 (quickstop) stopped a motion: Marlin's position is likely out of step "
                "with the steppers"
            )
        self.dialect.stop()

    def emergency_stop(self) -> None:
        """The operator's emergency stop: Marlin ``M112`` halts the board until it is reset
        or power-cycled (then ``reconnect()`` and ``home()``); GRBL resets (``ALARM:3``:
        home again)."""
        self._latched.set()
        self._stop_count += 1
        self.dialect.emergency_stop()

    def resume(self) -> None:
        """Clear the stop latch; the controller is made ready at the next command."""
        self._latched.clear()

    def state(self) -> ArmState:
        """Where the tool is. Marlin answers ``M114`` only between motions: while one runs,
        the last known position, with ``moving=True`` and ``extra["stale"] = 1``; GRBL's
        ``?`` is answered at any time but while homing (the last known position then).
        ``error`` names an alarm, a halt, a lost link, or a lost position (home() first)."""
        link = self.link
        stale = (
            link.lost is not None
            or self._homing  # GRBL answers no '?' while homing; Marlin no M114
            or (self._motions > 0 and not self.dialect.live_position)
        )
        if not stale:
            self._position.update(self.dialect.position())
        p = self._position
        moving = self._motions > 0 or (not stale and self.dialect.reports_moving())
        if self.joint_space is not None:
            joints = self.joint_space.from_axes(p)
            pose = self.joint_space.chain.forward(joints)
        else:
            joints = tuple(math.radians(p[a]) for a in self.config.joint_axes if a in p)
            pose = Pose(
                p.get("X", 0.0) / 1000.0,
                p.get("Y", 0.0) / 1000.0,
                p.get("Z", 0.0) / 1000.0,
                *self.config.orientation,
            )
        return ArmState(
            pose=pose,
            joints=joints,
            gripper_closed=self._gripper_closed,
            moving=moving,
            stopped=self._latched.is_set(),
            error=self.dialect.error or self._lost_position(),
            last_command=link.last_written,
            extra={
                "garbage_lines": float(link.garbage_lines),
                "stray_answers": float(link.stray_answers),
                "keepalives": float(link.keepalives),
                "stale": float(stale),
            },
        )

    def set_acceleration(self, linear: float, joint: float) -> None:
        """Cap the acceleration (``linear`` in m/s²); ``joint`` is not in either dialect."""
        del joint
        if not self.config.acceleration:
            return
        mm_s2 = linear * 1000.0
        fixed("S", mm_s2)  # refuses a negative or non-finite one before it is written
        if not mm_s2 > 0:
            raise SafetyError(f"GcodeArm: acceleration {linear!r} m/s² must be positive")
        for line in self.dialect.acceleration_lines(mm_s2):
            if re.search(r"\d[eE][-+]?\d|nan|inf", line, re.IGNORECASE):
                raise SafetyError(f"GcodeArm: {line!r} has a number in exponent form")
            self.command(line)

    # -- lines and answers ----------------------------------------------------------------

    def command(self, line: str, timeout: float | None = None) -> list[str]:
        """Send one line and wait for its answer; returns the report lines that came with it."""
        return self._run([line], timeout=timeout)

    def stream(self, lines: list[str], timeout: float | None = None) -> None:
        """Send a program, keeping at most ``in_flight`` lines awaiting their answer."""
        self._run(lines, timeout=timeout)

    def _motion(self, line: str, minutes: float) -> list[str]:
        return self._motion_lines([line], minutes)

    def _motion_lines(self, lines: list[str], minutes: float) -> list[str]:
        self._check_latch()
        return self._run([*lines, *self.dialect.sync_lines], motion=self._motion_timeout(minutes))

    def _lost_position(self) -> str | None:
        if self._home_first is None:
            return None
        return f"GcodeArm: home() before the next motion: {self._home_first}"

    def _check_position(self) -> None:
        """Refuse a move while the position is lost (until home())."""
        reason = self._home_first or self.link.alarm
        if reason is not None:
            raise ArmError(f"GcodeArm: home() before the next motion: {reason}")

    def _check_reach(self, line: str, target: dict[str, float], said: list[str]) -> None:
        """Read the position back and raise if an axis is farther from ``target`` than the
        tolerance: the firmware clamped the move (Marlin's soft endstops) or dropped it (Marlin
        before homing); ``said`` holds what it printed meanwhile."""
        reached = self.dialect.position()
        self._position.update(reached)
        linear = [a for a in target if a in "XYZ"]
        joint = [a for a in target if a not in "XYZ"]
        off_mm = math.dist([target[a] for a in linear], [reached.get(a, math.inf) for a in linear])
        off_deg = max((abs(target[a] - reached.get(a, math.inf)) for a in joint), default=0.0)
        tolerance_mm = self.config.reach_tolerance * 1000.0
        tolerance_deg = math.degrees(self.config.joint_tolerance)
        if off_mm <= tolerance_mm and off_deg <= tolerance_deg:
            return
        where = " ".join(f"{a}:{reached[a]:.3f}" for a in target if a in reached)
        echo = [s for s in said if s.lower().startswith(("echo:", "error:", "[msg:"))]
        why = (
            f"it said {'; '.join(echo)!r}"
            if echo
            else "it clamped the move (soft endstops or limits) or dropped it"
        )
        raise ArmError(
            f"GcodeArm: {line!r} did not reach its target: the firmware reports {where} "
            f"({off_mm:.1f} mm, {off_deg:.2f} deg off; reach_tolerance "
            f"{self.config.reach_tolerance} m, joint_tolerance {self.config.joint_tolerance} "
            f"rad); {why}"
        )

    def _run(
        self, lines: list[str], *, timeout: float | None = None, motion: float | None = None
    ) -> list[str]:
        """Send ``lines`` and wait for each answer: ``timeout`` s each, or ``motion`` s for
        the lines that wait for motion; ``motion`` also marks the arm moving, refuses to
        send after a stop, and waits for the dialect's end of motion.

        The stop count is read before any line is sent and stop() latches before it counts,
        so a stop either is seen by the send's guard (nothing more is sent) or changes the
        count (the call raises): it cannot fall between the two unnoticed."""
        each = timeout or self.config.timeout
        self.dialect.before_command()
        stops = self._stop_count
        moving = motion is not None
        slow = max(each, motion or 0.0)
        guard: Callable[[], None] | None = self._check_latch if moving else None
        deadline = time.monotonic() + self.config.motion_timeout if moving else None
        silence = self.config.silence_timeout if moving else None
        if any(_head(line) in _MOVES or _head(line).startswith("$J") for line in lines):
            self._at_rest = False
        with self._counter_lock:
            self._motions += moving
        try:
            window = self.dialect.motion_window
            pending = [
                self.link.send(line, slow, guard, window if _head(line) in _MOVES else None)
                for line in lines
            ]
            info: list[str] = []
            for p in pending:
                blocking = _head(p.line) in self.dialect.blocking
                info += self.link.wait(
                    p,
                    slow if blocking else each,
                    deadline=deadline,
                    silence=silence if blocking else None,
                )
            if moving:
                left = slow if deadline is None else max(0.0, deadline - time.monotonic())
                self.dialect.after_sync(min(slow, left))
                self._at_rest = True
        except ArmTimeout:
            if self._stop_count == stops:
                self.dialect.on_timeout()
                if moving and self.dialect.stop_loses_position:
                    self._home_first = "a motion timed out and was stopped with M410"
                bound = deadline is not None and time.monotonic() > deadline
                what = (
                    f"was not done within motion_timeout ({self.config.motion_timeout:g} s)"
                    if bound
                    else "had no answer in time"
                )
                raise ArmTimeout(
                    f"GcodeArm: {lines[0]!r} {what}; the machine was stopped "
                    f"({'feed hold and reset' if self.config.dialect == 'grbl' else 'M410'}), "
                    "call reconnect() before the next command"
                ) from None
            raise ArmError(f"GcodeArm: {lines[0]!r} was interrupted by stop()") from None
        except ArmError:
            if moving and self._stop_count != stops:
                raise ArmError(f"GcodeArm: {lines[0]!r} was interrupted by stop()") from None
            raise
        finally:
            with self._counter_lock:
                self._motions -= moving
        if moving and self._stop_count != stops:
            raise ArmError(f"GcodeArm: {lines[0]!r} was interrupted by stop()")
        return info

    def _check_latch(self) -> None:
        if self._latched.is_set():
            raise ArmError("GcodeArm: stopped by stop(): call resume() before the next motion")

    # -- units ----------------------------------------------------------------------------

    def _feed(self, speed: float | None) -> float:
        """mm/min: the speed asked for, capped by ``feed_max`` and by what the controller
        says it runs at most (so the time a move may take is known)."""
        cap = min(self.config.feed_max, self.dialect.max_feed() or math.inf)
        if speed is None:
            return min(self.config.default_feed, cap)
        if speed <= 0 or not math.isfinite(speed):
            raise ArmError(f"GcodeArm: speed {speed} m/s must be positive")
        return min(speed * 60_000.0, cap)

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
