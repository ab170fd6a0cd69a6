"""ReplanVLM's corrections on the loop's seams (seed 002, section III).

Checks (``Check``), in the seed's order, each refusing with a message the Decision Bot's
next request carries (``"<phase>: <message>"``):

- ``format``: the reply is a plan and a program (runtime/replan/kind.py reads it);
- ``refused``: the sandbox's allow-list accepts the program;
- ``match``: the Inner Bot says the program does what the plan says (no verdict: the check is
  skipped and recorded so);
- ``dry_run``: the Decision Bot writes a second program for the same request; both run on a
  twin built from the scene as perceived: collisions, unreachable poses, failed grasps and
  SafeArm refusals of the first refuse it;
- ``compare``: the two programs end the dry run differently.

Verifications (``Verify``) after a ``run``: the goal (runtime/replan/goal.py): its relations
must hold in the fresh look, or, for a judged goal, something must have changed; then, for a
judged goal only, the Extra Bot compares before and after (images, scene states, their
changes, how the run ended). Without the external correction: the run's own end. With
internal correction every refusal is *final*: once the rounds between two runs are spent
the task fails (the seed's rule); without it a refused proposal is a failed try that spends
a replan (runtime/loop/engine.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onboard.base.errors import LLMError
from onboard.loop.engine import Check, Verdict
from onboard.loop.kind import Observation, Step
from onboard.replan import prompts
from onboard.replan.allowlist import check as allowlist_check
from onboard.replan.bots import Ask
from onboard.replan.goal import CodeGoal, hidden_since
from onboard.replan.kind import RUN, CodeKind, CodeObservation, proposal_of
from onboard.replan.names import API_NAMES
from onboard.replan.sandbox import RunResult
from onboard.replan.scene_state import SceneState, changes, changes_text

__all__ = [
    "DECIDED",
    "AllowList",
    "Compare",
    "DryRun",
    "DryRunner",
    "ExtraVerify",
    "GoalVerify",
    "PlanMatch",
    "Readable",
    "RunEnded",
    "code_checks",
    "ended_text",
    "refusal",
]

Record = Callable[..., None]


class DryRunner(Protocol):
    """Dry runs for the Inner Bot: ``(problems, difference)`` of two programs on a twin of
    ``scene``: the first program's physical problems, and how the two disagree (None: they
    agree)."""

    def __call__(
        self, scene: SceneState, first: str, second: str | None
    ) -> tuple[list[str], str | None]: ...


def refusal(phase: str, message: str, final: bool = False) -> Verdict:
    """A failed check or verification as the Decision Bot is told it: ``"<phase>: <message>"``
    on one line."""
    return Verdict(False, f"{phase}: {' '.join(message.split())}", final=final)


def _run_step(steps: Sequence[Step]) -> Step | None:
    return next((s for s in steps if s.action == RUN), None)


def _code_observation(observation: Observation) -> CodeObservation:
    if not isinstance(observation, CodeObservation):
        raise TypeError(f"a code check needs a CodeObservation, not {type(observation).__name__}")
    return observation


@dataclass
class Readable:
    """``format``: the reply is a plan and a program."""

    final: bool
    name: str = "format"

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        step = _run_step(steps)
        if step is None or "unreadable" not in step.args:
            return Verdict(True)
        return refusal("format", step.args["unreadable"], self.final)


@dataclass
class AllowList:
    """``refused``: the sandbox would run the program."""

    final: bool
    name: str = "refused"

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        step = _run_step(steps)
        proposal = None if step is None else proposal_of(step)
        if proposal is None:
            return Verdict(True)
        refusals = allowlist_check(proposal.code, API_NAMES)
        if not refusals:
            return Verdict(True)
        why = "; ".join(f"line {r.line}: {r.reason}" for r in refusals)
        return refusal("refused", f"the sandbox refuses the code: {why}", self.final)


@dataclass
class PlanMatch:
    """``match``: the Inner Bot's plan/code question; no verdict skips the check."""

    inner: Ask
    instruction: str
    record: Record
    final: bool = True
    name: str = "match"
    #: send the Inner Bot no image (a text model serves it)
    text_only: bool = False

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        step = _run_step(steps)
        proposal = None if step is None else proposal_of(step)
        if proposal is None:
            return Verdict(True)
        images = [] if self.text_only else list(observation.images())
        try:
            text = self.inner.ask(
                "match",
                prompts.match_messages(self.instruction, proposal, images),
                prompts.match_schema(),
            )
            matched, reason = prompts.read_verdict(text, "match")
        except (LLMError, ValueError) as exc:
            self.record("skipped", check="match", reason=str(exc))
            return Verdict(True)
        if matched:
            return Verdict(True)
        return refusal("match", f"the code does not match the plan: {reason}", self.final)


class DryRun:
    """``dry_run``: a second program for the same request (the Decision Bot asked again with
    the very request that gave the first), and both dry-run on a twin of what is seen; the
    first one's physical problems refuse it. The comparison waits for :class:`Compare`."""

    name = "dry_run"

    def __init__(
        self, decision: Ask, kind: CodeKind, dry: DryRunner, record: Record, final: bool = True
    ) -> None:
        self.decision, self.kind, self.dry = decision, kind, dry
        self.record, self.final = record, final
        #: the last dry run's disagreement, for :class:`Compare` (None: none, or no second)
        self.difference: str | None = None
        self.compared = False

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        step = _run_step(steps)
        proposal = None if step is None else proposal_of(step)
        self.difference, self.compared = None, False
        if proposal is None:
            return Verdict(True)
        other = self._second(self.kind.asked)
        if other is None:
            self.record("skipped", check="compare", reason="the regenerated proposal is unusable")
        began = time.perf_counter()
        state = _code_observation(observation).state
        problems, difference = self.dry(state, proposal.code, other)
        self.record("dry_run", problems=problems, difference=difference, second=other,
                    seconds=round(time.perf_counter() - began, 3))  # fmt: skip
        self.difference, self.compared = difference, other is not None
        if problems:
            found = "; ".join(problems)
            return refusal("dry_run", f"a dry run of the code found: {found}", self.final)
        return Verdict(True)

    def _second(self, messages: Sequence[Any]) -> str | None:
        """A second program for the same request; None when it is unusable (no answer, the
        wrong form, or one the sandbox would not run: it compares with nothing)."""
        try:
            text = self.decision.ask("regenerate", messages)
        except LLMError:
            return None
        read = prompts.read_proposal(text)
        if isinstance(read, str) or allowlist_check(read.code, API_NAMES):
            return None
        return read.code


@dataclass
class Compare:
    """``compare``: the two programs of :class:`DryRun` agree when dry-run."""

    dry: DryRun
    final: bool = True
    name: str = "compare"

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        if _run_step(steps) is None or self.dry.difference is None:
            return Verdict(True)
        why = "two programs written for the same instruction disagree when dry-run: "
        return refusal("compare", why + self.dry.difference, self.final)


def code_checks(
    kind: CodeKind,
    decision: Ask,
    inner: Ask,
    instruction: str,
    record: Record,
    internal: bool,
    dry: DryRunner | None,
    inner_text_only: bool = False,
) -> list[Check]:
    """The checks of a code skill, in the seed's order: the form and the allow-list always;
    with internal correction the Inner Bot's match and, given ``dry``, the dry run and the
    comparison."""
    checks: list[Check] = [Readable(final=internal), AllowList(final=internal)]
    if not internal:
        return checks
    checks.append(PlanMatch(inner, instruction, record, text_only=inner_text_only))
    if dry is not None:
        dry_run = DryRun(decision, kind, dry, record)
        checks += [dry_run, Compare(dry_run)]
    return checks


class RunLog(Protocol):
    """How the last run ended (``"ok"``, or ``"<reason>: <message>"``): the driver's."""

    @property
    def ended(self) -> str: ...


#: the Extra Bot's verdict when the goal's relations decided instead (not asked)
DECIDED = "not asked: the goal's relations decide"


@dataclass
class GoalVerify:
    """``goal``: after a run, every relation of the goal holds in the fresh look (else the
    robot replans with what is missing); a judged goal needs something to have changed since
    the goal was read (else replans), and the Extra Bot decides."""

    goal: CodeGoal
    runs: RunLog
    name: str = "goal"

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict:
        if proposal_of(step) is None:
            return Verdict(True)
        last = _code_observation(after).state
        unknown = self.goal.unknown(last)
        if unknown is not None:  # what the look cannot tell: never done, nor not done
            return _unverified("goal", unknown, self.runs.ended)
        if self.goal.judged:
            first = self.goal.first
            if first is not None and not changes(first, last):
                return refusal("goal", "nothing has changed since the request was read")
            return Verdict(True)
        met = self.goal.met(_code_observation(after))
        if met.ok:
            seen = "; ".join(r.text() for r in self.goal.relations)
            return Verdict(True, f"the camera sees {seen}", 1.0)
        missing = met.feedback.removeprefix("not yet: ")
        ended = self.runs.ended
        why = f"the program ended with {ended}; " if ended != "ok" else ""
        return refusal("goal", f"after the run {why}the camera does not see {missing}", final=False)


@dataclass
class ExtraVerify:
    """The Extra Bot: before and after a run, is the request done? No verdict is final. With
    a ``goal`` whose relations decide, it is not asked (:data:`DECIDED`)."""

    extra: Ask
    instruction: str
    runs: RunLog
    goal_images: Sequence[bytes] = ()
    goal_notes: Sequence[str] = ()
    text_only: bool = False
    goal: CodeGoal | None = None
    name: str = "extra"

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict:
        proposal = proposal_of(step)
        if proposal is None:
            return Verdict(True)
        if self.goal is not None and not self.goal.judged:
            return Verdict(True, DECIDED)
        first, last = _code_observation(before), _code_observation(after)
        unknown = hidden_since(first.state, last.state)
        if unknown is not None:  # the Extra Bot would judge what the look cannot tell
            return _unverified("extra", unknown, self.runs.ended)
        ended = self.runs.ended
        messages = prompts.extra_messages(
            self.instruction,
            proposal,
            first.state.text(),
            last.state.text(),
            changes_text(first.state, last.state),
            ended,
            first.image,
            last.image,
            [] if self.text_only else self.goal_images,
            [] if self.text_only else self.goal_notes,
        )
        try:
            text = self.extra.ask("verify", messages, prompts.extra_schema())
            done, reason = prompts.read_verdict(text, "done")
        except (LLMError, ValueError) as exc:
            return refusal("extra", f"the Extra Bot gave no verdict: {exc}", final=True)
        if done:
            return Verdict(True, reason)
        if ended != "ok":
            reason = f"the program ended with {ended}; {reason}"
        return refusal("extra", f"after the run the task is not done: {reason}")


def _unverified(phase: str, unknown: str, ended: str) -> Verdict:
    """The look after a run cannot tell: the episode ends "could not verify" (nothing runs
    again on a guess), unless the program itself failed: then its plan was not carried out
    whatever the camera shows, and the robot replans, as after any failed run."""
    if ended != "ok":
        return refusal(phase, f"the program ended with {ended}; could not verify: {unknown}, "
                       "looked at twice")  # fmt: skip
    return refusal(phase, f"could not verify: {unknown}, looked at twice", final=True)


@dataclass
class RunEnded:
    """Without the external correction: a run that ended without error is the robot's own
    verdict (the seed's "without external" rows)."""

    runs: RunLog
    name: str = "run"

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict:
        if step.action != RUN or self.runs.ended == "ok":
            return Verdict(True)
        return refusal("run", f"the program ended with {self.runs.ended}", final=True)


def ended_text(result: RunResult) -> str:
    return "ok" if result.ok else f"{result.reason}: {result.message}"
