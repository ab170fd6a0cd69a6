"""The twin's Franka Panda: joint control, IK on a kinematic shadow copy, and the gripper.

Inverse kinematics runs on a second, kinematics-only Panda in its own DIRECT client, so
solving never disturbs the physics of the scene; every solution is checked by forward
kinematics and carries its residual.

Grasping: the fingers close under position control with a bounded force (20 N each by
default) and friction 1. Physics alone does lift the scene objects, but two small finger
contacts let the object pivot and slide in the grasp: a 4 cm block carried by a
pick-and-place at 0.15 or 0.4 m/s landed 17-18 mm from its target (measured). So with
``weld`` on (the default) a fixed constraint ties the object to the hand, made only once
both fingers press on the same loose object (contact points with at least 1 N each), and
removed when the gripper opens; the same pick-and-place then lands within 2 mm.
A grasp may also attach to a link of a fixed body (a drawer's handle): the candidates are
(body, link) pairs, -1 naming a body's base.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from onboard.drivers.arm.base import Pose
from onboard.drivers.rotations import quat_from_euler
from onboard.drivers.twin.arm_body import ArmBody, IKSolution, urdf_file
from onboard.drivers.twin.engine import connect
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.marker import HandMarker
from onboard.drivers.twin.scene import ArmSpec

__all__ = ["IKSolution", "Panda"]

URDF = "franka_panda/panda.urdf"
ARM = tuple(range(7))
FINGERS = (9, 10)
HAND = 8  # panda_hand: the grasp constraint attaches here
TCP = 11  # panda_grasptarget: between the finger tips, z along the fingers
FINGER_OPEN = 0.04  # metres per finger


class Panda(ArmBody):
    ARM, HAND, TCP, FINGERS = ARM, HAND, TCP, FINGERS
    WELD_FORCE = 200.0

    def __init__(self, p: Any, spec: ArmSpec, data_path: str) -> None:
        self._p = p
        self.spec = spec
        self.base = Transform(spec.position, quat_from_euler(0.0, 0.0, math.radians(spec.yaw)))
        urdf = URDF if spec.visual == "detailed" else simple_urdf(data_path)
        self.body = int(p.loadURDF(urdf, spec.position, self.base.rotation, useFixedBase=True))
        if spec.visual == "simple":
            for link in range(-1, p.getNumJoints(self.body)):
                color = (0.25, 0.25, 0.27, 1.0) if link >= HAND else (0.92, 0.92, 0.9, 1.0)
                p.changeVisualShape(self.body, link, rgbaColor=color)
        info = [p.getJointInfo(self.body, j) for j in ARM]
        self.lower = tuple(float(i[8]) for i in info)
        self.upper = tuple(float(i[9]) for i in info)
        self.max_force = tuple(float(i[10]) for i in info)
        self.max_velocity = tuple(float(i[11]) for i in info)
        self._shadow = connect()
        self._shadow.setAdditionalSearchPath(data_path)
        self._shadow_body = int(self._shadow.loadURDF(simple_urdf(data_path), useFixedBase=True))
        self._hold_nothing()
        self.marker: HandMarker | None = None
        self.reset(spec.home)
        if spec.marker is not None:
            self.marker = HandMarker(p, spec.marker, self.body, HAND, TCP)

    def joint_velocities(self) -> tuple[float, ...]:
        return tuple(float(s[1]) for s in self._p.getJointStates(self.body, ARM))

    def reset(self, joints: Sequence[float]) -> None:
        """Teleport to ``joints`` with the gripper open, and hold there."""
        self.release()
        for j, q in zip(ARM, joints, strict=True):
            self._p.resetJointState(self.body, j, q)
        for f in FINGERS:
            self._p.resetJointState(self.body, f, FINGER_OPEN)
        self.closed = False
        self.set_targets(joints, max(self.max_velocity))
        self._drive_fingers(FINGER_OPEN)
        if self.marker is not None:
            self.marker.place()

    def set_targets(self, joints: Sequence[float], max_velocity: float) -> None:
        for j, q in zip(ARM, joints, strict=True):
            self._p.setJointMotorControl2(
                self.body,
                j,
                self._p.POSITION_CONTROL,
                targetPosition=q,
                force=self.max_force[j],
                maxVelocity=min(max_velocity, self.max_velocity[j]),
            )

    def solve_ik(self, pose: Pose, seed: Sequence[float] | None = None) -> IKSolution:
        """Joints that put the tool at ``pose``, within the joint limits.

        Damped least squares from ``seed`` (default: the current joints), which moves the
        joints least; if that misses (a joint limit in the way), again from the home pose
        with PyBullet's null-space variant, which keeps to the limits but is less exact.
        """
        target = Transform.from_pose(pose)
        best = self._refine(target, seed if seed is not None else self.joints(), 3, 100)
        if best.residual > 1e-4 or best.angle > 1e-3:
            other = self._refine(target, self.spec.home, 3, 100, **self._null_space())
            if other.residual + 0.05 * other.angle < best.residual + 0.05 * best.angle:
                best = other
        return best

    def _null_space(self) -> dict[str, list[float]]:
        ranges = [hi - lo for lo, hi in zip(self.lower, self.upper, strict=True)]
        return {
            "lowerLimits": [*self.lower, 0.0, 0.0],
            "upperLimits": [*self.upper, FINGER_OPEN, FINGER_OPEN],
            "jointRanges": [*ranges, FINGER_OPEN, FINGER_OPEN],
            "restPoses": [*self.spec.home, FINGER_OPEN, FINGER_OPEN],
        }

    # gripper

    def width(self) -> float:
        return sum(float(s[0]) for s in self._p.getJointStates(self.body, FINGERS))

    def finger_speed(self) -> float:
        return max(abs(float(s[1])) for s in self._p.getJointStates(self.body, FINGERS))

    def grip(self, close: bool) -> None:
        self.closed = close
        if not close:
            self.release()
        self._drive_fingers(0.0 if close else FINGER_OPEN)

    def _drive_fingers(self, target: float) -> None:
        for f in FINGERS:
            self._p.setJointMotorControl2(
                self.body,
                f,
                self._p.POSITION_CONTROL,
                targetPosition=target,
                force=self.spec.gripper_force,
                maxVelocity=0.1,
            )


@cache
def simple_urdf(data_path: str) -> str:
    """The Panda drawn with its collision meshes (3.5k triangles instead of 100k), written
    once per process to the temporary folder."""
    meshes = Path(data_path) / "franka_panda" / "meshes" / "collision"
    text = (Path(data_path) / URDF).read_text(encoding="utf-8")
    for folder in ("visual", "collision"):
        text = text.replace(f"package://meshes/{folder}/", f"{meshes.as_posix()}/")
    return urdf_file(text, "panda")
