"""The closed loop every skill runs: observe, propose, check, act, verify.

::

    stimulus fires -> observe -> propose -> check -> act -> verify --+
          ^                                 | fail: feedback        |
          +------ event manager waits for the action's stimulus <---+

- observe: the latest observation of the skill's kind (runtime/loop/kind.py: a person as
  text, or a scene with its camera frame); perception posts updates on the loop;
- propose: an :class:`Ask` (the LLM over HTTP, or a recording) answers the kind's plan
  prompt; the kind reads the reply into steps (actions with their arguments);
- check: every :class:`Check` scores the proposal before it runs (the ReAd seam: a critic
  returning an advantage goes here); a failed check sends the proposal back with feedback;
- act: the state machine moves to the action and its driver command starts;
- verify: every :class:`Verify` compares the observation before the action with a fresh one
  after it (the ReplanVLM seam: an outer before/after check); a failure re-asks with feedback.

Checks and verifiers run off the loop (through ``clock.submit``), as LLM calls do, so a
critic or verifier that runs a model never blocks timers or a stop; a result that comes
back after the runner has moved on (a new decision, another action, a stop) is recorded as
stale and dropped, the guard plans have. Each re-ask carries the decision's refused
proposals with their scores and feedback (:class:`~onboard.loop.kind.Attempt`).

**Rounds.** A *decision* starts when a stimulus asks for a plan (or the skill starts); its
first proposal is round 0, and each re-ask after it is one *round*: a re-ask after a failed
check, or a replan after a failed verification of an action the decision proposed. A
decision has at most ``max_rounds`` rounds (the skill's ``max_rounds``); when they are spent,
the fallback runs, and the fallback itself is never re-asked, whatever its verification says.
Every loop of the other papers (ReAd's refinement, ReplanVLM's corrections) counts the same
rounds. A runner given ``max_replans`` counts replans apart (ReplanVLM's external
corrections): each failed verification of a decision's action, and each refused proposal
once the check rounds are spent, spends one replan and starts the check rounds afresh.
A *final* verdict (a check's or a verification's) ends the episode once the rounds are
spent, the fallback having made the robot safe.

A plan deferred behind a non-interruptible action is dropped when that action's
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
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from transitions import Machine, MachineError

from onboard.base.errors import DriverError, LLMError, OnboardError
from onboard.drivers.base import RobotDriver, Running
from onboard.llm import prompts
from onboard.llm.replies import parse_reply, reply_answer, reply_wait_time
from onboard.llm.types import ChatResult, Message
from onboard.loop.clock import Clock, Timer
from onboard.loop.events import EventManager
from onboard.loop.kind import Attempt, Observation, Plan, SkillKind, Step
from onboard.loop.skill import Skill

__all__ = [
    "Ask",
    "Check",
    "GoalGate",
    "Outcome",
    "SkillRunner",
    "Verdict",
    "Verify",
    "build_machine",
]


class Ask(Protocol):
    """One LLM exchange, blocking: ``purpose`` is plan, wait_time or lose_person.

    An ask may also name ``structured_output``, the form its schemas are sent in
    (onboard.llm.structured); each constrained request's record then shows it."""

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult: ...


def records_itself(ask: Ask) -> bool:
    """An ask that writes its own ``request`` and ``reply`` records (ReplanVLM's bots, whose
    records carry the request's hash a server's log is matched by): the runner then writes
    neither, so an exchange is recorded once."""
    return bool(getattr(ask, "records_itself", False))


@dataclass(frozen=True)
class Verdict:
    ok: bool
    feedback: str = ""
    score: float | None = None
    #: a failed check that no other proposal can mend once the decision's rounds are spent
    #: (the goal is not verified): the fallback makes the robot safe, then the episode fails
    #: with this feedback, instead of asking again
    final: bool = False
    #: a plan the check would take instead of the refused one (the person skill's critic:
    #: eye contact before speaking to a person not looking); the runner checks it like any
    #: plan and runs it, once per proposal, before it asks again
    amend: tuple[Step, ...] | None = None
    #: the check could not judge (a critic outside the states it was trained on): the
    #: proposal passes unjudged, and the check record says so
    unjudged: bool = False


class GoalGate(Protocol):
    """The episode's goal, compiled once before the first step (scene skills:
    runtime/manip/goal.py): the question, and whether the goal holds in what is seen."""

    def messages(self, skill: Skill, observation: Observation) -> list[Message]: ...

    def schema(self, skill: Skill, observation: Observation) -> dict[str, Any] | None: ...

    def read(self, text: str, observation: Observation) -> Verdict:
        """ok: the goal is understood; else the feedback is why the episode cannot go on."""
        ...

    def met(self, observation: Observation) -> Verdict: ...

    def to_record(self) -> dict[str, Any]:
        """What was understood, for the recording."""
        ...

    def judge(self, actions: Sequence[str], after: Observation) -> list[Message] | None:
        """The verifier model's question before the end step runs (``after`` against the
        look the goal was read with), or None when the goal's own check (a ``Check``)
        decides."""
        ...

    def judge_schema(self) -> dict[str, Any]: ...

    def judgement(self, text: str) -> Verdict:
        """The verifier model's reply read: ok lets the end step run."""
        ...


#: a plan a decision's refused proposals offer instead of the skill's fallback (or None)
FallbackPlan = Callable[[Sequence[Attempt], Observation], "list[Step] | None"]
#: whether what is seen ends the episode: ok in success, not ok in failure, None: go on
Ends = Callable[[Observation], "Verdict | None"]


class Check(Protocol):
    """Scores a proposed plan before it runs (ReAd: a critic's advantage). Runs off the
    loop: it may take time, but must not touch the loop's state."""

    name: str

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict: ...


class Verify(Protocol):
    """Compares the world before an action and a fresh look after it (ReplanVLM: the outer
    check). Runs off the loop, like a check."""

    name: str

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict: ...


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
    #: proposals each check refused (by the check's name), and fallbacks run
    refused: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0


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
        kind: SkillKind,
        record: Callable[..., None],
        *,
        action_text: bool = True,
        second_stage: bool = True,
        constrained: bool = False,
        latency: float | Callable[[], float] | None = None,
        checks: Sequence[Check] = (),
        verifiers: Sequence[Verify] = (),
        look: Callable[[], Observation] | None = None,
        max_rounds: int = 1,
        on_candidate: Callable[[str, str], None] | None = None,
        on_finish: Callable[[Outcome], None] | None = None,
        breaker_failures: int = 0,
        breaker_cooldown: float = 0.0,
        goal: GoalGate | None = None,
        max_replans: int | None = None,
        check_looks: bool = True,
        work_latency: Callable[[], float] | None = None,
        fallback_plan: FallbackPlan | None = None,
        ends: Ends | None = None,
    ) -> None:
        """``look`` takes a fresh observation for the verifiers (a new camera frame), and for
        the checks unless ``check_looks`` is False (the checks then judge a proposal against
        the look it was made from); it runs off the loop. Without it, verifiers compare with
        the latest observation. ``goal``: asked once before the start action; a goal not
        understood ends the episode at once, a goal that already holds ends it in success
        with no motion. ``max_replans``: replans counted apart from check rounds (see the
        module docstring); None: a replan is one more round. ``work_latency``: on the
        virtual clock, how long each piece of off-loop work (a check, a verification) takes,
        asked in order (a replay of a wall-clock run answers from the recording); None: none.
        ``fallback_plan``: when a decision's rounds are spent, a plan its refused proposals
        offer instead of the skill's fallback (ReAd: the one the critic scored highest, if it
        beats doing nothing), or None for the fallback; it is not checked again.
        ``ends``: asked once each action has completed and passed its verification, with
        what is seen then: an ok verdict ends the episode through the end action (the task's
        own success, as the environment reports it), a failed one stops it (a step limit),
        None goes on."""
        self.skill = skill
        self.clock = clock
        self.driver = driver
        self.ask = ask
        self.kind = kind
        self.record = record
        self.action_text = action_text
        self.constrained = constrained
        self.latency = latency
        self.checks = list(checks)
        self.verifiers = list(verifiers)
        self.look = look
        self.max_rounds = max_rounds
        self.on_candidate = on_candidate
        self.on_finish = on_finish
        self.goal = goal
        self.max_replans = max_replans
        self.check_looks = check_looks
        self.work_latency = work_latency
        self.fallback_plan = fallback_plan
        self.ends = ends
        self.outcome = Outcome()
        #: per decision: (stimulus -> request sent, reply received -> action started), seconds
        self.decision_overhead: list[tuple[float, float]] = []
        self.machine = build_machine(skill)
        self.model = cast(_Model, self.machine.model)
        self.events = EventManager(
            clock, self if second_stage else None, self._stimulus, record, changes=kind.changes
        )
        self._observation: Observation | None = None
        self._action_start_observation: Observation | None = None
        self._running: Running | None = None
        self._timeout: Timer | None = None
        self._step = Step("idle")
        self._queue: list[Step] = []
        self._phrase: str | None = None
        self._plan_seq = 0
        self._request_seq = 0
        self._stimulus_at = 0.0
        self._timing: tuple[float, float] | None = None
        self._deferred: tuple[list[Step], str | None, int] | None = None
        #: rounds spent by the decision whose actions are running (see the module docstring)
        self._rounds = 0
        #: replans spent by the current decision, when they are counted apart (max_replans)
        self._replans = 0
        #: the refused proposals of the current decision, carried by each re-ask
        self._history: list[Attempt] = []
        #: moves on whenever the runner does (an action begins, a plan is asked, a stop):
        #: an off-loop check or verification from an older epoch is stale
        self._epoch = 0
        #: fallbacks this episode (the skill's max_fallbacks bounds them: per goal, not reset
        #: by a planned action in between)
        self._fallbacks = 0
        #: why the episode ends once the fallback has made the robot safe (a final verdict)
        self._ending: str | None = None
        self.breaker_failures = breaker_failures
        self.breaker_cooldown = breaker_cooldown
        self._failed_in_row = 0
        self._open_until: float | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def current(self) -> str:
        return self.model.state

    @property
    def plans_asked(self) -> int:
        """Plans asked for so far this episode (a scene skill's goal question is not one)."""
        return self._plan_seq

    @property
    def finished(self) -> bool:
        return self.current == "done"

    def running(self) -> tuple[str, float]:
        """The action under way (``idle`` before the first) and the episode time it began."""
        if not self.outcome.actions:
            return "idle", 0.0
        began, name = self.outcome.actions[-1]
        return name, began

    @property
    def observation(self) -> Observation:
        if self._observation is None:
            raise RuntimeError("the runner has not started: no observation yet")
        return self._observation

    def start(self, observation: Observation) -> None:
        self._observation = self._action_start_observation = observation
        self.record("observation", **observation.to_record())
        self.record("start", skill=self.skill.name, goal=self.skill.goal, skill_kind=self.kind.name)
        if not self.finished:  # a stop before start is never undone
            self.driver.resume()
        self._rounds = 0
        if self.goal is not None:
            self._ask_goal(self.goal)
            return
        self._begin(Step(self.skill.start), "start action")

    def _ask_goal(self, goal: GoalGate) -> None:
        """Ask for the goal before the start action: nothing moves, and no plan is asked,
        until it is understood. It is read against what was seen when it was asked, so a
        replay reads it alike."""
        now = self.observation
        schema = goal.schema(self.skill, now) if self.constrained else None

        def handle(text: str | None, _: ChatResult | None) -> None:
            verdict = (
                Verdict(False, "goal not understood: no usable LLM reply")
                if text is None
                else goal.read(text, now)
            )
            met = goal.met(now) if verdict.ok else Verdict(False)
            self.record("goal", ok=verdict.ok, feedback=verdict.feedback, met=met.ok,
                        **goal.to_record())  # fmt: skip
            if not verdict.ok:
                self.stop(verdict.feedback)
                return
            self._begin(Step(self.skill.start), "start action")
            if met.ok:
                self._begin(Step(self.skill.end), "the goal holds at the first look")

        self._submit("goal", goal.messages(self.skill, now), schema, "episode goal", handle)

    def stop(self, reason: str = "stopped", signal: str | None = None) -> None:
        """Stop from any state: halt the robot, end the episode. Safe to call twice."""
        if self.finished:
            return
        self.outcome.signal = signal
        self._epoch += 1
        self._halt_command()
        self.events.disarm()
        try:
            self.driver.stop()
        finally:
            self.model.trigger("abort")
            self._finish(False, reason)

    # -- observe ---------------------------------------------------------------------------

    def observe(self, observation: Observation) -> None:
        old, self._observation = self._observation, observation
        self.record("observation", **observation.to_record())
        if not self.finished and old is not None:
            self.events.observe(old, observation)

    # -- propose ---------------------------------------------------------------------------

    def _stimulus(self, reason: str) -> None:
        self._stimulus_at = time.perf_counter()
        self._history = []  # a new decision
        self._replans = 0
        if self._queue:
            # the rest of the plan was checked against what was seen when it was made; the
            # world may have changed since: check it again against what is seen now
            queue = list(self._queue)

            def checked(verdict: Verdict) -> None:
                if verdict.ok:
                    step = self._queue.pop(0)
                    self._begin(step, f"{reason}; next in plan")
                    return
                self.record("dropped", plan=[s.text() for s in queue],
                            why=f"check failed: {verdict.feedback}")  # fmt: skip
                self._queue = []
                self._history.append(_attempt(queue, verdict))
                self._request_plan(f"{reason}; the rest of the plan failed its check", rounds=0)

            self._check(queue, checked)
            return
        self._request_plan(reason, rounds=0)

    def _request_plan(self, reason: str, rounds: int) -> None:
        if self.finished:
            return
        self._epoch += 1
        self._plan_seq += 1
        seq = self._plan_seq
        now = self.observation
        began = self._action_start_observation or now
        if self._history:
            self.record("reask", plan=seq, round=rounds, feedback=self._history[-1].feedback,
                        history=[a.to_record() for a in self._history])  # fmt: skip
        messages = self.kind.plan_messages(
            self.skill, self._step, began, now, self._history, self.action_text
        )
        schema = self.kind.plan_schema(self.skill, now) if self.constrained else None
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
        if not records_itself(self.ask):
            self.record("request", id=rid, purpose=purpose, reason=reason,
                        messages=list(messages), constrained=schema is not None,
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
            plan = self.kind.read_plan(text, self.observation)
        except LLMError as exc:
            self.record("error", source="llm", message=str(exc))
            self._fall_back("unusable LLM reply")
            return
        self.record("mapping", plan=seq, **plan.record)
        if not plan.steps:
            self._no_match(plan)
            return

        def refused(steps: list[Step], verdict: Verdict) -> None:
            self._history.append(_attempt(steps, verdict))
            if rounds < self.max_rounds:
                self._request_plan("check failed", rounds + 1)
            elif verdict.final:
                self._ending = verdict.feedback
                self._fall_back(verdict.feedback)
            elif self._replan_left():
                self._request_plan("check failed; the rounds are spent: replan", 0)
            else:
                self._fall_back(f"check failed: {verdict.feedback}")

        def checked(steps: list[Step], verdict: Verdict, amended: bool = False) -> None:
            if not verdict.ok and verdict.amend is not None and not amended:
                instead = list(verdict.amend)
                self.record("amend", plan=seq, steps=[s.to_record() for s in instead],
                            why=verdict.feedback)  # fmt: skip
                self._check(instead, lambda again: checked(instead, again, amended=True))
                return
            if not verdict.ok:
                refused(steps, verdict)
                return
            ends = any(s.action == self.skill.end for s in steps)
            question = (
                self.goal.judge([a for _, a in self.outcome.actions], self.observation)
                if ends and self.goal is not None
                else None
            )
            if question is None:
                self._act(steps, plan.phrase, rounds)
                return
            self._judge(question, replace(plan, steps=steps), rounds,
                        lambda v: refused(steps, v))  # fmt: skip

        self._check(plan.steps, lambda verdict: checked(plan.steps, verdict))

    def _judge(
        self,
        question: list[Message],
        plan: Plan,
        rounds: int,
        refused: Callable[[Verdict], None],
    ) -> None:
        """The verifier model on the end step (the goal's ``judge``): a yes lets it run, a no
        is a refusal like a failed check's."""
        assert self.goal is not None
        goal, seq = self.goal, self._plan_seq
        schema = goal.judge_schema() if self.constrained else None

        def handle(text: str | None, _: ChatResult | None) -> None:
            if seq != self._plan_seq:
                self.record("stale", purpose="verify", plan=seq)
                return
            verdict = (
                goal.judgement(text)
                if text is not None
                else Verdict(False, "goal not verified: the verifier gave no reply", 0.0)
            )
            self.record("check", check="judge", actions=[s.action for s in plan.steps],
                        steps=[s.to_record() for s in plan.steps], ok=verdict.ok,
                        feedback=verdict.feedback, score=verdict.score)  # fmt: skip
            if verdict.ok:
                self._act(plan.steps, plan.phrase, rounds)
            else:
                self.outcome.refused["judge"] = self.outcome.refused.get("judge", 0) + 1
                refused(verdict)

        self._submit("verify", question, schema, "the goal, judged", handle)

    def _reply_text(
        self, purpose: str, seq: int, result: ChatResult | BaseException, took: float
    ) -> str | None:
        if isinstance(result, BaseException):
            self.outcome.llm_failures += 1
        own = records_itself(self.ask)
        if isinstance(result, BaseException):
            message = str(result) if isinstance(result, OnboardError) else repr(result)
            if not own:
                self.record("error", source="llm", purpose=purpose, id=seq, message=message,
                            virtual_latency=round(took, 9))  # fmt: skip
            return None
        self.outcome.llm_replies += 1
        if own:
            return result.text
        self.record(
            "reply",
            id=seq,
            purpose=purpose,
            text=result.text,
            latency=round(result.latency, 4),
            virtual_latency=round(took, 9),
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

    def _no_match(self, plan: Plan) -> None:
        situation = self.observation.situation()
        if self.on_candidate is not None:
            self.on_candidate(plan.reply, situation)
        self.record("candidate", reply=plan.reply, situation=situation)
        self._fall_back("reply matches no action")

    # -- off the loop: checks and verifications ----------------------------------------------

    def _off_loop(self, purpose: str, work: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """Run ``work`` off the loop (a worker thread on the wall clock; at once, taking no
        virtual time, on the virtual clock); ``then`` gets its result on the loop unless the
        runner moved on meanwhile (then the result is recorded as stale)."""
        epoch = self._epoch

        def done(result: Any, took: float) -> None:
            if self.finished:
                return
            if epoch != self._epoch:
                self.record("stale", purpose=purpose)
                return
            if isinstance(result, BaseException):
                message = str(result) if isinstance(result, OnboardError) else repr(result)
                self.record("error", source=purpose, message=message)
                result = Verdict(False, feedback=f"{purpose} failed: {message}")
            then(result)

        latency = self.work_latency() if self.work_latency is not None else 0.0
        self.clock.submit(work, done, latency=latency)

    def _check(self, steps: list[Step], then: Callable[[Verdict], None]) -> None:
        """Every check on ``steps`` against what is seen now (a fresh look when the runner
        has ``look``); ``then`` gets the first failed verdict, or an ok one. Without checks,
        ``then`` runs at once."""
        if not self.checks:
            then(Verdict(True))
            return
        latest, checks = self.observation, list(self.checks)
        look = self.look if self.check_looks else None

        def work() -> tuple[Observation, list[tuple[str, Verdict]]]:
            observation = look() if look is not None else latest
            verdicts = []
            for check in checks:
                verdict = check.check(steps, observation)
                verdicts.append((check.name, verdict))
                if not verdict.ok:
                    break
            return observation, verdicts

        def done(result: tuple[Observation, list[tuple[str, Verdict]]] | Verdict) -> None:
            if isinstance(result, Verdict):  # the check itself failed
                then(result)
                return
            seen, verdicts = result
            if look is not None:
                self.observe(seen)
            for name, verdict in verdicts:
                self.record("check", check=name, actions=[s.action for s in steps],
                            steps=[s.to_record() for s in steps], ok=verdict.ok,
                            feedback=verdict.feedback, score=verdict.score,
                            **({"unjudged": True} if verdict.unjudged else {}))  # fmt: skip
                if not verdict.ok:
                    self.outcome.refused[name] = self.outcome.refused.get(name, 0) + 1
                    then(verdict)
                    return
            then(Verdict(True))

        self._off_loop("check", work, done)

    # -- act -------------------------------------------------------------------------------

    def _act(self, steps: list[Step], phrase: str | None, rounds: int) -> None:
        current = self.skill.actions[self.current]
        if self._running is not None and not current.spec.interruptible:
            self._deferred = (steps, phrase, rounds)
            self.record("deferred", action=self.current, plan=[s.action for s in steps])
            return
        self._phrase = phrase
        self._queue = list(steps[1:])
        self._rounds = rounds
        self._begin(steps[0], "plan")

    def _fall_back(self, why: str) -> None:
        self._queue = []
        self._rounds = self.max_rounds  # the fallback ends the decision: nothing re-asks it
        self._fallbacks += 1
        self.outcome.fallbacks += 1
        self.record("fallback", action=self.skill.fallback, why=why)
        limit = self.skill.max_fallbacks
        if limit is not None and self._fallbacks > limit:
            ending = f"gave up after {limit} fallbacks: {why}"
            if self.current == self.skill.fallback:  # it has just made the robot safe
                self.stop(ending)
                return
            self._ending = ending  # once more, to make safe what moved since, then end
        instead = None
        if self.fallback_plan is not None and self._ending is None:
            instead = self.fallback_plan(list(self._history), self.observation)
        if instead:
            self.record("fallback_plan", steps=[s.to_record() for s in instead])
            self._queue = list(instead[1:])
            self._begin(instead[0], f"fallback: {why}")
            return
        self._begin(Step(self.skill.fallback), f"fallback: {why}")

    def _begin(self, step: Step, reason: str) -> None:
        if self.finished:
            return
        self._epoch += 1
        previous = self.current
        self._halt_command()
        self.events.disarm()
        name = step.action
        try:
            self.model.trigger(f"to {name}")
        except MachineError:
            self.record("error", source="machine", message=f"{previous} -> {name} not allowed")
            name = self.skill.fallback
            step = Step(name)
            self.model.trigger(f"to {name}")
        now = self.clock.now()
        self._step = step
        self.outcome.actions.append((now, name))
        self.record("transition", source=previous, dest=name, reason=reason,
                    **({"args": dict(step.args)} if step.args else {}))  # fmt: skip
        observation = self.observation
        self._action_start_observation = observation
        action = self.skill.actions[name]
        args = self.kind.command_args(action, step, observation)
        if name == self.skill.end:
            self.outcome.phrase = args["text"] = self._phrase or self.skill.default_phrase
            self.outcome.spoke_at, self.outcome.spoke_visible = now, observation.visible
            self.record("speech", text=args["text"])
        if self._timing is not None:  # the command is handed to the driver now
            before, received = self._timing
            self.decision_overhead.append((before, time.perf_counter() - received))
            self._timing = None
        try:
            self._running = self.driver.start(action.spec.command, args, self._command_done)
        except DriverError as exc:
            self.record("error", source="driver", message=str(exc))
            self.stop(f"driver failed: {exc}")
            return
        if action.spec.timeout is not None:
            self._timeout = self.clock.call_later(action.spec.timeout, self._command_timeout)
        self.events.arm(action, observation)

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
        if not self.verifiers or not self.skill.actions[name].spec.verify:
            self._completed()
            return
        step, before = self._step, self._action_start_observation or self.observation
        latest, look, verifiers = self.observation, self.look, list(self.verifiers)

        def work() -> tuple[Observation, list[tuple[str, Verdict]]]:
            after = look() if look is not None else latest
            verdicts = []
            for verifier in verifiers:
                verdict = verifier.verify(step, before, after)
                verdicts.append((verifier.name, verdict))
                if not verdict.ok:
                    break
            return after, verdicts

        def done(result: tuple[Observation, list[tuple[str, Verdict]]] | Verdict) -> None:
            if isinstance(result, Verdict):
                failed: Verdict | None = result
            else:
                after, verdicts = result
                if look is not None:
                    self.observe(after)
                failed = None
                for verifier_name, verdict in verdicts:
                    self.record("verify", verifier=verifier_name, action=name, ok=verdict.ok,
                                feedback=verdict.feedback, score=verdict.score)  # fmt: skip
                    if not verdict.ok:
                        failed = verdict
            if failed is not None:
                if self._deferred is not None:
                    self.record("dropped", plan=[s.action for s in self._deferred[0]],
                                why="verification failed")  # fmt: skip
                    self._deferred = None
                self._history.append(_attempt([step], failed))
                if self._verification_failed(name, failed):
                    return
            self._completed()

        self._off_loop("verify", work, done)

    def _completed(self) -> None:
        """The current action finished and passed its verification."""
        if self._ending is not None and self.current == self.skill.fallback:
            self.stop(self._ending)  # the robot is safe: the episode ends with its cause
            return
        ending = self.ends(self.observation) if self.ends is not None else None
        if ending is not None:
            if ending.ok:
                self._begin(Step(self.skill.end), ending.feedback or "the goal holds")
            else:
                self.stop(ending.feedback)
            return
        if self._deferred is not None:
            steps, phrase, rounds = self._deferred
            self._deferred = None
            self._act(steps, phrase, rounds)
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

    def _verification_failed(self, action: str, verdict: Verdict) -> bool:
        """Re-ask within the decision's rounds (its replans, when counted apart), else fall
        back; True when that took over."""
        self._queue = []
        fallback = action == self.skill.fallback
        if self.max_replans is None:
            replan, rounds = self._rounds < self.max_rounds, self._rounds + 1
        else:  # a replan starts the check rounds afresh
            replan, rounds = not fallback and not verdict.final and self._replan_left(), 0
        if replan:
            self.events.disarm()
            self._request_plan("verification failed", rounds)
            return True
        if not fallback and verdict.final:
            self._ending = verdict.feedback
            self._fall_back(verdict.feedback)
            return True
        if not fallback:
            self._fall_back(f"verification failed: {verdict.feedback}")
            return True
        self.record("rounds_spent", action=action, rounds=self._rounds)
        return False

    def _replan_left(self) -> bool:
        """With replans counted apart: spend one if one is left."""
        if self.max_replans is None or self._replans >= self.max_replans:
            return False
        self._replans += 1
        return True

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
        second = self.skill.questions
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


def _attempt(steps: Sequence[Step], verdict: Verdict) -> Attempt:
    proposal = ", then ".join(s.text() for s in steps)
    return Attempt(proposal, verdict.feedback or "refused", verdict.score, tuple(steps))


def _jsonable(value: object) -> object:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value
