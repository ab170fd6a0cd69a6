"""Build the scene's bodies in a PyBullet client: table, objects of every kind.

URDF kinds come from pybullet_data (recoloured with ``changeVisualShape``); fruit, plates,
drawers, conveyors and panels are built from primitive shapes with ``createMultiBody``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onboard.drivers.twin.scene import RGBA, ObjectSpec, TableSpec, Vec3

__all__ = [
    "DRAWER_LINK",
    "HANDLE_LINK",
    "KIND_DEFAULTS",
    "Built",
    "KindDefaults",
    "build_object",
    "build_table",
]

#: PyBullet client (a ``pybullet_utils.bullet_client.BulletClient``; pybullet has no stubs)
Client = Any

WALL = 0.01  # metres: wall thickness of drawers and of a conveyor's end stop
#: metres a conveyor's end stop rises above its belt (above an apple's centre), and its
#: side rails (below the finger tips of a grasp on the belt)
STOP_HEIGHT, RAIL_HEIGHT = 0.05, 0.02
#: a drawer body's links: 0 slides on the prismatic joint, 1 is the handle fixed to its front
DRAWER_LINK, HANDLE_LINK = 0, 1
HANDLE_COLOR: RGBA = (0.15, 0.15, 0.17, 1.0)


@dataclass(frozen=True)
class KindDefaults:
    size: float | Vec3
    mass: float
    color: RGBA


KIND_DEFAULTS: dict[str, KindDefaults] = {
    "block": KindDefaults(0.04, 0.1, (0.6, 0.6, 0.6, 1.0)),
    "bar": KindDefaults(0.10, 0.05, (0.1, 0.7, 0.1, 1.0)),
    "apple": KindDefaults(0.07, 0.15, (0.8, 0.05, 0.05, 1.0)),
    "orange": KindDefaults(0.07, 0.15, (1.0, 0.5, 0.0, 1.0)),
    "lemon": KindDefaults(0.07, 0.1, (1.0, 0.92, 0.2, 1.0)),
    "banana": KindDefaults(0.18, 0.12, (0.95, 0.8, 0.15, 1.0)),
    "plate": KindDefaults(0.2, 0.3, (0.95, 0.95, 0.95, 1.0)),
    "box": KindDefaults(0.3, 0.0, (0.55, 0.4, 0.25, 1.0)),
    "duck": KindDefaults(0.06, 0.1, (1.0, 0.85, 0.1, 1.0)),
    "teddy": KindDefaults(0.1, 0.15, (0.6, 0.4, 0.25, 1.0)),
    "drawer": KindDefaults((0.3, 0.3, 0.2), 0.0, (0.85, 0.85, 0.8, 1.0)),
    "conveyor": KindDefaults((0.8, 0.2, 0.05), 0.0, (0.2, 0.2, 0.22, 1.0)),
    "panel": KindDefaults((0.2, 0.3, 0.005), 0.0, (0.8, 0.8, 0.8, 1.0)),
}

#: pybullet_data file and its size at scale 1 (the quantity ``size`` means for that kind)
URDFS: dict[str, tuple[str, float]] = {
    "block": ("cube_small.urdf", 0.05),
    "bar": ("block.urdf", 0.10),
    "box": ("tray/traybox.urdf", 0.6),
    "duck": ("duck_vhacd.urdf", 0.0907),
    "teddy": ("teddy_vhacd.urdf", 0.1012),
}


@dataclass(frozen=True)
class Built:
    """One object as built: its body, and for a conveyor its belt velocity (world frame)."""

    name: str
    kind: str
    body: int
    static: bool
    belt: Vec3 = (0.0, 0.0, 0.0)
    drawer_travel: float = 0.0


def build_table(p: Client, table: TableSpec) -> int:
    half = (table.size[0] / 2, table.size[1] / 2, table.thickness / 2)
    center = (table.center[0], table.center[1], -table.thickness / 2)
    body = _box_body(p, half, center, table.color, mass=0.0)
    p.changeDynamics(body, -1, lateralFriction=1.0)
    # a floor under the table so the camera sees something behind its edges
    _box_body(p, (3.0, 3.0, 0.01), (0.0, 0.0, -0.76), (0.45, 0.45, 0.47, 1.0), mass=0.0)
    return body


def build_object(p: Client, spec: ObjectSpec) -> Built:
    """Create ``spec`` at its pose; a 2-D position rests it on the table top (z = 0)."""
    defaults = KIND_DEFAULTS[spec.kind]
    color = spec.color or defaults.color
    mass = defaults.mass if spec.mass is None else spec.mass
    body = _BUILDERS[spec.kind](p, spec, color, mass)
    yaw = math.radians(spec.yaw)
    orientation = p.getQuaternionFromEuler((0.0, 0.0, yaw))
    if len(spec.position) == 3:
        p.resetBasePositionAndOrientation(body, spec.position, orientation)
    else:
        _rest_on_table(p, body, spec.position[0], spec.position[1], orientation)
    belt: Vec3 = (0.0, 0.0, 0.0)
    if spec.kind == "conveyor":
        speed = 0.05 if spec.speed is None else spec.speed
        belt = (speed * math.cos(yaw), speed * math.sin(yaw), 0.0)
    travel = 0.0
    if spec.kind == "drawer":
        travel = _drawer_travel(spec)
        p.resetJointState(body, 0, min(spec.opening or 0.0, travel))
    static = mass == 0.0 or spec.kind in ("drawer", "conveyor", "panel")
    return Built(spec.name, spec.kind, body, static, belt, travel)


def _rest_on_table(p: Client, body: int, x: float, y: float, orientation: Any) -> None:
    p.resetBasePositionAndOrientation(body, (x, y, 1.0), orientation)
    bottom = min(p.getAABB(body, link)[0][2] for link in range(-1, p.getNumJoints(body)))
    p.resetBasePositionAndOrientation(body, (x, y, 1.0 - bottom + 0.0005), orientation)


def _size(spec: ObjectSpec) -> float:
    default = KIND_DEFAULTS[spec.kind].size
    assert isinstance(default, float)
    return spec.size or default


def _extent(spec: ObjectSpec) -> Vec3:
    default = KIND_DEFAULTS[spec.kind].size
    assert isinstance(default, tuple)
    return spec.extent or default


def _from_urdf(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    file, native = URDFS[spec.kind]
    size = _size(spec)
    body = int(p.loadURDF(file, (0, 0, 1), globalScaling=size / native, useFixedBase=mass == 0))
    p.changeVisualShape(body, -1, rgbaColor=color)
    if mass > 0:
        low, high = p.getAABB(body)
        dx, dy, dz = (h - lo for h, lo in zip(high, low, strict=True))
        # the URDFs carry placeholder inertias (1 kg m^2); use a solid box of the same extent
        inertia = (
            mass / 12 * (dy**2 + dz**2),
            mass / 12 * (dx**2 + dz**2),
            mass / 12 * (dx**2 + dy**2),
        )
        p.changeDynamics(body, -1, mass=mass, localInertiaDiagonal=inertia)
    p.changeDynamics(body, -1, lateralFriction=1.0, spinningFriction=0.001)
    return body


def _sphere(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    radius = _size(spec) / 2
    shape = p.createCollisionShape(p.GEOM_SPHERE, radius=radius)
    visual = p.createVisualShape(p.GEOM_SPHERE, radius=radius, rgbaColor=color)
    return _round_body(p, shape, visual, mass)


def _capsule(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    """A capsule lying along x: a banana (thin) or a lemon (stout)."""
    length = _size(spec)
    radius = 0.018 if spec.kind == "banana" else length * 0.36
    frame = p.getQuaternionFromEuler((0.0, math.pi / 2, 0.0))
    cylinder = max(length - 2 * radius, 0.001)
    shape = p.createCollisionShape(
        p.GEOM_CAPSULE, radius=radius, height=cylinder, collisionFrameOrientation=frame
    )
    visual = p.createVisualShape(
        p.GEOM_CAPSULE,
        radius=radius,
        length=cylinder,
        rgbaColor=color,
        visualFrameOrientation=frame,
    )
    return _round_body(p, shape, visual, mass)


def _plate(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    radius, height = _size(spec) / 2, 0.012
    shape = p.createCollisionShape(p.GEOM_CYLINDER, radius=radius, height=height)
    visual = p.createVisualShape(p.GEOM_CYLINDER, radius=radius, length=height, rgbaColor=color)
    body = int(p.createMultiBody(mass, shape, visual, (0, 0, 1)))
    p.changeDynamics(body, -1, lateralFriction=1.0)
    return body


def _round_body(p: Client, shape: int, visual: int, mass: float) -> int:
    body = int(p.createMultiBody(mass, shape, visual, (0, 0, 1)))
    # rolling friction lets fruit come to rest instead of rolling off the table
    p.changeDynamics(body, -1, lateralFriction=1.0, rollingFriction=0.002, spinningFriction=0.002)
    return body


def _conveyor(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    ex, ey, ez = _extent(spec)
    if spec.end_stop:
        # the stop and the rails are part of the belt's body, so what leans on them is still
        # driven (pressed against the stop); downstream is +x, or -x for a negative speed.
        # The rails keep a queue of round things from buckling sideways off the belt.
        end = (ex / 2 - WALL / 2) * (1.0 if (spec.speed or 0.05) >= 0 else -1.0)
        top = ez / 2
        parts = [
            ((ex / 2, ey / 2, ez / 2), (0.0, 0.0, 0.0)),
            ((WALL / 2, ey / 2, STOP_HEIGHT / 2), (end, 0.0, top + STOP_HEIGHT / 2)),
        ]
        for side in (1.0, -1.0):
            rail = (0.0, side * (ey / 2 - WALL / 2), top + RAIL_HEIGHT / 2)
            parts.append(((ex / 2, WALL / 2, RAIL_HEIGHT / 2), rail))
        shape, visual = _box_array(p, parts)
        body = int(p.createMultiBody(0.0, shape, visual, (0, 0, 1)))
        p.changeVisualShape(body, -1, rgbaColor=color)
    else:
        body = _box_body(p, (ex / 2, ey / 2, ez / 2), (0, 0, 1), color, mass=0.0)
    # a frictionless belt: the twin sets the velocity of what rests on it every step
    p.changeDynamics(body, -1, lateralFriction=0.0, spinningFriction=0.0, rollingFriction=0.0)
    return body


def _drawer_travel(spec: ObjectSpec) -> float:
    return 0.8 * (_extent(spec)[0] - WALL)


def _drawer(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    """A fixed cabinet open at +x, and a drawer on a prismatic joint along x with a handle."""
    dx, dy, dz = _extent(spec)
    cabinet = [
        ((dx / 2, dy / 2, WALL / 2), (0, 0, -dz / 2 + WALL / 2)),  # bottom
        ((dx / 2, dy / 2, WALL / 2), (0, 0, dz / 2 - WALL / 2)),  # top
        ((WALL / 2, dy / 2, dz / 2), (-dx / 2 + WALL / 2, 0, 0)),  # back
        ((dx / 2, WALL / 2, dz / 2), (0, dy / 2 - WALL / 2, 0)),  # sides
        ((dx / 2, WALL / 2, dz / 2), (0, -dy / 2 + WALL / 2, 0)),
    ]
    # the drawer, in its own frame at the centre of the cabinet's inside
    ix, iy, iz = dx - WALL - 0.004, dy - 2 * WALL - 0.006, dz - 2 * WALL - 0.006
    side = iz * 0.7
    floor = -iz / 2 + WALL / 2
    drawer = [
        ((ix / 2, iy / 2, WALL / 2), (0, 0, floor)),
        ((WALL / 2, iy / 2, iz / 2), (ix / 2 - WALL / 2, 0, 0)),  # front panel
        ((WALL / 2, iy / 2, side / 2), (-ix / 2 + WALL / 2, 0, -iz / 2 + side / 2)),  # back
        ((ix / 2, WALL / 2, side / 2), (0, iy / 2 - WALL / 2, -iz / 2 + side / 2)),
        ((ix / 2, WALL / 2, side / 2), (0, -iy / 2 + WALL / 2, -iz / 2 + side / 2)),
    ]
    # the handle is a link of its own, fixed to the drawer's front: a grasp attaches to it,
    # and the detector has a class for it
    handle = [((0.015, min(0.06, iy / 3), 0.008), (0.0, 0.0, 0.0))]
    base_shape, base_visual = _box_array(p, cabinet)
    link_shape, link_visual = _box_array(p, drawer)
    handle_shape, handle_visual = _box_array(p, handle)
    body = int(
        p.createMultiBody(
            baseMass=0.0,
            baseCollisionShapeIndex=base_shape,
            baseVisualShapeIndex=base_visual,
            basePosition=(0, 0, 1),
            linkMasses=[0.5, 0.05],
            linkCollisionShapeIndices=[link_shape, handle_shape],
            linkVisualShapeIndices=[link_visual, handle_visual],
            linkPositions=[(WALL / 2 + 0.002, 0, 0), (ix / 2 + 0.015, 0, 0)],
            linkOrientations=[(0, 0, 0, 1), (0, 0, 0, 1)],
            linkInertialFramePositions=[(0, 0, 0), (0, 0, 0)],
            linkInertialFrameOrientations=[(0, 0, 0, 1), (0, 0, 0, 1)],
            # 0 is the cabinet (base), 1 the drawer link: the handle rides on the drawer
            linkParentIndices=[0, 1],
            linkJointTypes=[p.JOINT_PRISMATIC, p.JOINT_FIXED],
            linkJointAxis=[(1, 0, 0), (0, 0, 0)],
        )
    )
    travel = _drawer_travel(spec)
    p.changeDynamics(body, 0, jointLowerLimit=0.0, jointUpperLimit=travel, lateralFriction=1.0)
    p.changeVisualShape(body, -1, rgbaColor=color)
    darker = (color[0] * 0.75, color[1] * 0.75, color[2] * 0.75, color[3])
    p.changeVisualShape(body, 0, rgbaColor=darker)
    p.changeVisualShape(body, HANDLE_LINK, rgbaColor=HANDLE_COLOR)
    return body


def _panel(p: Client, spec: ObjectSpec, color: RGBA, mass: float) -> int:
    """A thin fixed slab (a coloured area of the table that objects rest on)."""
    ex, ey, ez = _extent(spec)
    body = _box_body(p, (ex / 2, ey / 2, ez / 2), (0.0, 0.0, ez / 2), color, mass=0.0)
    p.changeDynamics(body, -1, lateralFriction=1.0)
    return body


def _box_array(p: Client, boxes: list[tuple[Vec3, Vec3]]) -> tuple[int, int]:
    halves = [list(h) for h, _ in boxes]
    offsets = [list(o) for _, o in boxes]
    n = len(boxes)
    shape = p.createCollisionShapeArray(
        [p.GEOM_BOX] * n, halfExtents=halves, collisionFramePositions=offsets
    )
    visual = p.createVisualShapeArray(
        [p.GEOM_BOX] * n, halfExtents=halves, visualFramePositions=offsets
    )
    return int(shape), int(visual)


def _box_body(p: Client, half: Vec3, center: Vec3, color: RGBA, mass: float) -> int:
    shape = p.createCollisionShape(p.GEOM_BOX, halfExtents=half)
    visual = p.createVisualShape(p.GEOM_BOX, halfExtents=half, rgbaColor=color)
    return int(p.createMultiBody(mass, shape, visual, center))


Builder = Callable[[Client, ObjectSpec, RGBA, float], int]
_BUILDERS: dict[str, Builder] = {
    "block": _from_urdf,
    "bar": _from_urdf,
    "box": _from_urdf,
    "duck": _from_urdf,
    "teddy": _from_urdf,
    "apple": _sphere,
    "orange": _sphere,
    "lemon": _capsule,
    "banana": _capsule,
    "plate": _plate,
    "drawer": _drawer,
    "conveyor": _conveyor,
    "panel": _panel,
}
