"""The twin's SO-101: a body written from the arm's published dimensions, its servos as motors.

The chain is the one :mod:`onboard.drivers.arm.so101_kinematics` describes, with the same
dimensions (:data:`~onboard.drivers.arm.so101_kinematics.LINKS`: shoulder 0.1166 m above the
base, upper arm 0.116 m, forearm 0.1349 m, wrist flex axis to the tool point 0.10 m) and the
joint limits of the default calibration (+-120 degrees about each servo's middle): shoulder_pan
about z, shoulder_lift, elbow_flex and wrist_flex about y (positive tilts forward), wrist_roll
about the tool's axis. All zero is the arm standing straight up. The URDF is generated here
(boxes for collision and drawing), not copied from the SO-101's published description.

The gripper is one fixed jaw and one moving jaw, as on the arm; here the moving jaw slides
(a prismatic joint, its opening in metres: 0 closed, :data:`JAW_OPEN` open) where the real
one swings on its servo: a simple shape that grips the twin's blocks the same way. As on the
Panda, a fixed constraint ties an object to the hand once both jaws press on it (``weld``).

Each joint is a position-controlled motor with a force (torque) bound and the speed the servo
was asked for; :meth:`So101Body.limp` switches a motor off, as a servo's torque off does: the
arm then sags under its own weight. Forward kinematics is PyBullet's over this URDF (the
truth the driver's kinematics are checked against), inverse kinematics runs on a kinematic
shadow copy, as the Panda's does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from typing import Any

from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.so101_kinematics import DEFAULT_CALIBRATION, JOINTS, LINKS, Links
from onboard.drivers.rotations import quat_from_euler
from onboard.drivers.twin.arm_body import ArmBody, IKSolution, urdf_file
from onboard.drivers.twin.engine import connect
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.marker import HandMarker
from onboard.drivers.twin.scene import ArmSpec

__all__ = ["JAW_OPEN", "So101Body", "so101_urdf", "urdf_text"]

ARM = tuple(range(5))
HAND = 4  # the wrist_roll link: the grasp constraint attaches here
FIXED_JAW, JAW, TCP = 5, 6, 7
FINGERS = (FIXED_JAW, JAW)
JAW_OPEN = 0.07  # metres between the jaws, fully open
JAW_FORCE = 10.0  # newtons the moving jaw closes with
#: N m each joint's motor may apply (an STS3215 stalls at about 3 N m at 12 V)
JOINT_TORQUE = 3.0
MAX_JOINT_SPEED = 3000 * 2 * math.pi / 4096  # rad/s: the servo's top speed, 3000 steps/s
#: N m a joint's gear train resists being turned with its torque off. Without it the limp
#: links, light and with small inertia, never came to rest: on the table the wrist spun at
#: PyBullet's 100 rad/s cap, where a real unpowered servo's gears hold the arm where it lands
BACKDRIVE_FRICTION = 0.05
#: metres from the wrist_roll joint to the palm, and the palm's depth; the jaws run from the
#: palm to 5 mm past the tool point; the fixed jaw's inner face is this far off the tool axis
ROLL_AT, PALM, TIP_PAST, FACE = 0.03, 0.02, 0.005, 0.022


class So101Body(ArmBody):
    """The SO-101 of an ``[arm] model = "so101"`` scene, at ``spec.position`` turned by yaw."""

    ARM, HAND, TCP, FINGERS = ARM, HAND, TCP, FINGERS
    WELD_FORCE = 50.0

    def __init__(self, p: Any, spec: ArmSpec, links: Links = LINKS) -> None:
        self._p = p
        self.spec = spec
        self.links = links
        self.base = Transform(spec.position, quat_from_euler(0.0, 0.0, math.radians(spec.yaw)))
        urdf = so101_urdf(links)
        self.body = int(p.loadURDF(urdf, spec.position, self.base.rotation, useFixedBase=True))
        for link in range(-1, p.getNumJoints(self.body)):
            # printed links pale, the base housing and the jaws dark, as on most builds
            dark = link < 0 or link >= FIXED_JAW
            color = (0.25, 0.25, 0.27, 1.0) if dark else (0.92, 0.92, 0.9, 1.0)
            p.changeVisualShape(self.body, link, rgbaColor=color)
        for finger in FINGERS:
            p.changeDynamics(self.body, finger, lateralFriction=1.0)
        info = [p.getJointInfo(self.body, j) for j in ARM]
        self.lower = tuple(float(i[8]) for i in info)
        self.upper = tuple(float(i[9]) for i in info)
        self.max_velocity = tuple(MAX_JOINT_SPEED for _ in ARM)
        self._shadow = connect()
        self._shadow_body = int(self._shadow.loadURDF(urdf, useFixedBase=True))
        self._hold_nothing()
        self.marker: HandMarker | None = None
        self.reset(spec.home)
        if spec.marker is not None:
            self.marker = HandMarker(p, spec.marker, self.body, HAND, TCP)

    def reset(self, joints: Sequence[float]) -> None:
        """Teleport to ``joints`` with the jaws open, and hold there."""
        self.release()
        for j, q in zip(ARM, joints, strict=True):
            self._p.resetJointState(self.body, j, q)
        self._p.resetJointState(self.body, JAW, JAW_OPEN)
        self.closed = False
        self.set_targets(joints, MAX_JOINT_SPEED)
        self.drive_jaw(JAW_OPEN, 0.1)
        if self.marker is not None:
            self.marker.place()

    def set_targets(self, joints: Sequence[float], max_velocity: float) -> None:
        for j, q in zip(ARM, joints, strict=True):
            self.drive(j, q, max_velocity)

    def drive(self, joint: int, target: float, max_velocity: float) -> None:
        """Joint ``joint``'s motor toward ``target`` (radians) at most ``max_velocity``."""
        self._p.setJointMotorControl2(
            self.body,
            ARM[joint],
            self._p.POSITION_CONTROL,
            targetPosition=target,
            force=JOINT_TORQUE,
            maxVelocity=min(max(max_velocity, 1e-3), MAX_JOINT_SPEED),
        )

    def limp(self, joint: int) -> None:
        """Joint ``joint``'s motor off (a servo's torque off): it moves as gravity and
        contacts push it, against the joint's damping and its gears' friction only."""
        self._p.setJointMotorControl2(
            self.body,
            ARM[joint],
            self._p.VELOCITY_CONTROL,
            targetVelocity=0.0,
            force=BACKDRIVE_FRICTION,
        )

    def solve_ik(self, pose: Pose, seed: Sequence[float] | None = None) -> IKSolution:
        """Joints that put the tool at ``pose`` within the limits (PyBullet's damped least
        squares from ``seed``, clamped and solved again), checked by forward kinematics.
        Five joints: an orientation out of the pan's plane is reached as nearly as it can."""
        target = Transform.from_pose(pose)
        return self._refine(target, seed if seed is not None else self.joints(), 4, 200)

    # the jaws

    def width(self) -> float:
        return float(self._p.getJointState(self.body, JAW)[0])

    def finger_speed(self) -> float:
        return abs(float(self._p.getJointState(self.body, JAW)[1]))

    def grip(self, close: bool) -> None:
        self.drive_jaw(0.0 if close else JAW_OPEN, 0.1)

    def drive_jaw(self, opening: float, max_velocity: float) -> None:
        """The moving jaw toward ``opening`` metres: closing it (narrower than it is) grips,
        opening it (wider) lets go of what it held."""
        opening = min(max(opening, 0.0), JAW_OPEN)
        now = self.width()
        if opening > now + 1e-3:
            self.closed = False
            self.release()
        elif self.held is not None:
            return  # shut on what it holds: it closes no further, and a hold keeps it so
        elif opening < now - 1e-3:
            self.closed = True
        self._drive_jaw_motor(opening, max_velocity)

    def _drive_jaw_motor(self, opening: float, max_velocity: float) -> None:
        self._p.setJointMotorControl2(
            self.body,
            JAW,
            self._p.POSITION_CONTROL,
            targetPosition=opening,
            force=JAW_FORCE,
            maxVelocity=max(max_velocity, 1e-3),
        )

    def limp_jaw(self) -> None:
        """The jaw's motor off; what it holds stays held (a limp jaw does not spring open)."""
        self._p.setJointMotorControl2(
            self.body, JAW, self._p.VELOCITY_CONTROL, targetVelocity=0.0, force=0.0
        )

    def weld(self, body: int, link: int = -1) -> None:
        """Fix ``body`` to the hand where it is now (:meth:`ArmBody.weld`); the jaws' own
        contacts with it would only fight the weld (the jaw pressing into a body fixed to
        the hand), and could stall the wrist: they are off while it is held."""
        super().weld(body, link)
        self._jaw_contacts(body, link, False)
        self._drive_jaw_motor(self.width(), 0.1)  # the jaw stays shut on it, as it stalls

    def release(self) -> None:
        if self._weld is not None and self.held is not None:
            self._jaw_contacts(self.held, self.held_link, True)
        super().release()

    def _jaw_contacts(self, body: int, link: int, on: bool) -> None:
        for finger in FINGERS:
            self._p.setCollisionFilterPair(self.body, body, finger, link, int(on))


def _box(size: Sequence[float], at: Sequence[float]) -> str:
    xyz, dims = " ".join(f"{v:.5f}" for v in at), " ".join(f"{v:.5f}" for v in size)
    shape = f'<origin xyz="{xyz}"/><geometry><box size="{dims}"/></geometry>'
    return f"<visual>{shape}</visual><collision>{shape}</collision>"


def _link(name: str, mass: float, size: Sequence[float] | None, at: Sequence[float]) -> str:
    """A link: a box of ``size`` centred at ``at`` (None: no shape, a frame only)."""
    inertia = mass * 1e-4  # small links: the motors, not the inertia, set how they move
    xyz = " ".join(f"{v:.5f}" for v in at)
    shape = _box(size, at) if size is not None else ""
    return (
        f'<link name="{name}"><inertial><origin xyz="{xyz}"/><mass value="{mass}"/>'
        f'<inertia ixx="{inertia}" iyy="{inertia}" izz="{inertia}" ixy="0" ixz="0" iyz="0"/>'
        f"</inertial>{shape}</link>"
    )


def _joint(
    name: str, kind: str, parent: str, child: str, at: Sequence[float], axis: str = "0 0 1",
    limits: tuple[float, float] | None = None, rpy: str = "0 0 0",
) -> str:  # fmt: skip
    xyz = " ".join(f"{v:.5f}" for v in at)
    text = (
        f'<joint name="{name}" type="{kind}"><parent link="{parent}"/><child link="{child}"/>'
        f'<origin xyz="{xyz}" rpy="{rpy}"/><axis xyz="{axis}"/>'
    )
    if limits is not None:
        effort = JAW_FORCE if kind == "prismatic" else JOINT_TORQUE
        text += (
            f'<limit lower="{limits[0]:.6f}" upper="{limits[1]:.6f}" effort="{effort}" '
            f'velocity="{MAX_JOINT_SPEED:.4f}"/><dynamics damping="0.05"/>'
        )
    return text + "</joint>"


def urdf_text(links: Links = LINKS) -> str:
    """The SO-101's URDF, from ``links`` and the default calibration's joint limits."""
    limits = [DEFAULT_CALIBRATION[name].limits() for name in JOINTS]
    pan_at = 0.05  # the pan joint's height: the base housing below it
    shoulder = links.base - pan_at
    jaw_length = links.tool - ROLL_AT - PALM + TIP_PAST
    jaw_mid = PALM + jaw_length / 2  # in the hand's (wrist_roll link's) frame
    parts = [
        _link("base", 0.0, (0.09, 0.08, pan_at), (0, 0, pan_at / 2)),
        _link("shoulder", 0.1, (0.05, 0.05, shoulder), (0, 0, shoulder / 2)),
        _link("upper_arm", 0.1, (0.03, 0.04, links.upper), (0, 0, links.upper / 2)),
        _link("forearm", 0.08, (0.03, 0.03, links.fore), (0, 0, links.fore / 2)),
        _link("wrist", 0.05, (0.03, 0.03, ROLL_AT), (0, 0, ROLL_AT / 2)),
        _link("hand", 0.08, (0.03, 0.06, PALM), (0, 0, PALM / 2)),
        _link("fixed_jaw", 0.02, (0.02, 0.008, jaw_length), (0, FACE + 0.004, jaw_mid)),
        _link("jaw", 0.02, (0.02, 0.008, jaw_length), (0, -0.004, jaw_mid)),
        _link("tool", 0.001, None, (0, 0, 0)),
        _joint("shoulder_pan", "revolute", "base", "shoulder", (0, 0, pan_at), "0 0 1", limits[0]),
        _joint("shoulder_lift", "revolute", "shoulder", "upper_arm", (0, 0, links.base - pan_at),
               "0 1 0", limits[1]),
        _joint("elbow_flex", "revolute", "upper_arm", "forearm", (0, 0, links.upper), "0 1 0",
               limits[2]),
        _joint("wrist_flex", "revolute", "forearm", "wrist", (0, 0, links.fore), "0 1 0",
               limits[3]),
        _joint("wrist_roll", "revolute", "wrist", "hand", (0, 0, ROLL_AT), "0 0 1", limits[4]),
        _joint("fixed_jaw", "fixed", "hand", "fixed_jaw", (0, 0, 0)),
        # the moving jaw's frame is on the fixed jaw's inner face; its joint value is the gap
        _joint("jaw", "prismatic", "hand", "jaw", (0, FACE, 0), "0 -1 0", (0.0, JAW_OPEN)),
        # the tool point, turned half a turn about z: with the arm pointing down it is rx = pi
        _joint("tool", "fixed", "hand", "tool", (0, 0, links.tool - ROLL_AT), rpy=f"0 0 {math.pi}"),
    ]  # fmt: skip
    return '<?xml version="1.0"?><robot name="so101">' + "".join(parts) + "</robot>"


@cache
def so101_urdf(links: Links = LINKS) -> str:
    """:func:`urdf_text` written once per process to the temporary folder; its path."""
    return urdf_file(urdf_text(links), "so101")
