"""The checks on a team proposal, on the loop's check seam, and the fallback that chooses
among the refused.

A proposal is one ``choose`` step whose arguments are one action per agent asked (``{"Alice":
"MOVE red_cube"}``); a reply that cannot be read is a step too, carrying why (``?feedback``)
and what it showed (``?proposal``). The checks look at it in this order:

- :class:`ReplyCheck`: refuses an unreadable reply (or none) with its reason, so it is asked
  again like any refused proposal, never run;
- :class:`LegalCheck`: the environment's ``legal()``; an infeasible action is refused with the
  environment's reason and never reaches the critic. Without refinement (the single-step
  methods) it amends instead: the proposal runs with its infeasible actions as WAIT;
- :class:`CriticCheck`: the critic's score, the local advantage of the agent after the agents
  chosen before it (ReAd-S), or the joint advantage ``Q(s, a) - Q(s, w) / gamma`` (ReAd-J);
  under epsilon it is refused with its score (``refuse=False``: scored for the history, never
  refused). A score the critic flags out of distribution is *unknown*: the proposal passes,
  unjudged (``Verdict.unjudged``), never judged on it.

A refused proposal goes back in the next request with its reason (an
:class:`~onboard.loop.kind.Attempt` under "Refused this step"), at most ``refine_limit``
re-asks (the loop's rounds). When they are spent, :func:`best_refused`: the refused proposal
the critic scored highest if it scores above doing nothing (every agent asked WAITs), else the
skill's fallback (WAIT). An infeasible proposal or an unreadable reply is never chosen: what
the checks refused for a reason other than its score never runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from onboard.collab.prompts import WAIT
from onboard.loop.engine import Verdict
from onboard.loop.kind import Attempt, Observation, Step

__all__ = [
    "CHOOSE",
    "CriticCheck",
    "CriticView",
    "LegalCheck",
    "LegalView",
    "ReplyCheck",
    "Scored",
    "TeamObservation",
    "actions_of",
    "best_refused",
    "steps_of",
    "unreadable",
]

#: the action a proposal is: its arguments are the agents' actions
CHOOSE = "choose"
#: an unreadable reply's step arguments (no agent is named so: names start with a letter)
WHY, SHOWN = "?feedback", "?proposal"

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
    """A proposal as the loop's plan: one ``choose`` step."""
    return [Step(CHOOSE, dict(actions))]


def unreadable(proposal: str, feedback: str) -> list[Step]:
    """A reply that could not be read, as a plan the :class:`ReplyCheck` refuses."""
    return [Step(CHOOSE, {SHOWN: proposal, WHY: feedback})]


def actions_of(steps: Sequence[Step]) -> dict[str, str]:
    """The agents' actions a plan proposes (none for an unreadable reply)."""
    return {
        agent: action
        for step in steps
        if step.action == CHOOSE and WHY not in step.args
        for agent, action in step.args.items()
    }


class ReplyCheck:
    """Refuses a reply that could not be read (or never came), with why."""

    name = "reply"

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        for step in steps:
            if WHY in step.args:
                return Verdict(False, step.args[WHY])
        return Verdict(True)


class LegalCheck:
    """Refuses a proposal with any action the environment finds infeasible now."""

    name = "legal"

    def __init__(self, env: LegalView, *, amend: bool = False, lines: bool = False) -> None:
        """``amend``: a proposal with infeasible actions runs with them as WAIT (the
        single-step methods); ``lines``: the feedback is one line per infeasible action,
        ``Alice: MOVE x is infeasible: <why>`` (RoCo's physical feedback)."""
        self.env = env
        self.amend = amend
        self.lines = lines

    def reasons(self, steps: Sequence[Step], observation: TeamObservation) -> dict[str, str]:
        """The infeasible actions' reasons, by agent: each action after the actions chosen
        before it this step (``observation.chosen``, then the proposal's earlier agents' as
        the environment would run them: an infeasible one as WAIT)."""
        chosen = dict(observation.chosen)
        found = {}
        for agent, action in actions_of(steps).items():
            reason = self.env.legal(agent, action, dict(chosen))
            if reason is not None:
                found[agent] = reason
            chosen[agent] = action if reason is None else WAIT
        return found

    def check(self, steps: Sequence[Step], observation: Any) -> Verdict:
        reasons = self.reasons(steps, observation)
        if not reasons:
            return Verdict(True)
        actions = actions_of(steps)
        if self.lines:
            lines = (f"{a}: {actions[a]} is infeasible: {r}" for a, r in reasons.items())
            feedback = "\n".join(lines)
        else:
            feedback = "infeasible: " + "; ".join(reasons.values())
        amend = None
        if self.amend:
            amend = tuple(steps_of({a: WAIT if a in reasons else x for a, x in actions.items()}))
        return Verdict(False, feedback, amend=amend)


class CriticCheck:
    """The critic's score against ``epsilon``: local advantage (``sequential``, ReAd-S) or
    joint advantage (``joint``, ReAd-J); ``refuse=False``: scored, never refused."""

    name = "critic"

    def __init__(
        self,
        critic: CriticView,
        agents: Sequence[str],
        vocabulary: Sequence[str],
        mode: Literal["sequential", "joint"],
        epsilon: float,
        *,
        refuse: bool = True,
    ) -> None:
        self.critic = critic
        self.agents = tuple(agents)
        self.index = {action: i for i, action in enumerate(vocabulary)}
        self.mode = mode
        self.epsilon = epsilon
        self.refuse = refuse

    def score(self, steps: Sequence[Step], observation: TeamObservation) -> Scored:
        actions = actions_of(steps)
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

    def check(self, steps: Sequence[Step], observation: Any) -> Verdict:
        score = self.score(steps, observation)
        value = float(score.value)
        if score.ood:
            return Verdict(
                True, f"score unknown (state outside the critic's training range; {value:.2f} "
                "not trusted)", value, unjudged=True,
            )  # fmt: skip
        if value < self.epsilon:
            return Verdict(
                not self.refuse,
                f"score {_shown_under(value, self.epsilon)} (under the threshold "
                f"{self.epsilon:.2f})",
                value,
            )
        return Verdict(True, f"score {value:.2f}", value)


def _shown_under(value: float, threshold: float) -> str:
    """``value`` with as few decimals (two or more) as show it under ``threshold``: the LLM
    reads this, and "-0.00 (under the threshold 0.00)" reads as a contradiction."""
    for digits in range(2, 7):
        text = f"{value:.{digits}f}"
        if float(text) < threshold:
            return text
    return f"{value:.3e}"


def best_refused(
    refused: Sequence[Attempt],
    critic: CriticCheck,
    asked: Sequence[str],
    observation: TeamObservation,
    record: Callable[..., None],
) -> tuple[dict[str, str], bool]:
    """The fallback of a decision whose rounds are spent: of the proposals the critic refused
    (those with a score), the highest scored (the first of equals) if it scores above every
    agent asked WAITing, else the WAITs; with whether the critic could not judge the choice."""
    wait = {agent: WAIT for agent in asked}
    wait_score = critic.score(steps_of(wait), observation)
    vetoed = [(float(a.score), actions_of(a.steps)) for a in refused if a.score is not None]
    if not vetoed:
        record("fallback_choice", best=None, wait_score=float(wait_score.value), chosen=wait,
               ood=bool(wait_score.ood))  # fmt: skip
        return wait, bool(wait_score.ood)
    best_score, best = max(vetoed, key=lambda pair: pair[0])
    chosen = best if best_score > float(wait_score.value) else wait
    ood = bool(critic.score(steps_of(chosen), observation).ood)
    record("fallback_choice", best=best, best_score=best_score,
           wait_score=float(wait_score.value), chosen=chosen, ood=ood)  # fmt: skip
    return chosen, ood
