"""The team kind of skill (ReAd, seed 000): what the loop sees of a team task and how a reply
reads, and the ask, checks and fallback each method fills the loop's seams with.

- the observation is the environment step's state, as text and as the critic's features,
  with the actions chosen so far this step (:class:`~onboard.collab.refine.TeamObservation`);
- the plan request is the method's (onboard.collab.methods, onboard.collab.baselines), built
  from the episode so far (:class:`~onboard.collab.methods.Turn`);
- a reply reads as one ``choose`` step, one action per agent asked; a reply that cannot be
  read is a step too, which the reply check refuses, so it is asked again like any refused
  proposal (ReAd re-asks an unreadable reply within its rounds);
- the checks are the method's: the reply's, the environment's legality, the critic's score;
- when a decision's rounds are spent, the fallback is the best refused proposal the critic
  scored above WAIT (:func:`~onboard.collab.refine.best_refused`), RoCo's last plan with its
  infeasible actions as WAIT, or the skill's ``wait``.

:class:`TeamLedger` writes the loop's records and reads them into the turn as they come:
each refused proposal joins "Refused this step", each decision's proposals join ## History,
and the figures of the seed's tables (vetoes, failures, fallbacks, unjudged scores) count.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onboard.base.errors import LLMError, LLMReplyError
from onboard.collab.methods import Method, Turn
from onboard.collab.prompts import WAIT, proposal_text, read_reply
from onboard.collab.refine import (
    CHOOSE,
    SHOWN,
    WHY,
    CriticCheck,
    LegalCheck,
    ReplyCheck,
    TeamObservation,
    actions_of,
    best_refused,
    steps_of,
    unreadable,
)
from onboard.llm.types import ChatResult, Completes, Message
from onboard.loop.engine import Check
from onboard.loop.events import no_changes
from onboard.loop.kind import Attempt, Observation, Plan, Step
from onboard.loop.recorder import Recorder
from onboard.loop.skill import Action, Skill

__all__ = ["PlanAsk", "RecordedAsk", "TeamFigures", "TeamKind", "TeamLedger", "team_checks"]

_ENDPOINT = re.compile(r"^LLM at \S+: ")
#: the client's line for a request the endpoint refused with a client error
_REFUSED = re.compile(r"^LLM at \S+: HTTP 4\d\d\b")


class RecordedAsk:
    """Asks ``llm`` and records the exchange: a ``request`` record (NQ counts these), then a
    ``reply`` or an ``error`` record."""

    def __init__(self, llm: Completes, recorder: Recorder) -> None:
        self.llm = llm
        self.recorder = recorder
        self.requests = 0
        #: requests answered, and the last request the endpoint refused outright (an HTTP
        #: 4xx, which the client does not ask again; not a timeout, not an unreadable reply)
        self.answered = 0
        self.refusal: LLMError | None = None
        #: the response_format form a schema goes in, when the client says (ChatClient does)
        self.form: str | None = getattr(llm, "structured_output", None)

    def ask(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None,
        agents: Sequence[str],
    ) -> str:
        self.requests += 1
        form = {"structured_output": self.form} if schema is not None and self.form else {}
        self.recorder.write("request", id=self.requests, purpose=purpose, agents=list(agents),
                            messages=[dict(m) for m in messages], schema=schema,
                            constrained=schema is not None, **form)  # fmt: skip
        began = time.perf_counter()
        try:
            result = self.llm.complete(messages, schema)
        except LLMError as exc:
            self.recorder.write("error", id=self.requests, source="llm", purpose=purpose,
                                message=str(exc))  # fmt: skip
            if _REFUSED.match(str(exc)):  # by its text: a replay raises what was recorded
                self.refusal = exc
            raise
        self.answered += 1
        self.recorder.write("reply", id=self.requests, purpose=purpose, text=result.text,
                            latency=round(time.perf_counter() - began, 4),
                            tokens=[result.prompt_tokens, result.completion_tokens],
                            finish_reason=result.finish_reason)  # fmt: skip
        return result.text


@dataclass
class TeamFigures:
    """An episode's figures: SR comes from ``success``, ES is ``steps``, NQ is ``queries``
    (the request records). ``vetoes``: proposals the critic refused for their score;
    ``failed``: proposals refused as unreadable or infeasible, ``infeasible`` those the
    environment's feasibility check refused; ``fallbacks``: decisions that ended without an
    accepted proposal; ``ood_flags``: scores the critic could not vouch for (accepted
    unjudged)."""

    success: bool = False
    steps: int = 0
    queries: int = 0
    vetoes: int = 0
    fallbacks: int = 0
    ood_flags: int = 0
    failed: int = 0
    reward: float = 0.0
    infeasible: int = 0


class PlanAsk:
    """The method's plan request as the loop's ``Ask``: recorded as the team records every
    exchange (with the agents asked), after RoCo's dialogue when the method holds one. A
    failed exchange is kept for the kind to read as an unreadable reply, so it is asked again
    within the rounds instead of ending the decision."""

    records_itself = True

    def __init__(self, method: Method, turn: Turn, recorded: RecordedAsk) -> None:
        self.method, self.turn, self.recorded = method, turn, recorded
        #: the exchange's failure, for :meth:`TeamKind.read_plan`
        self.failure: LLMError | None = None

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        began = time.perf_counter()
        self.failure = None
        if self.method.dialogue is not None:
            messages = self.method.dialogue(self.turn, self.recorded)
        asked = self.method.asked(self.turn)
        try:
            text = self.recorded.ask(self.method.purpose, messages, schema, asked)
        except LLMError as exc:
            self.failure, text = exc, ""
        return ChatResult(text=text, latency=time.perf_counter() - began, attempts=1)


class TeamKind:
    """Implements :class:`~onboard.loop.kind.SkillKind` for team tasks."""

    name = "team"

    def __init__(self, method: Method, turn: Turn, ask: PlanAsk) -> None:
        self.method, self.turn, self.ask = method, turn, ask

    def plan_messages(
        self,
        skill: Skill,
        step: Step,
        began: Observation,
        now: Observation,
        history: Sequence[Attempt],
        action_text: bool,
    ) -> list[Message]:
        return self.method.request(self.turn, self.method.asked(self.turn))

    def plan_schema(self, skill: Skill, now: Observation) -> dict[str, Any] | None:
        return self.turn.schema(self.method.asked(self.turn))

    def read_plan(self, text: str, now: Observation) -> Plan:
        asked = self.method.asked(self.turn)
        if self.method.heard is not None:
            self.method.heard(self.turn, text)
        failure = self.ask.failure
        if failure is None:
            try:
                actions = read_reply(text, asked, self.turn.env.vocabulary)
            except LLMReplyError as exc:
                return self._unreadable(asked, str(exc), text)
            return Plan(steps_of(actions), record={"agents": asked, "ok": True,
                                                   "actions": actions})  # fmt: skip
        return self._unreadable(asked, _bare(failure), None, failure)

    def _unreadable(
        self, asked: list[str], why: str, text: str | None, failure: LLMError | None = None
    ) -> Plan:
        who = ", ".join(asked)
        if self.method.dialogue is not None:  # RoCo: the last speaker's plan was not read
            reason = why if failure is None else f"no reply ({_one_line(str(failure), 120)})"
            proposal, feedback = f"{who}: (no plan)", f"[{asked[-1]}] plan not read: {reason}"
        elif failure is None:
            shown = " ".join((text or "").split())[:60]
            proposal, feedback = f"{who}: {shown!r}", f"unusable reply: {why}"
        elif isinstance(failure, LLMReplyError):
            proposal, feedback = f"{who}: (reply refused)", f"unusable reply: {why}"
        else:
            proposal, feedback = f"{who}: (no reply)", f"no reply: {why}"
        return Plan(unreadable(proposal, feedback),
                    record={"agents": asked, "ok": False, "reason": feedback})  # fmt: skip

    def command_args(self, action: Action, step: Step, now: Observation) -> dict[str, Any]:
        return dict(step.args)

    def changes(self, old: Observation, new: Observation) -> frozenset[str]:
        return no_changes(old, new)

    def fallback_plan(self, refused: Sequence[Attempt], now: Observation) -> list[Step] | None:
        """What runs once a decision's rounds are spent (see the module docstring); None:
        the skill's fallback, the agents asked WAIT."""
        turn, method = self.turn, self.method
        asked = method.asked(turn)
        observation = now if isinstance(now, TeamObservation) else turn.observation()
        if method.critic is not None and turn.critic is not None:
            chosen, _ = best_refused(refused, critic_check(method, turn), asked, observation,
                                     turn.record)  # fmt: skip
            return None if all(a == WAIT for a in chosen.values()) else steps_of(chosen)
        if method.dialogue is not None:  # RoCo: the last plan, its infeasible actions WAIT
            for attempt in reversed(refused):
                actions = actions_of(attempt.steps)
                if actions:
                    reasons = LegalCheck(turn.env).reasons(attempt.steps, observation)
                    return steps_of({a: WAIT if a in reasons else x for a, x in actions.items()})
        return None


def critic_check(method: Method, turn: Turn) -> CriticCheck:
    assert method.critic is not None and turn.critic is not None
    return CriticCheck(turn.critic, turn.env.agents, turn.env.vocabulary, method.critic,
                       turn.settings.threshold, refuse=method.refined)  # fmt: skip


def team_checks(method: Method, turn: Turn) -> list[Check]:
    """The method's checks, in order: the reply's, the environment's, the critic's."""
    checks: list[Check] = [ReplyCheck()]
    if method.legal:
        checks.append(LegalCheck(turn.env, amend=not method.refined,
                                 lines=method.dialogue is not None))  # fmt: skip
    if method.critic is not None:
        checks.append(critic_check(method, turn))
    return checks


class TeamLedger:
    """Writes the loop's records and reads them into the turn (see the module docstring)."""

    def __init__(self, recorder: Recorder, method: Method, turn: Turn) -> None:
        self.recorder, self.method, self.turn = recorder, method, turn
        self.figures = TeamFigures()
        self._fallback = False
        self._critic: tuple[str, float, bool] | None = None
        self._ood = False

    def __call__(self, kind: str, **fields: Any) -> None:
        self.recorder.write(kind, **fields)
        if kind == "check":
            self._check(str(fields["check"]), fields)
        elif kind in ("amend", "fallback"):
            self._fallback = True
            self.figures.fallbacks += 1
        elif kind == "fallback_choice":
            self._ood = bool(fields["ood"])
        elif kind == "transition" and fields["dest"] in (CHOOSE, "wait"):
            self._decided(fields)

    def _check(self, name: str, fields: Mapping[str, Any]) -> None:
        turn, ok, feedback = self.turn, bool(fields["ok"]), str(fields["feedback"])
        (step,) = fields["steps"]
        args: dict[str, str] = step["args"]
        proposal = args[SHOWN] if WHY in args else proposal_text(args)
        if name == "critic":
            score, unjudged = float(fields["score"]), bool(fields.get("unjudged", False))
            if ok:
                self._critic, self._ood = (feedback, score, unjudged), unjudged
                return
            self.figures.vetoes += 1
            turn.refused.append(Attempt(proposal, feedback, score))
            turn.entries.append((proposal, f"{feedback}, refused"))
            return
        if ok:
            return
        self.figures.failed += 1
        turn.refused.append(Attempt(proposal, feedback))
        if self.method.dialogue is not None:
            turn.physical.extend(feedback.split("\n"))
        if name == "legal":
            self.figures.infeasible += 1
            turn.entries.append((proposal, feedback))

    def _decided(self, fields: Mapping[str, Any]) -> None:
        """A decision's plan begins: its proposal joins the step's entries."""
        turn = self.turn
        args = fields.get("args") or {a: WAIT for a in self.method.asked(turn)}
        proposal = proposal_text(args)
        if self._fallback:
            turn.entries.append((proposal, "fallback"))
        elif self._critic is not None:
            feedback, score, unjudged = self._critic
            ran = self.method.refined or unjudged or score >= turn.settings.threshold
            turn.entries.append((proposal, f"{feedback}, {'accepted' if ran else 'ran unrefined'}"))
        else:
            turn.entries.append((proposal, ""))
        self.figures.ood_flags += self._ood
        self._fallback, self._critic, self._ood = False, None, False


def _bare(exc: LLMError) -> str:
    """The reason without the endpoint's URL: it means nothing to the model, and a port
    differs between runs."""
    return _ENDPOINT.sub("", str(exc))


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
