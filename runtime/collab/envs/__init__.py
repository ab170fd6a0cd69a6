"""The symbolic team-task simulators: ``make_env(task, level)`` for a loaded task file.

Each is a :class:`TeamEnv`: a text description of the state for prompts, a float32 feature
vector for the critic, a WAIT for every agent, reward 1 per sub-goal, at most the task's
``step_limit`` steps an episode. Which class a task file's ``task.env`` names is the
registry's (:mod:`onboard.collab.envs.registry`): the shipped four by name, a user's own by
entry point or dotted path; only the one asked for is imported.
"""

from __future__ import annotations

from onboard.collab.envs.base import ABSENT, WAIT, Snapshot, StepResult, TeamEnv
from onboard.collab.envs.registry import make_env

__all__ = ["ABSENT", "WAIT", "Snapshot", "StepResult", "TeamEnv", "make_env"]
