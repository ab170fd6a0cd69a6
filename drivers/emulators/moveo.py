"""A kinematic model of the BCN3D Moveo, the backend of a joint-space G-code emulator.

The Moveo (github.com/BCN3D/BCN3D-Moveo, open hardware, printed parts and NEMA 17 steppers
on an Arduino Mega with a RAMPS 1.4 running Marlin) has five joints and a gripper: base yaw,
shoulder pitch, elbow pitch, forearm roll, wrist pitch. Its dimensions here are the ones
published from its CAD in the open GiRbot project's DH table (base to shoulder 152.75 mm,
shoulder to elbow 221.12 mm, elbow to the wrist pitch axis 223 mm, wrist to tool point 90 mm),
not copied files. Joint zero is the arm standing straight up; shoulder, elbow and wrist tilt
forward (toward +x at base yaw zero) when positive.

The tool's pose is computed here by chaining rotations and link vectors, written apart from
onboard's DH code (:mod:`onboard.drivers.arm.dh`), so that a driver's IK is checked against a
truth it does not share: :data:`MOVEO_DH` is the table a user writes in robot.toml for this
arm, and a test checks that it describes this model.

:class:`JointModelArm` is an :class:`~onboard.drivers.arm.base.Arm` whose joints move at the
asked speed in wall time (a straight line in joint space, as a G-code planner moves its axes),
stop at once on ``stop()`` and latch until ``resume()``; it takes joint moves only (the
emulator in joint space sends nothing else).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import DhJoint, GcodeArmConfig
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.rotations import matrix_to_rpy, rot_y, rot_z

__all__ = [
    "MOVEO_DH",
    "MOVEO_HOME",
    "MOVEO_LIMITS",
    "MOVEO_TOOL",
    "JointModelArm",
    "moveo_config",
    "moveo_pose",
    "serve_moveo",
]

BASE, UPPER, FORE, TOOL = 0.15275, 0.22112, 0.223, 0.09  # metres

#: axis, a (m), alpha (deg), d (m), theta (deg) of each joint: the [[drivers.arm.joints]]
#: rows (standard DH) for this arm with its firmware axes X Y Z A B
MOVEO_DH = (
    ("X", 0.0, -90.0, BASE, 0.0),
    ("Y", UPPER, 0.0, 0.0, -90.0),
    ("Z", 0.0, 90.0, 0.0, 90.0),
    ("A", 0.0, -90.0, FORE, 0.0),
    ("B", 0.0, 90.0, 0.0, 0.0),
)
MOVEO_TOOL = (0.0, 0.0, TOOL)
#: degrees: the base's +-121.5 of the same source; shoulder and elbow spans as it gives them
#: (150 degrees), the wrist's half turn; approximate: check them on your arm
MOVEO_LIMITS = ((-121.5, 121.5), (-75.0, 75.0), (-30.0, 120.0), (-180.0, 180.0), (-100.0, 100.0))
#: degrees: where the model stands after homing: the tool 33 cm out, 25 cm up, pointing down
MOVEO_HOME = (0.0, 30.0, 60.0, 0.0, 90.0)


def moveo_config(url: str, **settings: object) -> GcodeArmConfig:
    """The G-code arm configuration of this Moveo on Marlin (``kinematics = "joints"``)."""
    joints = tuple(
        DhJoint(axis=axis, a=a, alpha=alpha, d=d, theta=theta, min=low, max=high)
        for (axis, a, alpha, d, theta), (low, high) in zip(MOVEO_DH, MOVEO_LIMITS, strict=True)
    )
    return GcodeArmConfig.model_validate(
        {"url": url, "kinematics": "joints", "joints": joints, "tool": MOVEO_TOOL} | settings
    )


def serve_moveo(**settings: object) -> tuple[JointModelArm, MarlinEmulator]:
    """The model standing at its home and a Marlin build driving it in joint space (axes X Y
    Z A B, EMERGENCY_PARSER on), not started."""
    model = JointModelArm([math.radians(v) for v in MOVEO_HOME])
    options: dict[str, Any] = {"emergency_parser": True} | settings
    return model, MarlinEmulator(model, rotary_axes="AB", joint_space=True, **options)


def moveo_pose(joints: Sequence[float]) -> Pose:
    """The Moveo's tool pose for its five joint angles (radians), link by link."""
    yaw, shoulder, elbow, roll, pitch = (float(q) for q in joints[:5])
    up = np.array([0.0, 0.0, 1.0])
    rotation = rot_z(yaw) @ rot_y(shoulder)
    point = np.array([0.0, 0.0, BASE]) + rotation @ (UPPER * up)
    rotation = rotation @ rot_y(elbow) @ rot_z(roll)
    point = point + rotation @ (FORE * up)
    rotation = rotation @ rot_y(pitch)
    point = point + rotation @ (TOOL * up)
    x, y, z = (float(v) for v in point)
    return Pose(x, y, z, *matrix_to_rpy(rotation))


class JointModelArm:
    """Joints that move in wall time toward their targets; the pose from ``pose_of``."""

    def __init__(
        self,
        home: Sequence[float],
        pose_of: Callable[[Sequence[float]], Pose] | None = None,
        *,
        tick: float = 0.005,
    ) -> None:
        self.home_joints = tuple(float(q) for q in home)
        self._pose_of = moveo_pose if pose_of is None else pose_of
        self._joints = np.array(self.home_joints)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._moving = False
        self._gripper = False
        self.tick = tick
        self.moves = 0  # joint moves begun (for tests)

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass

    def home(self) -> None:
        self.move_joints(self.home_joints, 1.0)

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        raise ArmError("JointModelArm: a joint-space arm takes joint moves only")

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        """Move every joint along the straight line in joint space at ``speed`` (rad/s along
        that line); raises ArmError if stopped before or during the move."""
        if self._stopped.is_set():
            raise ArmError("JointModelArm: stopped")
        with self._lock:
            start = self._joints.copy()
        goal = start.copy()
        goal[: len(joints)] = joints[: len(goal)]
        length = float(np.linalg.norm(goal - start))
        duration = length / (speed or 1.0)
        self.moves += 1
        began = time.monotonic()
        self._moving = True
        try:
            while True:
                share = 1.0 if duration <= 0 else min(1.0, (time.monotonic() - began) / duration)
                with self._lock:
                    self._joints = start + (goal - start) * share
                if share >= 1.0:
                    return
                if self._stopped.wait(self.tick):
                    raise ArmError("JointModelArm: the move was cut short by stop()")
        finally:
            self._moving = False

    def grip(self, close: bool) -> None:
        if self._stopped.is_set():
            raise ArmError("JointModelArm: stopped")
        self._gripper = close

    def stop(self) -> None:
        self._stopped.set()

    def resume(self) -> None:
        self._stopped.clear()

    def joints(self) -> tuple[float, ...]:
        with self._lock:
            return tuple(float(q) for q in self._joints)

    def state(self) -> ArmState:
        joints = self.joints()
        return ArmState(
            pose=self._pose_of(joints),
            joints=joints,
            gripper_closed=self._gripper,
            moving=self._moving,
            stopped=self._stopped.is_set(),
        )
