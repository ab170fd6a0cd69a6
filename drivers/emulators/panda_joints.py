"""The twin's Franka Panda as a joint-space G-code arm: seven joints on a Marlin board's axes
X Y Z A B C U, onboard doing the kinematics from Franka's published DH table.

Franka publishes the Panda's kinematics as a modified (Craig) DH table (Franka Control
Interface documentation, "Robot and interface specifications"): d1 = 0.333, d3 = 0.316,
a4 = 0.0825, a5 = -0.0825, d5 = 0.384, a7 = 0.088 m, flange 0.107 m along joint 7's axis, and
its joint limits. The tool point here is the twin's (``panda_grasptarget``: the hand 0.107 m
past joint 7, turned -45 degrees about that axis, the point between the finger tips 0.105 m
past the hand). The twin's arm, behind a :class:`~onboard.drivers.emulators.marlin_pty.
MarlinEmulator` in joint space, is the truth: PyBullet computes its pose from the URDF, apart
from onboard's DH code.
"""

from __future__ import annotations

import math

from onboard.drivers.arm.config import DhJoint, GcodeArmConfig

__all__ = ["PANDA_AXES", "PANDA_DH", "panda_config"]

#: the Marlin axes of the seven joints
PANDA_AXES = "XYZABCU"
#: a (m), alpha (deg), d (m) of each joint, modified DH (a and alpha of the link before)
PANDA_DH = (
    (0.0, 0.0, 0.333),
    (0.0, -90.0, 0.0),
    (0.0, 90.0, 0.316),
    (0.0825, 90.0, 0.0),
    (-0.0825, -90.0, 0.384),
    (0.0, 90.0, 0.0),
    (0.088, 90.0, 0.0),
)
#: radians: Franka's published joint limits
PANDA_LIMITS = (
    (-2.8973, 2.8973),
    (-1.7628, 1.7628),
    (-2.8973, 2.8973),
    (-3.0718, -0.0698),
    (-2.8973, 2.8973),
    (-0.0175, 3.7525),
    (-2.8973, 2.8973),
)
FLANGE, FINGERTIPS = 0.107, 0.105  # m along joint 7's axis: to the hand, then to the tip


def panda_config(url: str, **settings: object) -> GcodeArmConfig:
    """The G-code arm configuration of the Panda on Marlin in joint space."""
    joints = tuple(
        DhJoint(
            axis=axis,
            a=a,
            alpha=alpha,
            d=d,
            min=math.degrees(low),
            max=math.degrees(high),
        )
        for axis, (a, alpha, d), (low, high) in zip(PANDA_AXES, PANDA_DH, PANDA_LIMITS, strict=True)
    )
    values = {
        "url": url,
        "kinematics": "joints",
        "dh": "modified",
        "joints": joints,
        "tool": (0.0, 0.0, FLANGE + FINGERTIPS),
        "tool_rotation": (0.0, 0.0, -math.pi / 4),
    }
    return GcodeArmConfig.model_validate(values | settings)
