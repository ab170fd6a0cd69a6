"""The manipulation loop's own cost, beside Engage's, in one run; and how fast a stop reaches
the arm.

    python bench/manipulation_loop.py [--episodes N]

Decision overhead is measured by the runner itself (``SkillRunner.decision_overhead``): from
the stimulus to the request leaving (prompt building: for tidy a fresh look, the scene text,
the schema) and from the reply's arrival to the driver command starting (parsing, mapping,
reference resolution, the check with its fresh look). The LLM is the stand-in over loopback
HTTP in both, so what is left is the runtime. Episodes run on the virtual clock.

Stop latency: tidy episodes on the wall clock; when the twin's arm first holds the block, a
thread asks the runner to stop (``clock.post``, as a signal handler does) and waits on the
simulated arm's stop latch (``SimArm.wait_stopped``): the time between is what a stop
request takes to reach ``Arm.stop()`` through the loop and SafeArm.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from _common import environment, fmt_ms, robot_and_skill, summary, write_results
from rich.console import Console
from rich.table import Table

from onboard import bundled
from onboard.config import RobotConfig
from onboard.drivers.arm.twin_arm import SimArm
from onboard.evaluation.tidy_eval import detector, run_tidy_trial
from onboard.evaluation.tidy_judge import load_tasks
from onboard.hri.evaluate import SEED_SCENARIOS
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, make_mapper, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.engine import SkillRunner
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill
from onboard.manip.perception import ScenePerception
from onboard.manip.session import SceneOptions, goal_skill, run_scene_episode, scene_hardware
from onboard.perception.pose import HandEye
from onboard.perception.scene_observer import SceneObserver
from onboard.testing.standin_server import StandInServer


def engage_overhead(episodes: int, url: str) -> list[tuple[float, float]]:
    robot, skill = robot_and_skill()
    mapper = make_mapper(robot, skill)
    folder = robot.skills_dir / "scenarios"
    found: list[tuple[float, float]] = []
    options = EpisodeOptions(constrained=True, latency=1.0, keep_candidates=False)
    with ChatClient(robot.llm, base_url=url) as client:
        for i in range(episodes):
            scenario = load_scenario(folder / f"{SEED_SCENARIOS[i % len(SEED_SCENARIOS)]}.toml")
            runners: list[SkillRunner] = []
            run_episode(robot, skill, scenario, HttpAsk(client), mapper, MemoryRecorder(),
                        options, on_runner=runners.append)  # fmt: skip
            found += runners[0].decision_overhead
    return found


def tidy_overhead(episodes: int, url: str) -> tuple[list[tuple[float, float]], int]:
    robot, skill = robot_and_skill("tidy")
    tasks, jitter = load_tasks(bundled.skills_dir() / "tasks" / "tidy.toml")
    found: list[tuple[float, float]] = []
    successes = 0
    options = SceneOptions("virtual", constrained=True, latency=1.0, limit=60.0)
    found_detector = detector()
    with ChatClient(robot.llm, base_url=url) as client:
        for i in range(episodes):
            runners: list[SkillRunner] = []
            trial = run_tidy_trial(robot, skill, tasks[i % len(tasks)], i, HttpAsk(client),
                                   found_detector, options, jitter, seed=0,
                                   on_runner=runners.append)  # fmt: skip
            successes += trial.success
            found += runners[0].decision_overhead
    return found, successes


def look_cost(looks: int) -> tuple[list[float], list[float]]:
    """(a fresh look: render + detect + locate, the detector alone), seconds each."""
    robot, _ = robot_and_skill("tidy")
    found_detector = detector()
    assert robot.hand_eye is not None
    observer = SceneObserver(HandEye.from_config(robot.hand_eye), sides="base")
    whole, detect = [], []
    with scene_hardware(robot.with_arm_scene("blocks")) as hardware:
        assert hardware.camera is not None
        perception = ScenePerception(hardware.camera, found_detector, observer, lambda: 0.0)
        frame = hardware.camera.read()
        for _ in range(looks):
            began = time.perf_counter()
            perception.look()
            whole.append(time.perf_counter() - began)
            began = time.perf_counter()
            found_detector.detect(frame.color)
            detect.append(time.perf_counter() - began)
    return whole, detect


def stop_latency(trials: int, url: str) -> list[float]:
    robot, skill = robot_and_skill("tidy")
    tasks, _ = load_tasks(bundled.skills_dir() / "tasks" / "tidy.toml")
    goal = next(t for t in tasks if t.name == "stack")
    found: list[float] = []
    with ChatClient(robot.llm, base_url=url) as client:
        for _ in range(trials):
            found += one_stop(robot, goal_skill(skill, goal.goal), goal.scene, HttpAsk(client))
    return found


def one_stop(robot: RobotConfig, skill: Skill, scene: str, ask: HttpAsk) -> list[float]:
    """A wall-clock episode stopped when the arm first holds the block: the seconds from the
    stop request to the simulated arm's stop latch (none if the arm never held it)."""
    measured: list[float] = []
    waiters: list[threading.Thread] = []
    runners: list[SkillRunner] = []
    with scene_hardware(robot.with_arm_scene(scene)) as hardware:
        assert hardware.twin is not None and hardware.arm is not None
        sim = hardware.arm.arm
        assert isinstance(sim, SimArm)

        def ask_and_wait(runner: SkillRunner) -> None:
            began = time.perf_counter()
            runner.clock.post(lambda: runner.stop("bench stop"))
            if sim.wait_stopped(5.0):
                measured.append(time.perf_counter() - began)

        def when_holding(snapshot: Any) -> None:
            if snapshot.held is None or waiters or not runners:
                return
            waiters.append(threading.Thread(target=ask_and_wait, args=(runners[0],)))
            waiters[0].start()

        options = SceneOptions("wall", constrained=True, limit=60.0)
        with hardware.twin.on_step(when_holding):
            run_scene_episode(robot, skill, ask, MemoryRecorder(), hardware, detector(),
                              options, on_runner=runners.append)  # fmt: skip
        for waiter in waiters:
            waiter.join(10.0)
    return measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--stops", type=int, default=10)
    args = parser.parse_args(argv)
    with StandInServer(seed=0, noise=0.0, format_noise=0.0) as server:
        engage = engage_overhead(args.episodes, server.base_url)
        tidy, successes = tidy_overhead(args.episodes, server.base_url)
        stops = stop_latency(args.stops, server.base_url)
    looks, detects = look_cost(20)
    rows = {
        "engage": {
            "stimulus_to_request": summary([a for a, _ in engage]),
            "reply_to_command": summary([b for _, b in engage]),
        },
        "tidy": {
            "stimulus_to_request": summary([a for a, _ in tidy]),
            "reply_to_command": summary([b for _, b in tidy]),
            "episodes_succeeded": [successes, args.episodes],
        },
        "stop_to_arm_stop": summary(stops),
        "fresh_look": summary(looks),
        "detector_alone": summary(detects),
    }
    table = Table(
        title="Decision overhead per decision (stand-in over loopback HTTP, virtual clock)"
    )
    for column in (
        "skill",
        "decisions",
        "stimulus -> request p50 / p99",
        "reply -> command p50 / p99",
    ):
        table.add_column(column)
    for name, pairs in (
        ("engage (person as text)", engage),
        ("tidy (camera, detector, arm)", tidy),
    ):
        key = name.split()[0]
        table.add_row(
            name,
            str(len(pairs)),
            fmt_ms(rows[key]["stimulus_to_request"], ("p50_ms", "p99_ms")),
            fmt_ms(rows[key]["reply_to_command"], ("p50_ms", "p99_ms")),
        )
    stop = Table(title="A stop request to Arm.stop() (wall clock, twin arm mid-motion)")
    stop.add_column("stops")
    stop.add_column("p50 / p99 / max")
    stop.add_row(str(len(stops)), fmt_ms(rows["stop_to_arm_stop"]))
    cost = Table(title="Where tidy's reply -> command goes: the check's fresh look")
    cost.add_column("")
    cost.add_column("p50 / p99 / max")
    cost.add_row("a fresh look (twin render 320x240 + detect + locate)", fmt_ms(rows["fresh_look"]))
    cost.add_row("the detector alone (ONNX, 1 thread)", fmt_ms(rows["detector_alone"]))
    console = Console()
    console.print(table)
    console.print(cost)
    console.print(stop)
    console.print(f"tidy episodes succeeded: {successes}/{args.episodes}")
    path = write_results("manipulation_loop", {"environment": environment(), **rows})
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
