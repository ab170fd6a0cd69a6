"""Sort Cubes on the physics twin's three arms (scene ``sort_cubes``): each agent of the task
file drives its own Panda through the normal arm drivers, :class:`SimArm` behind
:class:`SafeArm`, whose workspace covers exactly the agent's ``reach`` panels.

The limits come from the scene's panels and the task file's reach, in code
(:func:`reach_limits`): the workspace box is the panels' areas in the arm's base frame,
widened by a margin of 40 % of the gap between neighbouring panels (so a neighbour's panel
stays out), from the table top up to 0.4 m; the tool may go below ``z_floor`` only over the
reach panels (the pick zones). A plan the symbolic simulator accepts is then one the arms can
execute, and a move outside an agent's reach is refused by SafeArm before the arm moves.

A joint action runs one agent at a time, in the task file's order (the symbolic step is
simultaneous; the twin's is sequential, so two arms never share the air over a panel): each
``PICK <cube> PLACE <panel>`` is a pick-and-place from where the rig last put the cube (it is
told the start, :meth:`SortRig.told`, and remembers every place since; it never reads the
twin's truth) onto a free slot of the panel, then the arm goes home. Whether the cubes really
are where the plan says is for a judge to read from physics: the episode runner and its judge
are in :mod:`onboard.evaluation.sort_twin`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType
from typing import Protocol

from onboard.base.errors import DriverError
from onboard.collab.envs.base import WAIT
from onboard.collab.taskfile import PANELS, TeamTask
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.arm.safety import Box, SafeArm, SafetyLimits
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.rotations import Vec3, quat_from_euler
from onboard.drivers.twin.bodies import KIND_DEFAULTS
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.scene import Scene
from onboard.drivers.twin.tasks import pick_and_place
from onboard.drivers.twin.world import Twin

__all__ = [
    "CUBE",
    "SCENE",
    "SLOTS",
    "Frames",
    "Panel",
    "SceneFrames",
    "SortRig",
    "free_slot",
    "grasp_pose",
    "put",
    "reach_limits",
    "scene_panels",
]

SCENE = "sort_cubes"  # the shipped scene
CUBE = 0.04  # metres: the cubes' edge (the scene's blocks)
MARGIN_SHARE = 0.4  # of the gap between neighbouring panels: the workspace's margin
TOP = 0.4  # metres: the workspace's ceiling above the table
Z_FLOOR = 0.06  # metres: the tool goes lower only over a reach panel
APPROACH = 0.12  # metres above a pick or place pose
SPEED = 0.4  # m/s: the tool speed the limits allow (and the rig asks for)
SLOTS = (0.0, -0.07, 0.07)  # metres along x from a panel's centre: where a cube is put down
SLOT_CLEAR = 0.05  # metres: a slot is free when no other cube's centre is closer
DOWN = (math.pi, 0.0)  # roll, pitch of a tool pointing down


@dataclass(frozen=True)
class Panel:
    """A panel's area on the table, world frame: its top centre and half extents in x, y."""

    name: str
    center: tuple[float, float, float]
    half: tuple[float, float]

    def holds(self, x: float, y: float) -> bool:
        return abs(x - self.center[0]) <= self.half[0] and abs(y - self.center[1]) <= self.half[1]

    def slot(self, i: int) -> tuple[float, float, float]:
        """The centre of a cube resting in slot ``i`` (of SLOTS), world frame."""
        x, y, z = self.center
        return (x + SLOTS[i], y, z + CUBE / 2)


class Frames(Protocol):
    """Where things are in a scene: its objects, each arm's base frame. The twin is one;
    :class:`SceneFrames` is another, from the scene file alone (no physics), for a
    controller that drives its arm over the arm's own link."""

    @property
    def scene(self) -> Scene: ...

    def arm_names(self) -> list[str]: ...

    def to_base(self, point: Vec3, arm: str | None = None) -> Vec3: ...

    def to_world(self, point: Vec3, arm: str | None = None) -> Vec3: ...


class SceneFrames:
    """Implements :class:`Frames` from a scene's description: each arm's base at its
    ``position``, turned by its ``yaw`` (as the twin places its Pandas)."""

    def __init__(self, scene: Scene) -> None:
        self._scene = scene
        self._bases = {
            name: Transform(spec.position, quat_from_euler(0.0, 0.0, math.radians(spec.yaw)))
            for name, spec in scene.arm_specs().items()
        }

    @property
    def scene(self) -> Scene:
        return self._scene

    def arm_names(self) -> list[str]:
        return list(self._bases)

    def _base(self, arm: str | None) -> Transform:
        if arm is None:
            return next(iter(self._bases.values()))
        if arm not in self._bases:
            raise DriverError(f"sort twin: the scene has no arm {arm!r} "
                              f"(arms: {', '.join(self._bases)})")  # fmt: skip
        return self._bases[arm]

    def to_base(self, point: Vec3, arm: str | None = None) -> Vec3:
        return self._base(arm).inverse().apply(point)

    def to_world(self, point: Vec3, arm: str | None = None) -> Vec3:
        return self._base(arm).apply(point)


def scene_panels(twin: Frames) -> dict[str, Panel]:
    """The task's panels (panel1..panel7) as the twin's scene has them (kind ``panel``)."""
    specs = {o.name: o for o in twin.scene.objects if o.kind == "panel"}
    missing = [p for p in PANELS if p not in specs]
    if missing:
        raise DriverError(f"sort twin: the scene has no panel {', '.join(missing)}")
    panels = {}
    for name in PANELS:
        extent = specs[name].extent or KIND_DEFAULTS["panel"].size
        assert isinstance(extent, tuple)
        position = specs[name].position  # [x, y] rests it on the table; [x, y, z]: its centre
        top = extent[2] if len(position) == 2 else position[2] + extent[2] / 2
        panels[name] = Panel(name, (position[0], position[1], top), (extent[0] / 2, extent[1] / 2))
    return panels


def reach_limits(twin: Frames, arm: str, reach: tuple[str, ...] | list[str]) -> SafetyLimits:
    """The SafetyLimits of ``arm`` (in its base frame) whose workspace covers exactly the
    ``reach`` panels: see the module's docstring."""
    panels = scene_panels(twin)
    margin = MARGIN_SHARE * _smallest_gap(list(panels.values()))
    corners = [c for name in reach for c in _corners(twin, arm, panels[name], margin, TOP)]
    zones = [_bounds(_corners(twin, arm, panels[name], 0.0, Z_FLOOR)) for name in reach]
    return SafetyLimits(
        mode="refuse",
        workspace=_bounds(corners),
        z_floor=Z_FLOOR,
        pick_zones=tuple(zones),
        max_speed=SPEED,
        default_speed=SPEED,
        max_joint_speed=2.0,
        default_joint_speed=1.0,
    )


def grasp_pose(twin: Frames, arm: str, point: tuple[float, float, float], yaw: float = 0.0) -> Pose:
    """The tool pose that grasps (or puts down) a cube centred at ``point`` (world frame)
    from above, turned with the cube's ``yaw`` (radians, reduced to within 45 degrees)."""
    x, y, z = twin.to_base(point, arm)
    base_yaw = math.atan2(*_yaw_vector(twin, arm))
    turn = (yaw - base_yaw + math.pi / 4) % (math.pi / 2) - math.pi / 4
    return Pose(x, y, z, *DOWN, turn)


@dataclass
class SortRig:
    """The twin's arms for ``task`` (one per agent, named as the agents), behind their
    reach limits. Use as a context manager (connects and closes the arms)."""

    twin: Twin
    task: TeamTask
    arms: dict[str, SafeArm] = field(init=False)
    panels: dict[str, Panel] = field(init=False)
    #: where the rig believes each cube rests (its centre, world frame): told, then its own
    where: dict[str, tuple[float, float, float]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.panels = scene_panels(self.twin)
        missing = [a for a in self.task.agent_names if a not in self.twin.arm_names()]
        if missing:
            raise DriverError(
                f"sort twin: the scene has no arm named {', '.join(missing)} "
                f"(arms: {', '.join(self.twin.arm_names())})"
            )
        config = SimArmConfig(max_speed=SPEED, speed=SPEED)
        self.arms = {
            a.name: SafeArm(
                SimArm(self.twin, config, arm=a.name),
                reach_limits(self.twin, a.name, a.reach),
                forward_kinematics=partial(self.twin.forward, arm=a.name),
            )
            for a in self.task.agents
        }

    def __enter__(self) -> SortRig:
        for arm in self.arms.values():
            arm.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for arm in self.arms.values():
            arm.close()

    def told(self, where: Mapping[str, tuple[float, float, float]]) -> None:
        """Where the cubes rest now (their centres, world frame), as whoever laid out the
        table says."""
        self.where.update(where)

    def execute(self, joint: Mapping[str, str]) -> None:
        """Run a joint action, one agent at a time in the task file's order; raises the
        arm's SafetyError (nothing moved by that agent) when a move is out of its reach."""
        for agent in self.task.agent_names:
            action = joint.get(agent, WAIT)
            if action == WAIT:
                continue
            verb, cube, _, place = action.split()
            if verb != "PICK":
                raise DriverError(f"sort twin: no action {action!r}")
            self.pick_place(agent, cube, place)

    def pick_place(self, agent: str, cube: str, panel: str) -> None:
        """``agent`` puts ``cube`` on a free slot of ``panel`` and goes home."""
        put(self.twin, self.arms[agent], agent, self.panels, self.where, cube, panel)


def put(
    frames: Frames,
    arm: Arm,
    agent: str,
    panels: Mapping[str, Panel],
    where: dict[str, tuple[float, float, float]],
    cube: str,
    panel: str,
) -> tuple[float, float, float]:
    """``agent``'s ``arm`` puts ``cube`` from where ``where`` says it rests on a free slot of
    ``panel``, and goes home; ``where`` is updated and the slot returned. Both ends are
    checked against the arm's limits (a SafeArm's) before it moves: a refused place leaves
    the cube be."""
    if cube not in where:
        raise DriverError(f"sort twin: where {cube} is was never told (SortRig.told)")
    goal = free_slot(panels[panel], cube, where)
    pick = grasp_pose(frames, agent, where[cube])
    place = grasp_pose(frames, agent, (goal[0], goal[1], goal[2] + 0.002))
    check = getattr(arm, "check_move", None)
    if check is not None:
        for pose in (pick, place):
            for z in (pose.z, pose.z + APPROACH):
                check(Pose(pose.x, pose.y, z, pose.rx, pose.ry, pose.rz), None)
    pick_and_place(arm, pick, place, approach_height=APPROACH, speed=SPEED)
    where[cube] = goal
    arm.home()
    return goal


def free_slot(
    panel: Panel, moving: str, where: Mapping[str, tuple[float, float, float]]
) -> tuple[float, float, float]:
    """The first slot of ``panel`` no other cube is in (as ``where`` has them)."""
    others = [p for c, p in where.items() if c != moving]
    for i in range(len(SLOTS)):
        x, y, z = panel.slot(i)
        if all(math.dist((x, y), o[:2]) > SLOT_CLEAR for o in others):
            return (x, y, z)
    raise DriverError(f"sort twin: {panel.name} has no free slot for {moving}")


def _yaw_vector(twin: Frames, arm: str) -> tuple[float, float]:
    """(sin, cos) of the arm base's yaw in the world."""
    ox, oy, _ = twin.to_world((0.0, 0.0, 0.0), arm)
    ux, uy, _ = twin.to_world((1.0, 0.0, 0.0), arm)
    return (uy - oy, ux - ox)


def _corners(
    twin: Frames, arm: str, panel: Panel, margin: float, top: float
) -> list[tuple[float, float, float]]:
    """The corners of the space over ``panel`` (grown by ``margin`` in x and y) from the
    table up to ``top``, in ``arm``'s base frame."""
    (x, y, _), (hx, hy) = panel.center, panel.half
    return [
        twin.to_base((x + sx * (hx + margin), y + sy * (hy + margin), z), arm)
        for sx in (-1, 1)
        for sy in (-1, 1)
        for z in (0.0, top)
    ]


def _smallest_gap(panels: list[Panel]) -> float:
    """The smallest distance between the edges of two panels, along the line's axis."""
    gaps = []
    for a, b in itertools.pairwise(panels):
        dx = abs(a.center[0] - b.center[0]) - a.half[0] - b.half[0]
        dy = abs(a.center[1] - b.center[1]) - a.half[1] - b.half[1]
        gaps.append(max(dx, dy))
    return min(gaps)


def _bounds(points: list[tuple[float, float, float]]) -> Box:
    lo = tuple(min(p[i] for p in points) for i in range(3))
    hi = tuple(max(p[i] for p in points) for i in range(3))
    return Box(min=(lo[0], lo[1], lo[2]), max=(hi[0], hi[1], hi[2]))
