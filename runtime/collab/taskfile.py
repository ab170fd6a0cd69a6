"""Multi-robot task files (``tasks/*.toml``): agents with their reach, the action verbs, the
levels, the step and refinement limits, and the critic settings.

A file is checked in two passes, every problem reported at once as FILE:LINE: [key] reason:
its shape (pydantic, ``extra="forbid"``), then what the named simulator accepts (its verbs,
agent count, reach values, level names and level keys). The shipped simulators' facts live
here, not in :mod:`onboard.collab.envs`, so loading a shipped task file imports no
environment module (the critic reads task files and must not import one); a user's env
(:mod:`onboard.collab.envs.registry`) carries its own facts and is imported to read them.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from onboard.base.errors import Problem, TeamTaskError, UsageError
from onboard.base.tomlfile import format_key, load_model
from onboard.collab import kitchen

__all__ = [
    "ENV_SPECS",
    "FOODS",
    "KITCHEN_PLACES",
    "PANELS",
    "SORT_TARGETS",
    "CriticSettings",
    "EnvSpec",
    "OvercookedLevel",
    "SandwichLevel",
    "SortLevel",
    "SweepLevel",
    "TeamAgent",
    "TeamTask",
    "find_team_task",
    "load_team_task",
    "shipped_tasks_dir",
    "sort_distance",
    "team_task_files",
]

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]*$")]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

#: the table's panels, left to right (RoCoBench's sort and sweep tables)
PANELS: tuple[str, ...] = tuple(f"panel{i}" for i in range(1, 8))
#: the food items of RoCoBench's Make Sandwich
FOODS: tuple[str, ...] = (
    "bread_slice1",
    "bread_slice2",
    "bacon",
    "cheese",
    "tomato",
    "cucumber",
    "ham",
    "beef_patty",
)
#: Sort Cubes: each cube and the panel it belongs on (RoCoBench's pairs)
SORT_TARGETS: dict[str, str] = {
    "blue_square": "panel2",
    "pink_polygon": "panel4",
    "yellow_trapezoid": "panel6",
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SweepLevel(_Strict):
    """Sweep Floor: ``yellow`` target cubes (swept into the trash_bin) among ``green``
    distractor cubes (left on the table); the level is named ``Y<yellow>_G<green>``."""

    yellow: Annotated[int, Field(ge=1, le=3)]
    green: Annotated[int, Field(ge=0, le=3)]


class SandwichLevel(_Strict):
    """Make Sandwich: the recipe, bottom to top (bread_slice1 first, bread_slice2 last)."""

    recipe: Annotated[list[str], Field(min_length=3, max_length=len(FOODS))]


class SortLevel(_Strict):
    """Sort Cubes: the start positions' total distance to the targets, in panels, inclusive
    [low, high]; every cube starts off its target."""

    distance: tuple[int, int]


class OvercookedLevel(_Strict):
    """Overcooked-AI: the level is the package's layout (``cramped_room``,
    ``forced_coordination``); a soup of ``onions`` onions that cooks ``cook_time`` steps."""

    onions: Annotated[int, Field(ge=1, le=3)]
    cook_time: Annotated[int, Field(ge=1, le=20)]


#: Overcooked-AI: the stations a chef's side of the kitchen reaches (the agents' ``reach``)
KITCHEN_PLACES: tuple[str, ...] = ("onion_dispenser", "dish_dispenser", "pot", "serving_counter")
#: Overcooked-AI layouts the env plays (the seed's two)
KITCHEN_LAYOUTS: tuple[str, ...] = ("cramped_room", "forced_coordination")

LevelModel = SweepLevel | SandwichLevel | SortLevel | OvercookedLevel
Where = tuple[tuple[str | int, ...], str]  # (key path inside the level, reason)


def _no_check(name: str, level: Any) -> list[Where]:
    return []


@dataclass(frozen=True)
class EnvSpec:
    """What a simulator accepts from a task file: its number of agents, the verbs of its
    actions (WAIT among them), the places an agent's ``reach`` may name, the model of a
    level's table (a pydantic model; ``extra="forbid"`` catches a misspelt key), a regular
    expression level names match, and a check of a level beyond its model's (``(key path
    inside the level, reason)`` per problem)."""

    agents: int
    verbs: frozenset[str]
    reach: tuple[str, ...]
    level: type[BaseModel]
    level_name: str  # a regular expression
    check_level: Callable[[str, Any], list[Where]] = field(default=_no_check, repr=False)


def _check_sweep(name: str, level: SweepLevel) -> list[Where]:
    want = f"Y{level.yellow}_G{level.green}"
    if name != want:
        return [((), f"the name says other counts than yellow = {level.yellow}, "
                     f"green = {level.green} (expected {want})")]  # fmt: skip
    return []


def _check_sandwich(name: str, level: SandwichLevel) -> list[Where]:
    problems: list[Where] = []
    for i, food in enumerate(level.recipe):
        if food not in FOODS:
            problems.append((("recipe", i), f"unknown food {food!r} (foods: {', '.join(FOODS)})"))
    if len(set(level.recipe)) != len(level.recipe):
        problems.append((("recipe",), "a food appears twice"))
    if level.recipe[:1] != ["bread_slice1"] or level.recipe[-1:] != ["bread_slice2"]:
        problems.append((("recipe",), "must start with bread_slice1 and end with bread_slice2"))
    return problems


def sort_distance(start: dict[str, str]) -> int:
    """Sort Cubes: total panels between each cube's panel and its target."""
    return sum(abs(PANELS.index(p) - PANELS.index(SORT_TARGETS[c])) for c, p in start.items())


def sort_starts(low: int, high: int) -> list[dict[str, str]]:
    """Every start (distinct panels, every cube off its target) with a distance in range."""
    found = []
    for panels in itertools.permutations(PANELS, len(SORT_TARGETS)):
        start = dict(zip(SORT_TARGETS, panels, strict=True))
        if any(SORT_TARGETS[c] == p for c, p in start.items()):
            continue
        if low <= sort_distance(start) <= high:
            found.append(start)
    return found


def _check_sort(name: str, level: SortLevel) -> list[Where]:
    low, high = level.distance
    if low > high:
        return [(("distance",), f"low {low} is above high {high}")]
    if not sort_starts(low, high):
        return [(("distance",), f"no start has a total distance in [{low}, {high}]")]
    return []


def _check_overcooked(name: str, level: OvercookedLevel) -> list[Where]:
    return []  # the name is checked by level_name; the ranges by the model


ENV_SPECS: dict[str, EnvSpec] = {
    "sweep_floor": EnvSpec(
        agents=2,
        verbs=frozenset({"MOVE", "SWEEP", "DUMP", "WAIT"}),
        reach=PANELS,
        level=SweepLevel,
        level_name=r"Y\d_G\d",
        check_level=_check_sweep,
    ),
    "make_sandwich": EnvSpec(
        agents=2,
        verbs=frozenset({"PICK", "PUT", "WAIT"}),
        reach=("left", "right"),
        level=SandwichLevel,
        level_name=r"recipe\d+",
        check_level=_check_sandwich,
    ),
    "sort_cubes": EnvSpec(
        agents=3,
        verbs=frozenset({"PICK", "WAIT"}),  # PICK <cube> PLACE <panel>: one verb
        reach=PANELS,
        level=SortLevel,
        level_name=r"level\d+",
        check_level=_check_sort,
    ),
    "overcooked": EnvSpec(
        agents=2,
        verbs=frozenset({*kitchen.MOVES, kitchen.INTERACT, kitchen.WAIT}),
        reach=KITCHEN_PLACES,
        level=OvercookedLevel,
        level_name="|".join(KITCHEN_LAYOUTS),
        check_level=_check_overcooked,
    ),
}


class TaskHeader(_Strict):
    name: Name
    description: Text
    env: str
    step_limit: Annotated[int, Field(ge=1, le=100)] = 15
    refine_limit: Annotated[int, Field(ge=0, le=100)] = 15


class TeamAgent(_Strict):
    name: Name
    role: Text
    reach: Annotated[list[str], Field(min_length=1)]


class Actions(_Strict):
    verbs: Annotated[list[Annotated[str, StringConstraints(pattern=r"^[A-Z]+$")]],
                     Field(min_length=1)]  # fmt: skip


class CriticSettings(_Strict):
    model: Text  # a path template with {level}, relative to the repository or robot
    mode: Literal["sequential", "joint"]
    epsilon: float = 0.0


class FleetSettings(_Strict):
    """``[fleet]``: the task over a fleet of controllers (docs/fleet.md). ``on_lost``: what
    the others do when an agent is lost mid-task: ``stop`` (every arm stops, the episode
    ends with the lost agent named) or ``continue`` (the lost agent's actions are refused
    as illegal, the others go on to success or the step limit)."""

    on_lost: Literal["stop", "continue"] = "stop"


class TaskFile(_Strict):
    task: TaskHeader
    agents: Annotated[list[TeamAgent], Field(min_length=1)]
    actions: Actions
    levels: Annotated[dict[str, dict[str, Any]], Field(min_length=1)]
    critic: CriticSettings
    fleet: FleetSettings = FleetSettings()


@dataclass(frozen=True)
class TeamTask:
    """A validated task file."""

    path: Path
    name: str
    description: str
    env: str
    step_limit: int
    refine_limit: int
    agents: list[TeamAgent]
    verbs: list[str]
    levels: dict[str, BaseModel]  # a shipped env's: a LevelModel
    critic: CriticSettings
    fleet: FleetSettings = field(default_factory=FleetSettings)

    @property
    def agent_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.agents)

    def agent(self, name: str) -> TeamAgent:
        return next(a for a in self.agents if a.name == name)

    def critic_path(self, level: str, root: Path) -> Path:
        """The critic model of ``level``: the template filled in, relative to ``root``."""
        return root / self.critic.model.format(level=level, task=self.name)

    def critic_file(self, level: str) -> Path:
        """The shipped critic of ``level``: the template relative to the folder that holds
        ``models/`` (the checkout, or the installed package)."""
        from onboard.bundled import package_path

        return self.critic_path(level, package_path("onboard.models").parent)

    def level(self, name: str) -> BaseModel:
        """A level's settings; TeamTaskError naming the known levels otherwise."""
        if name not in self.levels:
            known = ", ".join(self.levels)
            raise TeamTaskError([Problem(self.path, "levels", None,
                                         f"no level {name!r} (levels: {known})")])  # fmt: skip
        return self.levels[name]


def load_team_task(path: Path) -> TeamTask:
    """Read and check a task file; TeamTaskError with one line per problem."""
    raw, lines = load_model(path, TaskFile, TeamTaskError)
    problems: list[Problem] = []

    def problem(key: Sequence[str | int], message: str) -> None:
        problems.append(Problem(path, format_key(key), lines.line_of(key), message))

    spec = ENV_SPECS.get(raw.task.env)
    if spec is None:  # a user's env (an entry point, a dotted path): the registry imports it
        from onboard.collab.envs.registry import EnvRefError, env_spec

        try:
            spec = env_spec(raw.task.env)
        except EnvRefError as exc:
            problem(("task", "env"), str(exc))
            raise TeamTaskError(problems) from None
    if "{level}" not in raw.critic.model:
        problem(("critic", "model"), "the path template needs {level} (one critic per level)")
    _check_agents(raw, spec, problem)
    _check_verbs(raw, spec, problem)
    levels = _check_levels(raw, spec, problem)
    if problems:
        raise TeamTaskError(problems)
    return TeamTask(
        path=path,
        name=raw.task.name,
        description=raw.task.description,
        env=raw.task.env,
        step_limit=raw.task.step_limit,
        refine_limit=raw.task.refine_limit,
        agents=list(raw.agents),
        verbs=list(raw.actions.verbs),
        levels=levels,
        critic=raw.critic,
        fleet=raw.fleet,
    )


Report = Callable[[Sequence[str | int], str], None]


def _check_agents(raw: TaskFile, spec: EnvSpec, problem: Report) -> None:
    if len(raw.agents) != spec.agents:
        problem(("agents",), f"env {raw.task.env} has {spec.agents} agents, "
                             f"the file names {len(raw.agents)}")  # fmt: skip
    seen: set[str] = set()
    for i, agent in enumerate(raw.agents):
        if agent.name in seen:
            problem(("agents", i, "name"), f"agent {agent.name!r} appears twice")
        seen.add(agent.name)
        for j, place in enumerate(agent.reach):
            if place not in spec.reach:
                problem(("agents", i, "reach", j),
                        f"{place!r} is not a place of env {raw.task.env} "
                        f"(places: {', '.join(spec.reach)})")  # fmt: skip


def _check_verbs(raw: TaskFile, spec: EnvSpec, problem: Report) -> None:
    verbs = raw.actions.verbs
    if "WAIT" not in verbs:
        problem(("actions", "verbs"), "WAIT is missing (every agent can always WAIT)")
    unknown = [v for v in verbs if v not in spec.verbs]
    if unknown:
        problem(("actions", "verbs"), f"env {raw.task.env} has no verb {', '.join(unknown)} "
                                      f"(verbs: {', '.join(sorted(spec.verbs))})")  # fmt: skip
    missing = sorted(spec.verbs - set(verbs) - {"WAIT"})
    if missing:
        problem(("actions", "verbs"), f"env {raw.task.env} needs {', '.join(missing)}")
    if len(set(verbs)) != len(verbs):
        problem(("actions", "verbs"), "a verb appears twice")


def _check_levels(raw: TaskFile, spec: EnvSpec, problem: Report) -> dict[str, BaseModel]:
    levels: dict[str, BaseModel] = {}
    for name, settings in raw.levels.items():
        if not re.fullmatch(spec.level_name, name):
            problem(("levels", name), f"env {raw.task.env} does not know level {name!r} "
                                      f"(names like {spec.level_name})")  # fmt: skip
            continue
        try:
            level = spec.level.model_validate(settings)
        except pydantic.ValidationError as exc:
            for err in exc.errors(include_url=False):
                loc = ("levels", name, *(p for p in err["loc"] if isinstance(p, str | int)))
                message = err["msg"]
                if err["type"] == "extra_forbidden":
                    message = f"unknown key for env {raw.task.env} (check its spelling)"
                problem(loc, message)
            continue
        for key, message in spec.check_level(name, level):
            problem(("levels", name, *key), message)
        levels[name] = level
    return levels


def team_task_files(folder: Path) -> list[Path]:
    """The task files of a folder, sorted."""
    return sorted(folder.glob("*.toml"))


def shipped_tasks_dir() -> Path:
    """The shipped ``tasks/`` folder (the ``onboard.tasks`` data package)."""
    from onboard.bundled import package_path

    return package_path("onboard.tasks")


def find_team_task(name: str) -> TeamTask:
    """A task by file path, or by name in the shipped ``tasks/`` folder (``sweep_floor``)."""
    path = Path(name)
    if path.suffix == ".toml" or path.exists():
        return load_team_task(path)
    folder = shipped_tasks_dir()
    known = {p.stem: p for p in team_task_files(folder)}
    if name not in known:
        raise UsageError(f"no task {name!r}: a task file, or one of {', '.join(sorted(known))}")
    return load_team_task(known[name])
