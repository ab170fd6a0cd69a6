"""Judge the seven code tasks from the physics twin's truth (evaluation only).

With the disturbers (:mod:`onboard.evaluation.disturb`) this is the only code that reads the
twin's truth about objects: where they are, what the gripper holds, how far a drawer is
open. The robot API sees the table through the camera and the detector alone. Each judge
returns a :class:`Verdict`: passed, and one line saying why, with the numbers it measured.
Positions are in the arm's base frame, metres.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from onboard.drivers.twin.bodies import KIND_DEFAULTS, STOP_HEIGHT, WALL
from onboard.drivers.twin.scene import ObjectSpec
from onboard.drivers.twin.world import Twin
from onboard.evaluation.code_tasks import (
    BeltOrder,
    Check,
    CodeTask,
    Given,
    Inside,
    OnPlates,
    OutOfDrawer,
    Stack,
)

__all__ = ["HANDED", "Verdict", "judge"]

#: metres from the hand-over point a given object's centre may be
HANDED = 0.06
#: metres across a stacked block's centre may be off the one below
ACROSS = 0.025
#: metres a block's centre stands above the table when it rests on it (a 4 cm block: 0.02)
ON_TABLE = 0.03
#: a box's rim stands this fraction of its width above the table (pybullet's traybox)
BOX_RIM = 0.23
#: metres short of a container's or plate's edge an object's centre must be
MARGIN = 0.02

Point = tuple[float, float, float]


class Verdict(NamedTuple):
    passed: bool
    reason: str


def judge(twin: Twin, task: CodeTask, handover: Sequence[float] | None = None) -> Verdict:
    """Whether ``task`` is done in ``twin`` now. ``handover``: the hand-over point (base
    frame, robot.toml ``[code] handover``), which a ``given`` task needs."""
    check: Check = task.judge
    if isinstance(check, Given):
        if handover is None:
            raise ValueError(f"task {task.number} ({task.name}) needs the hand-over point")
        return _given(twin, check, (handover[0], handover[1], handover[2]))
    if isinstance(check, Inside):
        return _inside(twin, check)
    if isinstance(check, Stack):
        return _stack(twin, check)
    if isinstance(check, BeltOrder):
        return _belt_order(twin, check)
    if isinstance(check, OnPlates):
        return _on_plates(twin, check)
    return _out_of_drawer(twin, check)


def _at(twin: Twin, name: str) -> Point:
    x, y, z = twin.to_base(twin.object_pose(name)[0])
    return float(x), float(y), float(z)


def _spec(twin: Twin, name: str) -> ObjectSpec:
    return next(o for o in twin.scene.objects if o.name == name)


def _size(spec: ObjectSpec) -> float:
    default = KIND_DEFAULTS[spec.kind].size
    assert isinstance(default, float)
    return spec.size or default


def _free(twin: Twin, names: Sequence[str]) -> str | None:
    """The one of ``names`` the gripper holds (a judge counts nothing still held), if any."""
    held = twin.held_object()
    return held if held in names else None


def _given(twin: Twin, check: Given, handover: Point) -> Verdict:
    away = math.dist(_at(twin, check.object), handover)
    held = twin.held_object() == check.object
    state = "held" if held else "not held"
    where = f"{away:.3f} m from the hand-over point"
    return Verdict(held and away < HANDED, f"{check.object} {state}, {where}")


def _in_box(twin: Twin, name: str, box: str) -> tuple[bool, str]:
    (x, y, z), (bx, by, _) = _at(twin, name), _at(twin, box)
    size = _size(_spec(twin, box))
    inside = max(abs(x - bx), abs(y - by)) < size / 2 - MARGIN and z < BOX_RIM * size
    return inside, f"{name} at ({x - bx:+.3f}, {y - by:+.3f}, {z:.3f}) from the {box}'s centre"


def _inside(twin: Twin, check: Inside) -> Verdict:
    if (held := _free(twin, [check.object, *check.not_inside])) is not None:
        return Verdict(False, f"{held} is still held")
    inside, where = _in_box(twin, check.object, check.container)
    if not inside:
        return Verdict(False, f"{check.object} not in the {check.container}: {where}")
    wrong = [n for n in check.not_inside if _in_box(twin, n, check.container)[0]]
    if wrong:
        return Verdict(False, f"{', '.join(wrong)} in the {check.container} too")
    return Verdict(True, f"{check.object} in the {check.container}: {where}")


def _stack(twin: Twin, check: Stack) -> Verdict:
    if (held := _free(twin, check.order)) is not None:
        return Verdict(False, f"{held} is still held")
    at = [_at(twin, n) for n in check.order]
    if at[0][2] > ON_TABLE:
        return Verdict(False, f"{check.order[0]} not on the table (z {at[0][2]:.3f})")
    for i in range(1, len(at)):
        below, above = check.order[i - 1], check.order[i]
        (bx, by, bz), (ax, ay, az) = at[i - 1], at[i]
        across, up = math.hypot(ax - bx, ay - by), az - bz
        height = (_size(_spec(twin, below)) + _size(_spec(twin, above))) / 2
        if across > ACROSS or abs(up - height) > 0.01:
            offset = f"({ax - bx:+.3f}, {ay - by:+.3f}, {up:+.3f})"
            return Verdict(False, f"{above} not on {below}: {offset}")
    return Verdict(True, f"{' on '.join(reversed(check.order))}")


def _belt(twin: Twin, conveyor: str) -> tuple[Point, float, float, float, float, float]:
    """The belt's centre, the unit vector downstream (x, y), its half length, half width
    and its top's height."""
    spec = _spec(twin, conveyor)
    assert spec.extent is not None
    yaw = math.radians(spec.yaw)
    sign = 1.0 if (spec.speed if spec.speed is not None else 0.05) >= 0 else -1.0
    ex, ey, ez = spec.extent
    centre = _at(twin, conveyor)
    top = centre[2] + ez / 2
    return centre, sign * math.cos(yaw), sign * math.sin(yaw), ex / 2, ey / 2, top


def _belt_order(twin: Twin, check: BeltOrder) -> Verdict:
    if (held := _free(twin, check.order)) is not None:
        return Verdict(False, f"{held} is still held")
    (cx, cy, _), ux, uy, half_length, half_width, top = _belt(twin, check.conveyor)
    along: dict[str, float] = {}
    for name in check.order:
        x, y, z = _at(twin, name)
        a, b = (x - cx) * ux + (y - cy) * uy, -(x - cx) * uy + (y - cy) * ux
        if abs(a) > half_length or abs(b) > half_width or not top < z < top + STOP_HEIGHT:
            return Verdict(False, f"{name} not on the {check.conveyor} ({x:.3f}, {y:.3f}, {z:.3f})")
        along[name] = a
    seen = sorted(check.order, key=lambda n: -along[n])
    if seen != list(check.order):
        return Verdict(False, f"from the end: {', '.join(seen)}")
    return Verdict(True, f"from the end: {', '.join(seen)}")


def _on_plate(twin: Twin, name: str, plate: str) -> tuple[bool, str]:
    (px, py, pz), (x, y, z) = _at(twin, plate), _at(twin, name)
    across = math.hypot(x - px, y - py)
    on = across < _size(_spec(twin, plate)) / 2 - MARGIN / 2 and pz < z < pz + 0.08
    return on, f"{across:.3f} m from its centre, {z - pz:+.3f} m above it"


def _on_plates(twin: Twin, check: OnPlates) -> Verdict:
    every = [o for objects in check.plates.values() for o in objects]
    if (held := _free(twin, [*every, *check.not_on])) is not None:
        return Verdict(False, f"{held} is still held")
    for plate, objects in check.plates.items():
        for name in objects:
            on, where = _on_plate(twin, name, plate)
            if not on:
                return Verdict(False, f"{name} not on the {plate}: {where}")
    for name in check.not_on:
        for plate in check.plates:
            if _on_plate(twin, name, plate)[0]:
                return Verdict(False, f"{name} on the {plate} too")
    return Verdict(True, "; ".join(f"{', '.join(o)} on the {p}" for p, o in check.plates.items()))


def _out_of_drawer(twin: Twin, check: OutOfDrawer) -> Verdict:
    if twin.held_object() == check.object:
        return Verdict(False, f"{check.object} is still held")
    spec = _spec(twin, check.drawer)
    assert spec.extent is not None
    dx, dy, _ = spec.extent
    yaw = math.radians(spec.yaw)
    (x, y, z), (cx, cy, _) = _at(twin, check.object), _at(twin, check.drawer)
    # the cabinet's frame: the drawer slides out along its +x by the opening
    a = (x - cx) * math.cos(yaw) + (y - cy) * math.sin(yaw)
    b = -(x - cx) * math.sin(yaw) + (y - cy) * math.cos(yaw)
    opening = twin.drawer_opening(check.drawer)
    within = -dx / 2 - WALL < a < dx / 2 + opening and abs(b) < dy / 2
    where = f"({x:.3f}, {y:.3f}, {z:.3f}), the drawer {opening:.3f} m open"
    if within:
        return Verdict(False, f"{check.object} still in the {check.drawer}: {where}")
    if z > ON_TABLE:
        return Verdict(False, f"{check.object} not on the table: {where}")
    return Verdict(True, f"{check.object} on the table out of the {check.drawer}: {where}")
