"""The symbolic team-task simulator's interface and the step loop all tasks share.

A subclass holds its state as one immutable, hashable value (so a snapshot is the value, a
breadth-first search can key on it) and gives the task's rules: the grounded actions,
whether an action is feasible now (given the actions earlier agents took this step), what a
step does, the state's text and features, and the oracle's useful actions.

Per step, agents act in the task file's order: an action that is infeasible in the state
(or clashes with an earlier agent's this step) acts as WAIT and its reason is the agent's
feedback; the feasible ones then apply together.

**Start states apart.** A level whose start states can be listed (:meth:`TeamEnv.start_space`)
splits them once and for all: one in :data:`HELD_OUT_SHARE` (at least one, by the sha256 of
the task, level and state) is *held out*, kept for evaluation; the rest are for training.
``starts`` says which a reset draws from: ``"training"`` (critic collection), ``"held_out"``
(``onboard task run``/``task eval``, a critic's probe states), or ``"all"`` (the default).
So no start state a critic is evaluated from was in its training data (tests/
test_team_starts.py). A level with a single start state (an Overcooked-AI layout) has nothing
to hold out: every reset is that state.
"""

from __future__ import annotations

import hashlib
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Generic, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from onboard.collab.taskfile import TeamTask

__all__ = ["ABSENT", "HELD_OUT_SHARE", "WAIT", "Snapshot", "Starts", "StepResult", "TeamEnv"]

ABSENT = "ABSENT"
WAIT = "WAIT"
#: one start state in this many (at least one) is held out for evaluation
HELD_OUT_SHARE = 5
#: which start states a reset draws from (see the module docstring)
Starts = Literal["all", "training", "held_out"]

S = TypeVar("S")


@dataclass(frozen=True)
class StepResult:
    reward: float
    done: bool
    success: bool
    feedback: dict[str, str]  # agent -> physical feedback, "" when its action went through


@dataclass(frozen=True)
class Snapshot(Generic[S]):
    state: S
    steps: int
    reward_total: float
    done: bool
    success: bool


class TeamEnv(ABC, Generic[S]):
    """One level of a team task; :meth:`reset` before the first step."""

    #: the start states :meth:`reset` draws from (see the module docstring)
    starts: Starts = "all"

    def __init__(self, task: TeamTask, level: str) -> None:
        self.task = task
        self.level = level
        self.settings: BaseModel = task.level(level)
        self.agents: tuple[str, ...] = task.agent_names
        self.step_limit = task.step_limit
        self.reach: dict[str, frozenset[str]] = {a.name: frozenset(a.reach) for a in task.agents}
        self.vocabulary: tuple[str, ...] = (ABSENT, WAIT, *sorted(set(self._grounded()) - {WAIT}))
        self._index = {a: i for i, a in enumerate(self.vocabulary)}
        self.feature_names: tuple[str, ...] = (*self._feature_names(), "steps_taken", "steps_left")
        self._state: S | None = None
        self.steps = 0
        self.reward_total = 0.0
        self.done = False
        self.success = False

    # -- the task's rules ------------------------------------------------------------------

    @abstractmethod
    def _grounded(self) -> Sequence[str]:
        """Every action of this level but ABSENT (WAIT may be included)."""

    @abstractmethod
    def _initial(self, rng: random.Random) -> S:
        """A seeded start state."""

    def start_space(self) -> Sequence[S] | None:
        """Every start state :meth:`_initial` can draw, when they can be listed (None: the
        level's starts cannot be split, and ``starts`` is ignored)."""
        return None

    @cached_property
    def start_split(self) -> tuple[tuple[S, ...], tuple[S, ...]] | None:
        """(training, held out) start states, each in the space's order; None when the
        level has fewer than two (or cannot list them)."""
        space = self.start_space()
        if space is None or len(set(space)) < 2:
            return None
        unique = list(dict.fromkeys(space))
        key = f"{self.task.name}/{self.level}/"
        ranked = sorted(unique, key=lambda s: hashlib.sha256(f"{key}{s!r}".encode()).digest())
        held = set(ranked[: max(1, len(unique) // HELD_OUT_SHARE)])
        return tuple(s for s in unique if s not in held), tuple(s for s in unique if s in held)

    def _start(self, seed: int) -> S:
        rng = random.Random(f"{self.task.name}/{self.level}/{seed}")
        split = self.start_split if self.starts != "all" else None
        if split is None:
            return self._initial(rng)
        training, held_out = split
        return rng.choice(held_out if self.starts == "held_out" else training)

    @abstractmethod
    def _reason(self, state: S, agent: str, action: str, chosen: Mapping[str, str]) -> str | None:
        """Why ``action`` (a non-WAIT vocabulary entry) is infeasible for ``agent`` now, given
        the feasible actions ``chosen`` by the agents before it this step; None if feasible."""

    def _possible(self, state: S, agent: str, action: str) -> bool:
        """False when ``action`` (a non-WAIT vocabulary entry) can never go through for
        ``agent`` from ``state`` on, whatever the agents do: its role, its reach of a place
        that does not change, a rule of the level. A constrained reply's enum for the agent
        leaves those out; the legal check still gives the reason for any other."""
        return True

    @abstractmethod
    def _apply(self, state: S, joint: Mapping[str, str]) -> tuple[S, float]:
        """The next state and the step's reward; ``joint`` holds feasible actions only."""

    @abstractmethod
    def _succeeded(self, state: S) -> bool: ...

    @abstractmethod
    def _describe(self, state: S) -> list[str]: ...

    @abstractmethod
    def _feature_names(self) -> Sequence[str]: ...

    @abstractmethod
    def _features(self, state: S) -> Sequence[float]: ...

    @abstractmethod
    def _useful(self, state: S, agent: str, chosen: Mapping[str, str]) -> list[str]:
        """The oracle: the actions that make progress now, best first; WAIT when waiting is
        what the shortest plan does; never empty."""

    # -- the interface -----------------------------------------------------------------------

    @property
    def state(self) -> S:
        if self._state is None:
            raise RuntimeError(f"{type(self).__name__}: reset() before use")
        return self._state

    def reset(self, seed: int) -> None:
        """A new episode: the level's start state varied by ``seed`` (among ``starts``)."""
        self._state = self._start(seed)
        self.steps = 0
        self.reward_total = 0.0
        self.done = False
        self.success = False

    def reset_to(self, seed: int) -> None:
        """A disturbance mid-episode: the state starts again (seeded), the step count and the
        reward so far go on."""
        self._state = self._start(seed)
        self.success = self._succeeded(self._state)
        self.done = self.success or self.steps >= self.step_limit

    def describe(self) -> str:
        lines = self._describe(self.state)
        lines.append(f"Step {self.steps} of {self.step_limit} taken.")
        return "\n".join(lines)

    def features(self) -> npt.NDArray[np.float32]:
        values = [*self._features(self.state), self.steps / self.step_limit,
                  (self.step_limit - self.steps) / self.step_limit]  # fmt: skip
        return np.asarray(values, dtype=np.float32)

    def action_index(self, action: str) -> int:
        """The vocabulary index of ``action``; KeyError when it is not in the vocabulary."""
        return self._index[action]

    def agent_actions(self, agent: str) -> list[str]:
        """The actions ``agent`` could still take from now on, WAIT first, in vocabulary
        order (a constrained reply's enum: only the agent's own actions)."""
        if agent not in self.reach:
            raise ValueError(f"no agent {agent!r} (agents: {', '.join(self.agents)})")
        possible = (a for a in self.vocabulary if a not in (ABSENT, WAIT))
        return [WAIT, *(a for a in possible if self._possible(self.state, agent, a))]

    def legal(self, agent: str, action: str, chosen: Mapping[str, str] | None = None) -> str | None:
        """None if ``agent`` can do ``action`` now (after the earlier agents' ``chosen``
        actions this step), else the reason, one line."""
        if agent not in self.reach:
            return f"no agent {agent!r} (agents: {', '.join(self.agents)})"
        if action == WAIT:
            return None
        if action not in self._index or action == ABSENT:
            return f"no action {action!r} in this task"
        earlier = {a: act for a, act in (chosen or {}).items() if a != agent}
        return self._reason(self.state, agent, action, earlier)

    def step(self, joint: Mapping[str, str]) -> StepResult:
        """One environment step; an agent missing from ``joint`` WAITs."""
        if self.done:
            raise RuntimeError(f"{type(self).__name__}: the episode is over; reset() first")
        unknown = sorted(set(joint) - set(self.agents))
        if unknown:
            raise ValueError(f"no agent {', '.join(unknown)} (agents: {', '.join(self.agents)})")
        feasible: dict[str, str] = {}
        feedback: dict[str, str] = {}
        for agent in self.agents:
            action = joint.get(agent, WAIT)
            reason = self.legal(agent, action, feasible)
            feedback[agent] = "" if reason is None else f"{action} failed: {reason}"
            feasible[agent] = action if reason is None else WAIT
        self._state, reward = self._apply(self.state, feasible)
        self.steps += 1
        self.reward_total += reward
        self.success = self._succeeded(self._state)
        self.done = self.success or self.steps >= self.step_limit
        return StepResult(reward, self.done, self.success, feedback)

    def useful(self, agent: str, chosen: Mapping[str, str] | None = None) -> list[str]:
        """ORACLE (data augmentation, tests; never a planner): the actions of ``agent`` that
        make progress now, given the earlier agents' ``chosen`` actions this step."""
        if agent not in self.reach:
            raise ValueError(f"no agent {agent!r} (agents: {', '.join(self.agents)})")
        return self._useful(self.state, agent, chosen or {})

    def snapshot(self) -> Snapshot[S]:
        return Snapshot(self.state, self.steps, self.reward_total, self.done, self.success)

    def restore(self, snap: object) -> None:
        if not isinstance(snap, Snapshot):
            raise TypeError(f"not a snapshot of this env: {type(snap).__name__}")
        self._state = snap.state
        self.steps, self.reward_total = snap.steps, snap.reward_total
        self.done, self.success = snap.done, snap.success
