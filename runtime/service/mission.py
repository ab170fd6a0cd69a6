"""Mission files: an ordered list of steps, each a skill with its parameters, its retries,
its timeout and what to do when it fails. They live in the robot's ``skills/missions/``.

::

    name = "morning"                  # default: the file's name
    on_interrupt = "resume"           # after a crash, a power cut or a stop: "resume" (the
                                      # default: the interrupted step runs again) or "abort"
    [[steps]]
    name = "greet"                    # unique in the mission; skip_to names one
    skill = "engage"                  # any skill of the robot: its kind says what it takes
    scenario = "person-object"        # person skills
    retries = 1                       # runs again after a failed verdict (default 0)
    timeout = 120                     # seconds; longer is a failure (default 600)
    on_failure = "continue"           # "abort" (default), "continue", "operator" (hold the
                                      # mission and call the operator), or { skip_to = "NAME" }

A mission may loop and may be queued by a clock instead of at start::

    repeat = 1000                     # runs, the first included, each queued when the last
                                      # ends done or aborted (default 1); "forever" never stops
    [schedule]                        # queued when due, not at start
    every = 3600                      # seconds between two queueings ...
    at = ["08:00", "17:30"]           # ... or these local times each day (one of the two)

Scene and code skills take ``goal`` (and ``scene`` on the simulated arm); the team skill
takes ``task``, ``level`` and ``method``. :func:`check_mission` holds a loaded mission to
the robot (the skill exists, its kind takes these parameters, the scenario exists), with the
file and line of each problem.
"""

from __future__ import annotations

import math
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from onboard.base.errors import ConfigError, MissionError, Problem
from onboard.base.tomlfile import KeyLines, load_model
from onboard.config import RobotConfig

__all__ = [
    "Mission",
    "Schedule",
    "SkipTo",
    "Step",
    "check_mission",
    "load_mission",
    "mission_files",
]

#: the parameters each kind of skill takes (the rest must be left out)
PARAMETERS: dict[str, tuple[str, ...]] = {
    "person": ("scenario",),
    "scene": ("goal", "scene"),
    "code": ("goal", "scene"),
    "team": ("task", "level", "method"),
}
REQUIRED = {"scene": "goal", "code": "goal", "team": "task"}
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class SkipTo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    skip_to: str


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=_NAME)]
    skill: Annotated[str, Field(pattern=_NAME)]
    scenario: str | None = None
    goal: Annotated[str, Field(min_length=1, max_length=500)] | None = None
    scene: str | None = None
    task: str | None = None
    level: str | None = None
    method: str | None = None
    retries: Annotated[int, Field(ge=0, le=10)] = 0
    timeout: Annotated[float, Field(gt=0, le=86400)] = 600.0
    on_failure: Literal["abort", "continue", "operator"] | SkipTo = "abort"

    @field_validator("timeout")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be a finite number of seconds")
        return value

    def parameters(self) -> dict[str, str]:
        """The skill's parameters this step sets."""
        keys = ("scenario", "goal", "scene", "task", "level", "method")
        return {k: v for k in keys if (v := getattr(self, k)) is not None}


class Schedule(BaseModel):
    """When a mission is queued: every ``every`` seconds, or each day at the local times
    ``at`` ("HH:MM"). A time missed while the service was down is made up once, at start."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    every: Annotated[float, Field(ge=1, le=366 * 86400)] | None = None
    at: Annotated[list[Annotated[str, Field(pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]$")]],
                  Field(min_length=1, max_length=96)] | None = None  # fmt: skip

    @model_validator(mode="after")
    def _one(self) -> Schedule:
        if (self.every is None) == (self.at is None):
            raise ValueError('give one of every = SECONDS or at = ["HH:MM", ...]')
        return self

    def due(self, last: datetime | None, now: datetime) -> datetime:
        """When the mission is next queued, given when it was last queued (None: never) and
        the time now (both aware): ``now`` when a time came since ``last`` (one made-up run,
        however many were missed), else the next time to come."""
        if self.every is not None:
            return now if last is None else max(now, last + timedelta(seconds=self.every))
        assert self.at is not None
        times = sorted(time.fromisoformat(t) for t in self.at)
        after = (last or now).astimezone()
        day = after.date()
        while True:
            for t in times:
                when = datetime.combine(day, t).astimezone()
                if when > after:
                    return now if when <= now else when
            day += timedelta(days=1)


class Mission(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(pattern=_NAME)] | None = None
    on_interrupt: Literal["resume", "abort"] = "resume"
    repeat: Annotated[int, Field(ge=1, le=1_000_000)] | Literal["forever"] = 1
    schedule: Schedule | None = None
    steps: Annotated[list[Step], Field(min_length=1, max_length=1000)]
    path: Path = Path()

    @model_validator(mode="after")
    def _names(self) -> Mission:
        seen: set[str] = set()
        for index, step in enumerate(self.steps):
            if step.name in seen:
                raise ValueError(f"steps[{index}]: a second step named {step.name!r}")
            seen.add(step.name)
        for index, step in enumerate(self.steps):
            if isinstance(step.on_failure, SkipTo):
                later = [s.name for s in self.steps[index + 1 :]]
                if step.on_failure.skip_to not in later:
                    raise ValueError(
                        f"steps[{index}] ({step.name}): on_failure skip_to "
                        f"{step.on_failure.skip_to!r} names no later step (later: "
                        f"{', '.join(later) or 'none'})"
                    )
        return self

    def index_of(self, name: str) -> int:
        return next(i for i, s in enumerate(self.steps) if s.name == name)


def load_mission(path: Path) -> tuple[Mission, KeyLines]:
    """Read and validate a mission file; MissionError with file, key and line."""
    mission, lines = load_model(path, Mission, MissionError)
    name = mission.name or path.stem
    return mission.model_copy(update={"name": name, "path": path}), lines


def mission_files(robot: RobotConfig) -> list[Path]:
    """The robot's missions: ``skills/missions/*.toml``, by name."""
    return sorted((robot.skills_dir / "missions").glob("*.toml"))


def check_mission(robot: RobotConfig, path: Path, hardware: bool = False) -> Mission:
    """Load ``path`` and hold each step to the robot: its skill exists, its kind takes the
    parameters given (and has the one it needs), a scenario exists. All problems at once;
    a skill that does not load is the skill file's problem, which ``onboard check`` reports.
    ``hardware``: the robot must have what each step drives (``onboard up``: a scene or code
    step needs robot.toml's arm, camera and hand-eye calibration)."""
    from onboard.catalog import load_robot_skill
    from onboard.hri.scenario import find_scenario

    mission, lines = load_mission(path)
    problems: list[Problem] = []
    for index, step in enumerate(mission.steps):

        def problem(key: str, message: str, index: int = index) -> None:
            at = ("steps", index, key)
            problems.append(Problem(path, f"steps[{index}].{key}", lines.line_of(at), message))

        if not (robot.skills_dir / f"{step.skill}.toml").is_file():
            there = ", ".join(sorted(p.stem for p in robot.skills_dir.glob("*.toml")))
            problem("skill", f"no skill named {step.skill!r} (skills here: {there or 'none'})")
            continue
        try:
            kind = load_robot_skill(robot, step.skill).kind
        except ConfigError:
            continue  # the skill file's own problems: onboard check reports them, once
        allowed = PARAMETERS.get(kind, ())
        for key in step.parameters():
            if key not in allowed:
                takes = ", ".join(allowed) or "no parameters"
                problem(key, f"{step.skill} is a {kind} skill: it takes {takes}, not {key}")
        needed = REQUIRED.get(kind)
        if needed is not None and getattr(step, needed) is None:
            problem("skill", f'{step.skill} is a {kind} skill: the step needs {needed} = "..."')
        missing = [key for key, value in (("[drivers.arm]", robot.drivers.arm),
                   ("[drivers.camera]", robot.drivers.camera), ("[hand_eye]", robot.hand_eye))
                   if value is None]  # fmt: skip
        if hardware and kind in ("scene", "code") and missing:
            problem("skill", f"{step.skill} is a {kind} skill: this robot has no "
                    f"{' or '.join(missing)} (robot.toml) to run it on")  # fmt: skip
        if step.on_failure == "operator" and not robot.service.api:
            problem("on_failure", 'the operator decides through the control API, which '
                    "robot.toml's [service] api = false turns off")  # fmt: skip
        if kind == "person":
            try:
                named = step.scenario or "person-object"
                found = find_scenario(named, robot.skills_dir / "scenarios")
                if not found.is_file():
                    problem("scenario", f"{step.scenario!r}: no such scenario file")
            except ConfigError as exc:
                problem("scenario", exc.problems[0].message if exc.problems else str(exc))
    if problems:
        raise MissionError(problems)
    return mission
