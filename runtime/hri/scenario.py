"""Scenario files: a simulated person's activity, gaze, motion and ground-truth labels."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from onboard.base.errors import Problem, ScenarioError
from onboard.base.tomlfile import KeyLines, ProblemAt, format_key, load_model

__all__ = ["HELD_OUT", "Label", "Scenario", "find_scenario", "load_scenario", "scenario_files"]

#: the held-out scenarios' folder inside a robot's scenarios folder
HELD_OUT = "heldout"

Seconds = Annotated[float, Field(ge=0)]
LabelState = Literal["not-ready", "ok-to-engage", "ready"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Header(_Strict):
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
    description: str = ""
    end: Annotated[float, Field(gt=0, description="time of the last human action, seconds")]
    distance: Annotated[float, Field(gt=0, description="metres at t = 0")]


class Activity(_Strict):
    at: Seconds
    text: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class Gaze(_Strict):
    at: Seconds
    toward: bool


class Label(_Strict):
    start: Seconds = Field(alias="from")
    stop: Seconds = Field(alias="to")
    state: LabelState


class Motion(_Strict):
    at: Seconds
    speed: Annotated[
        float,
        Field(description="m/s away from the robot; negative walks toward it, to arm's length"),
    ]


class Scenario(_Strict):
    scenario: Header
    activity: list[Activity] = Field(min_length=1)
    gaze: list[Gaze] = Field(min_length=1)
    label: list[Label] = Field(min_length=1)
    motion: list[Motion] = []

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def end(self) -> float:
        return self.scenario.end

    def label_at(self, t: float) -> LabelState | None:
        for label in self.label:
            if label.start <= t < label.stop:
                return label.state
        return None

    def to_toml_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True)


def scenario_files(folder: Path) -> list[Path]:
    """The scenario files of a robot's scenarios folder: its own, then the held-out ones."""
    return sorted(folder.glob("*.toml")) + sorted((folder / HELD_OUT).glob("*.toml"))


def find_scenario(scenario: Path | str, folder: Path) -> Path:
    """A scenario file's path, or a scenario's name in ``folder`` (a robot's skills/scenarios)
    or its held-out folder.

    An existing file wins (a relative path starts from the working folder, as always); a bare
    name (no folder, no suffix) is ``folder/NAME.toml``, else ``folder/heldout/NAME.toml``,
    and raises ScenarioError listing the names there when neither exists; any other path is
    returned for :func:`load_scenario` to report.
    """
    path = Path(scenario)
    if path.exists() or len(path.parts) != 1 or path.suffix:
        return path
    for named in (folder / f"{path}.toml", folder / HELD_OUT / f"{path}.toml"):
        if named.is_file():
            return named
    there = ", ".join(p.stem for p in scenario_files(folder)) or "none"
    message = f"no scenario named {str(path)!r} (scenarios here: {there})"
    raise ScenarioError([Problem(folder, "", None, message)])


def load_scenario(path: Path) -> Scenario:
    """Load and check a scenario file; raises ScenarioError listing every problem."""
    scenario, lines = load_model(path, Scenario, ScenarioError)
    problems = list(_check(scenario, path, lines))
    if problems:
        raise ScenarioError(problems)
    return scenario


def _check(s: Scenario, path: Path, lines: KeyLines) -> Iterable[Problem]:
    def problem(key: tuple[str | int, ...], message: str) -> Problem:
        return Problem(path, format_key(key), lines.line_of(key), message)

    for table, items in (("activity", s.activity), ("gaze", s.gaze), ("motion", s.motion)):
        yield from _check_times(table, [i.at for i in items], s.end, problem)
        if table != "motion" and items and items[0].at != 0:
            yield problem(
                (table, 0, "at"), "the first entry must be at 0.0 (what is seen at start)"
            )
    previous_stop = 0.0
    for i, label in enumerate(s.label):
        if label.stop <= label.start:
            yield problem(("label", i, "to"), "`to` must be after `from`")
        if label.start < previous_stop:
            yield problem(("label", i, "from"), "labels overlap or are out of order")
        previous_stop = max(previous_stop, label.stop)


def _check_times(
    table: str, times: Sequence[float], end: float, problem: ProblemAt
) -> Iterable[Problem]:
    for i, t in enumerate(times):
        if i and t <= times[i - 1]:
            yield problem((table, i, "at"), "times must increase")
        if t > end:
            yield problem((table, i, "at"), f"after the scenario's end ({end:g} s)")
