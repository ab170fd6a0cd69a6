"""Sort Cubes over a fleet: the team environment the ReAd loop already steps, whose joint
actions run on the controllers' arms (:class:`FleetSort`).

The symbolic env keeps the rules and the state the prompts read; a step finds which actions
are feasible as the symbolic step would, runs each on its agent's arm in the task file's
order (one arm at a time, as the twin's rig does), then applies only the actions whose arm
reported them done. The fleet's belief of where each cube rests (world frame) starts as the
layout says and follows each result's ``placed``; every action carries it.

A lost agent (:class:`~onboard.base.errors.AgentLost`) is handled as the task file's
``[fleet] on_lost`` says: ``stop`` stops every other arm and raises (the episode ends, the
lost agent named); ``continue`` refuses the lost agent's actions as illegal (its reason is
the prompt's feedback) and the others go on. A lost agent heard again is noted, still
refused: its arm is latched until a reset, which is an operator's decision
(``onboard fleet reset``), not the planner's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Protocol

from onboard.base.errors import AgentLost
from onboard.collab.envs.base import WAIT, StepResult
from onboard.collab.envs.sort import CUBES, SortCubes
from onboard.collab.taskfile import PANELS, TeamTask
from onboard.fleet.wire import Point

__all__ = ["ArmsLink", "Done", "FleetSort"]


class Done(Protocol):
    """What a controller answers an action with (a Result)."""

    @property
    def ok(self) -> bool: ...
    @property
    def error(self) -> str: ...
    @property
    def placed(self) -> Mapping[str, Point]: ...
    @property
    def received(self) -> float: ...


class ArmsLink(Protocol):
    """The arms an env's actions run on: over Zenoh (:class:`~onboard.fleet.link.FleetLink`)
    or in this process (bench/fleet.py's)."""

    def act(self, agent: str, action: str, cubes: Mapping[str, Point]) -> Done: ...

    def lost(self, agent: str) -> str | None: ...

    def stop_all(self, reason: str, but: str = "") -> list[str]: ...


#: lays out a start (cube -> panel) on the table; where each cube then rests (world frame)
Layout = Callable[[dict[str, str]], dict[str, Point]]


class FleetSort(SortCubes):
    """Sort Cubes whose steps run on ``link``'s arms (see the module docstring)."""

    def __init__(self, task: TeamTask, level: str, link: ArmsLink, layout: Layout) -> None:
        super().__init__(task, level)
        self.link, self.layout = link, layout
        self.where: dict[str, Point] = {}
        #: agent -> why it was lost (``continue``: refused from then on), and at which step
        self.gone: dict[str, str] = {}
        self.lost_at: dict[str, int] = {}
        #: per step that ran an action: seconds from the previous step's end (or the layout)
        #: to the first action's arrival at its controller (the decision, over the wire)
        self.decisions: list[float] = []
        self._ready = time.time()

    def reset(self, seed: int) -> None:
        super().reset(seed)
        self.gone.clear()
        self.lost_at.clear()
        start = {c: PANELS[p] for c, p in zip(CUBES, self.state.panel, strict=True)}
        self.where = dict(self.layout(start))
        self._ready = time.time()

    def legal(self, agent: str, action: str, chosen: Mapping[str, str] | None = None) -> str | None:
        if action != WAIT and agent in self.gone:
            return f"{agent} is lost ({self.gone[agent]}); its arm is stopped"
        return super().legal(agent, action, chosen)

    def step(self, joint: Mapping[str, str]) -> StepResult:
        before = self.snapshot()
        trial = super().step(joint)
        self.restore(before)
        failed: dict[str, str] = {}
        first = True
        for agent in self.agents:
            action = joint.get(agent, WAIT)
            if action == WAIT or trial.feedback[agent]:
                continue
            try:
                done = self.link.act(agent, action, self.where)
            except AgentLost as exc:
                if self.task.fleet.on_lost == "stop":
                    self.link.stop_all(f"{agent} lost: {exc}", but=agent)
                    raise
                self.gone[agent], self.lost_at[agent] = str(exc), self.steps
                failed[agent] = f"{action} failed: {agent} is lost ({exc})"
                continue
            if first:
                self.decisions.append(done.received - self._ready)
                first = False
            if done.ok:
                self.where.update({c: tuple(p) for c, p in done.placed.items()})  # type: ignore[misc]
            else:
                failed[agent] = f"{action} failed: {done.error}"
        ran = {a: (WAIT if a in failed else act) for a, act in joint.items()}
        result = super().step(ran)
        self._ready = time.time()
        feedback = {a: failed.get(a) or text for a, text in result.feedback.items()}
        return StepResult(result.reward, result.done, result.success, feedback)
