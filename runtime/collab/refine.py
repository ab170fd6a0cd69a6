"""The checks on a team proposal, on the loop's check seam, and the refinement around them.

A proposal is one action per agent asked, as :class:`~onboard.loop.kind.Step` s (``action`` the
vocabulary's text, ``args["agent"]`` the agent). Two checks look at it, in this order:

- :class:`LegalCheck`: the environment's ``legal()``; an infeasible action is refused with the
  environment's reason and never reaches the critic;
- :class:`CriticCheck`: the critic's score, the local advantage of the agent after the agents
  chosen before it (ReAd-S), or the joint advantage ``Q(s, a) - Q(s, w) / gamma`` (ReAd-J);
  under epsilon it is refused with its score. A score the critic flags out of distribution is
  *unknown*: the proposal passes, flagged (``CriticVerdict.ood``), never judged on it.

:func:`refine` is one decision (one agent's action for ReAd-S, the joint action for ReAd-J):
ask, read, check; a refused proposal goes back in the next request with its reason (an
:class:`~onboard.loop.kind.Attempt` under "Refused this step"), at most ``limit`` re-asks. When
they are spent, the fallback: the refused proposal the critic scored highest if it scores
above doing nothing (every agent asked WAITs), else WAIT. An infeasible proposal or an
unreadable reply is never a fallback: what the checks refused for a reason other than its
score never runs. Without refinement (the single-step methods) the first proposal runs as
it is, scored for the history; an infeasible action in it is replaced by WAIT.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from onboard.base.errors import LLMError, LLMReplyError
from onboard.collab.prompts import WAIT, proposal_text, read_reply
from onboard.llm.types import Message
from onboard.loop.engine import Verdict
from onboard.loop.kind import Attempt, Step

__all__ = [
    "CriticCheck",
    "CriticVerdict",
    "CriticView",
    "Decision",
    "LegalCheck",
    "LegalView",
    "Scored",
    "TeamAsk",
    "TeamObservation",
    "refine",
    "steps_of",
]

Features = npt.NDArray[np.float32]


class Scored(Protocol):
    """A critic's score (onboard.collab.critic.Score): its value, and whether the state was
    outside the range the critic saw in training."""

    @property
    def value(self) -> float: ...

    @property
    def ood(self) -> bool: ...


class CriticView(Protocol):
    """What the refinement needs of a critic (onboard.collab.critic.Critic has it); actions
    are indices into the level's vocabulary, one per agent slot."""

    def local_advantage(self, state: Features, prefix: Sequence[int], action: int) -> Scored: ...

    def joint_advantage(self, state: Features, joint: Sequence[int]) -> Scored: ...


class LegalView(Protocol):
    """What the legality check needs of an environment (onboard.collab.envs' TeamEnv)."""

    def legal(
        self, agent: str, action: str, chosen: Mapping[str, str] | None = None
    ) -> str | None: ...


class TeamAsk(Protocol):
    """One recorded LLM exchange: the reply text, or LLMError (onboard.collab.episode)."""

    def ask(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None,
        agents: Sequence[str],
    ) -> str: ...


@dataclass(frozen=True)
class TeamObservation:
    """The team's state for the checks (an :class:`onboard.loop.kind.Observation`): the step,
    the state as text and as features, and the actions chosen so far this step (ReAd-S)."""

    step: int
    state: str
    features: Features
    chosen: Mapping[str, str] = field(default_factory=dict)

    @property
    def t(self) -> float:
        return float(self.step)

    @property
    def visible(self) -> bool:
        return True

    def situation(self) -> str:
        return self.state

    def images(self) -> Sequence[bytes]:
        return ()

    def to_record(self) -> dict[str, object]:
        return {
            "step": self.step,
            "features": [round(float(x), 6) for x in self.features],
            "chosen": dict(self.chosen),
        }


def steps_of(actions: Mapping[str, str]) -> list[Step]:
    return [Step(action, {"agent": agent}) for agent, action in actions.items()]


def _actions_of(steps: Sequence[Step]) -> dict[str, str]:
    return {step.args["agent"]: step.action for step in steps}


class LegalCheck:
    """Refuses a proposal with any action the environment finds infeasible now."""

    name = "legal"

    def __init__(self, env: LegalView) -> None:
        self.env = env

    def reasons(self, steps: Sequence[Step], observation: TeamObservation) -> dict[str, str]:
        """The infeasible actions' reasons, by agent: each action after the actions chosen
        before it this step (``observation.chosen``, then the proposal's earlier agents' as
        the environment would run them: an infeasible one as WAIT)."""
        chosen = dict(observation.chosen)
        found = {}
        for step in steps:
            agent = step.args["agent"]
            reason = self.env.legal(agent, step.action, dict(chosen))
            if reason is not None:
                found[agent] = reason
            chosen[agent] = step.action if reason is None else WAIT
        return found

    def check(self, steps: Sequence[Step], observation: Any) -> Verdict:
        reasons = self.reasons(steps, observation)
        if not reasons:
            return Verdict(True)
        return Verdict(False, "infeasible: " + "; ".join(reasons.values()))


@dataclass(frozen=True)
class CriticVerdict(Verdict):
    """A critic's verdict; ``ood``: the score is unknown (the state is outside the critic's
    training range), so the proposal passed unjudged."""

    ood: bool = False


class CriticCheck:
    """The critic's score against ``epsilon``: local advantage (``sequential``, ReAd-S) or
    joint advantage (``joint``, ReAd-J)."""

    name = "critic"

    def __init__(
        self,
        critic: CriticView,
        agents: Sequence[str],
        vocabulary: Sequence[str],
        mode: Literal["sequential", "joint"],
        epsilon: float,
    ) -> None:
        self.critic = critic
        self.agents = tuple(agents)
        self.index = {action: i for i, action in enumerate(vocabulary)}
        self.mode = mode
        self.epsilon = epsilon

    def score(self, steps: Sequence[Step], observation: TeamObservation) -> Scored:
        actions = _actions_of(steps)
        if self.mode == "joint":
            joint = [self.index[actions.get(agent, WAIT)] for agent in self.agents]
            return self.critic.joint_advantage(observation.features, joint)
        if len(actions) != 1:
            raise ValueError(f"a sequential score is of one agent's action, not {len(actions)}")
        ((agent, action),) = actions.items()
        before = self.agents[: self.agents.index(agent)]
        missing = [a for a in before if a not in observation.chosen]
        if missing:
            raise ValueError(f"{agent} is scored before {', '.join(missing)} chose")
        prefix = [self.index[observation.chosen[a]] for a in before]
        return self.critic.local_advantage(observation.features, prefix, self.index[action])

    def check(self, steps: Sequence[Step], observation: Any) -> CriticVerdict:
        score = self.score(steps, observation)
        value = float(score.value)
        if score.ood:
            return CriticVerdict(
                True, f"score unknown (state outside the critic's training range; {value:.2f} "
                "not trusted)", value, ood=True,
            )  # fmt: skip
        if value < self.epsilon:
            return CriticVerdict(
                False,
                f"score {_shown_under(value, self.epsilon)} (under the threshold "
                f"{self.epsilon:.2f})",
                value,
            )
        return CriticVerdict(True, f"score {value:.2f}", value)


def _shown_under(value: float, threshold: float) -> str:
    """``value`` with as few decimals (two or more) as show it under ``threshold``: the LLM
    reads this, and "-0.00 (under the threshold 0.00)" reads as a contradiction."""
    for digits in range(2, 7):
        text = f"{value:.{digits}f}"
        if float(text) < threshold:
            return text
    return f"{value:.3e}"


@dataclass
class Decision:
    """What one decision chose, and what it took."""

    actions: dict[str, str]
    #: "accepted": a proposal passed; "first": the single-step methods' first proposal ran
    #: unrefined; "fallback": none passed (``why``)
    how: Literal["accepted", "first", "fallback"]
    score: float | None = None
    ood: bool = False
    #: requests made for the decision (the first and each re-ask)
    requests: int = 0
    #: proposals the critic refused for their score
    vetoes: int = 0
    #: proposals refused as unreadable or infeasible
    failed: int = 0
    why: str = ""
    #: each proposal and what came of it, for the ## History of later steps
    entries: list[tuple[str, str]] = field(default_factory=list)


def refine(
    *,
    purpose: str,
    asked: Sequence[str],
    build: Callable[[Sequence[Attempt]], list[Message]],
    schema: Mapping[str, Any] | None,
    llm: TeamAsk,
    vocabulary: Sequence[str],
    observation: TeamObservation,
    legal: LegalCheck | None,
    critic: CriticCheck | None,
    limit: int,
    refined: bool,
    refused: list[Attempt],
    record: Callable[..., None],
) -> Decision:
    """One decision for the agents ``asked``. ``build(refused)`` makes each request from the
    step's refused proposals so far; ``refused`` is the step's list, appended to here (ReAd-S
    shares it between the agents of a step). ``refined``: re-ask a refused proposal, at most
    ``limit`` times; otherwise the first proposal runs (infeasible actions as WAIT)."""
    decision = Decision(actions={}, how="fallback")
    vetoed: list[tuple[float, dict[str, str]]] = []
    for round_ in range(limit + 1 if refined else 1):
        decision.requests += 1
        actions, failure = _propose(llm, purpose, build(refused), schema, asked, vocabulary)
        if failure is not None:
            decision.failed += 1
            refused.append(failure)
            record("proposal", round=round_, agents=list(asked), ok=False,
                   reason=failure.feedback)  # fmt: skip
            continue
        record("proposal", round=round_, agents=list(asked), ok=True, actions=actions)
        steps = steps_of(actions)
        proposal = proposal_text(actions)
        if legal is not None:
            reasons = legal.reasons(steps, observation)
            if reasons:
                verdict = legal.check(steps, observation)
                record("check", check=legal.name, actions=actions, ok=False,
                       feedback=verdict.feedback, score=None, ood=False)  # fmt: skip
                decision.failed += 1
                refused.append(Attempt(proposal, verdict.feedback))
                decision.entries.append((proposal, verdict.feedback))
                if refined:
                    continue
                actions = {a: WAIT if a in reasons else x for a, x in actions.items()}
                decision.why = verdict.feedback
                return _finish(decision, actions, "fallback", critic, observation, record)
        if critic is None:
            decision.entries.append((proposal, ""))
            return _finish(decision, actions, "accepted" if refined else "first", None,
                           observation, record)  # fmt: skip
        verdict = critic.check(steps, observation)
        record("check", check=critic.name, actions=actions, ok=verdict.ok,
               feedback=verdict.feedback, score=verdict.score, ood=verdict.ood)  # fmt: skip
        decision.score, decision.ood = verdict.score, verdict.ood
        if verdict.ok or not refined:
            word = "accepted" if verdict.ok else "ran unrefined"
            decision.entries.append((proposal, f"{verdict.feedback}, {word}"))
            decision.actions, decision.how = actions, "accepted" if refined else "first"
            return decision
        decision.vetoes += 1
        refused.append(Attempt(proposal, verdict.feedback, verdict.score))
        decision.entries.append((proposal, f"{verdict.feedback}, refused"))
        vetoed.append((float(verdict.score or 0.0), actions))
    decision.why = f"{decision.requests} proposals refused"
    wait = {agent: WAIT for agent in asked}
    if critic is None or not vetoed:
        return _finish(decision, wait, "fallback", critic, observation, record)
    best_score, best = max(vetoed, key=lambda pair: pair[0])
    wait_score = float(critic.score(steps_of(wait), observation).value)
    chosen = best if best_score > wait_score else wait
    record("fallback_choice", best=best, best_score=best_score, wait_score=wait_score,
           chosen=chosen)  # fmt: skip
    return _finish(decision, chosen, "fallback", critic, observation, record)


_ENDPOINT = re.compile(r"^LLM at \S+: ")


def _propose(
    llm: TeamAsk,
    purpose: str,
    messages: list[Message],
    schema: Mapping[str, Any] | None,
    asked: Sequence[str],
    vocabulary: Sequence[str],
) -> tuple[dict[str, str], Attempt | None]:
    """The proposal of one exchange, or the failed proposal: no reply, or one that cannot be
    read (the reason without the endpoint's URL: it means nothing to the model, and a port
    differs between runs)."""
    who = ", ".join(asked)
    try:
        text = llm.ask(purpose, messages, schema, asked)
    except LLMReplyError as exc:
        return {}, Attempt(f"{who}: (reply refused)", f"unusable reply: {_bare(exc)}")
    except LLMError as exc:
        return {}, Attempt(f"{who}: (no reply)", f"no reply: {_bare(exc)}")
    try:
        return read_reply(text, asked, vocabulary), None
    except LLMReplyError as exc:
        shown = " ".join(text.split())[:60]
        return {}, Attempt(f"{who}: {shown!r}", f"unusable reply: {exc}")


def _bare(exc: LLMError) -> str:
    return _ENDPOINT.sub("", str(exc))


def _finish(
    decision: Decision,
    actions: dict[str, str],
    how: Literal["accepted", "first", "fallback"],
    critic: CriticCheck | None,
    observation: TeamObservation,
    record: Callable[..., None],
) -> Decision:
    decision.actions, decision.how = actions, how
    if how == "fallback":
        record("fallback", actions=actions, why=decision.why)
        if critic is not None:
            score = critic.score(steps_of(actions), observation)
            decision.score, decision.ood = float(score.value), bool(score.ood)
        decision.entries.append((proposal_text(actions), "fallback"))
    return decision
