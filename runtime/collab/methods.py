"""The team methods by name: how each plans one environment step.

====================  =========================================================================
``read_s``            ReAd-S: the agents in task order, one request each; the local advantage
                      of each proposal after the agents chosen before it; under epsilon it goes
                      back with its score, at most ``refine_limit`` re-asks per agent
``read_j``            ReAd-J: one request for the joint action; the joint advantage
                      ``Q(s, a) - Q(s, w) / gamma``; refined the same way
``read_s_single``     ReAd-S without refinement (the seed's single-step ablation): the first
                      proposal of each agent runs, scored for the history
``read_j_single``     ReAd-J without refinement
``central_plan``      one joint request per step with the history of all agents' actions; no
                      critic, no refinement (infeasible actions reach the environment, which
                      runs them as WAIT and says why)
====================  =========================================================================

A method is a ``plan(turn) -> list[Decision]`` (the step's decisions; the joint action is
their actions together, WAIT for any agent none chose), and optionally a ``finish(turn,
success)`` the runner calls once the episode is over (Reflexion's reflection). What a loop
keeps across the steps of one episode is the turn's :class:`EpisodeLog` (every step's joint
action and physical feedback, the disturbance, the method's own notes); what it keeps across
the episodes of one evaluation cell is a :class:`TrialMemory` the evaluation passes to each
episode. The baselines with their own loops (onboard.collab.baselines) add themselves with
:func:`register` when this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from onboard.base.errors import UsageError
from onboard.collab.prompts import (
    HistoryEntry,
    Situation,
    TaskText,
    agent_request,
    joint_request,
    reply_schema,
)
from onboard.collab.refine import (
    CriticCheck,
    CriticView,
    Decision,
    LegalCheck,
    TeamAsk,
    TeamObservation,
    refine,
)
from onboard.llm.types import Message
from onboard.loop.kind import Attempt

__all__ = [
    "METHODS",
    "EnvView",
    "EpisodeLog",
    "Method",
    "StepSeen",
    "StepView",
    "TaskView",
    "TeamSettings",
    "TrialMemory",
    "Turn",
    "method",
    "register",
    "registered",
]


class CriticSettingsView(Protocol):
    @property
    def mode(self) -> str: ...

    @property
    def epsilon(self) -> float: ...


class TaskView(TaskText, Protocol):
    """What the loops need of a task file (onboard.collab.taskfile's TeamTask)."""

    @property
    def name(self) -> str: ...

    @property
    def step_limit(self) -> int: ...

    @property
    def refine_limit(self) -> int: ...

    @property
    def critic(self) -> CriticSettingsView: ...


class StepView(Protocol):
    """An environment step's result (onboard.collab.envs' StepResult)."""

    @property
    def reward(self) -> float: ...

    @property
    def done(self) -> bool: ...

    @property
    def success(self) -> bool: ...

    @property
    def feedback(self) -> Mapping[str, str]: ...


class EnvView(Protocol):
    """What the loops need of a team environment (onboard.collab.envs' TeamEnv)."""

    @property
    def agents(self) -> tuple[str, ...]: ...

    @property
    def vocabulary(self) -> tuple[str, ...]: ...

    @property
    def feature_names(self) -> tuple[str, ...]: ...

    @property
    def steps(self) -> int: ...

    @property
    def done(self) -> bool: ...

    @property
    def success(self) -> bool: ...

    @property
    def reward_total(self) -> float: ...

    def reset(self, seed: int) -> None: ...

    def agent_actions(self, agent: str) -> list[str]: ...

    def describe(self) -> str: ...

    def features(self) -> npt.NDArray[np.float32]: ...

    def legal(
        self, agent: str, action: str, chosen: Mapping[str, str] | None = None
    ) -> str | None: ...

    def step(self, joint: Mapping[str, str]) -> StepView: ...


@dataclass(frozen=True)
class TeamSettings:
    """How an episode is run: the task and level, and the method's knobs (None: the task
    file's ``refine_limit`` and ``[critic] epsilon``)."""

    task: TaskView
    level: str
    #: ask for a JSON reply constrained to the schema (one enum of actions per agent)
    constrained: bool = False
    refine_limit: int | None = None
    epsilon: float | None = None
    #: the most recent lines of ## History a request carries
    history_limit: int = 12

    @property
    def limit(self) -> int:
        return self.task.refine_limit if self.refine_limit is None else self.refine_limit

    @property
    def threshold(self) -> float:
        return self.task.critic.epsilon if self.epsilon is None else self.epsilon

    def options(self) -> dict[str, Any]:
        return {"level": self.level, "constrained": self.constrained,
                "refine_limit": self.limit, "epsilon": self.threshold,
                "history_limit": self.history_limit}  # fmt: skip


@dataclass(frozen=True)
class StepSeen:
    """An environment step as it ran: the joint action, each agent's physical feedback ("" when
    its action went through) and the reward."""

    step: int
    joint: Mapping[str, str]
    feedback: Mapping[str, str]
    reward: float


@dataclass
class TrialMemory:
    """What a method carries from one episode (trial) to the next within one evaluation cell
    (same task, level and method): Reflexion's reflections, oldest first; requests carry the
    last ``keep`` of them."""

    reflections: list[str] = field(default_factory=list)
    keep: int = 3

    def recent(self) -> list[str]:
        return self.reflections[-self.keep :] if self.keep else []


@dataclass
class EpisodeLog:
    """What the runner keeps for a method across the steps of one episode."""

    #: the steps run so far, oldest first
    steps: list[StepSeen] = field(default_factory=list)
    #: the step after whose action the environment was re-initialised (the disturbance)
    disturbed_at: int | None = None
    #: memory across the episodes of one evaluation cell (None: this episode alone)
    trials: TrialMemory | None = None
    #: a method's own notes across steps (RoCo's dialogue, ReAct's thoughts)
    notes: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One environment step as a method sees it."""

    env: EnvView
    settings: TeamSettings
    ask: TeamAsk
    critic: CriticView | None
    record: Callable[..., None]
    step: int
    state: str
    features: npt.NDArray[np.float32]
    #: earlier steps' lines for ## History, oldest first
    history: Sequence[HistoryEntry] = field(default_factory=list)
    #: the episode so far (shared by every turn of the episode)
    log: EpisodeLog = field(default_factory=EpisodeLog)

    @property
    def situation(self) -> Situation:
        return Situation(self.settings.task, self.state, self.env.vocabulary)

    def observation(self, chosen: Mapping[str, str] | None = None) -> TeamObservation:
        return TeamObservation(self.step, self.state, self.features, dict(chosen or {}))

    def recent(self) -> Sequence[HistoryEntry]:
        return self.history[-self.settings.history_limit :] if self.settings.history_limit else []

    def schema(self, agents: Sequence[str]) -> dict[str, Any] | None:
        if not self.settings.constrained:
            return None
        return reply_schema({agent: self.env.agent_actions(agent) for agent in agents})

    def critic_check(self, mode: Literal["sequential", "joint"]) -> CriticCheck:
        if self.critic is None:
            raise UsageError("this method scores proposals with a critic: give it one")
        return CriticCheck(
            self.critic, self.env.agents, self.env.vocabulary, mode, self.settings.threshold
        )


Plan = Callable[[Turn], list[Decision]]
#: called once the episode is over: the turn holds the last state, then whether it succeeded
Finish = Callable[[Turn, bool], None]


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    plan: Plan
    #: whether it needs a critic
    critic: bool
    finish: Finish | None = None


def _score_note(threshold: float) -> str:
    return (
        f"Each score is the critic's advantage of that action: higher is better; a proposal "
        f"under {threshold:.2f} is refused. Choose the action you expect to score highest."
    )


def _read_s(refined: bool) -> Plan:
    def plan(turn: Turn) -> list[Decision]:
        critic = turn.critic_check("sequential")
        legal = LegalCheck(turn.env)
        chosen: dict[str, str] = {}
        refused: list[Attempt] = []
        decisions = []
        note = _score_note(turn.settings.threshold)
        for agent in turn.env.agents:

            def build(
                refused_now: Sequence[Attempt], agent: str = agent, chosen: dict[str, str] = chosen
            ) -> list[Message]:
                return agent_request(
                    turn.situation, agent, history=turn.recent(), history_note=note,
                    chosen=chosen, refused=refused_now, constrained=turn.settings.constrained,
                )  # fmt: skip

            decision = refine(
                purpose="plan_agent", asked=[agent], build=build, schema=turn.schema([agent]),
                llm=turn.ask, vocabulary=turn.env.vocabulary,
                observation=turn.observation(chosen), legal=legal, critic=critic,
                limit=turn.settings.limit, refined=refined, refused=refused, record=turn.record,
            )  # fmt: skip
            chosen.update(decision.actions)
            decisions.append(decision)
        return decisions

    return plan


def _read_j(refined: bool) -> Plan:
    def plan(turn: Turn) -> list[Decision]:
        agents = list(turn.env.agents)
        note = _score_note(turn.settings.threshold)

        def build(refused_now: Sequence[Attempt]) -> list[Message]:
            return joint_request(
                turn.situation, agents, history=turn.recent(), history_note=note,
                refused=refused_now, constrained=turn.settings.constrained,
            )  # fmt: skip

        decision = refine(
            purpose="plan_joint", asked=agents, build=build, schema=turn.schema(agents),
            llm=turn.ask, vocabulary=turn.env.vocabulary, observation=turn.observation(),
            legal=LegalCheck(turn.env), critic=turn.critic_check("joint"),
            limit=turn.settings.limit, refined=refined, refused=[], record=turn.record,
        )  # fmt: skip
        return [decision]

    return plan


def _central_plan(turn: Turn) -> list[Decision]:
    agents = list(turn.env.agents)

    def build(refused_now: Sequence[Attempt]) -> list[Message]:
        return joint_request(
            turn.situation, agents, history=turn.recent(), constrained=turn.settings.constrained
        )

    decision = refine(
        purpose="plan_joint", asked=agents, build=build, schema=turn.schema(agents),
        llm=turn.ask, vocabulary=turn.env.vocabulary, observation=turn.observation(),
        legal=None, critic=None, limit=0, refined=False, refused=[], record=turn.record,
    )  # fmt: skip
    return [decision]


METHODS: dict[str, Method] = {}


def register(entry: Method) -> Method:
    if entry.name in METHODS:
        raise ValueError(f"method {entry.name!r} is registered already")
    METHODS[entry.name] = entry
    return entry


register(Method("read_s", "ReAd-S: sequential plans refined on the local advantage",
                _read_s(refined=True), critic=True))  # fmt: skip
register(Method("read_j", "ReAd-J: joint plans refined on the joint advantage",
                _read_j(refined=True), critic=True))  # fmt: skip
register(Method("read_s_single", "ReAd-S single-step: scored for the history, not refined",
                _read_s(refined=False), critic=True))  # fmt: skip
register(Method("read_j_single", "ReAd-J single-step: scored for the history, not refined",
                _read_j(refined=False), critic=True))  # fmt: skip
register(Method("central_plan", "Central Plan: one joint request per step, no critic",
                _central_plan, critic=False))  # fmt: skip


def registered() -> dict[str, Method]:
    """Every method by name, the baselines' included: they register themselves when
    onboard.collab.baselines is imported (here, deferred: it imports this module)."""
    import onboard.collab.baselines  # noqa: F401

    return METHODS


def method(name: str) -> Method:
    """The method called ``name``; a UsageError naming the known ones otherwise."""
    known = registered()
    found = known.get(name)
    if found is None:
        raise UsageError(f"unknown team method {name!r} (known: {', '.join(sorted(known))})")
    return found
