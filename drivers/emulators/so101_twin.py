"""The physics twin's SO-101 behind the Feetech bus emulator: :class:`TwinServos`.

``So101Emulator(model=TwinServos(twin))`` puts the servo bus in front of the twin's SO-101 (a
scene with ``[arm] model = "so101"``): a goal position written to a servo drives that joint's
motor in the twin toward the goal's angle (the calibration's steps to radians) at the goal
speed's angular speed; the gripper servo's goal is the jaw's opening (its calibrated range,
closed at ``range_min``, spread over the jaw's travel); torque off switches the motor off, so
the twin's arm falls limp under gravity, as the real one sags. The positions read back are the
twin's joints, and ``moving`` is whether the joint turns.

Real servos move in wall time, so while the bus is open the twin steps in wall time
(:class:`WallStepper`: a thread, and each packet first catches the physics up); it is the
only thing that steps this twin (``onboard sim serve`` serves no other arm controller on an
SO-101 scene). If the process falls more than ``max_lag`` behind, the physics drops the
rest rather than race to catch up.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping

from onboard.drivers.arm.so101_kinematics import JOINTS, STEPS, MotorCalibration
from onboard.drivers.emulators.feetech_pty import Servo
from onboard.drivers.twin.so101 import JAW_OPEN
from onboard.drivers.twin.world import DT, Twin

__all__ = ["TwinServos", "WallStepper"]

#: rad/s (m/s for the jaw) under which a joint counts as still for the ``moving`` register
STILL = 0.02


class WallStepper:
    """Steps ``twin`` so that its time follows the wall clock, from its own thread and from
    whoever calls :meth:`catch_up`."""

    def __init__(self, twin: Twin, max_lag: float = 0.25, tick: float = 0.005) -> None:
        self.twin = twin
        self.max_lag = max_lag
        self.tick = tick
        self._lock = threading.Lock()
        self._origin = 0.0  # wall time at which the twin's time was ``_sim_origin``
        self._sim_origin = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._origin, self._sim_origin = time.monotonic(), self.twin.time
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="so101-twin", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None

    def catch_up(self) -> None:
        """Step the twin up to now (whole steps; a backlog beyond ``max_lag`` is dropped)."""
        with self._lock:
            if self._thread is None:
                return
            wall = time.monotonic() - self._origin
            owed = wall - (self.twin.time - self._sim_origin)
            if owed > self.max_lag:  # the process stalled: drop what it missed
                self._origin += owed - self.max_lag
                owed = self.max_lag
            steps = math.floor(owed / DT)
            if steps > 0:
                self.twin.step(steps * DT)

    def _loop(self) -> None:
        while not self._stop.wait(self.tick):
            self.catch_up()


class TwinServos:
    """The twin's SO-101 (arm ``arm``; None: the first) as the servos' model
    (:class:`~onboard.drivers.emulators.feetech_pty.ServoModel`). ``zero_offsets``: each
    joint's angle at the middle of its calibrated range, as robot.toml's ``zero_offsets``."""

    def __init__(
        self,
        twin: Twin,
        arm: str | None = None,
        zero_offsets: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0),
    ) -> None:
        if twin.arm_model(arm) != "so101":
            raise ValueError(f"the twin's arm {arm or ''!r} is a Panda; the scene needs "
                             '[arm] model = "so101"')  # fmt: skip
        self.twin = twin
        self.arm = arm
        self.zero = zero_offsets
        self.stepper = WallStepper(twin)
        self._calibration: dict[int, tuple[str, MotorCalibration]] = {}

    # -- ServoModel -------------------------------------------------------------------------

    def standing(
        self, calibration: Mapping[str, MotorCalibration]
    ) -> tuple[tuple[float, ...], float]:
        self._calibration = {cal.id: (name, cal) for name, cal in calibration.items()}
        now = self.twin.snapshot_of(self.arm)
        joints = tuple(q - z for q, z in zip(now.joints, self.zero, strict=True))
        return joints, now.gripper_width / JAW_OPEN

    def open(self) -> None:
        self.stepper.start()

    def close(self) -> None:
        self.stepper.stop()

    def advance(self, servos: Mapping[int, Servo], now: float) -> None:
        self.stepper.catch_up()
        snapshot = self.twin.snapshot_of(self.arm)
        for servo in servos.values():
            name, cal = self._calibration[servo.id]
            if name == "gripper":
                share = snapshot.gripper_width / JAW_OPEN
                steps = cal.range_min + share * (cal.range_max - cal.range_min)
                moving = snapshot.gripper_moving
            else:
                i = JOINTS.index(name)
                steps = _steps(cal, snapshot.joints[i] - self.zero[i])
                moving = abs(snapshot.joint_velocities[i]) > STILL
            servo.raw = steps + servo.offset()
            servo.put("moving", int(moving and bool(servo.get("torque_enable"))))

    def command(self, servo: Servo) -> None:
        found = self._calibration.get(servo.id)
        if found is None:
            return
        name, cal = found
        torque = bool(servo.get("torque_enable"))
        if name == "gripper":
            span = max(1, cal.range_max - cal.range_min)
            if not torque:
                self.twin.limp(None, self.arm)
                return
            opening = (servo.goal() - cal.range_min) / span * JAW_OPEN
            self.twin.drive_jaw(opening, servo.speed() / span * JAW_OPEN, self.arm)
            return
        i = JOINTS.index(name)
        if not torque:
            self.twin.limp(i, self.arm)
            return
        target = cal.to_radians(servo.goal()) + self.zero[i]
        self.twin.drive_joint(i, target, servo.speed() * 2 * math.pi / STEPS, self.arm)


def _steps(cal: MotorCalibration, radians: float) -> float:
    """Servo steps (after the offset, not rounded) of a joint angle."""
    value = -radians if cal.drive_mode else radians
    return cal.middle + value * STEPS / (2 * math.pi)
