"""The SO-101 (and SO-100) arm on its Feetech servo bus: :class:`So101Arm`.

Six STS3215 servos on one serial bus (:mod:`~onboard.drivers.arm.feetech`), ids and ranges
from LeRobot's calibration file when robot.toml names one (``calibration``), so a user who
calibrated with ``lerobot-calibrate`` reuses it; the kinematics are onboard's own
(:mod:`~onboard.drivers.arm.so101_kinematics`).

- ``connect()`` pings every servo (a missing one fails in one line naming the port and its
  id, and no torque is switched on), writes a homing offset that differs from the
  calibration's (torque off, EEPROM unlocked and locked again, as LeRobot does), sets each
  goal to where the servo is, then switches the torque on.
- ``move_joints`` sends every joint's goal in one SYNC_WRITE with speeds that end them
  together, then reads the positions back (SYNC_READ) until every joint is within
  ``joint_tolerance`` (the reach check), a stop, or ``motion_timeout``; a joint that makes no
  progress for ``stall_timeout`` fails it. ``move_to`` solves a straight line (the tool's
  orientation turning along it) into waypoints before anything moves, streams them at
  ``waypoint_interval``, then does the same check.
- ``stop()`` (any thread) switches every servo's torque off by a broadcast write (no answer
  needed, so it works while a reply is garbled): the arm goes limp, as LeRobot leaves it,
  and sags under its own weight. ``stop_mode = "hold"`` instead sets every goal to the last
  known position (torque stays on), for a set-up where a sagging arm would hit something.
  The encoders are absolute: no ``home()`` is needed after either. The next motion after
  ``resume()`` sets each goal to where the servo is before switching torque back on.
- A bus fault during a motion (a garbled answer, a missing servo, a servo's error bits)
  holds the arm where it last was (goals := last known positions, by a broadcast
  SYNC_WRITE; torque stays on, so nothing drops) and raises one line naming the port and
  servo id; a servo that reports overheat or overload has its torque switched off, the
  safe choice for a servo that is hurting itself.
- The gripper's state is read from its servo: ``state().gripper_closed`` is true when the jaw
  has left the open end after a close (short of the closed end when it holds something), or
  is still near closed after an open; ``extra["gripper_opening"]`` is 0 (closed) to 1.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import So101ArmConfig
from onboard.drivers.arm.feetech import BROADCAST, REG, BusError, FeetechBus, encode
from onboard.drivers.arm.so101_kinematics import (
    DEFAULT_CALIBRATION,
    JOINTS,
    MOTORS,
    Links,
    MotorCalibration,
    forward,
    load_calibration,
    solve,
)
from onboard.drivers.device import Device

__all__ = ["So101Arm"]

_POLL = 0.01  # seconds between position reads while a motion runs
_MAX_STEPS_PER_S = 3000  # goal speed cap written to the servos (STS3215: about 0.2 s/60 deg)
#: the least goal speed written: a joint that need not move still gets back at 0.09 rad/s
#: when a load pushes it off its goal (at 1 step/s it would crawl, and the motion stall)
_MIN_STEPS_PER_S = 60


class So101Arm(Device):
    """Implements :class:`~onboard.drivers.arm.base.Arm` for the SO-101 over its servo bus."""

    def __init__(self, config: So101ArmConfig, root: Path | None = None) -> None:
        self.config = config
        path = config.calibration
        if path is not None and root is not None and not path.is_absolute():
            path = root / path
        self.calibration: dict[str, MotorCalibration] = (
            load_calibration(path) if path is not None else dict(DEFAULT_CALIBRATION)
        )
        self.links = Links(*config.links)
        self.ids = {name: self.calibration[name].id for name in MOTORS}
        limits = [self.calibration[name].limits() for name in JOINTS]
        offsets = config.zero_offsets
        self.lower = tuple(lo + z for (lo, _), z in zip(limits, offsets, strict=True))
        self.upper = tuple(hi + z for (_, hi), z in zip(limits, offsets, strict=True))
        self.bus = FeetechBus(config.url, config.baudrate, config.timeout)
        self._stop = threading.Event()
        self._moving = False
        self._error: str | None = None
        self._last_command: str | None = None
        self._grip_closed_cmd = False
        self._known: dict[int, int] = {}  # last positions read, by servo id
        self._torque = False

    # -- life -----------------------------------------------------------------------------

    def connect(self) -> None:
        self.bus.open()
        try:
            for name in MOTORS:
                self.bus.ping(self.ids[name])
            for name in MOTORS:
                self._check_offset(name)
            self._read_positions()
            if self.config.torque_on_connect:
                self._torque_on()
        except BusError:
            self.bus.close()
            raise

    def close(self) -> None:
        if self._moving:  # a motion under way (another thread) stops, and the stop latches
            self.stop()
        if self.bus.is_open:
            if self.config.disable_on_close:
                with contextlib.suppress(BusError):
                    self.bus.write(BROADCAST, "torque_enable", 0)
            self.bus.close()

    # -- motion ---------------------------------------------------------------------------

    def home(self) -> None:
        self.move_joints(self.home_joints())

    def home_joints(self) -> tuple[float, ...]:
        if self.config.home_joints is not None:
            return tuple(self.config.home_joints)
        return solve(Pose(*self.config.home_pose), self.links, self.lower, self.upper).joints

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        if len(joints) != len(JOINTS):
            raise ArmError(f"so101: move_joints takes {len(JOINTS)} joints, got {len(joints)}")
        self._check_limits(joints)
        velocity = min(speed or self.config.joint_speed, self.config.max_joint_speed)
        with self._motion(f"move_joints({', '.join(f'{q:.3f}' for q in joints)})"):
            now = self._joints(self._read_positions())
            largest = max(abs(a - b) for a, b in zip(now, joints, strict=True))
            duration = max(largest / velocity, 1e-3)
            self._send_goals(joints, now, duration)
            self._wait_reached(joints, duration)

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        velocity = min(speed or self.config.speed, self.config.max_speed)
        final = solve(pose, self.links, self.lower, self.upper)
        with self._motion(f"move_to({pose.x:.4f}, {pose.y:.4f}, {pose.z:.4f})"):
            now = self._joints(self._read_positions())
            start = forward(now, self.links)
            distance = math.dist(start.position(), pose.position())
            duration = max(distance / velocity, 1e-3)
            path = self._line(now, start, pose, math.ceil(duration / self.config.waypoint_interval))
            path[-1] = final.joints
            interval = duration / len(path)
            began = time.monotonic()
            for i, goal in enumerate(path, start=1):
                # each joint's speed is from where it is (read back), not where the path
                # had it: a joint that lags (a load, gravity) is sent fast enough to catch up
                self._send_goals(goal, self._joints(self._known), interval)
                while time.monotonic() < began + i * interval:
                    self._check_stop()
                    self._read_positions()
                    time.sleep(_POLL)
            self._wait_reached(final.joints, interval)

    def _line(
        self, seed: tuple[float, ...], start: Pose, pose: Pose, steps: int
    ) -> list[tuple[float, ...]]:
        """Joints along the straight line from ``start`` to ``pose`` (the tool turning from
        one orientation to the other on the way), all solved before anything moves; ArmError
        when the line leaves the arm's reach."""
        steps = max(1, steps)
        path = []
        for i in range(1, steps + 1):
            point = start.toward(pose, i / steps)
            try:
                seed = solve(point, self.links, self.lower, self.upper, seed).joints
            except ArmError as exc:
                raise ArmError(
                    f"so101: the straight line to ({pose.x:.3f}, {pose.y:.3f}, {pose.z:.3f}) m "
                    f"leaves the arm's reach on the way ({exc}); move there in steps around it"
                ) from None
            path.append(seed)
        return path

    def grip(self, close: bool) -> None:
        cal = self.calibration["gripper"]
        goal = cal.range_min if close == self.config.gripper_closed_at_min else cal.range_max
        with self._motion(f"grip({'close' if close else 'open'})"):
            servo = self.ids["gripper"]
            self._grip_closed_cmd = close
            with self.bus.lock:
                self._check_stop()
                self.bus.write(servo, "goal_speed", _MAX_STEPS_PER_S)
                self.bus.write(servo, "goal_position", goal)
            deadline = time.monotonic() + self.config.grip_timeout
            last, still_since = None, time.monotonic()
            while True:
                self._check_stop()
                at = self._read_positions()[servo]
                if abs(at - goal) <= 8:
                    return
                now = time.monotonic()
                if last is None or abs(at - last) > 2:
                    last, still_since = at, now
                elif now - still_since > 0.2:  # the jaw stopped on something: it holds it
                    return
                if now > deadline:
                    raise ArmError(f"so101 {self.bus.port}: the gripper did not settle")
                time.sleep(_POLL)

    def stop(self) -> None:
        self._stop.set()
        self._stop_motion()

    def resume(self) -> None:
        self._stop.clear()

    def state(self) -> ArmState:
        positions = self._read_positions() if not self._moving else dict(self._known)
        joints = self._joints(positions)
        opening = self._opening(positions[self.ids["gripper"]])
        closed = opening < (0.95 if self._grip_closed_cmd else 0.5)
        return ArmState(
            pose=forward(joints, self.links),
            joints=joints,
            gripper_closed=closed,
            moving=self._moving,
            stopped=self._stop.is_set(),
            error=self._error,
            last_command=self._last_command,
            extra={"gripper_opening": opening},
        )

    def forward(self, joints: tuple[float, ...]) -> Pose:
        """The tool's pose for ``joints`` (what SafeArm checks a joint move with)."""
        return forward(joints, self.links)

    # -- helpers --------------------------------------------------------------------------

    def _motion(self, label: str) -> _Motion:
        return _Motion(self, label)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise ArmError("so101: stopped by stop(): call resume() to move again")

    def _check_limits(self, joints: Sequence[float]) -> None:
        for name, q, lo, hi in zip(JOINTS, joints, self.lower, self.upper, strict=True):
            if not lo - 1e-9 <= q <= hi + 1e-9:
                raise ArmError(
                    f"so101: {name} {q:.3f} rad is outside its limits [{lo:.3f}, {hi:.3f}]"
                )

    def _joints(self, positions: dict[int, int]) -> tuple[float, ...]:
        return tuple(
            self.calibration[name].to_radians(positions[self.ids[name]]) + zero
            for name, zero in zip(JOINTS, self.config.zero_offsets, strict=True)
        )

    def _opening(self, steps: int) -> float:
        cal = self.calibration["gripper"]
        fraction = (steps - cal.range_min) / max(1, cal.range_max - cal.range_min)
        fraction = min(1.0, max(0.0, fraction))
        return fraction if self.config.gripper_closed_at_min else 1.0 - fraction

    def _read_positions(self) -> dict[int, int]:
        positions = self.bus.sync_read("present_position", list(self.ids.values()))
        self._known = positions
        return positions

    def _check_offset(self, name: str) -> None:
        servo, cal = self.ids[name], self.calibration[name]
        raw = self.bus.read(servo, "homing_offset")
        magnitude = raw & 0x7FF
        have = -magnitude if raw & 0x800 else magnitude
        if have == cal.homing_offset:
            return
        want = (abs(cal.homing_offset) & 0x7FF) | (0x800 if cal.homing_offset < 0 else 0)
        self.bus.write(servo, "torque_enable", 0)
        self.bus.write(servo, "lock", 0)
        self.bus.write(servo, "homing_offset", want)
        self.bus.write(servo, "lock", 1)

    def _torque_on(self) -> None:
        """Goals := where the servos are, then torque on: nothing jumps."""
        positions = self._read_positions()
        address, size = REG["goal_position"]
        self.bus.sync_write(address, size, {s: encode(p, size) for s, p in positions.items()})
        self.bus.write(BROADCAST, "torque_enable", 1)
        self._torque = True

    def _send_goals(self, joints: Sequence[float], now: Sequence[float], duration: float) -> None:
        address, _ = REG["goal_position"]
        values = {}
        for name, q, q0, zero in zip(JOINTS, joints, now, self.config.zero_offsets, strict=True):
            cal = self.calibration[name]
            goal = cal.to_steps(q - zero)
            start = cal.to_steps(q0 - zero)
            speed = math.ceil(abs(goal - start) / duration * 1.05)
            speed = min(_MAX_STEPS_PER_S, max(_MIN_STEPS_PER_S, speed))
            values[cal.id] = encode(goal, 2) + encode(0, 2) + encode(speed, 2)
        with self.bus.lock:  # a stop's write lands before these goals or after: never lost
            self._check_stop()
            self.bus.sync_write(address, 6, values)

    def _wait_reached(self, joints: Sequence[float], expected: float) -> None:
        deadline = time.monotonic() + self.config.motion_timeout
        tolerance = self.config.joint_tolerance
        best = math.inf
        progress_at = time.monotonic()
        while True:
            self._check_stop()
            now = self._joints(self._read_positions())
            error = max(abs(a - b) for a, b in zip(now, joints, strict=True))
            if error <= tolerance:
                return
            t = time.monotonic()
            if error < best - 1e-3:
                best, progress_at = error, t
            elif t - progress_at > self.config.stall_timeout + expected:
                raise ArmError(
                    f"so101 {self.bus.port}: did not reach its target (a joint "
                    f"{error:.3f} rad away, no progress for {self.config.stall_timeout} s)"
                )
            if t > deadline:
                raise ArmError(f"so101 {self.bus.port}: the motion took over "
                               f"{self.config.motion_timeout} s")  # fmt: skip
            time.sleep(_POLL)

    def _stop_motion(self) -> None:
        """Stop as ``stop_mode`` says; a broadcast write needs no answer."""
        if not self.bus.is_open:
            return
        try:
            if self.config.stop_mode == "torque_off":
                self.bus.write(BROADCAST, "torque_enable", 0)
                self._torque = False
            else:
                self._hold()
        except BusError as exc:
            self._error = str(exc)

    def _hold(self) -> None:
        if self._known:
            address, size = REG["goal_position"]
            values = {s: encode(p, size) for s, p in self._known.items()}
            self.bus.sync_write(address, size, values)

    def _fault(self, exc: BusError) -> None:
        """A bus fault in a motion: hold where the arm last was; torque off a servo that
        reports overheat or overload."""
        self._error = str(exc)
        try:
            self._hold()
            if "overheat" in str(exc) or "overload" in str(exc):
                self.bus.write(BROADCAST, "torque_enable", 0)
                self._torque = False
        except BusError:
            pass


class _Motion:
    """One motion: refuses while stopped, switches torque on, marks moving, turns bus faults
    into a held arm and one line."""

    def __init__(self, arm: So101Arm, label: str) -> None:
        self.arm = arm
        self.label = label

    def __enter__(self) -> None:
        arm = self.arm
        arm._check_stop()
        if not arm.bus.is_open:
            raise ArmError("so101: not connected: call connect() first")
        arm._last_command = self.label
        arm._moving = True
        try:
            if not arm._torque:
                arm._torque_on()
        except BusError as exc:
            arm._moving = False
            arm._fault(exc)
            raise

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self.arm._moving = False
        if isinstance(exc, BusError):
            self.arm._fault(exc)
        elif exc is None:
            self.arm._error = None
