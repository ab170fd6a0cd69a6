"""The robot's own hand, taken for an object: where the camera may see it, from the arm's pose.

A detector trained on tabletop objects sometimes boxes the arm itself (a plate, a drawer on
the Panda's hand; ``python bench/arm_phantoms.py`` counts them). The arm knows where its hand
is, so a box whose surface point (the depth at its middle) lies on the hand is not an object
where the box says, whatever model drew it: either the hand taken for one, or an object behind
the hand, whose place the depth does not give. The scene observer reports such a box as
unknown ("may be behind the robot's hand", runtime/perception/unknown.py), never as an object
at the hand. :class:`HandZone` is that part of space: a cylinder of ``radius`` around the
tool's axis, from ``grasp`` behind the tool point (the fingertips) back ``length`` towards the
wrist. The first ``grasp`` metres are left out on purpose: what lies between the fingers is
the object being grasped or held, and anything under the tool point is on the table.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from onboard.base.errors import ArmError, DriverError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.rotations import rpy_to_matrix

__all__ = ["Hand", "HandZone"]

Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Hand:
    """The tool point and the unit axis from it back towards the wrist, base frame."""

    tip: Vector
    back: Vector

    @classmethod
    def from_pose(cls, pose: Pose) -> Hand:
        """The tool's pose as the Arm API gives it: its z axis points out of the fingers."""
        rotation = rpy_to_matrix((pose.rx, pose.ry, pose.rz))
        return cls(np.array(pose.position(), dtype=np.float64), -rotation[:, 2])

    @classmethod
    def of(cls, arm: Arm) -> Hand | None:
        """Where ``arm``'s hand is now; None when the arm cannot say (its check is then
        skipped for this look, as without a pose)."""
        try:
            return cls.from_pose(arm.state().pose)
        except (ArmError, DriverError, OSError):
            return None


class HandZone(BaseModel):
    """robot.toml ``[hand_zone]``: where the hand is around its tool axis, metres (the
    defaults fit the Panda: its hand spans 20 cm across the fingers, and the wrist is about
    30 cm behind the fingertips). ``length = 0`` turns the check off."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    length: float = Field(default=0.3, ge=0, description="along the tool axis, past the grasp")
    radius: float = Field(default=0.1, gt=0, description="around the tool axis")
    grasp: float = Field(
        default=0.06, ge=0, description="behind the fingertips: left out (held objects)"
    )

    def holds(self, hand: Hand, point: Vector) -> bool:
        """Whether the base-frame ``point`` is on the hand (in the zone)."""
        offset = np.asarray(point, dtype=np.float64) - hand.tip
        along = float(offset @ hand.back)
        if self.length == 0 or not self.grasp <= along <= self.grasp + self.length:
            return False
        return float(np.linalg.norm(offset - along * hand.back)) <= self.radius
