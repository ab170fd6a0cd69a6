"""``onboard code run FILE``: a generated program on the arm, through the sandbox and the robot
API; ``onboard code api``: the API's documentation, as prompts get it."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from onboard.base.errors import UsageError
from onboard.base.signals import on_stop_signals
from onboard.base.terminal import shown
from onboard.config import RobotConfig

__all__ = ["api_command", "run_command"]


def api_command() -> int:
    from onboard.replan.api import api_doc

    sys.stdout.write(api_doc())
    return 0


def run_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    """Check the program, build the robot, run it in the sandbox; 0 when it ran to its end,
    1 when it was refused or ended early, 128 + n after signal n (the arm stopped)."""
    from onboard.replan.allowlist import check
    from onboard.replan.names import API_NAMES

    path: Path = args.file
    source = _read(path)
    refusals = check(source, API_NAMES)
    for refusal in refusals:
        print(f"{shown(path)}:{refusal.line}: refused: {shown(refusal.reason)}")
    if refusals:
        return 1
    if args.scene:
        robot = robot.with_arm_scene(args.scene)
    from onboard.manip.session import hand_eye_of
    from onboard.replan.robot import NEEDS

    hand_eye_of(robot, NEEDS)  # before the confirmation and before anything moves
    kind = _arm_kind(robot)
    asks = robot.code.confirm_on(None if robot.drivers.arm is None else kind)
    if asks and not args.yes and not _confirmed(path, kind):
        print("onboard: not run (not confirmed)")
        return 1
    return _run(robot, path, source, getattr(args, "json", False))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"{path}: cannot be read ({reason})") from exc


def _confirmed(path: Path, kind: str) -> bool:
    print(f"onboard: run {path} on the {kind} arm? The arm will move. [y/N] ", end="", flush=True)
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _run(robot: RobotConfig, path: Path, source: str, as_json: bool) -> int:
    from onboard import bundled
    from onboard.grounding.embedder import shared_embedder
    from onboard.manip.session import scene_hardware
    from onboard.perception.detector import Detector
    from onboard.replan import api
    from onboard.replan.names import API_NAMES
    from onboard.replan.robot import code_limits
    from onboard.replan.robot import robot_api as build_api
    from onboard.replan.sandbox import CodeRun

    folder = bundled.detector_dir()
    detector = Detector(folder / "model.onnx", folder / "classes.json")
    embedder = shared_embedder(robot.embedder_dir)
    limits = code_limits(robot.code)
    with scene_hardware(robot) as found:
        assert found.arm is not None
        robot_api = build_api(robot, found, embedder, detector)
        robot_api.home()
        arm = found.arm
        sandbox = CodeRun(
            source,
            API_NAMES,
            lambda n, a, k: api.call(robot_api, n, a, k),
            limits,
            on_abort=arm.stop,
        )
        stopped: list[str] = []

        def stop(name: str) -> None:
            stopped.append(name)
            sandbox.abort("signal", f"{name} received")

        with on_stop_signals(stop):  # before the line a supervisor may answer with a signal
            print(f"onboard: running {path} on the {_arm_kind(robot)} arm", flush=True)
            result = sandbox.run()
    _report(result, as_json)
    if stopped:
        return 128 + signal.Signals[stopped[0]].value
    return 0 if result.ok else 1


def _arm_kind(robot: RobotConfig) -> str:
    arm = robot.drivers.arm
    return "?" if arm is None else arm.kind


def _report(result: object, as_json: bool) -> None:
    from onboard.replan.sandbox import RunResult

    assert isinstance(result, RunResult)
    if as_json:
        print(json.dumps(asdict(result)))
        return
    for name, args, kwargs in result.calls:
        parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
        print(f"call: {shown(name)}({shown(', '.join(parts))})")
    if result.output:
        print("output:")
        print(shown(result.output.rstrip("\n"), lines=True))
    how = "ran to its end" if result.ok else f"ended early ({result.reason}): {result.message}"
    print(f"{shown(how)}; {result.steps} steps, {len(result.calls)} API calls")
