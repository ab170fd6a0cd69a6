"""``onboard eval tidy``: every goal of skills/tasks/tidy.toml, N trials each, on the virtual
clock with the in-process physics twin, judged from the twin's truth (tidy_judge.py).

An evaluation harness, never imported by the robot's loop: it builds each episode as
``onboard run`` does (runtime/manip/session.py), with the task's scene set up first.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onboard import bundled
from onboard.config import RobotConfig
from onboard.evaluation.tidy_judge import SETTLE, TidyTask, judge, set_up
from onboard.loop.engine import Ask, SkillRunner
from onboard.loop.recorder import MemoryRecorder, Recorder
from onboard.loop.skill import Skill
from onboard.manip.session import SceneOptions, goal_skill, run_scene_episode, scene_hardware
from onboard.perception.detector import Detector

__all__ = ["TidyTrial", "run_tidy_trial"]


@dataclass(frozen=True)
class TidyTrial:
    task: str
    trial: int
    success: bool
    reason: str
    actions: list[str]
    finished: bool
    end_reason: str
    seconds: float  # episode clock
    replans: int  # re-asks after a failed check or verification
    fallbacks: int


def detector() -> Detector:
    folder = bundled.detector_dir()
    return Detector(folder / "model.onnx", folder / "classes.json")


def run_tidy_trial(
    robot: RobotConfig,
    skill: Skill,
    task: TidyTask,
    trial: int,
    ask: Ask,
    found_detector: Detector,
    options: SceneOptions,
    jitter: float,
    seed: int,
    record: Path | None = None,
    on_runner: Callable[[SkillRunner], None] | None = None,
) -> TidyTrial:
    """One episode of ``task``; its objects jittered by a generator seeded from ``seed``,
    the task and the trial."""
    rng = random.Random(f"{seed}/{task.name}/{trial}")
    episode_skill = goal_skill(skill, task.goal)
    recorder = Recorder(record) if record is not None else MemoryRecorder()
    with scene_hardware(robot.with_arm_scene(task.scene)) as found, recorder:
        assert found.twin is not None, "tidy evaluation needs the in-process twin (kind = sim)"
        placed = set_up(found.twin, task, rng, jitter)
        # what the set-up did, so a replay does the same: each block put at x, y, z (world
        # frame, metres), then every object let settle for `settle` seconds
        asked = {"goal": task.goal, "name": task.name, "scene": task.scene, "trial": trial,
                 "seed": seed, "jitter": jitter, "setup": placed, "settle": SETTLE}  # fmt: skip
        outcome = run_scene_episode(
            robot, episode_skill, ask, recorder, found, found_detector, options, on_runner, asked
        )
        verdict = judge(found.twin, task, skill)
    kinds = [r["kind"] for r in recorder.records]
    return TidyTrial(
        task=task.name,
        trial=trial,
        success=verdict.success,
        reason=verdict.reason,
        actions=[a for _, a in outcome.actions],
        finished=outcome.finished,
        end_reason=outcome.reason,
        seconds=outcome.actions[-1][0] if outcome.actions else 0.0,
        replans=kinds.count("reask"),
        fallbacks=kinds.count("fallback"),
    )
