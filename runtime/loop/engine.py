"""The closed loop every skill runs: observe, propose, check, act, verify.

::

    stimulus fires -> observe -> propose -> check -> act -> verify --+
          ^                                 | fail: feedback        |
          +------ event manager waits for the action's stimulus <---+

- observe: the latest :class:`PersonObservation` (perception posts updates on the loop);
- propose: an :class:`Ask` (the LLM over HTTP, or a recording) answers the Table I prompt;
  the free text is mapped onto the action set (:class:`ActionMapper`);
- check: every :class:`Check` scores the proposal before it runs (the ReAd seam: a critic
  returning an advantage goes here); a failed check sends the proposal back with feedback;
- act: the state machine moves to the action and its driver command starts;
- verify: every :class:`Verify` compares the observation before and after a completed action
  (the ReplanVLM seam: an outer before/after check); a failure re-asks with feedback.

**Rounds.** A *decision* starts when a stimulus asks for a plan (or the skill starts); its
first proposal is round 0, and each re-ask after it is one *round*: a re-ask after a failed
check, or a replan after a failed verification of an action the decision proposed. A
decision has at most ``max_rounds`` rounds (the skill's ``max_rounds``); when they are spent,
the fallback runs, and the fallback itself is never re-asked, whatever its verification says.
Every loop of the other papers (ReAd's refinement, ReplanVLM's corrections) counts the same
rounds. A plan deferred behind a non-interruptible action is dropped when that action's
verification fails: it was made before the failure was known. The rest of a plan of several
actions is checked again, against what is seen then, before its next action starts; if it
fails, it is dropped and a new decision is asked for with the check's feedback.

**Circuit breaker.** After ``breaker_failures`` failed exchanges in a row (errors, timeouts,
refusals; an unusable reply is an answer), the runner stops asking for ``breaker_cooldown``
seconds of the episode clock: each decision in that time is recorded as ``llm_skipped`` and
the fallback runs (a second-stage question gets no answer). The first exchange after the
cool-down is a trial: a failure opens the breaker again, a reply closes it. The state follows
from the recorded exchanges and the episode clock alone, so a replay reproduces it.

Everything runs in callbacks on the clock's loop; LLM calls go through ``clock.submit``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from transitions import Machine, MachineError

from onboard.base.errors import DriverError, LLMError, OnboardError
from onboard.drivers.base import RobotDriver, Running
from onboard.grounding.mapping import ActionMapper, MappingResult
from onboard.hri.events import EventManager
from onboard.hri.person import PersonObservation
from onboard.llm import prompts
from onboard.llm.client import ChatResult, Message
from onboard.llm.replies import (
    parse_reply,
    reply_action,
    reply_answer,
    reply_phrase,
    reply_wait_time,
)
from onboard.loop.clock import Clock, Timer
from onboard.loop.skill import Skill

__all__ = ["Ask", "Check", "Outcome", "SkillRunner", "Verdict", "Verify", "build_machine"]


class Ask(Protocol):
    """One LLM exchange, blocking: ``purpose`` is plan, wait_time or lose_person.

    An ask may also name ``structured_output``, the form its schemas are sent in
    (onboard.llm.structured); each constrained request's record then shows it."""

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult: ...


@dataclass(frozen=True)
class Verdict:
    ok: bool
    feedback: str = ""
    score: float | None = None


class Check(Protocol):
    """Scores a proposed action sequence before it runs (ReAd: a critic's advantage)."""

    name: str

    def check(self, actions: Sequence[str], observation: PersonObservation) -> Verdict: ...


class Verify(Protocol):
    """Compares the world before and after an action ran (ReplanVLM: the outer check)."""

    name: str

    def verify(
        self, action: str, before: PersonObservation, after: PersonObservation
    ) -> Verdict: ...


@dataclass
class Outcome:
    finished: bool = False
    reason: str = ""
    actions: list[tuple[float, str]] = field(default_factory=list)
    phrase: str | None = None
    spoke_at: float | None = None
    spoke_visible: bool | None = None
    #: the signal (SIGINT, SIGTERM) that stopped the episode, if one did
    signal: str | None = None
    #: LLM exchanges asked for, those that got a reply (usable or not), and those that failed
    #: (refused, timed out, HTTP errors); exchanges still in flight at the end are neither
    llm_requests: int = 0
    llm_replies: int = 0
    llm_failures: int = 0
    #: exchanges not asked because the circuit breaker was open
    llm_skipped: int = 0


class _Model:
    """The object the ``transitions`` machine drives; its state is the current action."""

    state: str
    trigger: Callable[[str], bool]  # added by the machine


def build_machine(skill: Skill) -> Machine:
    """One state per action (plus ``idle`` and ``done``), every transition declared now.

    An action may follow another when the other's ``next`` allows it; the fallback may
    follow any action, so the robot can always be made safe.
    """
    states = ["idle", *skill.actions, "done"]
    machine = Machine(
        model=_Model(), states=states, initial="idle", auto_transitions=False, send_event=False
    )
    for name in skill.actions:
        sources: list[Any] = [
            a for a in skill.actions if a != skill.end and name in skill.allowed_after(a)
        ]
        if name == skill.start:
            sources.insert(0, "idle")
        if name == skill.fallback:
            sources = ["idle", *[a for a in skill.actions if a != skill.end]]
        machine.add_transition(f"to {name}", sorted(set(sources)), name)
    machine.add_transition("finish", [skill.end], "done")
    machine.add_transition("abort", [*skill.actions, "idle"], "done")
    return machine


class SkillRunner:
    """Runs one skill episode on a clock, a driver and an LLM."""

    def __init__(
        self,
        skill: Skill,
        clock: Clock,
        driver: RobotDriver,
        ask: Ask,
        mapper: ActionMapper,
        record: Callable[..., None],
        *,
        action_text: bool = True,
        second_stage: bool = True,
        constrained: bool = False,
        latency: float | Callable[[], float] | None = None,
        checks: Sequence[Check] = (),
        verifiers: Sequence[Verify] = (),
        max_rounds: int = 1,
        on_candidate: Callable[[str, str], None] | None = None,
        on_finish: Callable[[Outcome], None] | None = None,
        breaker_failures: int = 0,
        breaker_cooldown: float = 0.0,
    ) -> None:
        self.skill = skill
        self.clock = clock
        self.driver = driver
        self.ask = ask
        self.mapper = mapper
        self.record = record
        self.action_text = action_text
        self.constrained = constrained
        self.latency = latency
        self.checks = list(checks)
        self.verifiers = list(verifiers)
        self.max_rounds = max_rounds
        self.on_candidate = on_candidate
        self.on_finish = on_finish
        self.outcome = Outcome()
        #: per decision: (stimulus -> request sent, reply received -> action started), seconds
        self.decision_overhead: list[tuple[float, float]] = []
        self.machine = build_machine(skill)
        self.model = cast(_Model, self.machine.model)
        self.events = EventManager(clock, self if second_stage else None, self._stimulus, record)
        self._observation = PersonObservation(t=0.0, activity=None, toward=None, visible=False)
        self._action_start_observation = self._observation
        self._running: Running | None = None
        self._timeout: Timer | None = None
        self._queue: list[str] = []
        self._phrase: str | None = None
        self._plan_seq = 0
        self._request_seq = 0
        self._stimulus_at = 0.0
        self._timing: tuple[float, float] | None = None
        self._deferred: tuple[list[str], str | None, int] | None = None
        #: rounds spent by the decision whose actions are running (see the module docstring)
        self._rounds = 0
        self.breaker_failures = breaker_failures
        self.breaker_cooldown = breaker_cooldown
        self._failed_in_row = 0
        self._open_until: float | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def current(self) -> str:
        return self.model.state

    @property
    def finished(self) -> bool:
        return self.current == "done"

    def start(self, observation: PersonObservation) -> None:
        self._observation = observation
        self.record("observation", **observation.to_record())
        self.record("start", skill=self.skill.name, goal=self.skill.goal)
        if not self.finished:  # a stop before start is never undone
            self.driver.resume()
        self._rounds = 0
        self._begin(self.skill.start, "start action")

    def stop(self, reason: str = "stopped", signal: str | None = None) -> None:
        """Stop from any state: halt the robot, end the episode. Safe to call twice."""
        if self.finished:
            return
        self.outcome.signal = signal
        self._halt_command()
        self.events.disarm()
        try:
            self.driver.stop()
        finally:
            self.model.trigger("abort")
            self._finish(False, reason)

    # -- observe ---------------------------------------------------------------------------

    def observe(self, observation: PersonObservation) -> None:
        old, self._observation = self._observation, observation
        self.record("observation", **observation.to_record())
        if not self.finished:
            self.events.observe(old, observation)

    # -- propose ---------------------------------------------------------------------------

    def _stimulus(self, reason: str) -> None:
        self._stimulus_at = time.perf_counter()
        if self._queue:
            # the rest of the plan was checked against what was seen when it was made; the
            # person may have moved since: check it again against what is seen now
            verdict = self._check(list(self._queue))
            if verdict.ok:
                self._begin(self._queue.pop(0), f"{reason}; next in plan")
                return
            self.record("dropped", plan=list(self._queue), why=f"check failed: {verdict.feedback}")
            self._queue = []
            self._request_plan(f"{reason}; the rest of the plan failed its check",
                               verdict.feedback, rounds=0)  # fmt: skip
            return
        self._request_plan(reason, feedback=None, rounds=0)

    def _request_plan(self, reason: str, feedback: str | None, rounds: int) -> None:
        if self.finished:
            return
        self._plan_seq += 1
        seq = self._plan_seq
        action = self.skill.actions[self.current]
        robot = self.skill.goal
        if self.action_text:
            robot += " " + action.describe(self._observed_fields(self._action_start_observation))
        human = self._observation.situation()
        if feedback:
            human += f" Note: {feedback}"
            self.record("reask", plan=seq, round=rounds, feedback=feedback)
        messages = prompts.first_stage(self.skill, robot, human)
        schema = (
            prompts.plan_schema(list(self.skill.actions), prompts.reason_schema(self.skill))
            if self.constrained
            else None
        )
        stimulus_at, self._stimulus_at = self._stimulus_at or time.perf_counter(), 0.0

        def handle(text: str | None, result: ChatResult | None) -> None:
            if result is not None and result.sent_at:
                self._timing = (result.sent_at - stimulus_at, result.received_at)
            self._on_plan(seq, rounds, text)

        self._submit("plan", messages, schema, reason, handle)

    def _submit(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: dict[str, Any] | None,
        reason: str,
        handle: Callable[[str | None, ChatResult | None], None],
    ) -> None:
        """Ask off the loop; ``handle`` gets the reply text (None when there is none)."""
        if self._open_until is not None and self.clock.now() < self._open_until:
            self.outcome.llm_skipped += 1
            self.record("llm_skipped", purpose=purpose, reason=reason,
                        until=round(self._open_until, 4), failures=self._failed_in_row)  # fmt: skip

            def skipped() -> None:
                if not self.finished:
                    handle(None, None)

            self.clock.post(skipped)
            return
        self._request_seq += 1
        self.outcome.llm_requests += 1
        rid = self._request_seq
        # the response_format form the schema went in, when the ask says (HttpAsk does)
        form = getattr(self.ask, "structured_output", None) if schema is not None else None
        self.record("request", id=rid, purpose=purpose, reason=reason, messages=list(messages),
                    constrained=schema is not None,
                    **({"structured_output": form} if form else {}))  # fmt: skip
        latency = self.latency() if callable(self.latency) else self.latency

        def work() -> ChatResult:
            return self.ask(purpose, messages, schema)

        def done(result: ChatResult | BaseException, took: float) -> None:
            if not self.finished:
                answered = result if isinstance(result, ChatResult) else None
                text = self._reply_text(purpose, rid, result, took)
                self._breaker(answered is not None)
                handle(text, answered)

        self.clock.submit(work, done, latency=latency)

    def _on_plan(self, seq: int, rounds: int, text: str | None) -> None:
        if seq != self._plan_seq:
            self.record("stale", purpose="plan", plan=seq)
            return
        if text is None:
            self._fall_back("no usable LLM reply")
            return
        try:
            parsed = parse_reply(text)
            action_text = reply_action(parsed)
        except LLMError as exc:
            self.record("error", source="llm", message=str(exc))
            self._fall_back("unusable LLM reply")
            return
        began = time.perf_counter()
        mapping = self.mapper.map(action_text)
        took = time.perf_counter() - began
        self.record("mapping", plan=seq, seconds=round(took, 6), **mapping.to_record())
        if not mapping.matched:
            self._no_match(mapping)
            return
        verdict = self._check(mapping.actions)
        if not verdict.ok:
            if rounds < self.max_rounds:
                self._request_plan("check failed", verdict.feedback, rounds + 1)
            else:
                self._fall_back(f"check failed: {verdict.feedback}")
            return
        self._act(mapping.actions, reply_phrase(parsed), rounds)

    def _reply_text(
        self, purpose: str, seq: int, result: ChatResult | BaseException, took: float
    ) -> str | None:
        if isinstance(result, BaseException):
            self.outcome.llm_failures += 1
        if isinstance(result, BaseException):
            message = str(result) if isinstance(result, OnboardError) else repr(result)
            self.record("error", source="llm", purpose=purpose, id=seq, message=message,
                        virtual_latency=round(took, 4))  # fmt: skip
            return None
        self.outcome.llm_replies += 1
        self.record(
            "reply",
            id=seq,
            purpose=purpose,
            text=result.text,
            latency=round(result.latency, 4),
            virtual_latency=round(took, 4),
            attempts=result.attempts,
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
        )
        return result.text

    def _breaker(self, answered: bool) -> None:
        """Count failed exchanges in a row; open the breaker at ``breaker_failures``."""
        if answered:
            if self._open_until is not None:
                self.record("breaker", state="closed", failures=self._failed_in_row)
            self._failed_in_row, self._open_until = 0, None
            return
        self._failed_in_row += 1
        if self.breaker_failures and self._failed_in_row >= self.breaker_failures:
            self._open_until = self.clock.now() + self.breaker_cooldown
            self.record("breaker", state="open", failures=self._failed_in_row,
                        until=round(self._open_until, 4))  # fmt: skip

    def _no_match(self, mapping: MappingResult) -> None:
        situation = self._observation.situation()
        if self.on_candidate is not None:
            self.on_candidate(mapping.reply, situation)
        self.record("candidate", reply=mapping.reply, situation=situation)
        self._fall_back("reply matches no action")

    # -- check -----------------------------------------------------------------------------

    def _check(self, actions: list[str]) -> Verdict:
        for check in self.checks:
            verdict = check.check(actions, self._observation)
            self.record(
                "check", check=check.name, actions=actions, ok=verdict.ok,
                feedback=verdict.feedback, score=verdict.score,
            )  # fmt: skip
            if not verdict.ok:
                return verdict
        return Verdict(True)

    # -- act -------------------------------------------------------------------------------

    def _act(self, actions: list[str], phrase: str | None, rounds: int) -> None:
        current = self.skill.actions[self.current]
        if self._running is not None and not current.spec.interruptible:
            self._deferred = (actions, phrase, rounds)
            self.record("deferred", action=self.current, plan=actions)
            return
        self._phrase = phrase
        self._queue = list(actions[1:])
        self._rounds = rounds
        self._begin(actions[0], "plan")

    def _fall_back(self, why: str) -> None:
        self._queue = []
        self._rounds = self.max_rounds  # the fallback ends the decision: nothing re-asks it
        self.record("fallback", action=self.skill.fallback, why=why)
        self._begin(self.skill.fallback, f"fallback: {why}")

    def _begin(self, name: str, reason: str) -> None:
        if self.finished:
            return
        previous = self.current
        self._halt_command()
        self.events.disarm()
        try:
            self.model.trigger(f"to {name}")
        except MachineError:
            self.record("error", source="machine", message=f"{previous} -> {name} not allowed")
            name = self.skill.fallback
            self.model.trigger(f"to {name}")
        now = self.clock.now()
        self.outcome.actions.append((now, name))
        self.record("transition", source=previous, dest=name, reason=reason)
        self._action_start_observation = self._observation
        action = self.skill.actions[name]
        args = dict(action.spec.args)
        if name == self.skill.end:
            self.outcome.phrase = args["text"] = self._phrase or self.skill.default_phrase
            self.outcome.spoke_at, self.outcome.spoke_visible = now, self._observation.visible
            self.record("speech", text=args["text"])
        try:
            self._running = self.driver.start(action.spec.command, args, self._command_done)
        except DriverError as exc:
            self.record("error", source="driver", message=str(exc))
            self.stop(f"driver failed: {exc}")
            return
        if action.spec.timeout is not None:
            self._timeout = self.clock.call_later(action.spec.timeout, self._command_timeout)
        if self._timing is not None:
            before, received = self._timing
            self.decision_overhead.append((before, time.perf_counter() - received))
            self._timing = None
        self.events.arm(action, self._observation)

    def _command_done(self) -> None:
        self._running = None
        if self._timeout is not None:
            self._timeout.cancel()
        name = self.current
        self.record("done", action=name)
        if name == self.skill.end:
            self.events.disarm()
            self.model.trigger("finish")
            self._finish(True, "end action completed")
            return
        failed = self._verify(name)
        if failed is not None:
            if self._deferred is not None:
                self.record("dropped", plan=self._deferred[0], why="verification failed")
                self._deferred = None
            if self._verification_failed(name, failed):
                return
        if self._deferred is not None:
            actions, phrase, rounds = self._deferred
            self._deferred = None
            self._act(actions, phrase, rounds)
            return
        self.events.completed()

    def _command_timeout(self) -> None:
        name = self.current
        self.record("error", source="driver", message=f"{name}: command timed out")
        self._halt_command()
        self.driver.stop()
        if name == self.skill.fallback:
            self.stop(f"fallback {name} timed out")
        else:
            self.driver.resume()  # moving again on purpose: the fallback makes the robot safe
            self._fall_back(f"{name} timed out")

    def _halt_command(self) -> None:
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
        if self._running is not None:
            self._running.cancel()
            self._running = None

    # -- verify ----------------------------------------------------------------------------

    def _verify(self, action: str) -> Verdict | None:
        """The first failed verdict on ``action``, or None when every verifier passed."""
        for verifier in self.verifiers:
            verdict = verifier.verify(action, self._action_start_observation, self._observation)
            self.record("verify", verifier=verifier.name, action=action, ok=verdict.ok,
                        feedback=verdict.feedback)  # fmt: skip
            if not verdict.ok:
                return verdict
        return None

    def _verification_failed(self, action: str, verdict: Verdict) -> bool:
        """Re-ask within the decision's rounds, else fall back; True when that took over."""
        self._queue = []
        if self._rounds < self.max_rounds:
            self.events.disarm()
            self._request_plan("verification failed", verdict.feedback, self._rounds + 1)
            return True
        if action != self.skill.fallback:
            self._fall_back(f"verification failed: {verdict.feedback}")
            return True
        self.record("rounds_spent", action=action, rounds=self._rounds)
        return False

    def _finish(self, finished: bool, reason: str) -> None:
        self.outcome.finished, self.outcome.reason = finished, reason
        stopped_by = {} if self.outcome.signal is None else {"signal": self.outcome.signal}
        self.record("end", finished=finished, reason=reason, **stopped_by,
                    actions=[[round(t, 3), a] for t, a in self.outcome.actions])  # fmt: skip
        if self.on_finish is not None:
            self.on_finish(self.outcome)

    # -- second stage (the event manager's questions) ---------------------------------------

    def wait_time(self, activity: str, answer: Callable[[float | None], None]) -> None:
        messages = prompts.wait_time(self.skill, activity)
        second = self.skill.prompt.second_stage
        reason = prompts.reason_schema(self.skill)
        schema = prompts.wait_time_schema(reason, second.wait_times) if self.constrained else None
        self._second_stage("wait_time", messages, schema, reply_wait_time, answer)

    def lose_person(
        self, activity: str, horizon: float, answer: Callable[[bool | None], None]
    ) -> None:
        messages = prompts.lose_person(self.skill, activity, horizon)
        reason = prompts.reason_schema(self.skill)
        schema = prompts.answer_schema(reason) if self.constrained else None
        self._second_stage("lose_person", messages, schema, reply_answer, answer)

    def _second_stage(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: dict[str, Any] | None,
        read: Callable[[dict[str, Any]], Any],
        answer: Callable[[Any], None],
    ) -> None:
        def handle(text: str | None, _: ChatResult | None) -> None:
            value = None
            if text is not None:
                try:
                    value = read(parse_reply(text))
                except LLMError as exc:
                    self.record("error", source="llm", purpose=purpose, message=str(exc))
            self.record("second_stage", purpose=purpose, value=_jsonable(value))
            answer(value)

        self._submit(purpose, messages, schema, f"{self.current} began", handle)

    @staticmethod
    def _observed_fields(observation: PersonObservation) -> dict[str, str]:
        return {
            "X_a": observation.activity or "nothing visible",
            "X_g": "looking at the robot" if observation.toward else "not looking at the robot",
        }


def _jsonable(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value
