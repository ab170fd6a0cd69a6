"""Replay a recorded scene episode offline: the LLM is answered from the recording.

The episode runs again on the virtual clock with the physics twin of the recorded scene, the
objects placed where the recording's task says they started (``setup``), and the recorded
skill, robot and models. Each request must equal the recorded one (scene text and images
included) and gets the recorded reply after the recorded latency. The replay passes when it
produces the same action sequence. An episode recorded on the virtual clock with the
in-process twin replays exactly; one recorded on hardware (or against ``onboard sim serve``)
replays against the twin of its scene, where a world that moved differently diverges and the
first differing request is named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from onboard import bundled
from onboard.base.errors import RecordingError, ReplayDivergence
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.camera.config import SimCameraConfig
from onboard.grounding.embedder import MODEL_FILE
from onboard.hri.replay import ReplayTiming, as_recording_error, read_episode
from onboard.loop.recorder import MemoryRecorder, with_images
from onboard.loop.recording import Header, check_models
from onboard.loop.skill import load_skill_text
from onboard.manip.commands import ARM_COMMANDS
from onboard.manip.playback import ScenePlayback
from onboard.manip.session import SceneOptions, goal_skill, run_scene_episode, scene_hardware
from onboard.perception.detector import Detector

__all__ = ["replay_scene", "replay_scene_recording"]


def replay_scene_recording(path: Path, scene: str | None = None) -> tuple[list[str], list[str]]:
    """(recorded action sequence, replayed action sequence) of a scene recording."""

    def run() -> tuple[list[str], list[str]]:
        records, header, end = read_episode(path)
        if header.skill_kind != "scene":
            raise RecordingError(f"{path}: a {header.skill_kind} recording, not a scene one")
        return replay_scene(path, header, records, end, scene)

    return as_recording_error(path, run)


def replay_scene(
    path: Path,
    header: Header,
    records: list[dict[str, Any]],
    end: dict[str, Any],
    scene: str | None = None,
) -> tuple[list[str], list[str]]:
    """(recorded action sequence, replayed action sequence); raises ReplayDivergence.

    A format 3 recording plays its own looks and arm completions back
    (runtime/manip/playback.py): nothing is simulated, so a run on the wall clock, on
    hardware or in a disturbed world replays as the robot saw it. ``scene`` (or a format 2
    recording) runs it again in a twin of that scene instead (the task's by default; a run
    recorded on hardware names none)."""
    task = header.task or {}
    play_back = scene is None and header.format >= 3
    scene = scene or task.get("scene")
    if not play_back and (not isinstance(scene, str) or not scene or scene == "None"):
        raise RecordingError(
            f"{path}: recorded on an arm that is not simulated, so its task names no scene: "
            "say which twin scene stands in for it (onboard replay REC --scene blocks)"
        )
    robot = header.robot_config()
    if not play_back:
        arm, camera = SimArmConfig(scene=Path(str(scene))), SimCameraConfig()
        drivers = robot.drivers.model_copy(update={"arm": arm, "camera": camera})
        robot = robot.model_copy(update={"drivers": drivers})
    folder = bundled.detector_dir()
    detector = Detector(folder / "model.onnx", folder / "classes.json")
    check_models(
        header, {"embedder": robot.embedder_dir / MODEL_FILE, "detector": detector.path}, path
    )
    skill = load_skill_text(header.skill.toml, f"{path} (skill {header.skill.name})",
                            commands={"scene": ARM_COMMANDS})  # fmt: skip
    goal = task.get("goal")
    if not isinstance(goal, str):
        raise RecordingError(f"{path}: header: the task names no goal")
    skill = goal_skill(skill, goal)
    records = list(with_images(records, path))
    options = header.options
    # played back, a wall-clock run's replies, checks and looks come when they came; run
    # again in a twin, the twin's time decides
    timing = ReplayTiming(header if play_back else _virtual(header), records, path)
    ask = timing.ask
    replayed = SceneOptions(
        clock="virtual",
        constrained=bool(options.get("constrained", False)),
        latency=ask.next_latency,
        limit=float(options.get("limit", 300.0)),
        look_every=float(options.get("look_every", 1.0)),
        start=timing.start,
    )
    if play_back:
        outcome = run_scene_episode(robot, skill, ask, MemoryRecorder(), None, detector,
                                    replayed, timing.attach, task,
                                    ScenePlayback(records, path))  # fmt: skip
    else:
        with scene_hardware(robot) as found:
            assert found.twin is not None
            # the set-up the recording says was done, in the same order, on a fresh twin of
            # the same scene: the physics starts where it started
            for name, position in (task.get("setup") or {}).items():
                x, y, z = (float(v) for v in position)
                found.twin.set_object_pose(str(name), (x, y, z))
            if task.get("setup"):
                found.twin.settle(float(task.get("settle", 0.5)))
            outcome = run_scene_episode(robot, skill, ask, MemoryRecorder(), found, detector,
                                        replayed, timing.attach, task)  # fmt: skip
    if ask.divergence:
        raise ReplayDivergence(ask.divergence)
    return [a for _, a in end["actions"]], [a for _, a in outcome.actions]


def _virtual(header: Header) -> Header:
    """The header as a virtual-clock run's: a twin re-run keeps its own time."""
    options = {**header.options, "clock": "virtual"}
    return header.model_copy(update={"options": options})
