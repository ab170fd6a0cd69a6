"""``onboard init DIR`` and the bundled example robot that runs when no robot.toml is found."""

from __future__ import annotations

from pathlib import Path

import pytest

from onboard import bundled
from onboard.cli.main import NO_ROBOT, main
from onboard.config import load_example_robot, load_robot

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = [
    "code.toml",
    "engage.toml",
    "team.toml",
    "tidy.toml",
    "scenarios/person-environment.toml",
    "scenarios/person-object.toml",
    "scenarios/person-person.toml",
    "scenarios/person-robot.toml",
    *sorted(
        f"scenarios/heldout/{p.name}" for p in (ROOT / "skills/scenarios/heldout").glob("*.toml")
    ),
]


def test_init_writes_a_robot_and_the_shipped_skills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "robot1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "onboard init: robot 'robot1' in robot1"
    assert out[1:-1] == [
        "  wrote robot1/robot.toml",
        *(f"  wrote robot1/skills/{p}" for p in SHIPPED),
    ]
    assert out[-1] == "next: cd robot1 && onboard check && onboard run engage --llm standin"
    for path in SHIPPED:
        assert (tmp_path / "robot1/skills" / path).read_bytes() == (
            ROOT / "skills" / path
        ).read_bytes()
    robot = load_robot(tmp_path / "robot1" / "robot.toml")
    assert robot.name == "robot1" and not robot.example
    assert robot.skills_dir == tmp_path / "robot1" / "skills"
    assert robot.recordings_dir == tmp_path / "robot1" / "recordings"
    assert robot.embedder_dir == bundled.embedder_dir()
    text = (tmp_path / "robot1" / "robot.toml").read_text(encoding="utf-8")
    assert (
        text.startswith("# A robot for onboard") and 'api_key_env = "ONBOARD_LLM_API_KEY"' in text
    )
    assert text == bundled.example_robot().read_text(encoding="utf-8").replace(
        'name = "example"', 'name = "robot1"'
    )


def test_init_takes_a_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "r"), "--name", "kitchen greeter"]) == 0
    assert load_robot(tmp_path / "r" / "robot.toml").name == "kitchen greeter"
    assert main(["init", str(tmp_path / "s"), "--name", " "]) == 2
    assert "[name] --name must not be empty" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("existing", ["robot.toml", "skills/scenarios/person-robot.toml"])
def test_init_overwrites_nothing_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], existing: str
) -> None:
    folder = tmp_path / "robot1"
    (folder / existing).parent.mkdir(parents=True)
    (folder / existing).write_text("# mine\n", encoding="utf-8")
    assert main(["init", str(folder)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"onboard: error: {folder / existing}: exists already: onboard init --force overwrites it"
    ]
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.toml")) == [existing]
    assert (folder / existing).read_text(encoding="utf-8") == "# mine\n"
    assert main(["init", str(folder), "--force"]) == 0
    assert load_robot(folder / "robot.toml").name == "robot1"
    assert (folder / existing).read_text(encoding="utf-8") != "# mine\n"


def test_init_into_a_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("", encoding="utf-8")
    assert main(["init", str(tmp_path / "f")]) == 2
    assert (
        capsys.readouterr().err == f"onboard: error: {tmp_path / 'f'}: exists and is not a folder\n"
    )


def test_without_robot_toml_the_bundled_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 0
    captured = capsys.readouterr()
    assert captured.err == NO_ROBOT + "\n"
    assert NO_ROBOT == (
        "onboard: no robot.toml here; using the bundled example robot "
        "(onboard init DIR writes one to edit)"
    )
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"{bundled.example_robot()}: robot 'example'")
    assert "4 scenarios" in captured.out and lines[-1] == "ok"
    assert main(["graph", "engage"]) == 0
    assert capsys.readouterr().err == NO_ROBOT + "\n"  # once per command
    robot = load_example_robot()
    assert robot.example and robot.skills_dir == bundled.skills_dir()
    assert robot.recordings_dir == tmp_path / "recordings"
    assert robot.model_copy(update={"clock": "virtual"}).example


def test_a_robot_toml_here_or_named_is_used_without_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "."]) == 0
    capsys.readouterr()
    assert main(["check"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("robot.toml: robot ")
    # an explicit --robot that does not exist stays an error
    assert main(["--robot", "nope/robot.toml", "check"]) == 2
    assert capsys.readouterr().err == "onboard: error: nope/robot.toml: file not found\n"


def test_the_example_robots_skills_are_not_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    before = (ROOT / "skills" / "engage.toml").read_bytes()
    assert main(["actions", "add", "engage", "abc", "--name", "wave"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == NO_ROBOT
    assert err[1:] == [
        "onboard: error: the bundled example robot's skills are onboard's own: "
        "onboard init DIR writes a robot with skills to edit"
    ]
    assert (ROOT / "skills" / "engage.toml").read_bytes() == before
