"""The seven tasks of generated code (``skills/tasks/code.toml``): loaded, typed, checked
against their scenes, and set up on the twin as seeded variations.

An evaluation harness, never imported by the robot: :func:`set_up` moves objects in the
twin (as a person laying out the table would), and the judge of each task is in
:mod:`onboard.evaluation.code_judges`.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from onboard import bundled
from onboard.base.errors import ConfigError, Problem
from onboard.base.tomlfile import load_model
from onboard.drivers.twin.scene import Scene, find_scene, load_scene
from onboard.drivers.twin.world import Twin

__all__ = [
    "BeltOrder",
    "Check",
    "CodeTask",
    "Given",
    "Inside",
    "OnPlates",
    "OutOfDrawer",
    "Program",
    "Stack",
    "Variation",
    "benign_corpus",
    "goal_image",
    "load_code_tasks",
    "set_up",
    "solution_path",
    "tasks_file",
]

#: seconds the objects settle after the set-up (a conveyor keeps carrying meanwhile)
SETTLE = 0.5
#: draws of a variation before giving up on one the judge does not already pass
DRAWS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Given(_Strict):
    """``object`` held out at the hand-over point."""

    check: Literal["given"]
    object: str


class Inside(_Strict):
    """``object`` in ``container`` (a box), and none of ``not_inside`` in it."""

    check: Literal["inside"]
    object: str
    container: str
    not_inside: tuple[str, ...] = ()


class Stack(_Strict):
    """``order`` stacked, bottom to top, the bottom one on the table."""

    check: Literal["stack"]
    order: tuple[str, ...] = Field(min_length=2)


class BeltOrder(_Strict):
    """``order`` on ``conveyor``, from its end stop upstream."""

    check: Literal["belt_order"]
    conveyor: str
    order: tuple[str, ...] = Field(min_length=2)


class OnPlates(_Strict):
    """Each plate's objects on it, and none of ``not_on`` on any plate."""

    check: Literal["on_plates"]
    plates: dict[str, tuple[str, ...]]
    not_on: tuple[str, ...] = ()


class OutOfDrawer(_Strict):
    """``object`` on the table, out of ``drawer``."""

    check: Literal["out_of_drawer"]
    object: str
    drawer: str


Check = Annotated[
    Given | Inside | Stack | BeltOrder | OnPlates | OutOfDrawer, Field(discriminator="check")
]


class Variation(_Strict):
    """How seeded variations differ: ``shuffle`` objects trade places (each keeps its own
    height), then every loose object moves by up to ``jitter`` (x, y) metres, the
    ``together`` ones by one shared offset."""

    shuffle: tuple[str, ...] = ()
    together: tuple[str, ...] = ()
    jitter: tuple[
        Annotated[float, Field(ge=0, le=0.05)], Annotated[float, Field(ge=0, le=0.05)]
    ] = (0.0, 0.0)


class CodeTask(_Strict):
    number: int = Field(ge=1)
    name: str = Field(min_length=1)
    instruction: str = Field(min_length=1)
    scene: str
    goal_scene: str | None = None
    solution: str
    variation: Variation = Variation()
    judge: Check

    def names(self) -> set[str]:
        """Every object the variation and the judge name."""
        judge = self.judge
        named: set[str] = {*self.variation.shuffle, *self.variation.together}
        if isinstance(judge, Given | OutOfDrawer):
            named.add(judge.object)
        if isinstance(judge, OutOfDrawer):
            named.add(judge.drawer)
        if isinstance(judge, Inside):
            named |= {judge.object, judge.container, *judge.not_inside}
        if isinstance(judge, Stack | BeltOrder):
            named |= set(judge.order)
        if isinstance(judge, BeltOrder):
            named.add(judge.conveyor)
        if isinstance(judge, OnPlates):
            named |= set(judge.plates) | {o for objs in judge.plates.values() for o in objs}
            named |= set(judge.not_on)
        return named


class Program(_Strict):
    """A short benign program of the corpus (``file`` in ``code/``) and its scene."""

    file: str
    scene: str


class _TaskFile(_Strict):
    task: list[CodeTask] = Field(min_length=1)
    program: list[Program] = []

    @model_validator(mode="after")
    def _unique(self) -> _TaskFile:
        for key in ("number", "name"):
            values = [getattr(t, key) for t in self.task]
            if len(set(values)) != len(values):
                raise ValueError(f"two tasks share a {key}")
        return self


def tasks_file() -> Path:
    """The shipped task list, ``skills/tasks/code.toml``."""
    return bundled.skills_dir() / "tasks" / "code.toml"


def solution_path(task: CodeTask, path: Path | None = None) -> Path:
    """The task's hand-written solution, beside its task list in ``code/``."""
    return (path or tasks_file()).parent / "code" / task.solution


def load_code_tasks(path: Path | None = None) -> list[CodeTask]:
    """The tasks of ``path`` (default: the shipped list), each checked against its scene:
    the scene (and goal scene) exist, every object named is in it, the solution exists.
    Errors are one line each, naming the file and the task."""
    return _load(path or tasks_file())[0]


def benign_corpus(path: Path | None = None) -> list[tuple[Path, str]]:
    """Every benign program of ``path`` (default: the shipped list) and the scene it runs
    on: each task's solution, then the short programs."""
    path = path or tasks_file()
    tasks, programs = _load(path)
    folder = path.parent / "code"
    return [(solution_path(t, path), t.scene) for t in tasks] + [
        (folder / p.file, p.scene) for p in programs
    ]


def _load(path: Path) -> tuple[list[CodeTask], list[Program]]:
    loaded, lines = load_model(path, _TaskFile)
    problems = []
    for i, task in enumerate(loaded.task):
        where = f"task.{i}"
        try:
            scene = load_scene(find_scene(task.scene))
            if task.goal_scene is not None:
                load_scene(find_scene(task.goal_scene))
        except ConfigError as exc:
            problems.append(Problem(path, where, lines.line_of(("task", i)), f"its scene: {exc}"))
            continue
        missing = task.names() - {o.name for o in scene.objects}
        if missing:
            why = f"scene {task.scene!r} has no {', '.join(sorted(missing))}"
            problems.append(Problem(path, where, lines.line_of(("task", i)), why))
        if not solution_path(task, path).is_file():
            why = f"no solution file {solution_path(task, path)}"
            problems.append(Problem(path, where, lines.line_of(("task", i)), why))
    for i, program in enumerate(loaded.program):
        where = f"program.{i}"
        if not (path.parent / "code" / program.file).is_file():
            why = f"no program file {path.parent / 'code' / program.file}"
            problems.append(Problem(path, where, lines.line_of(("program", i)), why))
        if not find_scene(program.scene).is_file():
            why = f"no scene {program.scene!r}"
            problems.append(Problem(path, where, lines.line_of(("program", i)), why))
    if problems:
        raise ConfigError(problems)
    return loaded.task, loaded.program


def _loose(scene: Scene) -> list[str]:
    return [o.name for o in scene.objects if o.kind not in ("drawer", "conveyor", "box")]


def set_up(
    twin: Twin,
    task: CodeTask,
    rng: random.Random,
    solved: Callable[[Twin], bool] | None = None,
) -> dict[str, list[float]]:
    """Lay out a seeded variation of ``task`` in ``twin`` (built from its scene) and let it
    settle; returns where each object was put (world frame). ``solved`` (the task's judge)
    draws again a variation that starts solved, up to :data:`DRAWS` times; the draws come
    from ``rng`` alone, so the same seed lays out the same table."""
    start = {n: twin.object_pose(n) for n in _loose(twin.scene)}
    for draw in itertools.count(1):
        # every loose object is put anew from where the scene had it: a redraw starts clean
        placed = _place(twin, task.variation, start, rng)
        twin.settle(SETTLE)
        if solved is None or draw >= DRAWS or not solved(twin):
            return placed
    raise AssertionError("unreachable")


def _place(
    twin: Twin,
    variation: Variation,
    start: dict[str, tuple[tuple[float, float, float], tuple[float, float, float, float]]],
    rng: random.Random,
) -> dict[str, list[float]]:
    slots = [start[n][0] for n in variation.shuffle]
    order = list(variation.shuffle)
    rng.shuffle(order)
    target = {n: p for n, (p, _) in start.items()}
    for name, slot in zip(order, slots, strict=True):
        target[name] = (slot[0], slot[1], start[name][0][2])  # its own height
    jx, jy = variation.jitter
    shared = (rng.uniform(-jx, jx), rng.uniform(-jy, jy))
    placed: dict[str, list[float]] = {}
    for name in start:
        x, y, z = target[name]
        if name in variation.together:
            dx, dy = shared
        else:
            dx, dy = rng.uniform(-jx, jx), rng.uniform(-jy, jy)
        placed[name] = [x + dx, y + dy, z]
        twin.set_object_pose(name, (x + dx, y + dy, z), start[name][1])
    return placed


def goal_image(task: CodeTask) -> npt.NDArray[np.uint8]:
    """The task's goal picture (RGB, H x W x 3): its goal scene rendered by the twin's
    camera once the objects have settled. Raises ValueError for a task without one."""
    if task.goal_scene is None:
        raise ValueError(f"task {task.number} ({task.name}) has no goal scene")
    with Twin(task.goal_scene) as twin:
        twin.settle(SETTLE)
        return twin.render()[0]
