"""Sort Cubes on the twin's three arms, judged: lay out a level's start, run a plan on the
arms (:class:`~onboard.collab.twin_sort.SortRig`), and after every step compare the cubes'
panels as physics has them with the symbolic env's state.

An evaluation harness, never imported by the robot: :func:`lay_out` moves the cubes in the
twin (as a person laying out the table would) and tells the rig where they are, and
:func:`twin_assignment` is the judge, reading the twin's truth. The plan is a team method's
(the joint actions its episode chose, step by step) or the symbolic env's oracle (each agent
the first useful action given the earlier agents'); only the actions the symbolic env lets
through run on the arms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onboard.collab.envs.base import WAIT, Snapshot
from onboard.collab.envs.sort import CUBES, SortCubes, SortState
from onboard.collab.probes import oracle_joint
from onboard.collab.taskfile import PANELS, SORT_TARGETS
from onboard.collab.twin_sort import CUBE, SortRig

__all__ = ["TwinEpisode", "TwinStep", "lay_out", "run_episode", "twin_assignment"]

REST = 0.01  # metres: a cube within this of resting height on a panel rests on it


@dataclass(frozen=True)
class TwinStep:
    """One step: the joint action, what the symbolic env let through (and the arms ran),
    and both states after it."""

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
    twin_start: dict[str, str | None]  # the cubes' panels in physics once laid out
    steps: tuple[TwinStep, ...]
    success: bool  # the symbolic env's verdict
    twin_success: bool  # every cube on its target panel in physics
    sim_seconds: float

    @property
    def agreed(self) -> bool:
        """The twin matched the symbolic state at the start and after every step."""
        return dict(self.start) == dict(self.twin_start) and all(s.agreed for s in self.steps)


def lay_out(rig: SortRig, start: dict[str, str]) -> None:
    """Put each cube in the first slot of its ``start`` panel (upright), let them settle,
    and tell the rig where they are."""
    where = {cube: rig.panels[start[cube]].slot(0) for cube in CUBES}
    for cube, (x, y, z) in where.items():
        rig.twin.set_object_pose(cube, (x, y, z + 0.001), (0.0, 0.0, 0.0, 1.0))
    rig.twin.settle(0.3)
    rig.told(where)


def twin_assignment(rig: SortRig) -> dict[str, str | None]:
    """Each cube's panel as physics has it: the panel whose area holds the cube's centre,
    with the cube resting on it (not held, not fallen); None: on no panel."""
    twin = rig.twin
    held = {twin.held_object(a) for a in twin.arm_names()}
    out: dict[str, str | None] = {}
    for cube in CUBES:
        (x, y, z), _ = twin.object_pose(cube)
        on = [p.name for p in rig.panels.values()
              if p.holds(x, y) and abs(z - p.center[2] - CUBE / 2) < REST]  # fmt: skip
        out[cube] = on[0] if on and cube not in held else None
    return out


def symbolic_assignment(env: SortCubes) -> dict[str, str]:
    return {c: PANELS[p] for c, p in zip(CUBES, env.state.panel, strict=True)}


def run_episode(
    rig: SortRig,
    env: SortCubes,
    seed: int,
    start: Mapping[str, str] | None = None,
    plan: Sequence[Mapping[str, str]] | None = None,
) -> TwinEpisode:
    """One episode of ``env``'s level (start by ``seed``, or ``start``: each cube's panel)
    on the twin: the joint actions of ``plan`` in order (a team method's episode, which the
    symbolic env reset with the same seed ran), or the oracle's; stops at the first step
    where the twin and the symbolic state differ, or when the plan ends."""
    env.reset(seed)
    if start is not None:
        state = SortState(tuple(PANELS.index(start[c]) for c in CUBES))
        env.restore(Snapshot(state, 0, 0.0, False, False))
    laid = symbolic_assignment(env)
    lay_out(rig, laid)
    twin_start = twin_assignment(rig)
    t0 = rig.twin.time
    steps: list[TwinStep] = []
    agreed = twin_start == laid
    chosen = None if plan is None else iter(plan)
    while agreed and not env.done:
        joint = oracle_joint(env) if chosen is None else dict(next(chosen, {}))
        if not joint:
            break  # the method's episode ended here (its step limit)
        result = env.step(joint)
        executed = {a: act for a, act in joint.items() if not result.feedback[a] and act != WAIT}
        rig.execute(executed)
        rig.twin.settle(0.1)
        steps.append(TwinStep(joint, executed, symbolic_assignment(env), twin_assignment(rig)))
        agreed = steps[-1].agreed
    final = steps[-1].twin if steps else twin_start  # nothing has moved since it was read
    return TwinEpisode(
        level=env.level,
        seed=seed,
        start=laid,
        twin_start=twin_start,
        steps=tuple(steps),
        success=env.success,
        twin_success=all(final[c] == t for c, t in SORT_TARGETS.items()),
        sim_seconds=rig.twin.time - t0,
    )
