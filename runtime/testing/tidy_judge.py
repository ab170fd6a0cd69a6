"""Judge tidy episodes from the physics twin's truth (evaluation only: the robot's loop never
imports this module; it sees the table through its camera and detector).

Tasks come from ``skills/tasks/tidy.toml``: a goal in words, the scene, objects moved before
the episode, and one success predicate (on, off, in, given).
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

__all__ = ["TidyTask", "Verdict", "judge", "load_tasks", "set_up"]

#: metres across a stacked object's centre may be off its support's
ACROSS = 0.03
#: metres from the hand-over point a given object may be
HANDED = 0.06
#: seconds the objects settle after the set-up (a replay settles as long)
SETTLE = 0.5


@dataclass(frozen=True)
class TidyTask:
    name: str
    goal: str
    scene: str
    setup: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    on: tuple[str, str] | None = None
    off: tuple[str, str] | None = None
    inside: tuple[str, str] | None = None
    given: str | None = None


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
            task = TidyTask(
                name=str(raw["name"]),
                goal=str(raw["goal"]),
                scene=str(raw.get("scene", "blocks")),
                setup=setup,
                on=_pair(raw, "on"),
                off=_pair(raw, "off"),
                inside=_pair(raw, "in"),
                given=str(raw["given"]) if "given" in raw else None,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ConfigError([Problem(path, f"task.{i}", None, f"not a task: {exc}")]) from exc
        if sum(p is not None for p in (task.on, task.off, task.inside, task.given)) != 1:
            why = "give exactly one of on, off, in, given"
            raise ConfigError([Problem(path, f"task.{i}", None, why)])
        tasks.append(task)
    return tasks, float(data.get("jitter", 0.0))


def _pair(raw: dict[str, Any], key: str) -> tuple[str, str] | None:
    if key not in raw:
        return None
    first, second = raw[key]
    return str(first), str(second)


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
    def at(name: str) -> tuple[float, float, float]:
        x, y, z = twin.to_base(twin.object_pose(name)[0])
        return float(x), float(y), float(z)

    if task.on is not None:
        x, y = task.on
        (ax, ay, az), (bx, by, bz) = at(x), at(y)
        ok = math.hypot(ax - bx, ay - by) < ACROSS and az > bz + 0.02
        offset = f"({ax - bx:+.3f}, {ay - by:+.3f}, {az - bz:+.3f})"
        return Verdict(ok, f"{x} {'on' if ok else 'not on'} {y} {offset}")
    if task.off is not None:
        x, y = task.off
        (ax, ay, az), (bx, by, bz) = at(x), at(y)
        ok = az < 0.035 and math.hypot(ax - bx, ay - by) > ACROSS
        return Verdict(ok, f"{x} at z {az:.3f}, {math.hypot(ax - bx, ay - by):.3f} m from {y}")
    if task.inside is not None:
        x, region = task.inside
        ax, ay, az = at(x)
        assert skill.scene is not None
        ok = skill.scene.regions[region].contains(ax, ay) and az < 0.035
        return Verdict(ok, f"{x} at ({ax:.3f}, {ay:.3f}) {'in' if ok else 'not in'} the {region}")
    assert task.given is not None and skill.scene is not None and skill.scene.handover is not None
    ax, ay, az = at(task.given)
    away = math.dist((ax, ay, az), skill.scene.handover)
    held = twin.held_object() == task.given
    ok = held and away < HANDED
    state = "held" if held else "not held"
    return Verdict(ok, f"{task.given} {state}, {away:.3f} m from the hand-over point")
