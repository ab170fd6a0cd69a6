"""The arm's blocking motions, in one place: pick, place, push, hold out, home.

Each is a short sequence of :class:`SafeArm` calls (so always through its safety limits) that
blocks until done or raises the arm's error. The scene skills' driver
(:class:`~onboard.manip.arm_driver.ArmDriver`) runs them off the loop; the robot API of
generated code (:class:`~onboard.replan.api.RobotAPI`) calls them directly. What the hand
holds is the robot's own account: the name it was asked to pick, and how far above the held
object's bottom the tool point is (to put it down on a surface of a known height).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.safety import SafeArm

__all__ = ["APPROACH", "GRASP_ABOVE", "PUSH_BACK", "Motions"]

#: metres above a grasp or release pose the tool approaches and leaves from
APPROACH = 0.10
#: metres a push starts behind the object, and stops short of the target point
PUSH_BACK = 0.06
#: the fingers close this fraction of the object's size above its centre: clear of the
#: table (and SafeArm's floor) for an object resting on it
GRASP_ABOVE = 0.25
#: metres above the surface a held object is let go (so it is not pressed into it)
RELEASE_GAP = 0.005
#: the fraction of the motions' speed a grasped object is drawn along its surface at
DRAW_SPEED = 0.25


class Motions:
    """Blocking motions of one arm; the tool keeps the orientation it has at home unless a
    motion names a yaw (radians about the base's z)."""

    def __init__(self, arm: SafeArm, speed: float = 0.2) -> None:
        self.arm = arm
        self.speed = speed
        self.holding: str | None = None
        #: metres from the held object's bottom up to the tool point (None: unknown)
        self.held_rise: float | None = None
        self._tool: Pose | None = None

    def pose(self, x: float, y: float, z: float, yaw: float | None = None) -> Pose:
        """The tool at (x, y, z) with its home orientation (turned to ``yaw`` if given)."""
        if self._tool is None:
            self._tool = self.arm.state().pose
        tool = self._tool if yaw is None else replace(self._tool, rz=yaw)
        return replace(tool, x=x, y=y, z=z)

    def home(self) -> None:
        self.arm.home()
        self._tool = self.arm.state().pose

    def pick(
        self,
        name: str,
        at: Pose,
        rise: float,
        approach: float = APPROACH,
        before_close: Callable[[], None] = lambda: None,
        draw: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        """Open, come down on ``at`` from ``approach`` m above, close, go back up; ``rise``:
        metres from the object's bottom to the tool point at ``at``; ``before_close`` runs
        when the fingers are there, open (to wait for a moving object); ``draw`` (dx, dy):
        metres the closed hand first slides the object along the surface it rests on (away
        from a neighbour it touches, which a straight lift would drag up with it)."""
        self.arm.grip(False)
        self.arm.move_to(replace(at, z=at.z + approach), self.speed)
        self.arm.move_to(at, self.speed)
        before_close()
        self.arm.grip(True)
        self.holding, self.held_rise = name, rise
        if draw != (0.0, 0.0):
            at = replace(at, x=at.x + draw[0], y=at.y + draw[1])
            self.arm.move_to(at, self.speed * DRAW_SPEED)
        self.arm.move_to(replace(at, z=at.z + approach), self.speed)

    def pick_centre(self, name: str, x: float, y: float, z: float, size: float) -> None:
        """Pick an object of ``size`` m whose centre is at (x, y, z)."""
        offset = GRASP_ABOVE * size
        self.pick(name, self.pose(x, y, z + offset), size / 2 + offset)

    def release(self) -> None:
        """Open the gripper where it is: what it held is no longer held."""
        self.arm.grip(False)
        self.holding = self.held_rise = None

    def place(
        self,
        x: float,
        y: float,
        top: float,
        approach: float = APPROACH,
        yaw: float | None = None,
    ) -> None:
        """Put what the gripper holds down at (x, y) on a surface ``top`` m high: its bottom
        just above it."""
        z = top + (self.held_rise if self.held_rise is not None else 0.02) + RELEASE_GAP
        release, above = self.pose(x, y, z, yaw), self.pose(x, y, z + approach, yaw)
        self.arm.move_to(above, self.speed)
        self.arm.move_to(release, self.speed)
        self.release()
        self.arm.move_to(above, self.speed)

    def push(self, x: float, y: float, z: float, size: float, tx: float, ty: float) -> None:
        """Push the object of ``size`` m centred at (x, y, z) to (tx, ty) with closed fingers."""
        z += GRASP_ABOVE * size  # the fingers on its upper half
        dx, dy = tx - x, ty - y
        length = max((dx * dx + dy * dy) ** 0.5, 1e-6)
        ux, uy = dx / length, dy / length
        behind = (x - ux * PUSH_BACK, y - uy * PUSH_BACK)
        # the fingers end short of the target point by the gap they started behind the object
        end = (tx - ux * PUSH_BACK, ty - uy * PUSH_BACK)
        self.arm.grip(True)
        self.arm.move_to(self.pose(*behind, z + APPROACH), self.speed)
        self.arm.move_to(self.pose(*behind, z), self.speed)
        self.arm.move_to(self.pose(*end, z), self.speed / 2)
        self.arm.move_to(self.pose(*end, z + APPROACH), self.speed)
        self.arm.grip(False)

    def give(self, x: float, y: float, z: float) -> None:
        """Hold what is held out at (x, y, z)."""
        self.arm.move_to(self.pose(x, y, z), self.speed)
