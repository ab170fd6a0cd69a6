"""Scripted tasks over the Arm interface only, so every driver runs the same script."""

from __future__ import annotations

from dataclasses import replace

from onboard.drivers.arm.base import Arm, Pose

__all__ = ["pick_and_place"]


def pick_and_place(
    arm: Arm,
    pick: Pose,
    place: Pose,
    approach_height: float = 0.10,
    speed: float | None = None,
) -> None:
    """Pick the object at ``pick`` and put it down at ``place`` (tool poses, base frame).

    Approaches and leaves both poses straight down from ``approach_height`` metres above;
    raises the driver's ArmError if any motion fails (the gripper state is then as it was
    at the failing step).
    """
    above_pick = replace(pick, z=pick.z + approach_height)
    above_place = replace(place, z=place.z + approach_height)
    arm.grip(False)
    arm.move_to(above_pick, speed)
    arm.move_to(pick, speed)
    arm.grip(True)
    arm.move_to(above_pick, speed)
    arm.move_to(above_place, speed)
    arm.move_to(place, speed)
    arm.grip(False)
    arm.move_to(above_place, speed)
