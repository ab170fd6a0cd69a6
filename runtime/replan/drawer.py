"""Opening and closing a drawer by its handle: grasp it, pull or push, let go.

A drawer's handle is a flat bar on its front, flush with it, so the fingers can only close on
its top and bottom: the tool comes in level, pointing into the drawer, the fingers above and
below the bar. The hand is 21 cm across its fingers, so the handle must be high enough for
its lower half to clear the table (about 12 cm on the twin's Panda); lower, the approach is
blocked and the motion fails with the arm's error.
"""

from __future__ import annotations

import math

import numpy as np

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.rotations import matrix_to_rpy
from onboard.manip.motions import Motions
from onboard.replan.seeing import Look
from onboard.replan.tracking import Point, Seen

__all__ = ["DrawerMotions", "HandleMissed", "centre", "opening"]

#: metres in front of the handle the tool lines up before it moves in
STANDOFF = 0.12
#: metres the tool point stops short of the handle's grasp point (the finger pads' middle)
GRASP_SHORT = 0.005
#: m/s while the hand moves the drawer
PULL_SPEED = 0.05
#: metres from a handle's grasp point back to the drawer's front panel
HANDLE_TO_PANEL = 0.015
#: metres a push stops short of the cabinet's front (a drawer is not driven into its stop)
SHUT_MARGIN = 0.005
#: metres either side of the handle's line where the cabinet's front edge is measured
FRONT_BAND = 0.04
#: metres between the fingers below which a closed gripper holds nothing
EMPTY_WIDTH = 0.004
#: metres short of its goal a pull may stall, the handle still held, and count as done
PULL_SLACK = 0.005


class HandleMissed(ArmError):
    """The hand did not get or keep the handle where it was seen: the drawer did not move
    (another box seen as the handle may be the handle)."""


class DrawerMotions:
    def __init__(self, motions: Motions) -> None:
        self.motions = motions

    def pull(self, handle: Point, centre: Point, distance: float) -> None:
        """Grasp the handle, move it ``distance`` m away from the drawer's centre (negative:
        towards it), let go, back off and home. HandleMissed when the fingers closed on
        nothing, or had nothing between them after a pull: a hand that closed above or below
        the handle comes away without the drawer, which a pull that reached its goal does
        not tell."""
        out = _outward(handle, centre)
        arm, rpy = self.motions.arm, _level_pointing(-out)

        def at(shift: float, up: float = 0.0) -> Pose:
            x, y = handle[0] + out[0] * shift, handle[1] + out[1] * shift
            return Pose(x, y, handle[2] + up, *rpy)

        arm.grip(False)
        arm.move_to(at(STANDOFF, 0.05), self.motions.speed)
        arm.move_to(at(STANDOFF), self.motions.speed)
        arm.move_to(at(GRASP_SHORT), PULL_SPEED)
        arm.grip(True)
        if _holds_nothing(arm):
            arm.grip(False)
            arm.move_to(at(STANDOFF), self.motions.speed)
            raise HandleMissed(
                "the gripper closed on nothing: the handle was not where it was seen"
            )
        # the pull goes out from where the hand closed, not from the line the handle was seen
        # on: fingers that met the handle short of it hold the drawer off that line, and a
        # pull along it would press the drawer into its cabinet
        held = arm.state().pose

        def beyond(shift: float) -> Pose:
            return Pose(held.x + out[0] * shift, held.y + out[1] * shift, held.z, *rpy)

        _pull_to(arm, beyond(distance))
        if distance > 0 and _holds_nothing(arm):  # a push needs no grip; a pull does
            arm.grip(False)
            self.motions.home()
            raise HandleMissed("the hand came away without the handle: the drawer did not follow")
        arm.grip(False)
        arm.move_to(beyond(distance + STANDOFF / 2), self.motions.speed)
        self.motions.home()

    def inside(self, handle: Point, centre: Point, depth: float) -> tuple[float, float]:
        """The point ``depth`` m into the drawer from its handle (where things go in)."""
        out = _outward(handle, centre)
        return handle[0] - out[0] * depth, handle[1] - out[1] * depth

    def centre(self, drawer: Seen, look: Look) -> Point:
        return centre(drawer, look)

    def opening(self, handle: Point, drawer: Seen, look: Look) -> float:
        return opening(handle, drawer, look)


def _pull_to(arm: Arm, goal: Pose) -> None:
    """Move the hand holding a handle to ``goal``. The drawer's runner (a motor on the twin,
    friction on a real one) holds the hand back by a few millimetres, about what an arm
    allows before it reports that it did not settle, so such a stall near the goal, the
    handle still in the hand, ends the pull; how far the drawer opened is the camera's to
    tell. A stall further off, an empty hand or a stop is the arm's error."""
    try:
        arm.move_to(goal, PULL_SPEED)
    except ArmError:
        state = arm.state()
        short = math.dist((state.pose.x, state.pose.y, state.pose.z), (goal.x, goal.y, goal.z))
        if state.stopped or short > PULL_SLACK or _holds_nothing(arm):
            raise


def _holds_nothing(arm: Arm) -> bool:
    """The gripper closed with less than EMPTY_WIDTH between its fingers (an arm that does
    not report its width is taken to hold what it closed on)."""
    width = arm.state().extra.get("gripper_width")
    return width is not None and width < EMPTY_WIDTH


def centre(drawer: Seen, look: Look) -> Point:
    """Where the cabinet's middle is, across the line its drawer slides on: the middle of
    its top as the camera sees it (robust to a box the image's border cuts off, which
    pulls the observer's estimate aside), else the observer's estimate."""
    cabinet = _top_of(drawer, look)
    if len(cabinet) == 0:
        return drawer.position
    x, y = (float(v) for v in np.median(cabinet[:, :2], axis=0))
    return (x, y, drawer.position[2])


def opening(handle: Point, drawer: Seen, look: Look) -> float:
    """How far the drawer stands open, as the camera sees it: from its front panel (behind
    the handle) to the front edge of the cabinet's top."""
    cabinet = _top_of(drawer, look)
    if len(cabinet) == 0:
        raise ArmError(f"no depth on {drawer.name}: cannot tell how far it is open")
    middle = centre(drawer, look)
    out = _outward(handle, middle)
    c = np.asarray(middle[:2])
    # the front edge straight behind the handle (a corner of the top, seen along a
    # slightly skewed line, would stand further out)
    rel = cabinet[:, :2] - np.asarray(handle[:2])
    behind = cabinet[np.abs(rel[:, 0] * out[1] - rel[:, 1] * out[0]) <= FRONT_BAND]
    edge = behind if len(behind) else cabinet
    front = float(np.max((edge[:, :2] - c) @ out))
    panel = float((np.asarray(handle[:2]) - c) @ out) - HANDLE_TO_PANEL
    return max(0.0, panel - front - SHUT_MARGIN)


def _top_of(drawer: Seen, look: Look) -> np.ndarray:
    """The points (n, 3) of the cabinet's top surface seen inside the drawer's box."""
    points = look.points(drawer.name)
    if len(points) == 0:
        return points
    top = float(np.percentile(points[:, 2], 95))
    return points[points[:, 2] >= top - 0.008]


def _outward(handle: Point, centre: Point) -> np.ndarray:
    """The level unit vector from the drawer's centre to its handle (the pull direction)."""
    d = np.array([handle[0] - centre[0], handle[1] - centre[1]], dtype=np.float64)
    n = float(np.linalg.norm(d))
    if n < 1e-6:
        raise ArmError("the handle is at the drawer's centre: no direction to pull in")
    return d / n


def _level_pointing(into: np.ndarray) -> tuple[float, float, float]:
    """Roll, pitch, yaw of a tool pointing level along ``into``, the fingers above and below."""
    z = np.array([into[0], into[1], 0.0])
    y = np.array([0.0, 0.0, -1.0])
    x = np.cross(y, z)
    rpy = matrix_to_rpy(np.column_stack([x, y, z]))
    return (rpy[0], rpy[1], rpy[2] if math.isfinite(rpy[2]) else 0.0)
