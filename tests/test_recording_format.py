"""Recording format 4 (runtime/loop/recording.py): the header carries the skill's text, the
robot, the scenario and the sha256 of the models, so a recording replays with nothing but
itself: after its skill file changed or went, and from another folder. A format 1 recording
and a different embedder are each one error line."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from test_cli import onboard, one_line_error

from onboard.base.errors import (
    ModelMismatch,
    RecordingError,
    RecordingFormatError,
    SkillError,
)
from onboard.catalog import load_robot_skill
from onboard.config import RobotConfig, load_robot
from onboard.grounding.embedder import MODEL_FILE
from onboard.hri.replay import replay
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, make_mapper, run_episode
from onboard.hri.world import SimRobot
from onboard.llm.client import ChatClient
from onboard.loop import recording
from onboard.loop.exitcodes import ExitCode
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.recording import (
    FORMAT,
    build_header,
    check_models,
    model_sha256,
    read_header,
)
from onboard.loop.skill import load_skill, load_skill_text
from onboard.testing.standin_server import StandInServer

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "skills" / "scenarios" / "person-object.toml"


def write_records(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def records_of(path: Path) -> list[dict[str, Any]]:
    return list(read_recording(path))


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(recording, the robot's folder): a real episode with the stand-in over HTTP, made by
    a robot in a folder of its own (robot.toml, skills/) that the tests change or delete."""
    folder = tmp_path_factory.mktemp("robot")
    robot = restore_robot_folder(folder)
    skill = load_robot_skill(robot, "engage")
    path = tmp_path_factory.mktemp("recorded") / "episode.jsonl"
    with (
        StandInServer(seed=0, noise=0.0, format_noise=0.0) as standin,
        ChatClient(robot.llm, base_url=standin.base_url) as client,
        Recorder(path) as recorder,
    ):
        mapper = make_mapper(robot, skill)
        options = EpisodeOptions(latency=1.0)
        scenario = load_scenario(SCENARIO)
        outcome = run_episode(robot, skill, scenario, HttpAsk(client), mapper, recorder, options)
    assert outcome.finished and outcome.spoke_at is not None
    return path, folder


def engage_without_critic() -> str:
    """engage.toml without its ``[critic]``: these tests are about the recording, and the
    noiseless stand-in plans a step before speaking (eye contact, a wait) that the critic
    refuses every time, so with it on the episode would never speak (README, "What that
    threshold means")."""
    document = tomlkit.parse((ROOT / "skills" / "engage.toml").read_text(encoding="utf-8"))
    del document["critic"]
    return tomlkit.dumps(document)


def restore_robot_folder(folder: Path) -> RobotConfig:
    """``folder`` as the episode saw it: the repository's robot.toml and skills (engage
    without its critic)."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "robot.toml", folder / "robot.toml")
    shutil.rmtree(folder / "skills", ignore_errors=True)
    shutil.copytree(ROOT / "skills", folder / "skills")
    (folder / "skills" / "engage.toml").write_text(engage_without_critic(), encoding="utf-8")
    return load_robot(folder / "robot.toml")


@pytest.fixture
def episode(made: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recording, and the robot's folder as the episode saw it."""
    path, folder = made
    restore_robot_folder(folder)
    return shutil.copy(path, tmp_path / path.name), folder


# -- the header --------------------------------------------------------------------------------


def test_the_header_carries_the_skill_text_robot_scenario_and_model_hashes(
    made: tuple[Path, Path], robot: RobotConfig
) -> None:
    path, folder = made
    header = records_of(path)[0]
    assert header["kind"] == "header" and header["format"] == FORMAT == 4
    assert header["skill_kind"] == "person"
    assert header["skill"]["name"] == "engage"
    assert header["skill"]["toml"] == engage_without_critic()
    assert header["scenario"]["scenario"]["name"] == "person-object"
    assert "task" not in header
    model = robot.embedder_dir / MODEL_FILE
    embedder = header["models"]["files"]["embedder"]
    assert embedder == {
        "file": str(model),
        "sha256": hashlib.sha256(model.read_bytes()).hexdigest(),
    }
    assert header["models"]["llm"] == robot.llm.model == "smollm2-135m-instruct"
    assert header["options"]["action_text"] is True and header["latency"] == 1.0
    assert header["robot"]["name"] == robot.name
    assert header["robot_root"] == str(folder.resolve())
    assert header["skill"]["file"] == str(folder / "skills" / "engage.toml")
    parsed = read_header(records_of(path), path)
    assert parsed.skill.toml == header["skill"]["toml"]
    assert parsed.robot_config().drivers.robot.perception == robot.drivers.robot.perception


def test_a_scene_header_with_a_task_is_carried(robot: RobotConfig, tmp_path: Path) -> None:
    """Manipulation skills record their kind and a free task mapping instead of a scenario."""
    skill = load_robot_skill(robot, "engage")
    task = {"goal": "stack the blocks", "scene": "blocks"}
    fields = build_header(robot, skill, "scene", task=task, options={}, models={})
    path = write_records(tmp_path / "scene.jsonl", [{"kind": "header", **fields}])
    header = read_header(records_of(path), path)
    assert header.skill_kind == "scene" and header.scenario is None
    assert header.task == {"goal": "stack the blocks", "scene": "blocks"}
    with pytest.raises(RecordingError, match="a scene recording without its 'task'"):
        read_header([{"kind": "header", **{**fields, "task": None}}], path)


def test_an_unknown_skill_kind_is_one_line(robot: RobotConfig, tmp_path: Path) -> None:
    skill = load_robot_skill(robot, "engage")
    fields = build_header(robot, skill, "person", scenario={}, options={}, models={})
    with pytest.raises(RecordingError) as caught:
        read_header([{"kind": "header", **fields, "skill_kind": "dance"}], tmp_path / "x.jsonl")
    assert "[skill_kind]" in str(caught.value) and "unknown skill kind 'dance'" in str(caught.value)
    assert "\n" not in str(caught.value)


# -- replay needs nothing but the recording ----------------------------------------------------


def test_replay_after_the_skill_file_changed(episode: tuple[Path, Path]) -> None:
    path, folder = episode
    engage = folder / "skills" / "engage.toml"
    text = engage.read_text(encoding="utf-8")  # what `onboard actions add` does, and more
    assert 'start = "approach"' in text
    engage.write_text(text.replace('start = "approach"', 'start = "pause"', 1) +
                      '\n[actions.wave]\ntext = "Wave."\nstimuli = { type = "2-A" }\n'
                      'references = ["wave at the person"]\n', encoding="utf-8")  # fmt: skip
    recorded, replayed = replay(path)
    assert recorded == replayed and recorded[0] == "approach"


def test_replay_after_the_skill_file_was_deleted(episode: tuple[Path, Path]) -> None:
    path, folder = episode
    (folder / "skills" / "engage.toml").unlink()
    recorded, replayed = replay(path)
    assert recorded == replayed and recorded[-1] == "speak"


def test_replay_on_another_machine(episode: tuple[Path, Path], tmp_path: Path) -> None:
    """The recording alone, copied to another folder, the robot's folder (robot.toml,
    skills) gone, replayed by `onboard replay` from a folder with no robot.toml."""
    path, folder = episode
    elsewhere = tmp_path / "other-machine"
    elsewhere.mkdir()
    copied = Path(shutil.copy(path, elsewhere / "copied.jsonl"))
    shutil.rmtree(folder)
    result = onboard("replay", copied, cwd=elsewhere)
    assert result.code == ExitCode.SUCCESS, result.out + result.err
    assert "reproduces" in result.out


def test_a_skill_in_the_header_is_checked_like_a_file(
    episode: tuple[Path, Path], tmp_path: Path
) -> None:
    path, _ = episode
    records = records_of(path)
    records[0]["skill"]["toml"] = records[0]["skill"]["toml"].replace(
        'start = "approach"', 'start = "fly"', 1
    )
    bad = write_records(tmp_path / "bad-skill.jsonl", records)
    line = one_line_error(onboard("replay", bad, cwd=tmp_path))
    assert line.startswith(f"onboard: error: {bad} (skill engage):")
    assert "[skill.start] unknown action 'fly'" in line


def test_the_text_loader_reuses_the_file_loader_checks(tmp_path: Path) -> None:
    text = (ROOT / "skills" / "engage.toml").read_text(encoding="utf-8")
    from_text = load_skill_text(text, "rec.jsonl (skill engage)", ("activity", "gaze"),
                                SimRobot.COMMANDS)  # fmt: skip
    from_file = load_skill(ROOT / "skills" / "engage.toml", ("activity", "gaze"), SimRobot.COMMANDS)
    assert from_text.source == from_file.source == text
    assert str(from_text.path) == "rec.jsonl (skill engage)"
    for key in ("name", "goal", "start", "end", "fallback", "prompt", "reject", "max_rounds"):
        assert getattr(from_text, key) == getattr(from_file, key), key
    assert {n: a.spec for n, a in from_text.actions.items()} == {
        n: a.spec for n, a in from_file.actions.items()
    }
    with pytest.raises(SkillError) as syntax:
        load_skill_text("[skill\nname = 1", "rec.jsonl (skill x)")
    assert str(syntax.value).startswith("rec.jsonl (skill x):1: TOML syntax error:")
    assert "\n" not in str(syntax.value)
    with pytest.raises(SkillError) as blind:  # a robot without gaze: the same problem as a file
        load_skill_text(text, "rec.jsonl (skill engage)", ("activity",))
    assert "needs gaze perception, which the robot lacks" in str(blind.value)


# -- format 1 and other formats ----------------------------------------------------------------


def as_format_1(header: dict[str, Any], skill_path: Path) -> dict[str, Any]:
    """The header as the code before format 2 wrote it."""
    old = {k: header[k] for k in ("seq", "t", "wall", "kind", "robot", "robot_root", "scenario",
                                  "options", "latency")}  # fmt: skip
    return {**old, "skill": str(skill_path)}


def test_a_format_1_recording_is_one_line(episode: tuple[Path, Path], tmp_path: Path) -> None:
    path, folder = episode
    records = records_of(path)
    records[0] = as_format_1(records[0], folder / "skills" / "engage.toml")
    old = write_records(tmp_path / "format1.jsonl", records)
    result = onboard("replay", old, cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    line = one_line_error(result)
    assert line == (
        f"onboard: error: {old}: a format 1 recording (made before recording format 2, by "
        f"onboard 0.1.0 at commit 3344cdd or earlier): replay it with that version, or record "
        f"the episode again"
    )
    with pytest.raises(RecordingFormatError):
        read_header(records, old)


def test_a_newer_format_is_one_line(episode: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = episode
    records = records_of(path)
    records[0]["format"] = 5
    newer = write_records(tmp_path / "format5.jsonl", records)
    line = one_line_error(onboard("replay", newer, cwd=tmp_path))
    assert f"{newer}: a format 5 recording; this onboard (0.1.0) replays formats 2, 3 and 4" in line


# -- model hashes ------------------------------------------------------------------------------


def test_a_different_embedder_is_one_line_naming_the_model_and_both_hashes(
    episode: tuple[Path, Path], tmp_path: Path, robot: RobotConfig
) -> None:
    path, _ = episode
    records = records_of(path)
    local = records[0]["models"]["files"]["embedder"]["sha256"]
    records[0]["models"]["files"]["embedder"]["sha256"] = "0" * 64
    changed = write_records(tmp_path / "other-model.jsonl", records)
    result = onboard("replay", changed, cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    line = one_line_error(result)
    model = robot.embedder_dir / MODEL_FILE
    assert line == (
        f"onboard: error: {changed}: the embedder model differs from the one recorded: "
        f"recorded sha256 {'0' * 64}, {model} has sha256 {local}: replay with the recorded "
        "model ([models] in robot.toml), or record the episode again"
    )


def test_a_missing_embedder_is_one_line(episode: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = episode
    records = records_of(path)
    records[0]["robot"]["models"]["embedder"] = str(tmp_path / "no-model-here")
    moved = write_records(tmp_path / "no-model.jsonl", records)
    line = one_line_error(onboard("replay", moved, cwd=tmp_path))
    assert f"the embedder model {tmp_path / 'no-model-here' / MODEL_FILE} is not here" in line
    assert "install the model with that sha256" in line


def test_check_models_ignores_roles_it_is_not_given(made: tuple[Path, Path]) -> None:
    path, _ = made
    check_models(read_header(records_of(path), path), {}, path)
    with pytest.raises(ModelMismatch):
        check_models(read_header(records_of(path), path), {"embedder": path}, path)


def test_a_model_file_is_hashed_once_per_path_mtime_and_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[str] = []
    digest = recording.hashlib.file_digest

    def counting(file: Any, name: str) -> Any:
        hashed.append(file.name)
        return digest(file, name)

    monkeypatch.setattr(recording.hashlib, "file_digest", counting)
    model = tmp_path / MODEL_FILE
    model.write_bytes(b"weights")
    first = model_sha256(model)
    assert first == hashlib.sha256(b"weights").hexdigest()
    assert model_sha256(model) == first and len(hashed) == 1
    model.write_bytes(b"other weights")  # another size
    assert model_sha256(model) == hashlib.sha256(b"other weights").hexdigest()
    model.write_bytes(b"OTHER weights")  # the same size, another mtime
    os.utime(model, ns=(1, 1))
    assert model_sha256(model) == hashlib.sha256(b"OTHER weights").hexdigest()
    assert len(hashed) == 3
