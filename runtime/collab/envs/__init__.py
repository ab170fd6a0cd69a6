"""The symbolic team-task simulators: ``make_env(task, level)`` for a loaded task file.

Each is a :class:`TeamEnv`: a text description of the state for prompts, a float32 feature
vector for the critic, a WAIT for every agent, reward 1 per sub-goal, at most the task's
``step_limit`` steps an episode.
"""

from __future__ import annotations

from onboard.collab.envs.base import ABSENT, WAIT, Snapshot, StepResult, TeamEnv
from onboard.collab.envs.overcooked import OvercookedAI
from onboard.collab.envs.sandwich import MakeSandwich
from onboard.collab.envs.sort import SortCubes
from onboard.collab.envs.sweep import SweepFloor
from onboard.collab.taskfile import TeamTask

__all__ = ["ABSENT", "ENVS", "WAIT", "Snapshot", "StepResult", "TeamEnv", "make_env"]

#: env name (a task file's ``task.env``) -> simulator
ENVS: dict[str, type[TeamEnv]] = {  # type: ignore[type-arg]
    "sweep_floor": SweepFloor,
    "make_sandwich": MakeSandwich,
    "sort_cubes": SortCubes,
    "overcooked": OvercookedAI,
}


def make_env(task: TeamTask, level: str) -> TeamEnv:  # type: ignore[type-arg]
    """The simulator of ``task`` at ``level`` (TeamTaskError for a level not in the file);
    call ``reset(seed)`` before the first step."""
    task.level(level)
    return ENVS[task.env](task, level)
