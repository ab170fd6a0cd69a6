"""A Marlin/GRBL-style G-code controller on a pseudo-terminal, backed by any Arm.

``GcodePtyEmulator(arm).start()`` opens a pty with ``os.openpty`` and answers on its master
side; :attr:`path` (``/dev/pts/N``) is what a driver opens with ``serial.serial_for_url``. It
speaks the dialect described in :mod:`onboard.drivers.arm.gcode`: moves are queued in a planner of
``planner_size`` entries and answered ``ok`` when queued (the answer is held while the planner
is full), ``M400`` is answered when every queued motion is done, ``M112`` is acted on when it
arrives and is not answered. A motion the backend could not do is reported as ``error:`` on
the next ``M400``. Errors are GRBL-style (``error:<msg>`` instead of ``ok``), or Marlin-style
with ``error_then_ok`` (``Error:<msg>`` and then ``ok``).

Hostile input is answered ``error:``, as GRBL does: a word whose number is not a plain finite
decimal (``X1e9``, ``X nan``) or is out of :data:`~onboard.drivers.arm.gcode.WORD_LIMITS`
(``M204 S-1``), a line longer than :data:`MAX_LINE` bytes, a dwell past :data:`MAX_DWELL`.
A ``G4`` dwell waits in the planner and ends at once on ``M112``, ``M410`` or ctrl-x
(0x18), which are acted on when read, however busy the planner is.

Faults for tests: :meth:`inject_garbage`, :meth:`fail_next`, :meth:`mute`, :meth:`close_link`.
To inject one while a motion runs, wait until the controller has begun it:
``emulator.worker.wait_started(started + 1, timeout)``. ``M112`` latches the backend arm's stop;
the next motion received after it resumes the arm (``M999`` is accepted and does nothing).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import replace

from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.emulators import Job
from onboard.drivers.emulators.gcode_lines import BadWord, normalize, parse_line
from onboard.drivers.emulators.pty_controller import MAX_LINE, TOO_LONG, LineReader, PtyController

__all__ = [
    "MAX_DWELL",
    "MAX_LINE",
    "TOO_LONG",
    "GcodePtyEmulator",
    "LineReader",
    "normalize",
    "parse_line",
]

MAX_DWELL = 600.0  # seconds: a longer G4 is refused
_REALTIME_RESET = 0x18  # GRBL's ctrl-x: stop at once, on any byte boundary


class GcodePtyEmulator(PtyController):
    """A G-code controller on a pty, driving ``arm``."""

    realtime = frozenset({_REALTIME_RESET})

    def __init__(
        self,
        arm: Arm,
        *,
        grip_on: str = "M3",
        grip_off: str = "M5",
        joint_axes: str = "ABCUVWIJK",
        estop: str = "M112",
        planner_size: int = 8,
        orientation: tuple[float, float, float] | None = None,
        error_then_ok: bool = False,
    ) -> None:
        super().__init__(arm, planner_size=planner_size)
        self.grip_on = normalize(grip_on)
        self.grip_off = normalize(grip_off)
        self.joint_axes = joint_axes
        self.estop = normalize(estop)
        self.orientation = orientation
        self.error_then_ok = error_then_ok
        self._estops = 0
        self._acceleration = 0.0
        self._stamps: deque[int] = deque()  # the stop count when each queued line came

    def error_lines(self, message: str) -> list[str]:
        if self.error_then_ok:
            return [f"Error:{message}", "ok"]
        return [f"error:{message}"]

    def on_realtime(self, byte: int) -> None:
        # ctrl-x is acted on where it is read, never queued: the lines before it are
        # cancelled, a line it cuts is dropped (as GRBL's soft reset clears its buffer)
        self._halt()

    def on_line(self, raw: str) -> bool:
        line = normalize(raw)
        if not line:
            return False
        head = line.split()[0]
        estop = line == self.estop or head == self.estop
        if estop or head == "M410":  # the emergency parser: acted on at once
            self._halt()
            if estop:  # never queued nor answered; M410 is answered in turn
                return False
        return True

    def _halt(self) -> None:
        """Stop now: lines received before are cancelled, not run; a dwell ends."""
        self._estops += 1
        self.worker.stop()

    def _enqueue(self, line: str) -> None:
        self._stamps.append(self._estops)
        super()._enqueue(line)

    def execute(self, raw: str) -> list[str]:
        estops = self._stamps.popleft()
        line = raw if raw == TOO_LONG else normalize(raw)
        if estops != self._estops and _is_motion(line, self):
            return ["ok"]  # cancelled by M112: answered, not run
        answer = self._execute(line)
        if answer and answer[-1].startswith("error:"):
            return self.error_lines(answer[-1][len("error:") :])
        return answer

    # -- the dialect ----------------------------------------------------------------------

    def _execute(self, line: str) -> list[str]:
        if line == TOO_LONG:
            return [f"error:line longer than {MAX_LINE} bytes"]
        try:
            head, words = parse_line(line)
        except BadWord as exc:
            return [f"error:{exc}"]
        if line in (self.grip_on, self.grip_off):
            return self._queue(_grip(line == self.grip_on))
        if head in ("G0", "G00", "G1", "G01"):
            return self._move(words)
        if head == "G28":
            return self._queue(_home)
        if head == "G4":
            seconds = words.get("S", words.get("P", 0.0) / 1000.0)
            if seconds > MAX_DWELL:
                return [f"error:G4 dwell {seconds:g} s is longer than {MAX_DWELL:g} s"]
            return self._queue(lambda arm: self._dwell(seconds))
        if head in ("G21", "G90", "M999", "M17", "M84", "M410"):
            return ["ok"]
        if head == "M204":
            self._acceleration = words.get("S", words.get("P", self._acceleration))
            return ["ok"]
        if head == "M400":
            return self._sync()
        if head == "M114":
            return [self._position(), "ok"]
        if head in ("G20", "G91"):
            return [f"error:{head} is not supported: send G21 and G90 (mm, absolute)"]
        return [f"error:Unknown command: {line}"]

    def _dwell(self, seconds: float) -> None:
        self.worker.dwell(seconds)  # ended early by M112, M410 or ctrl-x

    def _queue(self, job: Job) -> list[str]:
        self.queue_job(job)
        return ["ok"]

    def _move(self, words: dict[str, float]) -> list[str]:
        joints = {a: words[a] for a in self.joint_axes if a in words}
        cartesian = {a: words[a] for a in "XYZ" if a in words}
        feed = words.get("F")
        if joints and cartesian:
            return ["error:a move names both X/Y/Z and joint axes: send them apart"]
        if joints:
            return self._queue(_joint_move(joints, self.joint_axes, feed))
        if not cartesian:
            return ["ok"]  # a feed-only line
        return self._queue(_linear_move(cartesian, feed, self.orientation))

    def _sync(self) -> list[str]:
        if not self.wait_idle():
            return []
        error = self.worker.take_error()
        return [f"error:{error}"] if error else ["ok"]

    def _position(self) -> str:
        state = self.arm.state()
        p = state.pose
        text = f"X:{p.x * 1000:.3f} Y:{p.y * 1000:.3f} Z:{p.z * 1000:.3f}"
        for axis, q in zip(self.joint_axes, state.joints, strict=False):
            text += f" {axis}:{math.degrees(q):.3f}"
        return text + " Count X:0 Y:0 Z:0"


def _is_motion(line: str, emulator: GcodePtyEmulator) -> bool:
    head = line.split()[0]
    grips = (emulator.grip_on, emulator.grip_off)
    return head in ("G0", "G00", "G1", "G01", "G28", "G4") or line in grips


def _home(arm: Arm) -> None:
    arm.home()


def _grip(close: bool) -> Job:
    def job(arm: Arm) -> None:
        arm.grip(close)

    return job


def _linear_move(
    target_mm: dict[str, float],
    feed: float | None,
    orientation: tuple[float, float, float] | None,
) -> Job:
    def job(arm: Arm) -> None:
        here = arm.state().pose
        pose = replace(here, **{axis.lower(): value / 1000.0 for axis, value in target_mm.items()})
        if orientation is not None:
            pose = Pose(pose.x, pose.y, pose.z, *orientation)
        arm.move_to(pose, None if feed is None else feed / 60_000.0)

    return job


def _joint_move(target_deg: dict[str, float], axes: str, feed: float | None) -> Job:
    def job(arm: Arm) -> None:
        joints = list(arm.state().joints)
        for i, axis in enumerate(axes[: len(joints)]):
            if axis in target_deg:
                joints[i] = math.radians(target_deg[axis])
        arm.move_joints(tuple(joints), None if feed is None else math.radians(feed / 60.0))

    return job
