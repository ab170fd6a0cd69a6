"""A joint-space arm on G-code (``kinematics = "joints"``): the firmware's axes are the arm's
joints, and onboard does the kinematics.

Arms built on Marlin or GRBL forks (BCN3D Moveo, Thor, Arctos) drive each joint's stepper on
an axis of the board: ``G1 X30 Y-15 Z60 A0 B90`` turns the joints, in the units the board's
steps per unit give (degrees, or millimetres for a linear axis). This module holds what the
driver needs for such an arm: the DH chain of ``[[drivers.arm.joints]]``
(:class:`~onboard.drivers.arm.dh.Chain`), the conversion between the Arm API's joints
(radians, metres) and the firmware's axis values (degrees or millimetres, times ``scale``),
the joint limits, and the waypoints of a straight-line ``move_to``: every waypoint is solved
before a line is written, so a target out of reach or out of the limits is refused with
nothing sent.

Feed rates: a G1 naming several axes moves them together, its F being the rate along the
straight line in axis space (GRBL, and Marlin built with ARTICULATED_ROBOT_ARM, measure a
move over every axis so), so each waypoint's F is its axis-space length over the time the
tool speed gives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import GcodeArmConfig
from onboard.drivers.arm.dh import Chain, Link

__all__ = ["JointSpace", "Waypoint", "chain_of"]


def chain_of(config: GcodeArmConfig) -> Chain:
    """The DH chain of a ``kinematics = "joints"`` configuration (limits in API units)."""
    links, lower, upper = [], [], []
    for joint in config.joints:
        turns = joint.unit == "deg"
        links.append(
            Link(
                a=joint.a,
                alpha=math.radians(joint.alpha),
                d=joint.d,
                theta=math.radians(joint.theta),
                prismatic=not turns,
                modified=config.dh == "modified",
            )
        )
        to_api = math.radians if turns else (lambda v: v / 1000.0)
        lower.append(to_api(joint.min))
        upper.append(to_api(joint.max))
    return Chain(
        tuple(links),
        tuple(lower),
        tuple(upper),
        tool=config.tool,
        tool_rotation=config.tool_rotation,
        name="GcodeArm",
        tolerance=config.ik_tolerance,
    )


@dataclass(frozen=True)
class Waypoint:
    axes: dict[str, float]  # firmware values
    feed: float  # firmware units per minute


class JointSpace:
    """The joints of a joint-space G-code arm, in both units, with their limits."""

    def __init__(self, config: GcodeArmConfig) -> None:
        self.config = config
        self.joints = config.joints
        self.chain = chain_of(config)
        self.letters = "".join(j.axis for j in config.joints)

    def to_axes(self, joints: Sequence[float]) -> dict[str, float]:
        """API joints (rad, m) -> firmware values (deg, mm, times scale), refusing one outside
        its limits in one line."""
        values = {}
        for joint, q in zip(self.joints, joints, strict=False):
            if not math.isfinite(q):
                raise ArmError(f"GcodeArm: joint {joint.axis} = {q!r} is not a number")
            value = math.degrees(q) if joint.unit == "deg" else q * 1000.0
            if not joint.min - 1e-6 <= value <= joint.max + 1e-6:
                raise ArmError(
                    f"GcodeArm: joint {joint.axis} = {value:.2f} {joint.unit} is outside its "
                    f"limits [{joint.min:g}, {joint.max:g}] {joint.unit} "
                    "([[drivers.arm.joints]] min/max): nothing was sent"
                )
            values[joint.axis] = value * joint.scale
        return values

    def from_axes(self, position: Mapping[str, float]) -> tuple[float, ...]:
        """Firmware values -> API joints; an axis the report lacks is taken as 0."""
        joints = []
        for joint in self.joints:
            value = position.get(joint.axis, 0.0) / joint.scale
            joints.append(math.radians(value) if joint.unit == "deg" else value / 1000.0)
        return tuple(joints)

    def tolerance(self, axis: str) -> float:
        """Firmware units a reached axis may be off by."""
        joint = next(j for j in self.joints if j.axis == axis)
        if joint.unit == "deg":
            return math.degrees(self.config.joint_tolerance) * abs(joint.scale)
        return self.config.reach_tolerance * 1000.0 * abs(joint.scale)

    def line_to(
        self, here: Sequence[float], pose: Pose, speed_m_s: float, feed_cap: float
    ) -> list[Waypoint]:
        """The waypoints of a straight line from ``here`` (joints) to ``pose``, every one
        solved and within the limits, or ArmError before anything is sent."""
        start = self.chain.forward(here)
        length = math.dist(start.position(), pose.position())
        count = max(1, math.ceil(length / self.config.segment))
        seed = tuple(here)
        self.chain.solve(pose, seed)  # the target itself first: its refusal names it
        before = dict(zip(self.letters, self._fw(seed), strict=True))
        waypoints = []
        for k in range(1, count + 1):
            try:
                seed = self.chain.solve(start.toward(pose, k / count), seed)
            except ArmError as exc:
                raise ArmError(
                    f"GcodeArm: the straight line to ({pose.x:.3f}, {pose.y:.3f}, "
                    f"{pose.z:.3f}) m leaves the arm's reach on the way ({exc}); move there "
                    "in steps around it"
                ) from None
            axes = self.to_axes(seed)
            travel = math.dist([before[a] for a in self.letters], [axes[a] for a in self.letters])
            minutes = (length / count) / speed_m_s / 60.0
            feed = min(max(travel / minutes, 1.0) if minutes > 0 else feed_cap, feed_cap)
            waypoints.append(Waypoint(axes, feed))
            before = axes
        return waypoints

    def _fw(self, joints: Sequence[float]) -> list[float]:
        out = []
        for joint, q in zip(self.joints, joints, strict=True):
            value = math.degrees(q) if joint.unit == "deg" else q * 1000.0
            out.append(value * joint.scale)
        return out
