"""Team tasks as a skill kind (issue 28): skills/team.toml loads and is checked like any skill,
``onboard run team`` runs a task level by a method on the skill runner (the team stand-in on
loopback, seeing only the HTTP requests), ``onboard eval team`` evaluates it, and its
recording replays, as does one made before the team ran on the runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onboard.base.errors import SkillError
from onboard.cli.main import main
from onboard.collab.episode import team_skill
from onboard.collab.names import TEAM_COMMANDS
from onboard.loop.skill import load_skill_text

ROOT = Path(__file__).resolve().parent.parent
ROBOT = ["--robot", str(ROOT / "robot.toml")]


def test_the_shipped_team_skill_declares_its_seams() -> None:
    skill = team_skill()
    assert (skill.kind, skill.start, skill.end, skill.fallback) == ("team", "look", "done", "wait")
    assert {a.spec.command for a in skill.actions.values()} <= TEAM_COMMANDS


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('command = "team.choose"', 'command = "arm.pick"', "unknown command 'arm.pick'"),
        ("[actions.look]", '[scene]\nsafe = "x"\n\n[actions.look]', "no [scene] table"),
        ('next = ["choose"]', 'next = ["jump"]', "unknown action 'jump'"),
    ],
)
def test_a_broken_team_skill_is_refused_with_file_key_and_line(
    old: str, new: str, problem: str
) -> None:
    text = (ROOT / "skills" / "team.toml").read_text(encoding="utf-8")
    assert old in text
    with pytest.raises(SkillError) as caught:
        load_skill_text(text.replace(old, new), "my-team.toml", (), {"team": TEAM_COMMANDS})
    assert problem in str(caught.value) and "my-team.toml:" in str(caught.value)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    path = tmp_path_factory.mktemp("team") / "run.jsonl"
    args = [*ROBOT, "run", "team", "--task", "sweep_floor", "--level", "Y1_G1"]
    return main([*args, "--method", "read_s", "--record", str(path)]), path


def test_onboard_run_team_runs_the_runner_s_loop(recorded: tuple[int, Path]) -> None:
    code, path = recorded
    assert code == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["skill_kind"] == "team"
    start = next(r for r in records if r["kind"] == "start")
    assert start["skill"] == "team" and start["skill_kind"] == "team"
    # the runner's seams: every proposal checked (the reply, its legality, the critic) before
    # it runs; each agent's choice a transition; the environment steps once both chose
    checks = [r["check"] for r in records if r["kind"] == "check"]
    assert checks[:3] == ["reply", "legal", "critic"]
    chose = [r for r in records if r["kind"] == "transition" and r["dest"] == "choose"]
    steps = [r for r in records if r["kind"] == "env_step"]
    assert len(chose) == 2 * len(steps) and [list(c["args"]) for c in chose[:2]] == [
        ["Alice"],
        ["Bob"],
    ]
    # the episode ends when the environment reports the task done, through the end action
    done = next(r for r in records if r["kind"] == "transition" and r["dest"] == "done")
    assert done["reason"] == "the task is done"
    assert next(r for r in records if r["kind"] == "end")["finished"]
    outcome = next(r for r in records if r["kind"] == "outcome")["outcome"]
    assert outcome["queries"] == sum(r["kind"] == "request" for r in records)


def test_a_team_skill_s_recording_replays(
    recorded: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(recorded[1])]) == 0
    assert "replay reproduces" in capsys.readouterr().out


def test_a_recording_made_before_the_team_ran_on_the_runner_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # recorded at 61024da (its own loop): the same requests, byte for byte, and actions; its
    # critic, since rebuilt on training starts only, is kept beside it (the header names it)
    old = (ROOT / "tests" / "data" / "team-read_j-before-runner.jsonl").read_text()
    path = tmp_path / "old.jsonl"
    path.write_text(old.replace("@ROOT@", str(ROOT)))
    assert main(["replay", str(path)]) == 0
    assert "replay reproduces" in capsys.readouterr().out


def test_onboard_eval_team_is_the_task_evaluation(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["eval", "team", "--task", "sweep_floor", "--level", "Y1_G1"]
    assert main([*ROBOT, *args, "--method", "central_plan", "--trials", "1"]) == 0
    assert "sweep_floor" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["run", "team"], "give --task"),
        (["run", "team", "--task", "sweep_floor", "--goal", "x"], "not --goal"),
        (["run", "engage", "--task", "sweep_floor"], "not a team skill"),
        (["eval", "team", "--scenario", "x"], "evaluated on task levels"),
    ],
)
def test_team_options_are_refused_in_one_line_where_they_do_not_apply(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*ROBOT, *args]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1
