"""``onboard code eval``: the seven code tasks on the twin, per method and model, judged from the
twin's truth; the rows Tables II-V are made of (runtime/evaluation/code_report.py).

An evaluation harness, never imported by the robot's loop. Each episode builds the robot as
``onboard code do`` does (the twin of the task's scene, the robot API, the bots over HTTP),
sets up the task's seeded variation, and runs one method:

- ReplanVLM with its corrections: ``full``, ``no-internal``, ``no-external``, ``no-both``;
- the baselines: ``progprompt`` (code from the scene as text, run once) and ``saycan`` (the
  API's next step chosen under constrained decoding, step by step).

Models: ``standin`` (the stand-in VLM in its own process at ``competence``, planting the
seed's errors as its ERRORS.md says), ``control`` (the stand-in with no planted errors),
``smollm2`` (the bundled local model, text-only: the scene as the detector's text, no image),
or an OpenAI-compatible URL. A disturbed episode (ReplanVLM in full, for Table V) has the
gripper drop what it first holds (runtime/evaluation/disturb.py), logged with the twin's time;
Table V scores the external corrections against those logs and the internal ones against the
stand-in's log of the errors it planted. Every episode is recorded (images by hash)
and replays.
"""

from __future__ import annotations

import contextlib
import json
import random
import re
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from onboard.base.errors import RecordingError
from onboard.config import RobotConfig
from onboard.drivers.twin.world import Twin
from onboard.evaluation.code_judges import judge
from onboard.evaluation.code_report import EpisodeRow
from onboard.evaluation.code_tasks import CodeTask, goal_image, set_up
from onboard.evaluation.code_trials import code_world
from onboard.evaluation.disturb import Disturbance, Event, disturbed
from onboard.grounding.embedder import Embedder
from onboard.llm.content import encode_image
from onboard.llm.types import Completes
from onboard.loop.recorder import Recorder
from onboard.loop.recording import images_dir
from onboard.perception.detector import Detector
from onboard.replan.api import RobotAPI
from onboard.replan.baselines import BaselineResult, run_progprompt, run_saycan
from onboard.replan.bots import Bots, HttpBot, open_bots
from onboard.replan.episode import (
    CodeOutcome,
    Corrections,
    RobotWorld,
    run_code_episode,
    twin_dry_runner,
)
from onboard.replan.perceive import perceive
from onboard.replan.record import code_header
from onboard.replan.robot import code_limits
from onboard.replan.sandbox import RunResult
from onboard.replan.scene_state import SceneState

__all__ = [
    "METHODS",
    "InnerBot",
    "InternalErrors",
    "Method",
    "internal_errors",
    "replay_baseline",
    "run_episode",
    "text_only_model",
]


@dataclass(frozen=True)
class Method:
    name: str
    label: str
    corrections: Corrections | None  # None: a baseline


METHODS: dict[str, Method] = {
    "full": Method("full", "ReplanVLM", Corrections()),
    "no_internal": Method("no_internal", "without internal", Corrections(internal=False)),
    "no_external": Method("no_external", "without external", Corrections(external=False)),
    "no_both": Method("no_both", "without both", Corrections(internal=False, external=False)),
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

    def __init__(self, api: RobotAPI, twin: Twin, task: CodeTask, robot: RobotConfig):
        super().__init__(api, code_limits(robot.code), task.scene, lambda: twin.time)
        self.twin, self.task, self.handover = twin, task, robot.code.handover
        self.verdicts: list[bool] = []

    def run(self, program: str) -> RunResult:
        result = super().run(program)
        self.verdicts.append(judge(self.twin, self.task, self.handover).passed)
        return result


@dataclass(frozen=True)
class InnerBot:
    """The Inner Bot served apart from the other two bots: ``robot``'s ``[code.inner]`` at
    ``url``, named ``label``; ``text_only``: a text model, sent no image (the plan and the
    code it checks are text)."""

    robot: RobotConfig
    url: str
    label: str
    text_only: bool = False


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
    planted: Callable[[], list[dict[str, Any]]] = list,
    disturb: bool = False,
    inner: InnerBot | None = None,
) -> EpisodeRow:
    """One episode of ``task`` by ``method`` with the bots at ``base_url``, judged;
    ``planted()`` reads the stand-in's log of planted errors (empty for a real model);
    ``disturb``: the gripper drops what it first holds; ``inner``: the Inner Bot served by
    another model (its robot, endpoint and name), so detection is not graded by the model
    that planted the errors."""
    rng = random.Random(f"{seed}/{task.name}/{trial}")
    if recording is not None:  # a recording is appended to: start a stale one afresh
        recording.unlink(missing_ok=True)
        shutil.rmtree(images_dir(recording), ignore_errors=True)
    text_only = text_only_model(model)
    episode = recording_name(task, method, model, trial).removesuffix(".jsonl")
    began = time.perf_counter()
    with code_world(robot, task.scene, embedder, detector) as (twin, api):
        set_up(twin, task, rng, solved=lambda t: judge(t, task, robot.code.handover).passed)
        api.home()
        world = _JudgedWorld(api, twin, task, robot)
        goals = [encode_image(goal_image(task))] if task.goal_scene else []
        notes = [GOAL_NOTE] if goals else []
        with Recorder(recording) as recorder:
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
                **({"inner": inner.label} if inner is not None else {}),
            }
            recorder.write("header", **code_header(robot, task_info, options))
            with (
                open_bots(
                    robot,
                    recorder,
                    base_url,
                    episode,
                    None if inner is None else (inner.robot, inner.url),
                ) as bots,
                _maybe_disturbed(twin, disturb) as events,
            ):
                inner_text = inner is not None and inner.text_only
                outcome = _run_method(
                    robot, world, task, method, bots, recorder, text_only, goals, notes, inner_text
                )
            if isinstance(outcome, BaselineResult):  # every episode ends with an end record
                recorder.write("end", done=outcome.done, ended=outcome.ended)
            records = list(recorder.records)
        passed = judge(twin, task, robot.code.handover).passed
    scored = internal_errors(records, planted())
    return _row(task, trial, method, model, outcome, passed, world.verdicts, events, scored,
                time.perf_counter() - began)  # fmt: skip


def _run_method(
    robot: RobotConfig,
    world: _JudgedWorld,
    task: CodeTask,
    method: Method,
    bots: Bots,
    recorder: Recorder,
    text_only: bool,
    goals: Sequence[bytes],
    notes: Sequence[str],
    inner_text_only: bool = False,
) -> CodeOutcome | BaselineResult:
    see = _seer(task)
    if method.name == "saycan":
        return run_saycan(world.api, task.instruction, _client(bots), recorder, see=see)
    if method.name == "progprompt":
        return run_progprompt(
            world.api, task.instruction, _client(bots), recorder, world.limits, see=see
        )
    assert method.corrections is not None
    corrections = replace(method.corrections, text_only=text_only, inner_text_only=inner_text_only)
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


def _client(bots: Bots) -> Completes:
    """The baselines ask the Decision Bot's endpoint."""
    decision = bots.decision
    assert isinstance(decision, HttpBot)
    return decision.client


@contextlib.contextmanager
def _maybe_disturbed(twin: Twin, disturb: bool) -> Iterator[list[Event]]:
    if not disturb:
        yield []
        return
    with disturbed(twin, DROP) as disturber:
        yield disturber.events


#: the corrections of the internal checks
INTERNAL = frozenset({"format", "refused", "match", "compare", "dry_run"})


@dataclass
class InternalErrors:
    """The stand-in's planted errors in one episode's proposals: ``planted``, of those
    ``detected`` (a check sent it back before it ran), ``by_runtime`` of those detected by
    the runtime's own checks (form, allow-list, dry run, comparison: not the Inner Bot,
    which the stand-in answers itself), and ``replaced`` (after it was sent back, the next
    program that ran carried no planted error). An error is *corrected* when it was replaced
    and the episode then passed (the row's ``internal_corrected``)."""

    planted: int = 0
    detected: int = 0
    by_runtime: int = 0
    replaced: int = 0


#: the internal checks that are the runtime's own, not a model's answer
RUNTIME_CHECKS = frozenset({"format", "refused", "compare", "dry_run"})


def internal_errors(
    records: Sequence[dict[str, Any]], log: Sequence[dict[str, Any]]
) -> InternalErrors:
    """The planted errors of one episode, from its records and the stand-in's log. Each
    request names its episode and how many times the episode sent it before (``episode``,
    ``repeat``: its record, and the body's ``user`` field the stand-in keys its draws by); a
    proposal (a Decision request of purpose ``plan``) is matched to the log entry of the same
    episode, hash and repeat, so another episode's requests (another method's identical first
    request) never count here, whatever order the methods ran in."""
    episode = next((r.get("episode") for r in records if r.get("kind") == "request"), None)
    planted = {
        (str(e["hash"]), int(e["n"])): bool(e.get("planted"))
        for e in log
        if e.get("bot") == "decision" and e.get("episode") == episode
    }
    sent: dict[str, int] = {}
    found = InternalErrors()
    open_ = False  # the last proposal carries a planted error not yet sent back
    pending = 0  # errors sent back, waiting for the next program that runs
    for record in records:
        kind = record.get("kind")
        if kind == "request" and record.get("bot") == "decision":
            digest = str(record.get("hash"))
            n = int(record.get("repeat", sent.get(digest, 0)))
            sent[digest] = n + 1
            if record.get("purpose") == "plan":
                open_ = planted.get((digest, n), False)
                found.planted += open_
        elif kind == "correction" and open_ and record.get("phase") in INTERNAL:
            found.detected += 1
            found.by_runtime += record.get("phase") in RUNTIME_CHECKS
            pending += 1
            open_ = False
        elif kind == "program":
            if not open_:
                found.replaced += pending
            pending, open_ = 0, False
    return found


def _row(
    task: CodeTask,
    trial: int,
    method: Method,
    model: str,
    outcome: CodeOutcome | BaselineResult,
    passed: bool,
    verdicts: list[bool],
    events: list[Event],
    internal: InternalErrors,
    seconds: float,
) -> EpisodeRow:
    broke = bool(events) and bool(verdicts) and not verdicts[0]
    if isinstance(outcome, BaselineResult):
        runs = (
            len(outcome.steps) if outcome.method == "saycan" else int(outcome.program is not None)
        )
        asks, extra = outcome.model_calls, False
    else:
        runs, asks = outcome.runs, outcome.asks
        extra = any(e.phase in ("goal", "extra") for e in outcome.events)  # the outer check
    return EpisodeRow(
        task=task.number,
        name=task.name,
        method=method.name,
        model=model,
        trial=trial,
        success=passed,
        runs=runs,
        asks=asks,
        internal_detected=internal.detected,
        internal_by_runtime=internal.by_runtime,
        internal_corrected=internal.replaced if passed else 0,
        planted=internal.planted,
        disturbed=bool(events),
        disturbance_broke=broke,
        external_detected=broke and extra,
        external_corrected=broke and extra and passed,
        seconds=round(seconds, 2),
    )


def planted_log(path: Path | None) -> Callable[[], list[dict[str, Any]]]:
    """A reader of the stand-in's planted-error log (one JSON object a line)."""

    def read() -> list[dict[str, Any]]:
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    return read


def recording_name(task: CodeTask, method: Method, model: str, trial: int) -> str:
    """``code-t<N>-<method>-<model>-<trial>.jsonl``, the model's name made file-safe."""
    safe = re.sub(r"[^A-Za-z0-9.]+", "_", model).strip("_")[:40] or "model"
    return f"code-t{task.number}-{method.name}-{safe}-{trial}.jsonl"


def replay_baseline(
    path: Path, embedder: Embedder | None = None, found: Detector | None = None
) -> tuple[list[str], list[str]]:
    """A baseline episode (SayCan, ProgPrompt) run again on the twin of its task and trial
    with the recorded replies: ``(recorded, replayed)`` steps and how each ended; a request
    that differs from the recorded one is added as a divergence."""
    from onboard.evaluation.code_tasks import load_code_tasks
    from onboard.evaluation.tidy_eval import detector
    from onboard.loop.recorder import read_recording
    from onboard.loop.recording import read_header
    from onboard.replan.baselines import recorded_replies

    records = list(read_recording(path, images=True))
    header = read_header(records, path)
    robot, options = header.robot_config(), header.options
    method = METHODS[str(options["method"])]
    number = (header.task or {}).get("number")
    task = next((t for t in load_code_tasks() if t.number == number), None)
    end = next((r for r in records if r["kind"] == "baseline_end"), None)
    if task is None or end is None or method.corrections is not None:
        raise RecordingError(f"{path}: not a complete baseline episode of a code task")
    replies = recorded_replies(records, method.name)
    rng = random.Random(f"{options['seed']}/{task.name}/{options['trial']}")
    embedder = embedder or Embedder(robot.embedder_dir)
    with code_world(robot, task.scene, embedder, found or detector()) as (twin, api):
        set_up(twin, task, rng, solved=lambda t: judge(t, task, robot.code.handover).passed)
        api.home()
        with Recorder(None) as scratch:
            if method.name == "saycan":
                result = run_saycan(api, task.instruction, replies, scratch, see=_seer(task))
            else:
                limits = code_limits(robot.code)
                result = run_progprompt(
                    api, task.instruction, replies, scratch, limits, see=_seer(task)
                )
    recorded = [*end["steps"], f"ended: {end['ended']}"]
    replayed = [*result.steps, f"ended: {result.ended}"]
    return recorded, replayed + [f"diverged: {d}" for d in replies.diverged]


def _seer(task: CodeTask) -> Callable[[RobotAPI], SceneState]:
    return lambda api: perceive(api, task.scene)
