"""``onboard run code --goal "..."``: one episode of a code skill (ReplanVLM) on the arm and
camera robot.toml names, recorded.

The bots' endpoint (``--llm``): ``standin`` (the stand-in VLM, which knows the seven code
tasks by their instructions and plants the seed's errors at competence 0.5), ``local`` (the
bundled SmolLM2: text only, the scene as the detector's text), or a VLM's URL; by default
robot.toml's ``[code]`` endpoints.
"""

from __future__ import annotations

import argparse
import time
from contextlib import ExitStack

from onboard.base.errors import UsageError
from onboard.base.urls import public_url
from onboard.config import RobotConfig
from onboard.loop.paths import inside, safe_name
from onboard.loop.skill import Skill

__all__ = ["run_code"]

#: the stand-in's competence for ``onboard run code --llm standin`` (as ``onboard code do``)
STANDIN_COMPETENCE = 0.5


def run_code(robot: RobotConfig, skill: Skill, args: argparse.Namespace) -> int:
    from onboard import bundled
    from onboard.cli.code_eval import vlm_endpoint
    from onboard.cli.run import keep_quota
    from onboard.grounding.embedder import shared_embedder
    from onboard.loop.exitcodes import TABLE, ExitCode
    from onboard.loop.recorder import Recorder
    from onboard.manip.session import hand_eye_of, scene_hardware
    from onboard.perception.detector import Detector
    from onboard.replan.bots import open_bots
    from onboard.replan.episode import Corrections, RobotWorld, run_code_episode, twin_dry_runner
    from onboard.replan.record import code_header
    from onboard.replan.robot import NEEDS, code_limits, robot_api

    if not args.goal:
        raise UsageError(f'{skill.name} is a code skill: say what to do with --goal "..."')
    if args.clock == "wall":
        raise UsageError(
            f"{skill.name} is a code skill: it runs on the robot's own clock (the twin's on "
            "the simulated arm); --clock wall is not supported"
        )
    if args.scene:
        robot = robot.with_arm_scene(args.scene)
    hand_eye_of(robot, NEEDS)
    scene = str(getattr(robot.drivers.arm, "scene", "") or "")
    folder = robot.recordings_dir
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.record or inside(folder, folder / f"{safe_name(skill.name)}-{stamp}.jsonl")
    keep_quota(robot, path)
    detector_dir = bundled.detector_dir()
    detector = Detector(detector_dir / "model.onnx", detector_dir / "classes.json")
    embedder = shared_embedder(robot.embedder_dir)
    choice = args.llm or (robot.llm.base_url if robot.llm.base_url == "local" else None)
    with ExitStack() as stack:
        url: str | None = None  # None: each bot at its robot.toml [code] endpoint
        model = robot.llm.model
        if choice is not None:
            robot, url, model = stack.enter_context(
                vlm_endpoint(robot, choice, STANDIN_COMPETENCE, None)
            )
        recorder = stack.enter_context(Recorder(path))
        found = stack.enter_context(scene_hardware(robot))
        api = robot_api(robot, found, embedder, detector)
        twin = found.twin
        now = (lambda: twin.time) if twin is not None else time.monotonic
        world = RobotWorld(api, code_limits(robot.code), scene, now)
        corrections = Corrections(
            cycles=skill.max_rounds + 1,
            replans=skill.max_replans or 0,
            text_only=model == "smollm2",  # the bundled model reads no images
        )
        options = {"method": "full", "model": model, "clock": "robot"}
        task = {"instruction": args.goal, "scene": scene}
        recorder.write("header", **code_header(robot, task, options, skill))
        bots = stack.enter_context(open_bots(robot, recorder, url))
        bots_at = public_url(url) if url else "of robot.toml [code]"
        print(f"onboard: {skill.name}: {args.goal!r}, bots {bots_at}, {scene or 'arm'} scene")
        api.home()
        outcome = run_code_episode(
            world,
            args.goal,
            bots,
            corrections,
            recorder,
            dry=twin_dry_runner(robot, scene) if twin is not None else None,
            image_format=robot.code.image_format,
            skill=skill,
        )
    print("decisions: " + (" -> ".join(outcome.decisions) or "none"))
    if outcome.done:
        print(f"done: verified after {outcome.runs} run(s), {outcome.asks} Decision request(s)")
    else:
        print(f"not done: {outcome.failed}")
    print(f"recorded: {path}  (onboard replay {path})")
    code = ExitCode.SUCCESS if outcome.done else ExitCode.TASK_FAILED
    print(f"exit {int(code)}: {TABLE[code][0]}")
    return code
