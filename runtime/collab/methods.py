"""The team methods by name: what each asks at one decision, and which checks refine it.

====================  =========================================================================
``read_s``            ReAd-S: the agents in task order, one decision each; the local advantage
                      of each proposal after the agents chosen before it; under epsilon it goes
                      back with its score, at most ``refine_limit`` re-asks per agent
``read_j``            ReAd-J: one decision for the joint action; the joint advantage
                      ``Q(s, a) - Q(s, w) / gamma``; refined the same way
``read_s_single``     ReAd-S without refinement (the seed's single-step ablation): the first
                      proposal of each agent runs, scored for the history
``read_j_single``     ReAd-J without refinement
``central_plan``      one joint request per step with the history of all agents' actions; no
                      critic, no refinement (infeasible actions reach the environment, which
                      runs them as WAIT and says why)
====================  =========================================================================

A method is declared, not a loop: the request it builds from the episode so far
(:class:`Turn`), whether a decision is one agent's or the joint action, the checks that refine
it (the environment's legality, the critic's score, as the loop's checks:
onboard.collab.refine), and optionally a ``finish(turn, success)`` asked once the episode is
over (Reflexion's reflection) and a ``dialogue`` its ask holds before each plan (RoCo). The
team kind (onboard.collab.kind) runs every method on the loop every skill runs. What a method
keeps across the steps of one episode is the turn's :class:`EpisodeLog` (every step's joint
action and physical feedback, the disturbance, the method's own notes); what it keeps across
the episodes of one evaluation cell is a :class:`TrialMemory` the evaluation passes to each
episode. The baselines (onboard.collab.baselines) add themselves with :func:`register` when
this module is imported.
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
from onboard.collab.refine import CriticView, TeamObservation
from onboard.llm.types import Message
from onboard.loop.kind import Attempt

__all__ = [
    "METHODS",
    "EnvView",
    "EpisodeLog",
    "Method",
    "Request",
    "StepSeen",
    "StepView",
    "TaskView",
    "TeamAsk",
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


class TeamAsk(Protocol):
    """One recorded LLM exchange: the reply text, or LLMError (onboard.collab.kind.RecordedAsk)."""

    def ask(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None,
        agents: Sequence[str],
    ) -> str: ...


@dataclass
class Turn:
    """The team episode as a method sees it at the current environment step: what earlier
    steps left (``history``, ``log``) and what this step has gathered so far (the actions
    chosen, the refused proposals, RoCo's physical feedback and dialogue)."""

    env: EnvView
    settings: TeamSettings
    ask: TeamAsk
    critic: CriticView | None
    record: Callable[..., None]
    #: earlier steps' lines for ## History, oldest first
    history: list[HistoryEntry] = field(default_factory=list)
    #: the episode so far
    log: EpisodeLog = field(default_factory=EpisodeLog)
    #: this step: the actions chosen (ReAd-S: the agents before the one asked)
    chosen: dict[str, str] = field(default_factory=dict)
    #: this step: every refused proposal, shared by the agents of the step (ReAd-S)
    refused: list[Attempt] = field(default_factory=list)
    #: this step: each proposal and what came of it, for the ## History of later steps
    entries: list[tuple[str, str]] = field(default_factory=list)
    #: this step: the feasibility feedback of every round (RoCo)
    physical: list[str] = field(default_factory=list)
    #: this step: the last round's dialogue (RoCo), None when the method holds none
    said: list[str] | None = None
    state: str = ""
    features: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))

    def __post_init__(self) -> None:
        self.look()

    @property
    def step(self) -> int:
        return int(self.env.steps)

    def look(self) -> None:
        """What the environment shows now (at the start, and after each step)."""
        self.state, self.features = self.env.describe(), self.env.features()

    def next_step(self, step: int) -> None:
        """Step ``step`` ran: its entries join the history; what the next step gathers starts
        empty."""
        self.history.extend(HistoryEntry(step, p, o) for p, o in self.entries)
        if self.said is not None:
            self.log.notes.setdefault("dialogue", {})[step] = self.said
        self.chosen, self.refused, self.entries, self.physical = {}, [], [], []
        self.said = None
        self.look()

    @property
    def situation(self) -> Situation:
        return Situation(self.settings.task, self.state, self.env.vocabulary)

    def observation(self) -> TeamObservation:
        return TeamObservation(self.step, self.state, self.features, dict(self.chosen))

    def recent(self) -> Sequence[HistoryEntry]:
        return self.history[-self.settings.history_limit :] if self.settings.history_limit else []

    def schema(self, agents: Sequence[str]) -> dict[str, Any] | None:
        if not self.settings.constrained:
            return None
        return reply_schema({agent: self.env.agent_actions(agent) for agent in agents})


#: a decision's request: the turn, then the agents asked
Request = Callable[[Turn, Sequence[str]], list[Message]]
#: called once the episode is over: the turn holds the last state, then whether it succeeded
Finish = Callable[[Turn, bool], None]
#: RoCo's dialogue before each plan: asks the other agents, returns the plan's request
Dialogue = Callable[[Turn, TeamAsk], list[Message]]


@dataclass(frozen=True)
class Method:
    name: str
    description: str
    request: Request
    #: the critic's score of a proposal: the local (``sequential``) or joint advantage
    critic: Literal["sequential", "joint"] | None = None
    #: refused proposals are asked again (the rounds: the task's refine_limit); else the
    #: first proposal runs
    refined: bool = False
    #: the environment checks each proposal's feasibility before it runs
    legal: bool = False
    #: one decision per agent, in task order (ReAd-S); else one for all agents
    per_agent: bool = False
    #: the purpose of its plan requests in the recording
    purpose: str = "plan_joint"
    finish: Finish | None = None
    #: read a reply's text besides its actions (ReAct's thought)
    heard: Callable[[Turn, str], None] | None = None
    dialogue: Dialogue | None = None

    def asked(self, turn: Turn) -> list[str]:
        """The agents a decision asks now: the next to choose, or all."""
        if not self.per_agent:
            return list(turn.env.agents)
        return [next(a for a in turn.env.agents if a not in turn.chosen)]


def _score_note(threshold: float) -> str:
    return (
        f"Each score is the critic's advantage of that action: higher is better; a proposal "
        f"under {threshold:.2f} is refused. Choose the action you expect to score highest."
    )


def _agent_request(turn: Turn, asked: Sequence[str]) -> list[Message]:
    (agent,) = asked
    return agent_request(
        turn.situation, agent, history=turn.recent(),
        history_note=_score_note(turn.settings.threshold), chosen=turn.chosen,
        refused=turn.refused, constrained=turn.settings.constrained,
    )  # fmt: skip


def _joint_request(turn: Turn, asked: Sequence[str]) -> list[Message]:
    return joint_request(
        turn.situation, asked, history=turn.recent(),
        history_note=_score_note(turn.settings.threshold), refused=turn.refused,
        constrained=turn.settings.constrained,
    )  # fmt: skip


def _central_request(turn: Turn, asked: Sequence[str]) -> list[Message]:
    return joint_request(
        turn.situation, asked, history=turn.recent(), constrained=turn.settings.constrained
    )


METHODS: dict[str, Method] = {}


def register(entry: Method) -> Method:
    if entry.name in METHODS:
        raise ValueError(f"method {entry.name!r} is registered already")
    METHODS[entry.name] = entry
    return entry


register(Method("read_s", "ReAd-S: sequential plans refined on the local advantage",
                _agent_request, critic="sequential", refined=True, legal=True, per_agent=True,
                purpose="plan_agent"))  # fmt: skip
register(Method("read_j", "ReAd-J: joint plans refined on the joint advantage",
                _joint_request, critic="joint", refined=True, legal=True))  # fmt: skip
register(Method("read_s_single", "ReAd-S single-step: scored for the history, not refined",
                _agent_request, critic="sequential", legal=True, per_agent=True,
                purpose="plan_agent"))  # fmt: skip
register(Method("read_j_single", "ReAd-J single-step: scored for the history, not refined",
                _joint_request, critic="joint", legal=True))  # fmt: skip
register(Method("central_plan", "Central Plan: one joint request per step, no critic",
                _central_request))  # fmt: skip


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
