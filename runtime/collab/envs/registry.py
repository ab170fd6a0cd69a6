"""The one registry of team environments: what a task file's ``task.env`` may name.

- a shipped env by its name (``sweep_floor``, ``make_sandwich``, ``sort_cubes``,
  ``overcooked``): its class is listed here, the facts its task files are checked against
  in :data:`onboard.collab.taskfile.ENV_SPECS` (loading a shipped task file imports no
  simulator);
- an installed package's env by the name it gives under the entry-point group
  ``onboard.team_envs`` (``stack_blocks = "mypkg.stack:StackBlocks"``);
- any env by its dotted path, ``"mypkg.stack:StackBlocks"`` (importable: installed or on
  ``PYTHONPATH``).

A user's env is a :class:`~onboard.collab.envs.base.TeamEnv` subclass with a class attribute
``spec``, an :class:`~onboard.collab.taskfile.EnvSpec`; loading its task file imports it.
docs/team-envs.md is the worked example.
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points

from onboard.collab.envs.base import Starts, TeamEnv
from onboard.collab.taskfile import ENV_SPECS, EnvSpec, TeamTask

__all__ = ["ENTRY_POINTS", "SHIPPED", "EnvRefError", "env_class", "env_names", "env_spec",
           "make_env"]  # fmt: skip

#: the entry-point group an installed package registers its envs under
ENTRY_POINTS = "onboard.team_envs"
#: the shipped envs: name -> "module:Class"
SHIPPED: dict[str, str] = {
    "sweep_floor": "onboard.collab.envs.sweep:SweepFloor",
    "make_sandwich": "onboard.collab.envs.sandwich:MakeSandwich",
    "sort_cubes": "onboard.collab.envs.sort:SortCubes",
    "overcooked": "onboard.collab.envs.overcooked:OvercookedAI",
}


class EnvRefError(ValueError):
    """Why ``task.env`` names no usable env, one line (the task file's loader adds where)."""


def _installed() -> dict[str, str]:
    """The envs installed packages register: name -> "module:Class"."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINTS)}


def env_names() -> list[str]:
    """The envs a task file may name without a dotted path: the shipped, then the installed."""
    return [*SHIPPED, *sorted(set(_installed()) - set(SHIPPED))]


def _target(ref: str) -> str:
    if ref in SHIPPED:
        return SHIPPED[ref]
    installed = _installed()
    if ref in installed:
        return installed[ref]
    if ":" in ref:
        return ref
    raise EnvRefError(f"unknown env {ref!r} (envs: {', '.join(env_names())}; or a class by "
                      f"its dotted path, package.module:Class)")  # fmt: skip


def env_class(ref: str) -> type[TeamEnv]:  # type: ignore[type-arg]
    """The class ``ref`` names (a shipped or installed name, or ``module:Class``);
    EnvRefError naming what is wrong."""
    target = _target(ref)
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise EnvRefError(f"{target!r} is not a dotted path package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EnvRefError(f"{target}: cannot import {module_name} ({exc})") from None
    except Exception as exc:  # the user's module failed as it ran: still one line
        raise EnvRefError(f"{target}: importing {module_name} failed: "
                          f"{type(exc).__name__}: {exc}") from None  # fmt: skip
    found: object = module
    for part in attr.split("."):
        if not hasattr(found, part):
            raise EnvRefError(f"{target}: module {module_name} has no {attr}")
        found = getattr(found, part)
    if not (isinstance(found, type) and issubclass(found, TeamEnv)):
        what = found.__name__ if isinstance(found, type) else type(found).__name__
        raise EnvRefError(f"{target}: {what} is not a TeamEnv subclass "
                          f"(onboard.collab.envs.base.TeamEnv)")  # fmt: skip
    if inspect.isabstract(found):
        missing = ", ".join(sorted(getattr(found, "__abstractmethods__", ())))
        raise EnvRefError(f"{target}: {found.__name__} does not define {missing}")
    return found


def env_spec(ref: str) -> EnvSpec:
    """What ``ref``'s env accepts from a task file: a shipped env's from ENV_SPECS (nothing
    imported), another's from its class's ``spec``."""
    if ref in ENV_SPECS:
        return ENV_SPECS[ref]
    cls = env_class(ref)
    spec = getattr(cls, "spec", None)
    if not isinstance(spec, EnvSpec):
        raise EnvRefError(f"{_target(ref)}: {cls.__name__} has no class attribute spec = "
                          f"EnvSpec(...) (what its task files are checked against)")  # fmt: skip
    return spec


def make_env(task: TeamTask, level: str, starts: Starts = "all") -> TeamEnv:  # type: ignore[type-arg]
    """The simulator of ``task`` at ``level`` (TeamTaskError for a level not in the file),
    drawing its start states from ``starts`` (onboard.collab.envs.base: evaluation draws
    held-out ones, critic collection training ones); call ``reset(seed)`` before the first
    step."""
    task.level(level)
    env = env_class(task.env)(task, level)
    env.starts = starts
    return env
