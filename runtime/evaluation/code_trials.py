"""Run a program of generated code on the in-process twin, through the sandbox and the robot
API, as ``onboard code run`` does; and one seeded trial of a code task, judged from the
twin's truth (evaluation only: the robot never imports this module).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from onboard.config import RobotConfig
from onboard.drivers.twin.world import Twin
from onboard.evaluation.code_judges import judge
from onboard.evaluation.code_tasks import CodeTask, set_up, solution_path
from onboard.evaluation.disturb import Disturbance, Event, disturbed
from onboard.grounding.embedder import Embedder
from onboard.manip.session import scene_hardware
from onboard.perception.detector import Detector
from onboard.replan.api import RobotAPI, call
from onboard.replan.names import API_NAMES
from onboard.replan.robot import code_limits, robot_api
from onboard.replan.sandbox import Limits, RunResult, run

__all__ = ["CodeTrial", "code_world", "limits_of", "run_program", "run_trial"]


@dataclass(frozen=True)
class CodeTrial:
    task: int
    name: str
    trial: int
    passed: bool
    reason: str  # the judge's
    ended: str  # "ok", or the sandbox's reason word
    message: str  # the sandbox's message (an API error's line)
    calls: int
    output: str
    robot_seconds: float  # the twin's time the program took
    wall_seconds: float
    placed: dict[str, list[float]] = field(default_factory=dict)
    disturbances: list[Event] = field(default_factory=list)


def limits_of(robot: RobotConfig) -> Limits:
    return code_limits(robot.code)


@contextmanager
def code_world(
    robot: RobotConfig, scene: str, embedder: Embedder, detector: Detector
) -> Iterator[tuple[Twin, RobotAPI]]:
    """The in-process twin of ``scene`` with the robot API over its arm and camera."""
    with scene_hardware(robot.with_arm_scene(scene)) as found:
        if found.twin is None:
            raise ValueError("code trials need the in-process twin ([drivers.arm] kind = 'sim')")
        yield found.twin, robot_api(robot, found, embedder, detector)


def run_program(api: RobotAPI, source: str, limits: Limits) -> RunResult:
    """``source`` through the sandbox, its API calls dispatched to ``api``; a run that ends
    early stops the arm."""
    return run(source, API_NAMES, lambda n, a, k: call(api, n, a, k), limits, api.arm.stop)


def run_trial(
    robot: RobotConfig,
    task: CodeTask,
    trial: int,
    seed: int,
    embedder: Embedder,
    detector: Detector,
    source: str | None = None,
    disturbance: Disturbance | None = None,
) -> CodeTrial:
    """Trial ``trial`` of ``task``: its variation seeded by ``seed``, the task and the trial;
    ``source`` (default: the task's hand-written solution) run to its end, then judged."""
    rng = random.Random(f"{seed}/{task.name}/{trial}")
    program = source if source is not None else solution_path(task).read_text(encoding="utf-8")
    handover = robot.code.handover
    with code_world(robot, task.scene, embedder, detector) as (twin, api):
        placed = set_up(twin, task, rng, solved=lambda t: judge(t, task, handover).passed)
        api.home()
        began, wall = twin.time, time.perf_counter()
        if disturbance is None:
            result, events = run_program(api, program, limits_of(robot)), []
        else:
            with disturbed(twin, disturbance) as disturber:
                result = run_program(api, program, limits_of(robot))
            events = disturber.events
        took, robot_took = time.perf_counter() - wall, twin.time - began
        verdict = judge(twin, task, handover)
    return CodeTrial(
        task=task.number,
        name=task.name,
        trial=trial,
        passed=verdict.passed,
        reason=verdict.reason,
        ended=result.reason or "ok",
        message=result.message,
        calls=len(result.calls),
        output=result.output,
        robot_seconds=round(robot_took, 2),
        wall_seconds=round(took, 2),
        placed=placed,
        disturbances=events,
    )
