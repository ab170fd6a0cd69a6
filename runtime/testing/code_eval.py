"""``onboard code eval``: the seven code tasks on the twin, per method and model, judged from the
twin's truth; the rows Tables II-V are made of (runtime/testing/code_report.py).

An evaluation harness, never imported by the robot's loop. Each episode builds the robot as
``onboard code do`` does (the twin of the task's scene, the robot API, the bots over HTTP),
sets up the task's seeded variation, and runs one method:

- ReplanVLM with its corrections: ``full``, ``no-internal``, ``no-external``, ``no-both``;
- the baselines: ``progprompt`` (code from the scene as text, run once) and ``saycan`` (the
  API's next step chosen under constrained decoding, step by step).

Models: ``standin`` (the stand-in VLM in its own process at ``competence``, planting the
seed's errors as its ERRORS.md says), ``control`` (the stand-in with no planted errors),
``smollm2`` (the bundled local model, text-only: the scene as the detector's text, no image),
or an OpenAI-compatible URL. Odd trials are disturbed: the gripper drops what it first holds
(runtime/testing/disturb.py), logged with the twin's time; Table V scores the external
corrections against those logs and the internal ones against the stand-in's log of the errors
it planted. Every episode is recorded (format 2, images by hash) and replays.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from onboard.config import RobotConfig
from onboard.drivers.twin.world import Twin
from onboard.grounding.embedder import Embedder
from onboard.llm.content import encode_image
from onboard.loop.recorder import Recorder
from onboard.perception.detector import Detector
from onboard.replan.bots import open_bots
from onboard.replan.episode import (
    CodeOutcome,
    Corrections,
    RobotWorld,
    run_code_episode,
    twin_dry_runner,
)
from onboard.replan.record import code_header
from onboard.replan.robot import code_limits
from onboard.replan.sandbox import RunResult
from onboard.testing.code_judges import judge
from onboard.testing.code_report import EpisodeRow
from onboard.testing.code_tasks import CodeTask, goal_image, set_up
from onboard.testing.code_trials import code_world
from onboard.testing.disturb import Disturbance, Event, disturbed

__all__ = ["METHODS", "Method", "run_episode", "text_only_model"]


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    corrections: Corrections | None  # None: a baseline


METHODS: dict[str, Method] = {
    "full": Method("full", "ReplanVLM", Corrections()),
    "no-internal": Method("no-internal", "without internal", Corrections(internal=False)),
    "no-external": Method("no-external", "without external", Corrections(external=False)),
    "no-both": Method("no-both", "without both", Corrections(internal=False, external=False)),
    "progprompt": Method("progprompt", "ProgPrompt", None),
    "saycan": Method("saycan", "SayCan", None),
}

#: the disturbance of odd trials: the gripper lets go of what it first holds, as it lifts
DROP = Disturbance(kind="drop", on="held", after=0.3)
GOAL_NOTE = "the goal picture: the blocks as they must be stacked"


def text_only_model(model: str) -> bool:
    """The bundled SmolLM2 reads no images: its rows give it the scene as text."""
    return model == "smollm2"


class _JudgedWorld(RobotWorld):
    """The robot's world, plus the judge's verdict after each run (evaluation only: the
    loop never sees it)."""

    def __init__(self, inner: RobotWorld, twin: Twin, task: CodeTask, robot: RobotConfig):
        super().__init__(inner.api, inner.limits, inner.fixtures, lambda: twin.time)
        self.twin, self.task, self.handover = twin, task, robot.code.handover
        self.verdicts: list[bool] = []

    def run(self, program: str) -> RunResult:
        result = super().run(program)
        self.verdicts.append(judge(self.twin, self.task, self.handover).passed)
        return result


def run_episode(
    robot: RobotConfig,
    task: CodeTask,
    trial: int,
    seed: int,
    method: Method,
    model: str,
    base_url: str,
    embedder: Embedder,
    detector: Detector,
    recording: Path | None,
    planted: Callable[[], list[dict[str, object]]] = list,
) -> EpisodeRow:
    """One episode of ``task`` by ``method`` with the bots at ``base_url``, judged;
    ``planted()`` reads the stand-in's log of planted errors so far (empty for a real
    model)."""
    rng = random.Random(f"{seed}/{task.name}/{trial}")
    disturb = trial % 2 == 1
    text_only = text_only_model(model)
    began = time.perf_counter()
    already = len(planted())
    with code_world(robot, task.scene, embedder, detector) as (twin, api):
        set_up(twin, task, rng, solved=lambda t: judge(t, task, robot.code.handover).passed)
        api.home()
        world = _JudgedWorld(
            RobotWorld(api, code_limits(robot.code), task.scene), twin, task, robot
        )
        goals = [encode_image(goal_image(task))] if task.goal_scene else []
        notes = [GOAL_NOTE] if goals else []
        with _recorder(recording) as recorder:
            task_info = {
                "number": task.number,
                "name": task.name,
                "scene": task.scene,
                "instruction": task.instruction,
            }
            options = {
                "method": method.name,
                "model": model,
                "seed": seed,
                "trial": trial,
                "disturb": disturb,
            }
            recorder.write("header", **code_header(robot, task_info, options))
            with (
                open_bots(robot, recorder, base_url) as bots,
                _maybe_disturbed(twin, disturb) as events,
            ):
                outcome = _run_method(
                    robot, world, task, method, bots, recorder, text_only, goals, notes
                )
        passed = judge(twin, task, robot.code.handover)
    mine = planted()[already:]
    return _row(task, trial, method, model, outcome, passed.passed, world.verdicts, events,
                mine, time.perf_counter() - began)  # fmt: skip


def _run_method(
    robot: RobotConfig,
    world: _JudgedWorld,
    task: CodeTask,
    method: Method,
    bots: object,
    recorder: Recorder,
    text_only: bool,
    goals: Sequence[bytes],
    notes: Sequence[str],
) -> CodeOutcome:
    from onboard.replan.bots import Bots

    assert isinstance(bots, Bots)
    if method.corrections is None:
        from onboard.replan import baselines

        run_baseline = baselines.saycan if method.name == "saycan" else baselines.progprompt
        return run_baseline(world, task.instruction, bots, recorder)
    corrections = method.corrections
    if text_only:
        corrections = Corrections(
            corrections.internal, corrections.external, corrections.cycles,
            corrections.replans, text_only=True,
        )  # fmt: skip
    dry = twin_dry_runner(robot, task.scene) if corrections.internal else None
    return run_code_episode(
        world,
        task.instruction,
        bots,
        corrections,
        recorder,
        dry=dry,
        goal_images=goals,
        goal_notes=notes,
        image_format=robot.code.image_format,
    )


@contextlib.contextmanager
def _recorder(path: Path | None) -> Iterator[Recorder]:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    with Recorder(path) as recorder:
        yield recorder


@contextlib.contextmanager
def _maybe_disturbed(twin: Twin, disturb: bool) -> Iterator[list[Event]]:
    if not disturb:
        yield []
        return
    with disturbed(twin, DROP) as disturber:
        yield disturber.events


def _row(
    task: CodeTask,
    trial: int,
    method: Method,
    model: str,
    outcome: CodeOutcome,
    passed: bool,
    verdicts: list[bool],
    events: list[Event],
    planted: list[dict[str, object]],
    seconds: float,
) -> EpisodeRow:
    internal = {"format", "refused", "match", "compare", "dry_run"}
    caught = sum(1 for e in outcome.events if e.phase in internal)
    broke = bool(events) and bool(verdicts) and not verdicts[0]
    detected = broke and any(e.phase == "extra" for e in outcome.events)
    planted_errors = sum(len(p.get("planted", [])) > 0 for p in planted)  # type: ignore[arg-type]
    return EpisodeRow(
        task=task.number,
        name=task.name,
        method=method.name,
        model=model,
        trial=trial,
        success=passed,
        runs=outcome.runs,
        asks=outcome.asks,
        internal_detected=min(caught, planted_errors),
        internal_corrected=int(planted_errors > 0 and passed),
        planted=planted_errors,
        disturbed=bool(events),
        disturbance_broke=broke,
        external_detected=detected,
        external_corrected=detected and passed,
        seconds=round(seconds, 2),
    )


def planted_log(path: Path | None) -> Callable[[], list[dict[str, object]]]:
    """A reader of the stand-in's planted-error log (one JSON object a line)."""

    def read() -> list[dict[str, object]]:
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    return read


def recording_name(task: CodeTask, method: Method, model: str, trial: int) -> str:
    digest = hashlib.sha256(f"{task.number}/{method.name}/{model}/{trial}".encode()).hexdigest()
    return f"code-t{task.number}-{method.name}-{model}-{trial}-{digest[:6]}.jsonl"
