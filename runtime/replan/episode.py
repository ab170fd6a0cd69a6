"""One ReplanVLM episode: the closed loop every skill runs (observe, propose, check, act,
verify), filled in the way seed 002 does it.

::

    observe (camera frame + perceived scene state)
      -> propose: the Decision Bot writes plan + code (the errors of earlier tries in its prompt)
      -> check (internal correction, at most ``cycles`` proposals):
           format (PLAN/CODE, the code parses) -> the sandbox's allow-list
           -> the Inner Bot: does the code match the plan?
           -> regenerate and compare: a second proposal for the same request; both dry-run on a
              twin built from the perceived scene; collisions, unreachable poses, failed
              grasps, SafeArm refusals, or two programs that disagree send advice back
      -> act: the accepted program runs in the sandbox on the robot
      -> verify (external correction, at most ``replans`` replans): the Extra Bot compares
         before and after (images and scene states); "not done" replans with its reason

Every failed check is a :class:`Correction` (phase, message, cycle, replan, robot time) and
its message goes to the Decision Bot's next prompt: advice, not a veto. After ``cycles``
proposals without agreement the task fails (the seed's rule). A program is a single long
action, so the loop is written out here rather than driven by the skill state machine's
stimuli; its rounds, records and replay follow the same rules (docs/generated-code.md).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from onboard.base.errors import LLMError
from onboard.config import RobotConfig
from onboard.llm.content import encode_image
from onboard.loop.recorder import Recorder
from onboard.replan import prompts
from onboard.replan.allowlist import check
from onboard.replan.api import RobotAPI, call, call_text
from onboard.replan.bots import Bots
from onboard.replan.names import API_NAMES
from onboard.replan.prompts import Proposal
from onboard.replan.sandbox import Limits, RunResult, run
from onboard.replan.scene_state import SceneState, changes_text

__all__ = [
    "CodeOutcome",
    "CodeWorld",
    "Correction",
    "Corrections",
    "DryRunner",
    "RobotWorld",
    "run_code_episode",
]

ImageForm = Literal["png", "jpeg"]
#: the earlier tries' messages a prompt carries at most (the newest)
KEEP_ERRORS = 6
#: seconds a dry run may take at most
DRY_WALL = 120.0


@dataclass(frozen=True)
class Corrections:
    """Which corrections run: ``internal`` (the Inner Bot and the dry run), ``external``
    (the Extra Bot and replanning); ``text_only``: the scene as text, no image."""

    internal: bool = True
    external: bool = True
    cycles: int = 5
    replans: int = 3
    text_only: bool = False


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


class CodeWorld(Protocol):
    """What the loop acts on and sees: the robot API's arm and camera."""

    fixtures: str

    def look(self) -> tuple[npt.NDArray[np.uint8] | bytes | None, SceneState]:
        """A fresh camera frame (RGB, or already encoded as a replay gives it; None when the
        camera gives none) and the perceived scene."""

    def run(self, program: str) -> RunResult:
        """Runs an accepted program on the robot; an early end stops the arm."""

    def now(self) -> float:
        """The robot's clock (the twin's time on the twin)."""


class DryRunner(Protocol):
    """Dry runs for the Inner Bot: ``(problems, difference)`` of two programs on a twin of
    ``scene``: the first program's physical problems, and how the two disagree (None: they
    agree)."""

    def __call__(
        self, scene: SceneState, first: str, second: str | None
    ) -> tuple[list[str], str | None]: ...


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
        from onboard.replan.perceive import perceive, scene_image

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


class _Episode:
    def __init__(
        self,
        world: CodeWorld,
        instruction: str,
        bots: Bots,
        corrections: Corrections,
        recorder: Recorder,
        dry: DryRunner | None,
        goal_images: Sequence[bytes],
        goal_notes: Sequence[str],
        image_format: ImageForm,
    ) -> None:
        self.world = world
        self.instruction = instruction
        self.bots = bots
        self.corrections = corrections
        self.recorder = recorder
        self.dry = dry
        self.goal_images = list(goal_images)
        self.goal_notes = list(goal_notes)
        self.image_format = image_format
        self.errors: list[str] = []
        self.outcome = CodeOutcome()
        self.replan = 0
        self.cycle = 0

    # -- observe --------------------------------------------------------------------------

    def look(self, purpose: str) -> tuple[bytes | None, SceneState]:
        frame, state = self.world.look()
        image = None  # text only: the scene goes as text, no image is made
        if not self.corrections.text_only and frame is not None:
            image = frame if isinstance(frame, bytes) else encode_image(frame, self.image_format)
        self.recorder.write(
            "observation",
            purpose=purpose,
            state=state.to_record(),
            text=state.text(),
            image=None if image is None else hashlib.sha256(image).hexdigest(),
        )
        return image, state

    # -- bookkeeping ----------------------------------------------------------------------

    def failed_check(self, phase: str, message: str) -> None:
        message = " ".join(message.split())
        event = Correction(phase, message, self.cycle, self.replan, self.world.now())
        self.outcome.events.append(event)
        self.outcome.decisions.append(f"{phase}: fail")
        self.errors.append(f"{phase}: {message}")
        self.recorder.write("correction", **event.to_record())

    def decided(self, what: str) -> None:
        self.outcome.decisions.append(what)

    # -- propose --------------------------------------------------------------------------

    def propose(self, image: bytes | None, state: SceneState) -> Proposal | None:
        """One Decision Bot reply, read; None (a correction recorded) when unusable."""
        proposal = self._ask_decision(image, state, "plan")
        if isinstance(proposal, tuple):
            self.failed_check(*proposal)
            return None
        return proposal

    def _ask_decision(
        self, image: bytes | None, state: SceneState, purpose: str
    ) -> Proposal | tuple[str, str]:
        """The reply read, or ``(phase, problem)``: no answer, or a reply of the wrong form."""
        images = [] if image is None else [image]
        notes = [] if image is None else ["the table now, seen by the robot's camera"]
        if not self.corrections.text_only:
            images += self.goal_images
            notes += self.goal_notes
        messages = prompts.decision_messages(
            self.instruction,
            images,
            notes,
            scene_text=state.text() if self.corrections.text_only else None,
            errors=self.errors[-KEEP_ERRORS:],
        )
        self.outcome.asks += 1
        try:
            text = self.bots.decision.ask(purpose, messages)
        except LLMError as exc:
            return "answer", f"the Decision Bot gave no answer: {exc}"
        read = prompts.read_proposal(text)
        return ("format", read) if isinstance(read, str) else read

    # -- check ----------------------------------------------------------------------------

    def inner_check(self, proposal: Proposal, image: bytes | None, state: SceneState) -> bool:
        """The seed's internal checks after the format: plan/code match, then regenerate and
        compare by dry runs. True: accepted."""
        images = [] if image is None else [image]
        try:
            text = self.bots.inner.ask(
                "match",
                prompts.match_messages(self.instruction, proposal, images),
                prompts.match_schema(),
            )
            matched, reason = prompts.read_verdict(text, "match")
        except (LLMError, ValueError) as exc:
            self.recorder.write("skipped", check="match", reason=str(exc))
            matched, reason = True, ""
        if not matched:
            self.failed_check("match", f"the code does not match the plan: {reason}")
            return False
        self.decided("match: ok")
        if self.dry is None:
            return True
        second = self._ask_decision(image, state, "regenerate")
        other = second.code if isinstance(second, Proposal) else None
        if other is not None and check(other, API_NAMES):
            other = None  # a second opinion the sandbox would not run compares with nothing
        if other is None:
            self.recorder.write(
                "skipped", check="compare", reason="the regenerated proposal is unusable"
            )
        began = time.perf_counter()
        problems, difference = self.dry(state, proposal.code, other)
        self.recorder.write(
            "dry_run",
            problems=problems,
            difference=difference,
            second=None if other is None else other,
            seconds=round(time.perf_counter() - began, 3),
        )
        if problems:
            self.failed_check("dry_run", "a dry run of the code found: " + "; ".join(problems))
            return False
        if difference is not None:
            self.failed_check(
                "compare",
                "two programs written for the same instruction disagree when dry-run: "
                + difference,
            )
            return False
        self.decided("compare: ok" if other is not None else "dry_run: ok")
        return True

    def accepted(self, image: bytes | None, state: SceneState) -> Proposal | None:
        """Proposals until one passes every check (at most ``cycles``); None: the task
        fails. Without internal correction the first readable, allowed proposal runs."""
        cycles = self.corrections.cycles if self.corrections.internal else 1
        for self.cycle in range(cycles):
            proposal = self.propose(image, state)
            if proposal is None:
                continue
            refusals = check(proposal.code, API_NAMES)
            if refusals:
                self.failed_check(
                    "refused",
                    "the sandbox refuses the code: "
                    + "; ".join(f"line {r.line}: {r.reason}" for r in refusals),
                )
                continue
            self.decided("format: ok")
            if not self.corrections.internal or self.inner_check(proposal, image, state):
                return proposal
        return None

    # -- act and verify -------------------------------------------------------------------

    def act(self, proposal: Proposal) -> str:
        self.outcome.runs += 1
        self.outcome.programs.append(proposal.code)
        self.recorder.write("program", **proposal.to_record(), replan=self.replan)
        began = time.perf_counter()
        result = self.world.run(proposal.code)
        ended = "ok" if result.ok else f"{result.reason}: {result.message}"
        self.recorder.write(
            "run",
            ended=ended,
            steps=result.steps,
            calls=[call_text(n, a, k) for n, a, k in result.calls],
            output=result.output,
            seconds=round(time.perf_counter() - began, 3),
        )
        self.decided(f"run: {'ok' if result.ok else result.reason}")
        return ended

    def verify(
        self,
        proposal: Proposal,
        ended: str,
        before: tuple[bytes | None, SceneState],
        after: tuple[bytes | None, SceneState],
    ) -> tuple[bool, str]:
        messages = prompts.extra_messages(
            self.instruction,
            proposal,
            before[1].text(),
            after[1].text(),
            changes_text(before[1], after[1]),
            ended,
            before[0],
            after[0],
            [] if self.corrections.text_only else self.goal_images,
            [] if self.corrections.text_only else self.goal_notes,
        )
        text = self.bots.extra.ask("verify", messages, prompts.extra_schema())
        return prompts.read_verdict(text, "done")

    def run(self) -> CodeOutcome:
        replans = self.corrections.replans if self.corrections.external else 0
        for self.replan in range(replans + 1):
            before = self.look("before")
            proposal = self.accepted(*before)
            if proposal is None:
                self.outcome.failed = (
                    f"no program passed the checks in {self.cycle + 1} proposal(s)"
                    if self.corrections.internal
                    else "the proposal could not run"
                )
                if self.corrections.internal:
                    return self._end()
                continue  # without internal correction a bad proposal is a failed try
            ended = self.act(proposal)
            if not self.corrections.external:
                self.outcome.done = ended == "ok"
                return self._end()
            after = self.look("after")
            try:
                done, reason = self.verify(proposal, ended, before, after)
            except (LLMError, ValueError) as exc:
                self.outcome.failed = f"the Extra Bot gave no verdict: {exc}"
                return self._end()
            if done:
                self.decided("extra: done")
                self.outcome.done, self.outcome.failed = True, None
                return self._end()
            if ended != "ok":
                reason = f"the program ended with {ended}; {reason}"
            self.failed_check("extra", f"after the run the task is not done: {reason}")
        self.outcome.failed = self.outcome.failed or f"not done after {replans} replan(s)"
        return self._end()

    def _end(self) -> CodeOutcome:
        o = self.outcome
        self.recorder.write(
            "end",
            done=o.done,
            failed=o.failed,
            runs=o.runs,
            asks=o.asks,
            decisions=o.decisions,
            corrections=[e.to_record() for e in o.events],
        )
        return o


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
) -> CodeOutcome:
    """One episode of ``instruction`` (see the module's docstring). ``dry`` runs the Inner
    Bot's dry runs (None: regenerate-and-compare is left out, as where the sim extra is
    missing); ``goal_images`` are pictures the instruction refers to. Records are stamped
    with the robot's clock."""
    recorder.use_clock(world.now)
    recorder.write(
        "start",
        instruction=instruction,
        corrections={
            "internal": corrections.internal,
            "external": corrections.external,
            "cycles": corrections.cycles,
            "replans": corrections.replans,
            "text_only": corrections.text_only,
            "dry_run": dry is not None,
        },
        goal_images=[hashlib.sha256(g).hexdigest() for g in goal_images],
        goal_notes=list(goal_notes),
        image_format=image_format,
    )
    episode = _Episode(
        world,
        instruction,
        bots,
        corrections,
        recorder,
        dry,
        goal_images,
        goal_notes,
        image_format,
    )
    return episode.run()
