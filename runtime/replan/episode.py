"""One ReplanVLM episode (seed 002) as a code skill on the loop every skill runs.

::

    observe (camera frame + perceived scene state)
      -> propose: the Decision Bot writes plan + code (the errors of earlier tries in its prompt)
      -> check (internal correction, at most ``cycles`` proposals between two runs):
           format -> the sandbox's allow-list -> the Inner Bot: does the code match the plan?
           -> regenerate and compare: a second proposal for the same request; both dry-run on
              a twin built from the perceived scene
      -> act: the accepted program runs in the sandbox on the robot
      -> verify (external correction, at most ``replans`` replans): the Extra Bot compares
         before and after; "not done" replans with its reason

The skill (skills/code.toml) runs on :class:`~onboard.loop.engine.SkillRunner`: the Decision
Bot is the kind's ``Ask`` (runtime/replan/kind.py), the corrections are its ``Check`` s and
``Verify`` s (runtime/replan/checks.py), the sandbox is its driver (runtime/replan/driver.py),
cycles are rounds and replans are replans. This module sets it up on a clock that keeps the
robot's time and reads the episode back as a :class:`CodeOutcome` (the tables' terms).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from string import Template
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from onboard import bundled
from onboard.base.errors import ArmError
from onboard.config import RobotConfig
from onboard.llm.content import encode_image
from onboard.llm.types import ChatResult, Message
from onboard.loop.clock import VirtualClock
from onboard.loop.engine import SkillRunner, Verify
from onboard.loop.recorder import Recorder
from onboard.loop.skill import Skill, load_skill
from onboard.replan.api import RobotAPI, call
from onboard.replan.bots import Ask, Bots
from onboard.replan.checks import (
    DECIDED,
    DryRunner,
    ExtraVerify,
    GoalVerify,
    RunEnded,
    code_checks,
)
from onboard.replan.driver import CodeDriver, CodeWorld
from onboard.replan.goal import CodeGoal
from onboard.replan.kind import RUN, CodeKind, CodeObservation
from onboard.replan.names import API_NAMES, CODE_COMMANDS
from onboard.replan.sandbox import Limits, RunResult, run
from onboard.replan.scene_state import SceneState

__all__ = [
    "CodeOutcome",
    "CodeWorld",
    "Correction",
    "Corrections",
    "DryRunner",
    "RobotWorld",
    "code_skill",
    "run_code_episode",
]

ImageForm = Literal["png", "jpeg"]
#: seconds a dry run may take at most
DRY_WALL = 120.0
#: the phases of the internal correction
INTERNAL = frozenset({"format", "refused", "match", "dry_run", "compare"})


@dataclass(frozen=True)
class Corrections:
    """Which corrections run: ``internal`` (the Inner Bot and the dry run), ``external``
    (the Extra Bot and replanning); ``goal``: with ``external``, the request is read as
    relations checked against perception after each run (runtime/replan/goal.py; off: the
    Extra Bot alone, as in the seed); ``text_only``: the scene as text, no image;
    ``inner_text_only``: the Inner Bot is sent no image (a text model serves it: it checks
    the plan against the code, which are text)."""

    internal: bool = True
    external: bool = True
    cycles: int = 5
    replans: int = 3
    text_only: bool = False
    goal: bool = True
    inner_text_only: bool = False


@dataclass(frozen=True)
class Correction:
    """One failed check, and its message for the Decision Bot."""

    phase: str
    message: str
    cycle: int
    replan: int
    t: float

    def to_record(self) -> dict[str, object]:
        return {
            "phase": self.phase,
            "message": self.message,
            "cycle": self.cycle,
            "replan": self.replan,
            "t": round(self.t, 3),
        }


@dataclass
class CodeOutcome:
    """How an episode ended: ``done`` is the robot's own verdict (the Extra Bot's last, or a
    run that ended without error when there is no external check); the task's judge, which
    alone reads the twin's truth, is the evaluation's business."""

    done: bool = False
    failed: str | None = None
    runs: int = 0
    asks: int = 0
    events: list[Correction] = field(default_factory=list)
    programs: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)


class RobotWorld:
    """A :class:`CodeWorld` over a :class:`RobotAPI` (the twin or the arm)."""

    def __init__(
        self, api: RobotAPI, limits: Limits, fixtures: str, now: Callable[[], float] = time.time
    ) -> None:
        self.api = api
        self.limits = limits
        self.fixtures = fixtures
        self._now = now
        self._stopped = False

    def look(self) -> tuple[npt.NDArray[np.uint8] | None, SceneState]:
        """A look; one that cannot tell everything (a frame too dark or too blurred to trust,
        a faint box, an unsure stack: runtime/perception/view.py, unknown.py; a box or a closed
        drawer while something seen before is missing) is taken once more before the look
        says so (the loop sees the second). With something missing or a box on the robot's
        own hand, the gripper empty and the arm free to move (not stopped after an early
        end), the arm goes to its home pose first: it may have hidden what is missing, or
        been taken for an object (as ``RobotAPI`` looks again for a name it lost)."""
        from onboard.replan.perceive import perceive, scene_image

        state = perceive(self.api, self.fixtures)
        lost = [n for n in self.api.eyes.tracker.tracks
                if state.named(n) is None and state.held != n]  # fmt: skip
        unsure = any(u.kind != "inside" for u in state.unknown) or (lost and state.unknown)
        arm_in_the_way = lost or any(u.kind == "hand" for u in state.unknown)
        if state.view is not None or unsure:
            if arm_in_the_way and state.held is None and not self._stopped:
                with contextlib.suppress(ArmError):  # else it looks from where it is
                    self.api.motions.home()
            state = perceive(self.api, self.fixtures)
        return scene_image(self.api), state

    def run(self, program: str) -> RunResult:
        """Runs an accepted program; an early end stops the arm. A program accepted after a
        replan is a deliberate decision to move again: it clears the stop the last early end
        latched (recorded by SafeArm)."""
        api = self.api
        if self._stopped:
            api.arm.resume()
        result = run(
            program, API_NAMES, lambda n, a, k: call(api, n, a, k), self.limits, api.arm.stop
        )
        self._stopped = not result.ok
        return result

    def halt(self) -> None:
        self.api.arm.stop()
        self._stopped = True

    def now(self) -> float:
        return self._now()


def twin_dry_runner(robot: RobotConfig, fixtures: str) -> DryRunner:
    """Dry runs on a twin of the perceived scene (runtime/replan/dryrun.py: the sim extra)."""
    from onboard.replan.dryrun import compare, dry_run

    # a dry-run twin runs faster than the robot; a program that waits on it longer than
    # DRY_WALL seconds is cut off (its own wall limit is the real run's)
    code = robot.code.model_copy(update={"wall_seconds": min(robot.code.wall_seconds, DRY_WALL)})
    robot = robot.model_copy(update={"code": code})

    def dry(scene: SceneState, first: str, second: str | None) -> tuple[list[str], str | None]:
        # only physical problems fail the check: a program that stops with an error in the
        # dry run may stop because the dry run lacks what the camera could not see (a block
        # hidden in a stack); that shows in the comparison when the other program goes on
        a = dry_run(robot, scene, first, fixtures)
        problems = list(a.problems)
        if second is None:
            return problems, None
        return problems, compare(a, dry_run(robot, scene, second, fixtures))

    return dry


def code_skill(path: str | None = None) -> Skill:
    """The code skill: the shipped skills/code.toml, or the file at ``path``."""
    found = Path(path) if path is not None else bundled.skills_dir() / "code.toml"
    return load_skill(found, (), {"code": CODE_COMMANDS})


class _Counted:
    """A bot whose asks are counted (the tables' "asks": the Decision Bot's requests)."""

    def __init__(self, bot: Ask) -> None:
        self.bot, self.name, self.calls = bot, bot.name, 0

    def ask(self, purpose: str, messages: Sequence[Message], schema: Any = None) -> str:
        if purpose != "goal":  # the goal reader is not the Decision Bot's planning
            self.calls += 1
        return self.bot.ask(purpose, messages, schema)


class _DecisionAsk:
    """The Decision Bot as the runner's ``Ask``: the bot records each exchange itself."""

    records_itself = True

    def __init__(self, bot: _Counted) -> None:
        self.bot = bot

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        began = time.perf_counter()
        text = self.bot.ask(purpose, messages, schema)
        return ChatResult(text=text, latency=time.perf_counter() - began, attempts=1)


class _Ledger:
    """Writes the runner's records and reads them as the tables' terms: each check passed or
    failed, each run, each Extra Bot verdict (``decisions``), and each failed check or
    verification as a :class:`Correction`."""

    def __init__(self, recorder: Recorder, now: Callable[[], float]) -> None:
        self.recorder, self.now = recorder, now
        self.decisions: list[str] = []
        self.events: list[Correction] = []
        self.cycle = 0
        self.replan = 0
        self.compared = False

    def __call__(self, kind: str, **fields: Any) -> None:
        self.recorder.write(kind, **fields)
        if kind == "dry_run":
            self.compared = fields.get("second") is not None
        elif kind == "check" and RUN in fields.get("actions", ()):
            self._verdict(str(fields["check"]), bool(fields["ok"]), str(fields["feedback"]))
            if not fields["ok"]:
                self.cycle += 1
        elif kind == "run":
            ended = str(fields["ended"])
            self.decisions.append(f"run: {'ok' if ended == 'ok' else ended.partition(':')[0]}")
            self.cycle, self.replan = 0, self.replan + 1
        elif kind == "verify" and fields.get("verifier") == "goal" and fields["action"] == RUN:
            if not fields["ok"]:
                self.decisions.append("goal: fail")
                self._correction("goal", str(fields["feedback"]))
            elif fields["feedback"]:  # a judged goal's pass says nothing: the Extra Bot decides
                self.decisions.append("goal: met")
        elif kind == "verify" and fields.get("verifier") == "extra" and fields["action"] == RUN:
            ok = bool(fields["ok"])
            if ok and fields["feedback"] == DECIDED:
                return
            self.decisions.append("extra: done" if ok else "extra: fail")
            if not ok:
                self._correction("extra", str(fields["feedback"]))
        elif kind == "fallback" and fields.get("why") == "no usable LLM reply":
            self.decisions.append("answer: fail")
            self._correction("answer", "answer: the Decision Bot gave no answer")

    def _verdict(self, name: str, ok: bool, feedback: str) -> None:
        if not ok:
            self.decisions.append(f"{name}: fail")
            self._correction(name, feedback)
            return
        # the seed's phases: "format" is the form and the allow-list; the dry run passes as
        # "compare" when a second program was compared with, else as "dry_run"
        said = {"refused": "format", "compare": "compare" if self.compared else "dry_run"}
        if name in said:
            self.decisions.append(f"{said[name]}: ok")
        elif name not in ("format", "dry_run"):
            self.decisions.append(f"{name}: ok")

    def _correction(self, phase: str, feedback: str) -> None:
        message = feedback.removeprefix(f"{phase}: ")
        event = Correction(phase, message, self.cycle, max(0, self.replan), self.now())
        self.events.append(event)
        self.recorder.write("correction", **event.to_record())


def run_code_episode(
    world: CodeWorld,
    instruction: str,
    bots: Bots,
    corrections: Corrections,
    recorder: Recorder,
    dry: DryRunner | None = None,
    goal_images: Sequence[bytes] = (),
    goal_notes: Sequence[str] = (),
    image_format: ImageForm = "png",
    skill: Skill | None = None,
) -> CodeOutcome:
    """One episode of ``instruction`` by the code skill (the shipped one unless ``skill``
    is given; see the module's docstring). ``corrections`` choose the checks and bound
    the rounds (the ablations of Table V); ``dry`` runs the Inner Bot's dry runs (None:
    regenerate-and-compare is left out, as where the sim extra is missing); ``goal_images``
    are pictures the instruction refers to. The loop's clock keeps the robot's time."""
    skill = skill or code_skill()
    skill = replace(
        skill, goal=Template(skill.goal).safe_substitute(goal=instruction), request=instruction
    )
    clock = VirtualClock(start=world.now())
    recorder.use_clock(clock.now)
    ledger = _Ledger(recorder, clock.now)
    text_only = corrections.text_only
    recorder.write(
        "setup",
        instruction=instruction,
        corrections={
            "internal": corrections.internal,
            "external": corrections.external,
            "cycles": corrections.cycles,
            "replans": corrections.replans,
            "text_only": text_only,
            "inner_text_only": corrections.inner_text_only,
            "dry_run": dry is not None,
            "goal": corrections.external and corrections.goal,
        },
        goal_images=[hashlib.sha256(g).hexdigest() for g in goal_images],
        goal_notes=list(goal_notes),
        image_format=image_format,
    )
    kind = CodeKind(skill.end, goal_images, goal_notes, text_only)
    decision = _Counted(bots.decision)
    driver = CodeDriver(world, clock, ledger)
    checks = code_checks(kind, decision, bots.inner, instruction, ledger, corrections.internal, dry,
                         inner_text_only=corrections.inner_text_only)  # fmt: skip
    goal = CodeGoal(instruction) if corrections.external and corrections.goal else None
    verifiers: list[Verify] = [RunEnded(driver)]
    if corrections.external:
        extra = ExtraVerify(bots.extra, instruction, driver, goal_images, goal_notes, text_only)
        verifiers = [extra]
        if goal is not None:
            verifiers = [GoalVerify(goal, driver), replace(extra, goal=goal)]

    def look(purpose: str = "after") -> CodeObservation:
        frame, state = world.look()
        image = None  # text only: the scene goes as text, no image is made
        if not text_only and frame is not None:
            image = frame if isinstance(frame, bytes) else encode_image(frame, image_format)
        return CodeObservation(world.now(), state, image, purpose)

    runner = SkillRunner(
        skill,
        clock,
        driver,
        _DecisionAsk(decision),
        kind,
        ledger,
        action_text=False,
        second_stage=False,
        latency=0.0,
        checks=checks,
        verifiers=verifiers,
        goal=goal,
        look=look,
        max_rounds=(corrections.cycles - 1) if corrections.internal else 0,
        max_replans=corrections.replans if corrections.external else 0,
        check_looks=False,
        on_finish=lambda _: clock.stop(),
    )
    runner.start(look("before"))
    clock.run(until=math.inf)
    if not runner.finished:
        runner.stop("the loop ran out of events")
    done = runner.outcome.finished
    outcome = CodeOutcome(
        done=done,
        failed=None if done else _failed(runner.outcome.reason, ledger, corrections),
        runs=driver.runs,
        asks=decision.calls,
        events=ledger.events,
        programs=driver.programs,
        decisions=ledger.decisions,
    )
    recorder.write("outcome", done=outcome.done, failed=outcome.failed, runs=outcome.runs,
                   asks=outcome.asks, decisions=outcome.decisions,
                   corrections=[e.to_record() for e in outcome.events])  # fmt: skip
    return outcome


def _failed(reason: str, ledger: _Ledger, corrections: Corrections) -> str:
    """Why the episode failed, in the seed's terms."""
    last = ledger.events[-1] if ledger.events else None
    if last is None:
        return reason
    if last.phase in INTERNAL and corrections.internal:
        return f"no program passed the checks in {last.cycle + 1} proposal(s)"
    if last.phase in INTERNAL:
        return "the proposal could not run"
    if last.phase == "extra" and last.message.startswith("the Extra Bot gave no verdict"):
        return last.message
    if last.phase in ("extra", "goal") and last.message.startswith("could not verify"):
        return last.message  # the outer check could not see: no replan was tried
    if last.phase in ("extra", "goal") and "could not verify" in last.message:
        return f"{last.message}; after {corrections.replans} replan(s)"  # the program failed
    if last.phase in ("extra", "goal"):
        return f"not done after {corrections.replans} replan(s)"
    if last.phase == "answer":
        return "the Decision Bot gave no answer"
    return reason
