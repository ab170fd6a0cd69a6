"""``onboard run``: one headless episode on the simulated robot, recorded."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from onboard.base.errors import UsageError
from onboard.base.terminal import shown
from onboard.base.urls import public_url
from onboard.cli.endpoint import llm_endpoint
from onboard.config import RobotConfig
from onboard.loop.paths import inside, safe_name
from onboard.loop.skill import Skill

__all__ = ["keep_quota", "run", "run_scene", "run_team"]


def run(robot: RobotConfig, args: argparse.Namespace) -> int:
    """One headless episode on the simulated robot, recorded."""
    from onboard.hri.scenario import find_scenario, load_scenario
    from onboard.hri.session import (
        EpisodeOptions,
        HttpAsk,
        episode_exit_code,
        judge,
        load_robot_skill,
        make_mapper,
        run_episode,
    )
    from onboard.llm.client import ChatClient
    from onboard.loop.exitcodes import TABLE
    from onboard.loop.recorder import Recorder

    skill = load_robot_skill(robot, args.skill)
    if skill.kind == "scene":
        return run_scene(robot, skill, args)
    if skill.kind == "code":
        from onboard.cli.run_code import run_code

        return run_code(robot, skill, args)
    if skill.kind == "team":
        return run_team(robot, args)
    if args.task or args.level or args.method:
        raise UsageError(f"{skill.name} is not a team skill: --task, --level and --method are "
                         "for team skills")  # fmt: skip
    if args.goal or args.scene:
        raise UsageError(f"{skill.name} is a person skill: --goal and --scene are for scene skills")
    scenario = load_scenario(find_scenario(args.scenario, robot.skills_dir / "scenarios"))
    mapper = make_mapper(robot, skill)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = robot.recordings_dir
    name = f"{safe_name(skill.name)}-{safe_name(scenario.name)}-{stamp}.jsonl"
    path = args.record or inside(folder, folder / name)
    keep_quota(robot, path)
    clock = args.clock or robot.clock
    with llm_endpoint(robot, args.llm) as (url, standin):
        constrained = robot.llm.decoding == "constrained" and not standin
        latency = robot.eval.standin_latency if standin and clock == "virtual" else None
        options = EpisodeOptions(
            clock, constrained=constrained, latency=latency, handle_signals=True
        )
        with ChatClient(robot.llm, base_url=url) as client, Recorder(path) as recorder:
            mode = f"constrained, {client.structured_output} form" if constrained else "free"
            print(f"onboard: {shown(skill.name)} on {shown(scenario.name)}, LLM "
                  f"{public_url(url)} ({mode}), {clock} clock")  # fmt: skip
            ask = HttpAsk(client)
            outcome = run_episode(robot, skill, scenario, ask, mapper, recorder, options)
    verdict = judge(outcome, scenario)
    sequence = " -> ".join(f"{a}@{t:.1f}s" for t, a in outcome.actions) or "none (nothing moved)"
    print(f"actions: {sequence}")
    print(f"said: {outcome.phrase!r}" if outcome.phrase else "said nothing")
    print(f"{'success' if verdict.success else 'failure'}: {verdict.reason}")
    print(f"recorded: {path}  (onboard replay {path})")
    code = episode_exit_code(outcome, verdict.success)
    print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def run_team(robot: RobotConfig, args: argparse.Namespace) -> int:
    """One episode of the team skill (``onboard run team --task sweep_floor``): the same as
    ``onboard task run TASK [--level L] [--method M]``."""
    from onboard.cli.main import _parser
    from onboard.cli.task import run_command

    if args.task is None:
        raise UsageError("a team skill runs a task: give --task (a name in tasks/ or a file)")
    if args.goal or args.scene or args.clock:
        raise UsageError("a team skill takes --task, --level and --method, not --goal, --scene "
                         "or --clock (it runs on the virtual clock)")  # fmt: skip
    argv = ["task", "run", args.task]
    for flag, value in (("--level", args.level), ("--method", args.method),
                        ("--llm", args.llm), ("--record", args.record)):  # fmt: skip
        if value is not None:
            argv += [flag, str(value)]
    return run_command(robot, _parser().parse_args(argv))


def run_scene(robot: RobotConfig, skill: Skill, args: argparse.Namespace) -> int:
    """One episode of a scene skill (``onboard run tidy --goal "..."``) with the arm and
    camera robot.toml names, recorded."""
    from onboard import bundled
    from onboard.hri.session import HttpAsk
    from onboard.llm.client import ChatClient
    from onboard.loop.exitcodes import TABLE, ExitCode
    from onboard.loop.recorder import Recorder
    from onboard.manip.session import SceneOptions, goal_skill, run_scene_episode, scene_hardware
    from onboard.perception.detector import Detector

    if not args.goal:
        raise UsageError(f'{skill.name} is a scene skill: say what to do with --goal "..."')
    if args.scene:
        robot = robot.with_arm_scene(args.scene)
    skill = goal_skill(skill, args.goal)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    folder = robot.recordings_dir
    path = args.record or inside(folder, folder / f"{safe_name(skill.name)}-{stamp}.jsonl")
    keep_quota(robot, path)
    clock = args.clock or robot.clock
    detector_dir = bundled.detector_dir()
    detector = Detector(detector_dir / "model.onnx", detector_dir / "classes.json")
    with llm_endpoint(robot, args.llm) as (url, standin):
        constrained = robot.llm.decoding == "constrained" and not standin
        latency = robot.eval.standin_latency if standin and clock == "virtual" else None
        options = SceneOptions(clock, constrained=constrained, latency=latency, handle_signals=True)
        with (
            ChatClient(robot.llm, base_url=url) as client,
            Recorder(path) as recorder,
            scene_hardware(robot, realtime=clock == "wall") as found,
        ):
            mode = f"constrained, {client.structured_output} form" if constrained else "free"
            print(f"onboard: {shown(skill.name)}: {args.goal!r}, LLM {public_url(url)} ({mode}), "
                  f"{clock} clock")  # fmt: skip
            asked = {"goal": args.goal, "scene": str(getattr(robot.drivers.arm, "scene", None))}
            outcome = run_scene_episode(
                robot, skill, HttpAsk(client), recorder, found, detector, options, task=asked
            )
    sequence = " -> ".join(f"{a}@{t:.1f}s" for t, a in outcome.actions) or "none (nothing moved)"
    print(f"actions: {sequence}")
    print(f"{'finished' if outcome.finished else 'not finished'}: {outcome.reason}")
    print(f"recorded: {path}")
    code = ExitCode.SUCCESS if outcome.finished else ExitCode.TASK_FAILED
    if outcome.signal is not None:
        from onboard.loop.exitcodes import for_signal

        code = for_signal(outcome.signal)
    print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def keep_quota(robot: RobotConfig, path: Path) -> None:
    """``recordings_max_mb``: a recording about to start in the recordings folder first makes
    room by deleting the oldest episodes, through the quota in force there (the service's,
    which measures each episode once and logs what went as JSON), else through a fresh one,
    and then one stderr line says which."""
    from onboard.loop.quota import RecordingsQuota, quota_in_force

    folder = robot.recordings_dir
    if path.resolve().parent != folder.resolve():
        return
    serving = quota_in_force(folder)
    if serving is not None:
        serving.make_room(path)
        return
    dropped = RecordingsQuota(folder, int(robot.recordings_max_mb * 1e6)).make_room(path)
    if dropped:
        names = ", ".join(p.name for p in dropped)
        print(f"onboard: recordings over {robot.recordings_max_mb:g} MB: deleted the "
              f"{len(dropped)} oldest: {names}", file=sys.stderr)  # fmt: skip
