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
``PICK <cube> PLACE <panel>`` is a pick-and-place at the cube's pose as physics has it, onto a
free slot of the panel, then the arm goes home. Where each cube is comes back from physics
(:meth:`SortRig.assignment`): the panel whose area holds the cube's centre, with the cube
resting on it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from types import TracebackType

from onboard.base.errors import DriverError
from onboard.collab.envs.base import WAIT
from onboard.collab.envs.sort import CUBES, SortCubes
from onboard.collab.probes import oracle_joint
from onboard.collab.taskfile import PANELS, SORT_TARGETS, TeamTask
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.arm.safety import Box, SafeArm, SafetyLimits
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.twin.bodies import KIND_DEFAULTS
from onboard.drivers.twin.frames import quat_to_euler
from onboard.drivers.twin.tasks import pick_and_place
from onboard.drivers.twin.world import Twin

__all__ = [
    "SCENE",
    "Panel",
    "SortRig",
    "TwinEpisode",
    "TwinStep",
    "grasp_pose",
    "reach_limits",
    "run_episode",
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


def scene_panels(twin: Twin) -> dict[str, Panel]:
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


def reach_limits(twin: Twin, arm: str, reach: tuple[str, ...] | list[str]) -> SafetyLimits:
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


def grasp_pose(twin: Twin, arm: str, point: tuple[float, float, float], yaw: float = 0.0) -> Pose:
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

    def place_cubes(self, start: Mapping[str, str]) -> None:
        """Teleport each cube to the first slot of its panel in ``start``; let them settle."""
        for cube in CUBES:
            x, y, z = self.panels[start[cube]].center
            self.twin.set_object_pose(cube, (x, y, z + CUBE / 2 + 0.001), (0.0, 0.0, 0.0, 1.0))
        self.twin.settle(0.3)

    def assignment(self) -> dict[str, str | None]:
        """Each cube's panel as physics has it: the panel whose area holds the cube's centre,
        with the cube resting on it (not held, not fallen); None: on no panel."""
        held = {self.twin.held_object(a) for a in self.twin.arm_names()}
        out: dict[str, str | None] = {}
        for cube in CUBES:
            (x, y, z), _ = self.twin.object_pose(cube)
            on = [p.name for p in self.panels.values()
                  if p.holds(x, y) and abs(z - p.center[2] - CUBE / 2) < 0.01]  # fmt: skip
            out[cube] = on[0] if on and cube not in held else None
        return out

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
        arm = self.arms[agent]
        position, orientation = self.twin.object_pose(cube)
        yaw = quat_to_euler(orientation)[2]
        pick = grasp_pose(self.twin, agent, position, yaw)
        place = grasp_pose(self.twin, agent, self._free_slot(panel, cube))
        # both ends are checked before the arm moves: a refused place leaves the cube be
        for pose in (pick, place):
            for z in (pose.z, pose.z + APPROACH):
                arm.check_move(Pose(pose.x, pose.y, z, pose.rx, pose.ry, pose.rz), None)
        pick_and_place(arm, pick, place, approach_height=APPROACH, speed=SPEED)
        arm.home()

    def _free_slot(self, panel: str, moving: str) -> tuple[float, float, float]:
        x, y, z = self.panels[panel].center
        others = [self.twin.object_pose(c)[0] for c in CUBES if c != moving]
        for dx in SLOTS:
            if all(math.dist((x + dx, y), o[:2]) > SLOT_CLEAR for o in others):
                return (x + dx, y, z + CUBE / 2 + 0.002)
        raise DriverError(f"sort twin: {panel} has no free slot for {moving}")


@dataclass(frozen=True)
class TwinStep:
    """One step: the joint action, what went through, and both states after it."""

    joint: dict[str, str]
    executed: dict[str, str]
    symbolic: dict[str, str]
    twin: dict[str, str | None]

    @property
    def agreed(self) -> bool:
        return dict(self.symbolic) == dict(self.twin)


@dataclass(frozen=True)
class TwinEpisode:
    level: str
    seed: int
    start: dict[str, str]
    steps: tuple[TwinStep, ...]
    success: bool  # the symbolic env's verdict
    twin_success: bool  # every cube on its target panel in physics
    sim_seconds: float

    @property
    def agreed(self) -> bool:
        """The twin matched the symbolic state after every step."""
        return all(s.agreed for s in self.steps)


def symbolic_assignment(env: SortCubes) -> dict[str, str]:
    return {c: PANELS[p] for c, p in zip(CUBES, env.state.panel, strict=True)}


def run_episode(rig: SortRig, env: SortCubes, seed: int) -> TwinEpisode:
    """One episode of ``env``'s level on the twin, the oracle's plan (each agent the first
    useful action given the earlier ones'): the feasible actions of each step run on the
    arms, and the twin's cube panels are compared with the symbolic state. Stops at the
    first step where they differ."""
    env.reset(seed)
    start = symbolic_assignment(env)
    rig.place_cubes(start)
    t0 = rig.twin.time
    steps: list[TwinStep] = []
    while not env.done:
        joint = oracle_joint(env)
        result = env.step(joint)
        executed = {a: act for a, act in joint.items() if not result.feedback[a] and act != WAIT}
        rig.execute(executed)
        rig.twin.settle(0.1)
        steps.append(TwinStep(joint, executed, symbolic_assignment(env), rig.assignment()))
        if not steps[-1].agreed:
            break
    twin = rig.assignment()
    twin_success = all(twin[c] == t for c, t in SORT_TARGETS.items())
    return TwinEpisode(
        env.level, seed, start, tuple(steps), env.success, twin_success, rig.twin.time - t0
    )


def _yaw_vector(twin: Twin, arm: str) -> tuple[float, float]:
    """(sin, cos) of the arm base's yaw in the world."""
    ox, oy, _ = twin.to_world((0.0, 0.0, 0.0), arm)
    ux, uy, _ = twin.to_world((1.0, 0.0, 0.0), arm)
    return (uy - oy, ux - ox)


def _corners(
    twin: Twin, arm: str, panel: Panel, margin: float, top: float
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
