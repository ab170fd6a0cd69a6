"""The tidy skill through the one loop: the physics twin, its camera, the shipped detector and
embedder, the arm behind SafeArm, and the stand-in LLM over loopback HTTP (a documented rule
policy that sees only the request: runtime/testing/tidy_policy.py). Success is judged from the
twin's truth by runtime/evaluation/tidy_judge.py, which the robot's code never imports.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from onboard import bundled
from onboard.base.errors import SkillError, UsageError
from onboard.catalog import load_robot_skill, make_mapper
from onboard.cli.main import main
from onboard.config import RobotConfig
from onboard.drivers.factory import Hardware
from onboard.drivers.twin.camera import DEFAULT_LIGHT
from onboard.evaluation.tidy_eval import detector, run_tidy_trial
from onboard.evaluation.tidy_judge import TidyTask, judge, load_tasks
from onboard.grounding.embedder import Embedder
from onboard.hri.session import HttpAsk
from onboard.llm.client import ChatClient
from onboard.llm.types import ChatResult
from onboard.loop.clock import VirtualClock
from onboard.loop.engine import SkillRunner
from onboard.loop.kind import Step
from onboard.loop.recorder import MemoryRecorder, Recorder
from onboard.loop.skill import Skill, load_skill
from onboard.manip.arm_driver import ArmDriver
from onboard.manip.commands import ARM_COMMANDS
from onboard.manip.goal import SceneGoal
from onboard.manip.kind import SceneKind
from onboard.manip.observation import SceneObservation
from onboard.manip.perception import ScenePerception
from onboard.manip.replay import replay_scene_recording
from onboard.manip.resolve import ObjectResolver
from onboard.manip.session import (
    SceneOptions,
    goal_skill,
    keep_time,
    run_scene_episode,
    scene_hardware,
)
from onboard.perception.pose import HandEye
from onboard.perception.scene_observer import SceneObserver
from onboard.testing.standin_server import StandInServer

TASKS = bundled.skills_dir() / "tasks" / "tidy.toml"
#: the room's lights down to an eighth (the twin's camera renders under it)
DIM = replace(DEFAULT_LIGHT, ambient=0.08, diffuse=0.05, specular=0.0)


@pytest.fixture(scope="module")
def tidy(robot: RobotConfig) -> Skill:
    return load_robot_skill(robot, "tidy")


@pytest.fixture(scope="module")
def tasks() -> dict[str, TidyTask]:
    found, _ = load_tasks(TASKS)
    return {t.name: t for t in found}


@pytest.fixture(scope="module")
def server() -> Iterator[StandInServer]:
    with StandInServer(seed=0, noise=0.0, format_noise=0.0) as running:
        yield running


@pytest.fixture
def hardware(robot: RobotConfig) -> Iterator[Hardware]:
    with scene_hardware(robot.with_arm_scene("blocks")) as found:
        yield found


def look(robot: RobotConfig, found: Hardware) -> SceneObservation:
    assert found.camera is not None and robot.hand_eye is not None
    observer = SceneObserver(HandEye.from_config(robot.hand_eye), sides="base")
    return ScenePerception(found.camera, detector(), observer, lambda: 0.0).look()


# -- the skill file --------------------------------------------------------------------------


def test_tidy_is_a_scene_skill_with_regions_and_arm_commands(tidy: Skill) -> None:
    assert tidy.kind == "scene" and tidy.scene is not None
    assert set(tidy.scene.regions) == {"left side", "right side", "middle"}
    assert {a.spec.command for a in tidy.actions.values()} <= ARM_COMMANDS
    assert tidy.actions["pick"].spec.params == ["object"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('kind = "scene"', 'kind = "person"'), "a person skill needs"),
        (lambda t: t.replace('safe = "left side"', 'safe = "the shelf"'), "unknown region"),
        (lambda t: t.replace("$object", "$thing", 1), "unknown template field $thing"),
        (lambda t: re.sub(r"\[scene\].*?(?=\[mapping\])", "", t, flags=re.S), "[scene]"),
    ],
)
def test_a_broken_scene_skill_names_the_problem(
    tidy: Skill, tmp_path: Path, edit: Any, message: str
) -> None:
    path = tmp_path / "tidy.toml"
    path.write_text(edit(tidy.path.read_text(encoding="utf-8")), encoding="utf-8")
    with pytest.raises(SkillError) as caught:
        load_skill(path, commands={"scene": ARM_COMMANDS, "person": ARM_COMMANDS})
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


# -- references, schema, reading a reply -----------------------------------------------------


@pytest.mark.parametrize(
    ("phrase", "name"),
    [
        ("the red block", "red block"),
        ("red", "red block"),
        ("the blue one", "blue block"),
        ("the green cube", "green block"),
        ("the ruby cube", None),  # nothing near enough: refused, not guessed
        ("the lemon block", None),  # as near two blocks: refused
        ("the banana", None),
    ],
)
def test_object_references_resolve_through_the_embedder(
    embedder: Embedder, phrase: str, name: str | None
) -> None:
    names = ["red block", "green block", "blue block", "yellow block"]
    assert ObjectResolver(embedder).resolve(phrase, names).name == name


def test_the_schema_enums_are_the_actions_the_objects_in_view_and_the_regions(
    robot: RobotConfig, tidy: Skill, hardware: Hardware
) -> None:
    seen = look(robot, hardware)
    assert sorted(seen.names()) == ["blue block", "green block", "red block", "yellow block"]
    kind = SceneKind(tidy, make_mapper(robot, tidy), ObjectResolver(Embedder(robot.embedder_dir)))
    schema = kind.plan_schema(tidy, seen)
    assert schema is not None
    properties = schema["properties"]
    assert properties["action"]["enum"] == list(tidy.actions)
    assert sorted(properties["object"]["enum"]) == sorted([*seen.names(), "none"])
    assert set(properties["target"]["enum"]) == {*seen.names(), "left side", "right side",
                                                 "middle", "none"}  # fmt: skip
    assert schema["required"] == list(properties)


def test_a_free_text_reply_becomes_a_step_with_arguments_or_is_refused(
    robot: RobotConfig, tidy: Skill, hardware: Hardware
) -> None:
    seen = look(robot, hardware)
    kind = SceneKind(tidy, make_mapper(robot, tidy), ObjectResolver(Embedder(robot.embedder_dir)))
    plan = kind.read_plan('{"action": "grab", "object": "the red block", "target": "none"}', seen)
    assert plan.steps == [Step("pick", {"object": "red block"})]
    plan = kind.read_plan('{"action": "put it down", "target": "the right side"}', seen)
    assert plan.steps == [Step("place", {"target": "right side"})]
    refused = kind.read_plan('{"action": "pick up", "object": "the ruby cube"}', seen)
    assert refused.steps == [] and "not in view" in refused.record["refused"]
    missing = kind.read_plan('{"action": "pick up", "object": "none"}', seen)
    assert missing.steps == [] and "needs its object" in missing.record["refused"]


# -- episodes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["stack", "unstack", "region", "give", "push"])
def test_each_goal_succeeds_with_the_standin(
    robot: RobotConfig, tidy: Skill, tasks: dict[str, TidyTask], server: StandInServer, name: str
) -> None:
    options = SceneOptions("virtual", constrained=True, latency=1.0, limit=60.0)
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        trial = run_tidy_trial(robot, tidy, tasks[name], 0, HttpAsk(client), detector(),
                               options, jitter=0.01, seed=0)  # fmt: skip
    assert trial.success, trial
    assert trial.actions[-1] == "done" and trial.fallbacks == 0


class KnockOff(Recorder):
    """Records to ``path``; once the place of ``subject`` has passed its verification, the
    next plan request knocks ``subject`` off its support in the twin (while the plan is
    asked): a disturbance the recording holds only as the robot saw it."""

    def __init__(self, hardware: Hardware, subject: str, path: Path) -> None:
        super().__init__(path)
        self.hardware, self.subject = hardware, subject
        self.placed = False
        self.knocked_at: int | None = None

    def write(self, kind: str, **fields: Any) -> None:
        super().write(kind, **fields)
        if kind == "verify" and fields.get("action") == "place" and fields.get("ok"):
            self.placed = True
        if kind == "request" and self.placed and self.knocked_at is None:
            assert self.hardware.twin is not None
            self.hardware.twin.set_object_pose(self.subject, (0.32, 0.22, 0.02))
            self.knocked_at = len(self.records)


def test_a_block_knocked_off_while_the_next_step_is_planned_is_noticed_and_put_back(
    robot: RobotConfig, tidy: Skill, tasks: dict[str, TidyTask], server: StandInServer,
    hardware: Hardware, tmp_path: Path,
) -> None:  # fmt: skip
    task = tasks["stack"]
    options = SceneOptions("virtual", constrained=True, latency=1.0, limit=90.0)
    path = tmp_path / "knocked.jsonl"
    with (
        ChatClient(robot.llm, base_url=server.base_url) as client,
        KnockOff(hardware, "red block", path) as recorder,
    ):
        outcome = run_scene_episode(robot, goal_skill(tidy, task.goal), HttpAsk(client),
                                    recorder, hardware, detector(), options,
                                    task={"goal": task.goal})  # fmt: skip
    assert recorder.knocked_at is not None
    after = recorder.records[recorder.knocked_at :]
    noticed = [r for r in after if r["kind"] in ("check", "verify") and not r["ok"]]
    assert noticed and "no longer on the blue block" in noticed[0]["feedback"]
    reask = next(r for r in after if r["kind"] == "reask")
    assert "no longer on the blue block" in reask["history"][-1]["feedback"]
    actions = [a for _, a in outcome.actions]
    assert actions.count("place") == 2 and actions[-1] == "done" and outcome.finished
    assert hardware.twin is not None and judge(hardware.twin, task, tidy).success
    # the knock is in the recording as the robot saw it: the replay plays the looks back
    recorded, replayed = replay_scene_recording(path)
    assert recorded == replayed == actions


def test_a_stop_reaches_the_arm_at_once_and_never_opens_a_closed_gripper(
    robot: RobotConfig, tidy: Skill, tasks: dict[str, TidyTask], server: StandInServer,
    hardware: Hardware,
) -> None:  # fmt: skip
    twin = hardware.twin
    assert twin is not None and hardware.arm is not None
    runners: list[SkillRunner] = []
    asked = threading.Event()
    stopped_at: list[int] = []

    def stop_when_holding(snapshot: Any) -> None:
        if snapshot.held == "red block" and not asked.is_set():
            asked.set()
            stopped_at.append(snapshot.step)
            runners[0].clock.post(lambda: runners[0].stop("operator stop"))

    options = SceneOptions("wall", constrained=True, latency=None, limit=60.0)
    with ChatClient(robot.llm, base_url=server.base_url) as client, twin.on_step(stop_when_holding):
        outcome = run_scene_episode(robot, goal_skill(tidy, tasks["stack"].goal),
                                    HttpAsk(client), MemoryRecorder(), hardware, detector(),
                                    options, on_runner=runners.append)  # fmt: skip
    assert asked.is_set() and outcome.reason == "operator stop" and not outcome.finished
    state = hardware.arm.state()
    assert state.stopped and state.gripper_closed
    assert twin.held_object() == "red block"  # the fallback decides; a stop never drops it


def test_the_verifier_reads_camera_and_detector_only() -> None:
    code = (
        "import sys, onboard.manip.verify, onboard.manip.kind, onboard.manip.perception\n"
        "bad = [m for m in sys.modules if m.startswith('onboard.drivers.twin') or"
        " m.startswith('pybullet') or m.startswith('onboard.testing')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_twin_keeps_the_loops_virtual_time_and_a_motion_takes_its_twin_time(
    hardware: Hardware,
) -> None:
    twin = hardware.twin
    assert twin is not None and hardware.arm is not None
    clock = VirtualClock()
    driver = ArmDriver(hardware.arm, clock, elapsed=lambda: twin.time)
    driver.home()
    keep_time(clock, twin, True)
    began = twin.time
    clock.call_later(5.0, lambda: None)  # a 5 s model call: 5 s of physics pass
    clock.run(until=5.0)
    assert abs(twin.time - began - 5.0) < 0.01
    done = threading.Event()
    before = twin.time
    driver.start("arm.home", {}, done.set)
    moved = twin.time - before
    clock.run(until=5.0 + moved + 0.001)
    assert done.is_set() and abs(clock.now() - 5.0 - moved) < 0.01


def test_run_without_a_goal_or_with_a_goal_on_a_person_skill_is_a_usage_error(
    tidy: Skill, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", "tidy", "--llm", "standin"]) == 2
    assert "--goal" in capsys.readouterr().err
    with pytest.raises(UsageError):
        goal_skill(tidy, "  ")
    assert main(["run", "engage", "--goal", "stack them"]) == 2
    assert "scene skills" in capsys.readouterr().err


def test_the_same_run_drives_the_jaka_emulator_over_tcp_and_succeeds(
    robot: RobotConfig, tmp_path: Path, server: StandInServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``onboard run tidy`` with robot.toml naming the JAKA arm and the served camera of
    ``onboard sim serve``: the arm moves the blocks the camera sees; the judge reads the truth
    port."""
    from test_sim_serve_camera import serving

    from onboard.drivers.emulators.truth_client import TruthClient
    from onboard.drivers.twin.scene import PANDA_READY

    assert robot.hand_eye is not None
    with serving("blocks") as (served, _stop):
        (jaka_host, jaka_port), (camera_host, camera_port) = served.jaka, served.camera
        toml = f"""
name = "jaka-tidy"
skills = "{bundled.skills_dir()}"
recordings = "{tmp_path / "recordings"}"
[llm]
base_url = "{server.base_url}"
[drivers.arm]
kind = "jaka"
host = "{jaka_host}"
port = {jaka_port}
status_port = {served.status[1]}
grip_settle = 0.0
home_joints = {list(PANDA_READY)}
[drivers.camera]
kind = "sim-serve"
host = "{camera_host}"
port = {camera_port}
[hand_eye]
translation = {list(robot.hand_eye.translation)}
quaternion_xyzw = {list(robot.hand_eye.quaternion_xyzw or ())}
"""
        path = tmp_path / "robot.toml"
        path.write_text(toml, encoding="utf-8")
        goal = "put the red block on the blue block"
        record = tmp_path / "jaka.jsonl"
        args = ["--robot", str(path), "run", "tidy", "--goal", goal, "--clock", "virtual",
                "--record", str(record)]  # fmt: skip
        assert main(args) == 0, capsys.readouterr()
        out = capsys.readouterr().out
        assert "-> place@" in out and "-> done@" in out
        with TruthClient(*served.truth) as truth_port:
            now = truth_port.truth()
        red, blue = now.objects["red block"].base, now.objects["blue block"].base
        across = math.dist(red.position[:2], blue.position[:2])
        assert across < 0.03 and red.position[2] > blue.position[2] + 0.02
    # the hardware run replays offline from what it recorded, with no arm, camera or twin;
    # and again in a twin of the scene sim serve ran, when --scene names it
    assert main(["replay", str(record)]) == 0
    assert "replay reproduces the recorded action sequence" in capsys.readouterr().out
    # a fresh in-process twin re-simulates the world: where the served twin put a block can
    # differ by millimetres, which a prompt's centimetres may show (docs/recordings.md), so
    # it either reproduces or names the first request that differs, in one line
    code = main(["replay", str(record), "--scene", "blocks"])
    said = capsys.readouterr()
    if code == 0:
        assert "replay reproduces the recorded action sequence" in said.out
    else:
        assert code == 1 and "differs from the recording" in said.err
        assert len(said.err.strip().splitlines()) == 1


def _tidy_on_served(
    tmp_path: Path, served: Any, llm: str, arm: str, camera: list[float], quaternion: list[float]
) -> Any:
    """``onboard run tidy`` (stack red on blue) with robot.toml naming ``arm`` (its
    ``[drivers.arm]`` lines) and sim serve's camera seen from ``camera`` (hand-eye); the
    truth port's objects before and after, once the run said it placed and finished."""
    from onboard.drivers.emulators.truth_client import TruthClient

    host, port = served.camera
    path = tmp_path / "robot.toml"
    path.write_text(f"""
name = "served-tidy"
skills = "{bundled.skills_dir()}"
recordings = "{tmp_path / "recordings"}"
[llm]
base_url = "{llm}"
[drivers.arm]
{arm}
[drivers.camera]
kind = "sim-serve"
host = "{host}"
port = {port}
[hand_eye]
translation = {camera}
quaternion_xyzw = {quaternion}
""", encoding="utf-8")  # fmt: skip
    with TruthClient(*served.truth) as truth_port:
        before = truth_port.truth().objects
    goal = "put the red block on the blue block"
    args = ["--robot", str(path), "run", "tidy", "--goal", goal, "--clock", "virtual"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    assert code == 0, out.getvalue()
    assert "-> place@" in out.getvalue() and "-> done@" in out.getvalue()
    with TruthClient(*served.truth) as truth_port:
        after = truth_port.truth().objects
    red, blue = after["red block"].base, after["blue block"].base
    across = math.dist(red.position[:2], blue.position[:2])
    assert across < 0.03 and red.position[2] > blue.position[2] + 0.02
    return before, after


def test_the_same_run_drives_a_joint_space_gcode_arm_and_succeeds(
    robot: RobotConfig, tmp_path: Path, server: StandInServer
) -> None:
    """``onboard run tidy`` with robot.toml naming a joint-space G-code arm: sim serve's Marlin
    in joint space, its axes X Y Z A B C U the twin's Panda joints, onboard doing the
    kinematics from Franka's published DH table; the served camera sees what it moves."""
    from test_sim_serve_camera import serving

    from onboard.drivers.emulators.panda_joints import panda_config

    assert robot.hand_eye is not None
    with serving("blocks", gcode=True) as (served, _stop):
        assert served.marlin_joints is not None
        config = panda_config(served.marlin_joints)
        arm = {"kind": "gcode"} | config.model_dump(mode="json", exclude_defaults=True)
        joints = "".join(
            "[[drivers.arm.joints]]\n" + "".join(f"{k} = {v!r}\n" for k, v in j.items())
            for j in arm.pop("joints")
        )
        keys = "".join(f"{k} = {json.dumps(v)}\n" for k, v in arm.items())
        _tidy_on_served(tmp_path, served, server.base_url, f"{keys}grip_settle = 0.0\n{joints}",
                        list(robot.hand_eye.translation),
                        list(robot.hand_eye.quaternion_xyzw or ()))  # fmt: skip


def test_the_same_run_drives_the_so101_servo_bus_on_the_twin_and_succeeds(
    robot: RobotConfig, tmp_path: Path, server: StandInServer
) -> None:
    """``onboard run tidy`` with robot.toml naming the SO-101 on sim serve's servo bus: on the
    so101_blocks scene its servos move the twin's SO-101 (the goals onboard writes drive the
    twin's joints, the positions it reads back are the twin's), the served camera sees the
    blocks it moves, and the judge reads the truth port."""
    from test_sim_serve_camera import serving

    from onboard.drivers.twin.scene import find_scene, load_scene

    assert robot.hand_eye is not None
    # the blocks scene's camera, seen from the SO-101's base, which stands apart from the origin
    base = load_scene(find_scene("so101_blocks")).arm.position
    camera = [a - b for a, b in zip(robot.hand_eye.translation, base, strict=True)]
    with serving("so101_blocks") as (served, _stop):
        assert served.so101 is not None and served.jaka is None
        arm = f'kind = "so101"\nurl = "{served.so101}"\ntimeout = 1.0'
        before, after = _tidy_on_served(tmp_path, served, server.base_url, arm, camera,
                                        list(robot.hand_eye.quaternion_xyzw or ()))  # fmt: skip
        moved = math.dist(after["red block"].base.position, before["red block"].base.position)
        assert moved > 0.1  # the twin's arm moved it


def test_a_recorded_tidy_trial_and_a_recorded_run_replay(
    robot: RobotConfig, tidy: Skill, tasks: dict[str, TidyTask], server: StandInServer,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """An evaluation trial (its set-up in the header) and an ``onboard run tidy`` replay with
    nothing but the recording: the same action sequence."""
    from onboard.cli.replay import replay_recording as replay

    options = SceneOptions("virtual", constrained=True, latency=1.0, limit=60.0)
    trial_path = tmp_path / "push.jsonl"
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        trial = run_tidy_trial(robot, tidy, tasks["push"], 3, HttpAsk(client), detector(),
                               options, jitter=0.01, seed=5, record=trial_path)  # fmt: skip
    recorded, replayed = replay(trial_path)
    assert recorded == replayed == trial.actions

    run_path = tmp_path / "run.jsonl"
    goal = "hand me the blue block"
    args = ["run", "tidy", "--goal", goal, "--llm", "standin", "--clock", "virtual",
            "--record", str(run_path)]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert main(["replay", str(run_path)]) == 0
    assert "replay reproduces the recorded action sequence" in capsys.readouterr().out


def test_with_images_each_plan_request_carries_the_frame_stored_once_by_hash(
    robot: RobotConfig, tidy: Skill, tasks: dict[str, TidyTask], server: StandInServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    """``[prompt] images = true``: the camera frame goes with each plan request as an OpenAI
    ``image_url`` part, through the client and the stand-in; the recording stores each image
    once beside it, by hash; the replay restores and compares them."""
    from onboard.cli.replay import replay_recording as replay

    path = tmp_path / "tidy.toml"
    path.write_text(tidy.path.read_text(encoding="utf-8").replace(
        "images = false", "images = true"), encoding="utf-8")  # fmt: skip
    seeing = load_skill(path, commands={"scene": ARM_COMMANDS})
    assert seeing.prompt.images
    record = tmp_path / "stack.jsonl"
    options = SceneOptions("virtual", constrained=True, latency=1.0, limit=60.0)
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        trial = run_tidy_trial(robot, seeing, tasks["stack"], 0, HttpAsk(client), detector(),
                               options, jitter=0.01, seed=0, record=record)  # fmt: skip
    assert trial.success
    lines = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    requests = [r for r in lines if r["kind"] == "request" and r["purpose"] == "plan"]
    parts = [p for r in requests for p in r["messages"][-1]["content"] if isinstance(p, dict)]
    images = [p["image_url"]["url"] for p in parts if p.get("type") == "image_url"]
    assert len(images) == len(requests) and all(u.startswith("sha256:") for u in images)
    stored = list((tmp_path / "stack.images").iterdir())
    assert stored and {f.stem for f in stored} == {u.removeprefix("sha256:") for u in images}
    assert all(f.read_bytes().startswith(b"\x89PNG") for f in stored)
    recorded, replayed = replay(record)
    assert recorded == replayed


def test_without_hand_eye_a_scene_run_is_one_line_before_anything_moves(
    robot: RobotConfig, tidy: Skill, hardware: Hardware, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from onboard.base.errors import ConfigError

    blind = robot.model_copy(update={"hand_eye": None})
    assert hardware.twin is not None
    joints = hardware.twin.joints()
    with pytest.raises(ConfigError) as caught:
        run_scene_episode(blind, goal_skill(tidy, "stack them"), lambda *_: None,  # type: ignore[arg-type]
                          MemoryRecorder(), hardware, detector())  # fmt: skip
    assert "hand_eye" in str(caught.value) and "onboard calibrate --write" in str(caught.value)
    assert hardware.twin.joints() == joints  # the arm never moved
    # onboard check says what a scene skill still needs, without failing the robot
    path = tmp_path / "robot.toml"
    text = (Path(__file__).resolve().parent.parent / "robot.toml").read_text(encoding="utf-8")
    path.write_text(text.split("[hand_eye]")[0].replace(
        'skills = "skills"', f'skills = "{bundled.skills_dir()}"'), encoding="utf-8")  # fmt: skip
    assert main(["--robot", str(path), "check"]) == 0
    assert (
        "tidy is a scene skill: to run it, robot.toml needs [hand_eye]" in capsys.readouterr().out
    )


# -- the goal: verified, or a quick failure with its cause ------------------------------------


def _episode(robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware,
             goal: str, ask: Any = None) -> tuple[Any, MemoryRecorder]:  # fmt: skip
    recorder = MemoryRecorder()
    options = SceneOptions("virtual", constrained=True, latency=1.0, limit=120.0)
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        outcome = run_scene_episode(robot, goal_skill(tidy, goal), ask or HttpAsk(client),
                                    recorder, hardware, detector(), options)  # fmt: skip
    return outcome, recorder


@pytest.mark.parametrize(
    ("goal", "cause"),
    [
        ("hand me the apple", "the apple is not in view (in view: blue block, green block"),
        ("put the red block on the purple block", "the purple block is no object the robot knows"),
    ],
)
def test_a_goal_naming_what_is_not_there_fails_at_once_naming_it_and_what_is_in_view(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware, goal: str,
    cause: str,
) -> None:  # fmt: skip
    outcome, recorder = _episode(robot, tidy, server, hardware, goal)
    assert not outcome.finished and outcome.reason.startswith(cause)
    assert outcome.actions == []  # the goal is asked first: nothing moved
    assert not [r for r in recorder.records if r["kind"] == "command"]
    assert recorder.records[-1]["t"] < 30.0  # of the episode's clock (it was the time limit)


def test_a_goal_that_already_holds_ends_in_success_with_no_motion(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware
) -> None:
    outcome, _ = _episode(robot, tidy, server, hardware, "take the red block off the blue block")
    assert outcome.finished and [a for _, a in outcome.actions] == ["look", "done"]
    assert outcome.actions[-1][0] <= 1.0  # when the goal's reply came


def test_a_done_the_camera_does_not_confirm_is_asked_again_then_fails_with_what_is_missing(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware
) -> None:
    """A model that says "done" at once: the goal (understood from the stand-in's real HTTP
    reply) is checked against a fresh look; the rounds are spent, the episode fails."""
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        http = HttpAsk(client)

        def says_done(purpose: str, messages: Any, schema: Any) -> ChatResult:
            if purpose == "goal":
                return http(purpose, messages, schema)
            done = '{"action": "done", "object": "none", "target": "none"}'
            return ChatResult(text=done, latency=0.0, attempts=1)

        outcome, recorder = _episode(robot, tidy, server, hardware,
                                     "put the red block on the blue block", says_done)  # fmt: skip
    why = "goal not verified: the red block on the blue block"
    assert not outcome.finished and outcome.reason == why
    refused = [r for r in recorder.records if r["kind"] == "check" and r["check"] == "goal"]
    assert len(refused) == tidy.max_rounds + 1 and not any(r["ok"] for r in refused)
    assert [a for _, a in outcome.actions] == ["look", "recover"]  # made safe, then ended


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (
            {
                "mentions": ["the red block"],
                "relations": [{"relation": "on", "object": "red block", "target": "blue block"}],
            },
            "the request does not name the blue block",
        ),
        (
            {
                "mentions": ["red block", "blue block", "green block"],
                "relations": [{"relation": "on", "object": "red block", "target": "blue block"}],
            },
            "'green block' is not words of the request",
        ),
        (
            {
                "mentions": ["red block", "blue block"],
                "relations": [{"relation": "given", "object": "red block", "target": "none"}],
            },
            "no word of the request asks for given",
        ),
        ({"mentions": [], "relations": []}, "it asks for no arrangement"),
    ],
)
def test_a_translation_the_request_does_not_support_is_not_understood(
    robot: RobotConfig, tidy: Skill, hardware: Hardware, reply: dict[str, Any], why: str
) -> None:
    seen = look(robot, hardware)
    resolver = ObjectResolver(make_mapper(robot, tidy).embedder)
    goal = SceneGoal(tidy, "put the red block on the blue block", resolver)
    verdict = goal.read(json.dumps(reply), seen)
    assert not verdict.ok and why in verdict.feedback
    good = {"mentions": ["red block", "the blue block"], "relations": [
        {"relation": "on", "object": "red block", "target": "blue block"}]}  # fmt: skip
    assert goal.read(json.dumps(good), seen).ok
    assert goal.met(seen).feedback == "not yet: the red block on the blue block"
    both = SceneGoal(tidy, "put the red block on the blue block and the green block in the middle",
                     resolver)  # fmt: skip
    partly = {"mentions": ["red block", "blue block", "green block", "middle"], "relations": [
        {"relation": "on", "object": "red block", "target": "blue block"}]}  # fmt: skip
    assert "nothing is asked of green block, middle" in both.read(json.dumps(partly), seen).feedback


def test_a_block_hidden_under_another_may_be_named_and_a_raised_block_is_not_off(
    robot: RobotConfig, tidy: Skill, hardware: Hardware
) -> None:
    """The blue block under the red one, as the camera may miss it: a kind the detector knows
    stands for a mention while something in view rests raised; "off" needs the red block
    resting on the table, so it does not hold at the first look."""
    assert hardware.twin is not None
    hardware.twin.set_object_pose("red block", (0.45, -0.1, 0.06))
    hardware.twin.settle(0.5)
    seen = look(robot, hardware)
    objects = tuple(o for o in seen.scene.objects if o.name != "blue block")
    hidden = replace(seen, scene=replace(seen.scene, objects=objects))
    resolver = ObjectResolver(make_mapper(robot, tidy).embedder)
    request = "take the red block off the blue block"
    goal = SceneGoal(tidy, request, resolver, known=detector().classes)
    off = {"mentions": ["red block", "blue block"], "relations": [
        {"relation": "off", "object": "red block", "target": "blue block"}]}  # fmt: skip
    assert goal.read(json.dumps(off), hidden).ok
    assert not goal.met(hidden).ok
    flat = SceneGoal(tidy, request, resolver, known=detector().classes)
    table = replace(seen, scene=replace(seen.scene, objects=tuple(
        o for o in seen.scene.objects if o.name not in ("blue block", "red block"))))  # fmt: skip
    verdict = flat.read(json.dumps(off), table)
    assert not verdict.ok and verdict.feedback.startswith("the red block is not in view")
    binned = SceneGoal(tidy, "put the red block in the bin", resolver, known=detector().classes)
    bin_reply = binned.read(json.dumps({"mentions": ["the bin"], "relations": []}), seen)
    assert "the bin is no object the robot knows and no region" in bin_reply.feedback


def test_in_a_region_means_on_the_table_there_not_stacked_on_a_block_inside_it(
    robot: RobotConfig, tidy: Skill, hardware: Hardware
) -> None:
    assert hardware.twin is not None
    hardware.twin.set_object_pose("blue block", (0.5, 0.0, 0.02))
    hardware.twin.set_object_pose("red block", (0.5, 0.0, 0.06))
    hardware.twin.settle(0.5)
    seen = look(robot, hardware)
    resolver = ObjectResolver(make_mapper(robot, tidy).embedder)
    for name, met in (("red block", False), ("blue block", True)):
        goal = SceneGoal(tidy, f"put the {name} in the middle", resolver)
        reply = {"mentions": [name, "middle"], "relations": [
            {"relation": "in", "object": name, "target": "middle"}]}  # fmt: skip
        assert goal.read(json.dumps(reply), seen).ok
        assert goal.met(seen).ok is met


def test_fallbacks_are_counted_per_goal_so_a_pick_between_them_does_not_reset_the_bound(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware
) -> None:
    """A model that picks the red block, then asks to pick again while holding it (refused
    every round): each fallback puts the block down, the next pick succeeds; the episode
    still ends after max_fallbacks, not at the time limit."""
    picks = 0

    with ChatClient(robot.llm, base_url=server.base_url) as client:
        http = HttpAsk(client)

        def grinds(purpose: str, messages: Any, schema: Any) -> ChatResult:
            nonlocal picks
            if purpose == "goal":
                return http(purpose, messages, schema)
            holding = "The robot holds the red block" in str(messages[-1]["content"])
            picks += not holding
            target = "blue block" if holding else "red block"
            step = {"action": "pick", "object": target, "target": "none"}
            return ChatResult(text=json.dumps(step), latency=0.0, attempts=1)

        outcome, _ = _episode(robot, tidy, server, hardware,
                              "put the red block on the blue block", grinds)  # fmt: skip
    actions = [a for _, a in outcome.actions]
    assert outcome.reason.startswith(f"gave up after {tidy.max_fallbacks} fallbacks")
    assert actions.count("pick") == tidy.max_fallbacks + 1 and picks > 1
    assert actions.count("recover") == tidy.max_fallbacks + 1


def test_a_goal_with_no_relation_is_judged_by_the_verifier_model_and_never_done_unchanged(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware
) -> None:
    """ "Line up ..." names blocks in view but no relation: the end step goes to the verifier
    model (the Extra Bot's question) with the table before and after; a "done" at once,
    with nothing moved, fails without asking it."""
    request = "line up the red block and the blue block neatly"
    asked: list[str] = []

    def scripted(steps: list[dict[str, str]]) -> Any:
        plans = iter(steps)

        def ask(purpose: str, messages: Any, schema: Any) -> ChatResult:
            asked.append(purpose)
            if purpose == "goal":
                return http(purpose, messages, schema)
            if purpose == "verify":
                assert "the red block moved from" in str(messages[-1]["content"])
                text = json.dumps({"done": True, "reason": "they stand in a line"})
            else:
                text = json.dumps(next(plans))
            return ChatResult(text=text, latency=0.0, attempts=1)

        return ask

    done = {"action": "done", "object": "none", "target": "none"}
    pick = {"action": "pick", "object": "red block", "target": "none"}
    place = {"action": "place", "object": "none", "target": "middle"}
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        http = HttpAsk(client)
        at_once, _ = _episode(robot, tidy, server, hardware, request, scripted([done] * 3))
        assert not at_once.finished and at_once.reason == "goal not verified: nothing has changed"
        assert "verify" not in asked
        moved, recorder = _episode(robot, tidy, server, hardware, request,
                                   scripted([pick, place, done]))  # fmt: skip
    assert moved.finished and [a for _, a in moved.actions][-1] == "done"
    judged = [r for r in recorder.records if r["kind"] == "check" and r["check"] == "judge"]
    assert len(judged) == 1 and judged[0]["ok"]


def test_eval_tidy_puts_the_robots_verdict_beside_the_judges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A goal file in the held-out format: a feasible goal and one no end state fulfils."""
    goals = tmp_path / "goals.toml"
    goals.write_text(
        'jitter = 0.01\n[[task]]\nname = "one-give"\ngoal = "hand me the blue block"\n'
        'scene = "blocks"\ngiven = "blue block"\n[[task]]\nname = "unknown-object-apple"\n'
        'goal = "hand me the apple"\nscene = "blocks"\nexpect = "failure"\nwhy = "no apple"\n',
        encoding="utf-8",
    )
    args = ["eval", "tidy", "--goals", str(goals), "--trials", "1"]
    assert main([*args, "--json"]) == 0  # every verdict agrees with the judge
    found = json.loads(capsys.readouterr().out)
    assert (found["false_successes"], found["false_failures"]) == (0, 0)
    episodes = {n: g["episodes"][0] for n, g in found["goals"].items()}
    assert episodes["one-give"]["finished"] and episodes["one-give"]["success"]
    apple = episodes["unknown-object-apple"]
    assert not apple["finished"] and apple["end_reason"].startswith("the apple is not in view")
    assert main(args) == 0
    table = capsys.readouterr().out
    assert "the robot's verdict against the judge's (the twin's truth)" in table
    rows = {line.split("│")[1].strip(): line for line in table.splitlines() if "│" in line}
    assert [c.strip() for c in rows["all"].split("│")[2:7]] == ["2", "1", "1", "0", "0"]


def test_a_done_in_the_dark_is_never_success_nor_a_missing_object(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware
) -> None:
    """The goal is read in the light; then the room's lights go down to an eighth before the
    model says "done". The fresh look at the end step is too dark to trust (taken twice): the
    episode ends as not verified because it could not see, not with what is missing."""
    assert hardware.twin is not None
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        http = HttpAsk(client)

        def dims_then_says_done(purpose: str, messages: Any, schema: Any) -> ChatResult:
            if purpose == "goal":
                return http(purpose, messages, schema)
            hardware.twin.set_light(DIM)
            done = '{"action": "done", "object": "none", "target": "none"}'
            return ChatResult(text=done, latency=0.0, attempts=1)

        try:
            outcome, recorder = _episode(robot, tidy, server, hardware,
                                         "put the red block on the blue block",
                                         dims_then_says_done)  # fmt: skip
        finally:
            hardware.twin.set_light(None)
    assert not outcome.finished
    assert outcome.reason.startswith("goal not verified: could not see: the view is too dark")
    goal = next(r for r in recorder.records if r["kind"] == "goal")
    assert goal["ok"] and goal["relations"]  # read in the light
    dark = [r for r in recorder.records if r["kind"] == "observation" and r.get("view")]
    assert dark and all(r["view"].startswith("too dark") for r in dark)


def test_a_goal_asked_in_the_dark_is_not_read_and_nothing_moves(
    robot: RobotConfig, tidy: Skill, server: StandInServer, hardware: Hardware
) -> None:
    """Lights down before the start: "the apple is not in view" would be a guess."""
    assert hardware.twin is not None
    hardware.twin.set_light(DIM)
    try:
        outcome, recorder = _episode(
            robot, tidy, server, hardware, "put the red block on the blue block"
        )
    finally:
        hardware.twin.set_light(None)
    assert outcome.reason.startswith("goal not understood: could not see: the view is too dark")
    assert outcome.actions == [] and not [r for r in recorder.records if r["kind"] == "command"]
