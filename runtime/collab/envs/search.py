"""Breadth-first search over a team env's states: the fewest steps from the current state to
success, over every joint action of feasible actions. It proves a level's minimum (the level
table, the Make Sandwich recipe3 claim) where the ``useful`` oracle is only a greedy plan."""

from __future__ import annotations

import itertools
from typing import Any

from onboard.collab.envs.base import ABSENT, TeamEnv

__all__ = ["minimal_steps", "oracle_steps"]


def minimal_steps(env: TeamEnv[Any], limit: int | None = None) -> int | None:
    """The fewest steps to success from the env's current state (None: not within
    ``limit``, default the steps left); the env is left as it was."""
    start = env.snapshot()
    limit = env.step_limit - env.steps if limit is None else limit
    if start.success:
        return 0
    seen = {start.state}
    frontier = [start]
    try:
        for depth in range(1, limit + 1):
            following = []
            for snap in frontier:
                env.restore(snap)
                options = [
                    [a for a in env.vocabulary if a != ABSENT and env.legal(agent, a) is None]
                    for agent in env.agents
                ]
                for joint in itertools.product(*options):
                    env.restore(snap)
                    env.step(dict(zip(env.agents, joint, strict=True)))
                    if env.success:
                        return depth
                    after = env.snapshot()
                    if after.state not in seen:
                        seen.add(after.state)
                        following.append(after)
            frontier = following
        return None
    finally:
        env.restore(start)


def oracle_steps(env: TeamEnv[Any]) -> int | None:
    """Steps the ``useful`` oracle (each agent its first useful action, in order) takes from
    the current state to success; None if it does not get there; the env is left as it was."""
    start = env.snapshot()
    try:
        while not env.done:
            chosen: dict[str, str] = {}
            for agent in env.agents:
                chosen[agent] = env.useful(agent, chosen)[0]
            env.step(chosen)
        return env.steps - start.steps if env.success else None
    finally:
        env.restore(start)
