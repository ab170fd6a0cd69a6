"""The files that travel inside the package: onboard.bundled finds them, installed or not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from onboard import bundled
from onboard.base.errors import ModelError
from onboard.config import load_robot

ROOT = Path(__file__).resolve().parent.parent


def test_the_bundled_folders_hold_the_shipped_files() -> None:
    skills = bundled.skills_dir()
    assert (skills / "engage.toml").is_file()
    assert sorted(p.stem for p in (skills / "scenarios").glob("*.toml")) == [
        "person-environment", "person-object", "person-person", "person-robot",
    ]  # fmt: skip
    assert {p.name for p in bundled.embedder_dir().iterdir()} >= {"model.onnx", "tokenizer.json"}
    assert {p.name for p in bundled.detector_dir().iterdir()} >= {"model.onnx", "classes.json"}
    assert load_robot(bundled.example_robot()).name == "example"


def test_the_editable_install_points_into_the_checkout() -> None:
    # the editable install maps onboard.skills and onboard.models onto the repository's folders
    assert bundled.skills_dir() == ROOT / "skills"
    assert bundled.embedder_dir() == ROOT / "models" / "minilm"
    assert bundled.example_robot() == ROOT / "runtime" / "example-robot.toml"


def test_a_missing_bundled_file_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "minilm").mkdir()
    (tmp_path / "minilm" / "model.onnx").write_bytes(b"")
    monkeypatch.setattr(bundled, "package_path", lambda package: tmp_path)
    with pytest.raises(ModelError) as caught:
        bundled.embedder_dir()
    message = str(caught.value)
    assert "\n" not in message
    assert f"{tmp_path / 'minilm' / 'tokenizer.json'} is missing" in message


def test_the_embedder_defaults_to_the_bundled_model(tmp_path: Path) -> None:
    path = tmp_path / "robot.toml"
    path.write_text('name = "r"\n', encoding="utf-8")
    assert load_robot(path).embedder_dir == bundled.embedder_dir()
    path.write_text('name = "r"\n[models]\nembedder = "mine"\n', encoding="utf-8")
    assert load_robot(path).embedder_dir == tmp_path / "mine"


def test_check_names_a_configured_embedder_without_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from onboard.base.errors import ConfigError
    from onboard.cli.check import check

    path = tmp_path / "robot.toml"
    path.write_text(
        f'name = "r"\nskills = "{ROOT / "skills"}"\n[models]\nembedder = "mine"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        check(path)
    (problem,) = caught.value.problems
    assert str(problem) == f"{path}: [models.embedder] no model.onnx in {tmp_path / 'mine'}"


def test_a_scene_is_a_path_or_a_shipped_scenes_name(tmp_path: Path) -> None:
    from onboard.drivers.twin.scene import SCENES, find_scene

    robot = load_robot(ROOT / "robot.toml")
    assert robot.drivers.arm is not None and robot.drivers.arm.kind == "sim"
    assert robot.drivers.arm.scene == Path("blocks")
    assert find_scene("calibration", robot.root) == SCENES / "calibration.toml"
    assert find_scene("blocks") == SCENES / "blocks.toml"
    # a file path works as before, relative to robot.toml's folder; an existing file wins
    mine = tmp_path / "calibration"
    mine.write_text("", encoding="utf-8")
    assert find_scene("calibration", tmp_path) == mine
    assert find_scene(SCENES / "drawer.toml", tmp_path) == SCENES / "drawer.toml"
    # neither a file nor a shipped name: the path as given, for load_scene to report
    assert find_scene("nowhere", tmp_path) == tmp_path / "nowhere"
    assert find_scene("scenes/blocks.toml", tmp_path) == tmp_path / "scenes" / "blocks.toml"


def test_a_scenario_is_a_path_or_a_name_in_the_robots_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onboard.base.errors import ScenarioError
    from onboard.hri.scenario import find_scenario

    folder = ROOT / "skills" / "scenarios"
    assert find_scenario("person-object", folder) == folder / "person-object.toml"
    # a path works exactly as before: relative to the working folder, checked by load_scenario
    monkeypatch.chdir(ROOT)
    relative = Path("skills/scenarios/person-robot.toml")
    assert find_scenario(relative, tmp_path) == relative
    assert find_scenario(Path("nope.toml"), folder) == Path("nope.toml")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "person-object").write_text("", encoding="utf-8")
    assert find_scenario("person-object", folder) == Path("person-object")  # a file wins
    with pytest.raises(ScenarioError) as caught:
        find_scenario("person-cat", folder)
    (problem,) = caught.value.problems
    assert str(problem) == (
        f"{folder}: no scenario named 'person-cat' (scenarios here: person-environment, "
        "person-object, person-person, person-robot, "
        + ", ".join(sorted(p.stem for p in (folder / "heldout").glob("*.toml")))
        + ")"
    )
    assert find_scenario("heldout-coins", folder) == folder / "heldout" / "heldout-coins.toml"


def test_onboard_detector_dir_names_a_candidate_in_place_of_the_shipped_detector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    shipped = bundled.detector_dir()
    (tmp_path / "model.onnx").write_bytes((shipped / "model.onnx").read_bytes())
    monkeypatch.setenv(bundled.DETECTOR_DIR_ENV, str(tmp_path))
    with pytest.raises(ModelError) as caught:  # half a candidate is refused, not mixed in
        bundled.detector_dir()
    assert str(caught.value) == f"ONBOARD_DETECTOR_DIR={tmp_path}: no classes.json in that folder"
    (tmp_path / "classes.json").write_text((shipped / "classes.json").read_text())
    assert bundled.detector_dir() == tmp_path


def test_the_detector_gate_runs_the_skill_tests_on_the_candidate(tmp_path: Path) -> None:
    # a candidate that is not a model fails the test that loads the detector, so the child
    # pytest loaded the candidate and not the shipped file
    broken = tmp_path / "candidate.onnx"
    broken.write_bytes(b"not an onnx file")
    gate = [sys.executable, "-P", str(ROOT / "models" / "detector" / "gate.py"), str(broken)]
    only = ["-k", "test_shipped_card_matches_the_model", "-p", "no:cacheprovider"]
    result = subprocess.run([*gate, "--jobs", "0", "--", *only], capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout and "ModelError" in result.stdout
    assert result.stdout.rstrip().endswith(f"gate: {broken} failed (pytest exit 1)")
    none = tmp_path / "none.onnx"
    missing = subprocess.run([*gate[:-1], str(none)], capture_output=True, text=True)
    assert (missing.returncode, missing.stderr) == (2, f"gate: no model file {none}\n")
