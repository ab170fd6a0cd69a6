"""Judge tidy episodes from the physics twin's truth (evaluation only: the robot's loop never
imports this module; it sees the table through its camera and detector).

Tasks come from ``skills/tasks/tidy.toml``: a goal in words, the scene, objects moved before
the episode, and what must hold at the end: one or more relations (on, off, in, given), or
``expect = "failure"`` with ``why`` when no end state fulfils the request (an unknown object or
region, an impossible stack, nonsense): then only a failure is the right verdict.
"""

from __future__ import annotations

import math
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onboard.base.errors import ConfigError, Problem
from onboard.drivers.twin.world import Twin
from onboard.loop.skill import Skill

__all__ = ["GROUPS", "Relation", "TidyTask", "Verdict", "judge", "load_tasks", "set_up"]

#: metres across a stacked object's centre may be off its support's
ACROSS = 0.03
#: metres from the hand-over point a given object may be
HANDED = 0.06
#: seconds the objects settle after the set-up (a replay settles as long)
SETTLE = 0.5


#: what a task may ask for: X on Y, X off Y, X in REGION, X given
RELATIONS = ("on", "off", "in", "given")


@dataclass(frozen=True)
class Relation:
    kind: str  # one of RELATIONS
    subject: str
    other: str | None = None  # the object or region; None for given


@dataclass(frozen=True)
class TidyTask:
    name: str
    goal: str
    scene: str
    setup: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    #: all must hold at the end; empty when no end state fulfils the request
    relations: tuple[Relation, ...] = ()
    #: why no end state fulfils the request (``expect = "failure"``); None when one does
    impossible: str | None = None

    @property
    def kind(self) -> str:
        """The goal's group: the name's prefix in the held-out set, else "shipped"."""
        for group in GROUPS:
            if self.name.startswith(group + "-"):
                return group
        return "shipped"


#: the held-out set's groups (bench/data/tidy-heldout/BRIEF.md), by name prefix
GROUPS = ("one", "multi", "already", "impossible", "unknown-object", "unknown-region", "nonsense")


@dataclass(frozen=True)
class Verdict:
    success: bool
    reason: str


def load_tasks(path: Path) -> tuple[list[TidyTask], float]:
    """The tasks and the jitter (metres) of ``path``; one-line errors naming the task."""
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError([Problem(path, "", None, f"cannot read the tasks: {exc}")]) from exc
    tasks = []
    for i, raw in enumerate(data.get("task", [])):
        try:
            setup = {
                k: (float(v[0]), float(v[1]), float(v[2])) for k, v in raw.get("setup", {}).items()
            }
            relations = tuple(_relations(raw))
            impossible = str(raw.get("why", "")) if raw.get("expect") == "failure" else None
            task = TidyTask(
                name=str(raw["name"]),
                goal=str(raw["goal"]),
                scene=str(raw.get("scene", "blocks")),
                setup=setup,
                relations=relations,
                impossible=impossible,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ConfigError([Problem(path, f"task.{i}", None, f"not a task: {exc}")]) from exc
        if (impossible is None) == (not relations):
            why = 'give on, off, in or given, or expect = "failure" with why, not both'
            raise ConfigError([Problem(path, f"task.{i}", None, why)])
        tasks.append(task)
    return tasks, float(data.get("jitter", 0.0))


def _relations(raw: dict[str, Any]) -> list[Relation]:
    """``on = [X, Y]`` or ``on = [[X, Y], ...]`` (likewise off, in); ``given = X``."""
    found = []
    for kind in ("on", "off", "in"):
        value = raw.get(kind)
        if value is None:
            continue
        pairs = value if value and isinstance(value[0], list) else [value]
        for first, second in pairs:
            found.append(Relation(kind, str(first), str(second)))
    if "given" in raw:
        found.append(Relation("given", str(raw["given"])))
    return found


def set_up(twin: Twin, task: TidyTask, rng: random.Random, jitter: float) -> dict[str, list[float]]:
    """Move the task's objects into place, jitter every block, let them settle; returns where
    each was put (world frame), so a replay can do the same (runtime/manip/replay.py)."""
    placed: dict[str, list[float]] = {}
    for name in twin.object_names():
        if twin.kind_of(name) != "block":
            continue
        (x, y, z), _ = twin.object_pose(name)
        if name in task.setup:
            x, y, z = task.setup[name]
        dx, dy = (rng.uniform(-jitter, jitter) for _ in range(2))
        placed[name] = [x + dx, y + dy, z]
        twin.set_object_pose(name, (x + dx, y + dy, z))
    twin.settle(SETTLE)
    return placed


def judge(twin: Twin, task: TidyTask, skill: Skill) -> Verdict:
    """Success when every relation holds in the twin's truth; a task no end state fulfils
    is never a success."""
    if task.impossible is not None:
        return Verdict(False, f"cannot be done: {task.impossible}")
    verdicts = [_holds(twin, r, skill) for r in task.relations]
    return Verdict(all(v.success for v in verdicts), "; ".join(v.reason for v in verdicts))


def _holds(twin: Twin, relation: Relation, skill: Skill) -> Verdict:
    def at(name: str) -> tuple[float, float, float]:
        x, y, z = twin.to_base(twin.object_pose(name)[0])
        return float(x), float(y), float(z)

    x, other = relation.subject, relation.other
    if relation.kind == "on" and other is not None:
        (ax, ay, az), (bx, by, bz) = at(x), at(other)
        ok = math.hypot(ax - bx, ay - by) < ACROSS and az > bz + 0.02
        offset = f"({ax - bx:+.3f}, {ay - by:+.3f}, {az - bz:+.3f})"
        return Verdict(ok, f"{x} {'on' if ok else 'not on'} {other} {offset}")
    if relation.kind == "off" and other is not None:
        (ax, ay, az), (bx, by, bz) = at(x), at(other)
        ok = az < 0.035 and math.hypot(ax - bx, ay - by) > ACROSS
        return Verdict(ok, f"{x} at z {az:.3f}, {math.hypot(ax - bx, ay - by):.3f} m from {other}")
    if relation.kind == "in" and other is not None:
        ax, ay, az = at(x)
        assert skill.scene is not None
        ok = skill.scene.regions[other].contains(ax, ay) and az < 0.035
        return Verdict(ok, f"{x} at ({ax:.3f}, {ay:.3f}) {'in' if ok else 'not in'} the {other}")
    assert skill.scene is not None and skill.scene.handover is not None
    ax, ay, az = at(x)
    away = math.dist((ax, ay, az), skill.scene.handover)
    held = twin.held_object() == x
    ok = held and away < HANDED
    state = "held" if held else "not held"
    return Verdict(ok, f"{x} {state}, {away:.3f} m from the hand-over point")
