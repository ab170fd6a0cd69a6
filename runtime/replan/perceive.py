"""The scene as the robot perceives it (:class:`~onboard.replan.scene_state.SceneState`):
one fresh look through the robot API's eyes (camera, detector, depth, hand-eye), each
object's position and size, what it rests on and what holds it, and what the gripper holds.

Only perception is read, never the twin's truth. What the camera cannot tell apart from the
table, a conveyor's belt 2 mm above it, comes from the workcell the robot knows (the scene
file of its fixtures, ``workcell``); nothing movable is ever taken from that file.

The rules, in metres:

- an object rests *on* the one under it: within a block's width across (:data:`ACROSS`),
  lower, and touching in z (their tops about one height apart: :data:`LOWER`,
  :data:`TOUCH`); else on the container it is in, else on the table; a held object rests
  on nothing;
- an object is *inside* a container (box, plate, drawer, conveyor) whose footprint holds its
  centre (a drawer's: below the cabinet's top): for a container seen, the extent of the
  depth points above the table in its box (a drawer's includes the part pulled out); for a
  conveyor, its extent in the workcell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onboard.base.errors import ArmError
from onboard.drivers.rotations import quat_from_euler
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.scene import Scene, find_scene, load_scene
from onboard.perception.unknown import Unknown, behind_hand, faint, inside, stacks
from onboard.perception.view import view_problem
from onboard.replan.api import RobotAPI
from onboard.replan.drawer import opening
from onboard.replan.scene_state import ObjectState, SceneState
from onboard.replan.seeing import Look
from onboard.replan.tracking import Seen

__all__ = ["CONTAINERS", "Footprint", "conveyors", "perceive", "scene_image", "state_of"]

#: the detector's labels of things others are put in or on
CONTAINERS = frozenset({"box", "plate", "drawer"})
#: metres across within which one object stands on another (a block's width)
ACROSS = 0.04
#: the tops of two objects stacked touching differ by this many of the upper one's heights
LOWER, TOUCH = 0.2, 1.6
#: metres above the table a depth point belongs to a container, not the table around it
ABOVE_TABLE = 0.004
#: percentiles of a container's depth points that bound its footprint (drops the stray ones)
EDGE = (2.0, 98.0)
#: a conveyor's extent when its scene gives none (drivers/twin/bodies.py KIND_DEFAULTS)
CONVEYOR_EXTENT = (0.8, 0.2, 0.05)
#: metres a footprint is widened by: what stands at its rim is in it
RIM = 0.01
#: metres a drawer must stand open, as measured (runtime/replan/drawer.py: it reads 1-2 cm
#: short at a few cm open), for the camera to see what is in it
OPEN = 0.05


@dataclass(frozen=True)
class Footprint:
    """A container's outline on the table (base frame): centre, half extents along its own
    axes turned by ``yaw`` (radians), and its top."""

    name: str
    kind: str
    centre: tuple[float, float]
    half: tuple[float, float]
    yaw: float
    top: float

    def holds(self, x: float, y: float, z: float) -> bool:
        if self.kind == "drawer" and z >= self.top:
            return False  # on the cabinet, not in its drawer
        dx, dy = x - self.centre[0], y - self.centre[1]
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        along, across = dx * c + dy * s, -dx * s + dy * c
        return abs(along) <= self.half[0] + RIM and abs(across) <= self.half[1] + RIM


def perceive(api: RobotAPI, workcell: str | None = None) -> SceneState:
    """The scene in a fresh look (``detect()``'s names): each object's kind, position, size,
    what it rests on or is in, and what the gripper holds (``api.holding()``). ``workcell``:
    the scene file (or shipped scene name) of the robot's fixtures, for the conveyors the
    camera cannot see; None: no conveyor is known."""
    look = api.eyes.look()
    return state_of(look, api.holding(), conveyors(workcell) if workcell else ())


def scene_image(api: RobotAPI) -> npt.NDArray[np.uint8]:
    """The RGB frame (H, W, 3) of the last look (the one :func:`perceive` used), or of a
    fresh one when nothing was looked at yet."""
    look = api.eyes.last or api.eyes.look()
    if look.frame is None:
        raise ValueError("the last look kept no frame")
    return look.frame.color


def state_of(look: Look, held: str | None, belts: tuple[Footprint, ...] = ()) -> SceneState:
    """The SceneState of one look, the gripper holding ``held``, ``belts`` the conveyors."""
    footprints = [_footprint(look, s) for s in look.objects.values() if s.label in CONTAINERS]
    shapes = {f.name: f for f in footprints if f is not None}
    loose = [s for s in look.objects.values() if s.label not in CONTAINERS and s.name != held]
    objects: list[ObjectState] = []
    for seen in look.objects.values():
        if seen.name in shapes:
            objects.append(_container(seen, shapes[seen.name]))
        elif seen.name == held:
            objects.append(ObjectState(seen.name, seen.label, _rounded(seen.position), _size(seen)))
        else:
            objects.append(_resting(seen, loose, [*shapes.values(), *belts]))
    view = None if look.frame is None else view_problem(look.frame.color)
    return SceneState(tuple(objects), held, view=view, unknown=tuple(_unknown(look, objects, held)))


def _unknown(look: Look, objects: list[ObjectState], held: str | None) -> list[Unknown]:
    """What this look cannot tell (runtime/perception/unknown.py): classes seen only faintly
    or on the robot's hand, unsure stacks, a box (its rim hides some of what is in it), a
    drawer not seen open."""
    found = faint(list(look.faint), [o.kind for o in objects], look.threshold)
    found += behind_hand(look.on_hand, [o.kind for o in objects])
    loose = [(o.name, np.array(o.position), o.size[0] if o.size else 0.04) for o in objects
             if o.kind not in CONTAINERS and o.name != held]  # fmt: skip
    resting = {o.name for o in objects if o.inside is not None or o.on not in (None, "table")}
    found += stacks(loose, table=0.0, supported=resting)
    for o in objects:
        if o.kind == "box":
            found.append(inside(o.name))
        elif o.kind == "drawer" and _drawn(look, o.name) < OPEN:
            found.append(inside(o.name, closed=True))
    return found


def _drawn(look: Look, name: str) -> float:
    """How far drawer ``name`` stands open as seen; 0 when no handle or no depth tells."""
    seen = look.objects[name]
    handles = sorted(look.handles, key=lambda h: math.dist(h[:2], seen.position[:2]))
    if not handles:
        return 0.0
    try:
        return opening(handles[0], seen, look)
    except ArmError:
        return 0.0


def _container(seen: Seen, shape: Footprint) -> ObjectState:
    x, y = shape.centre
    size = (2 * shape.half[0], 2 * shape.half[1], shape.top)
    return ObjectState(
        seen.name, seen.label, _rounded((x, y, shape.top / 2)), _rounded(size), "table"
    )


def _resting(seen: Seen, loose: list[Seen], containers: list[Footprint]) -> ObjectState:
    x, y, _ = seen.position
    under = _under(seen, loose)
    holder = next((c for c in containers if c.holds(x, y, seen.position[2])), None)
    inside = holder.name if holder is not None else None
    on = under.name if under is not None else inside or "table"
    z = seen.position[2] if under is None else seen.top - _height(seen) / 2
    return ObjectState(seen.name, seen.label, _rounded((x, y, z)), _size(seen), on, inside)


def _under(seen: Seen, loose: list[Seen]) -> Seen | None:
    """The object ``seen`` stands on: the highest one below it within a block's width across,
    if it touches: its top lower by about one height of ``seen`` (a top seen over an object
    that another stands on takes in some of the one above: from 0.2 to 1.6 heights)."""
    height = _height(seen)
    below = [
        o
        for o in loose
        if o.name != seen.name
        and math.dist(o.position[:2], seen.position[:2]) <= ACROSS
        and o.top < seen.top - LOWER * height
    ]
    if not below:
        return None
    best = max(below, key=lambda o: o.top)
    return best if seen.top - best.top <= TOUCH * height else None


def _height(seen: Seen) -> float:
    """An object's height: its width as seen, or its top when that is lower (a lying toy)."""
    return min(seen.size, seen.top) if seen.top > 0 else seen.size


def _size(seen: Seen) -> tuple[float, float, float]:
    return _rounded((seen.size, seen.size, _height(seen)))


def _footprint(look: Look, seen: Seen) -> Footprint | None:
    """A container's outline from the depth points above the table in its box."""
    points = look.points(seen.name)
    above = points[points[:, 2] > ABOVE_TABLE]
    if len(above) < 5:
        return None
    lo = np.percentile(above[:, :2], EDGE[0], axis=0)
    hi = np.percentile(above[:, :2], EDGE[1], axis=0)
    top = float(np.percentile(above[:, 2], 90))
    centre = (float(lo[0] + hi[0]) / 2, float(lo[1] + hi[1]) / 2)
    half = (float(hi[0] - lo[0]) / 2, float(hi[1] - lo[1]) / 2)
    return Footprint(seen.name, seen.label, centre, half, 0.0, top)


def conveyors(workcell: str) -> tuple[Footprint, ...]:
    """The conveyors of the workcell's scene file, in the arm's base frame."""
    return _conveyors_of(load_scene(find_scene(workcell)))


def _conveyors_of(scene: Scene) -> tuple[Footprint, ...]:
    base = Transform(scene.arm.position, quat_from_euler(0.0, 0.0, math.radians(scene.arm.yaw)))
    to_base = base.inverse()
    out = []
    for spec in scene.objects:
        if spec.kind != "conveyor":
            continue
        ex, ey, ez = spec.extent or CONVEYOR_EXTENT
        z = spec.position[2] if len(spec.position) == 3 else ez / 2
        x, y, top = to_base.apply((spec.position[0], spec.position[1], z + ez / 2))
        yaw = math.radians(spec.yaw - scene.arm.yaw)
        out.append(Footprint(spec.name, "conveyor", (x, y), (ex / 2, ey / 2), yaw, top))
    return tuple(out)


def _rounded(v: tuple[float, float, float]) -> tuple[float, float, float]:
    return (round(float(v[0]), 4), round(float(v[1]), 4), round(float(v[2]), 4))
