"""Generated code as a skill kind (issue 28): skills/code.toml loads and is checked like any
skill, ``onboard run code`` runs it on the twin through the skill runner (the stand-in VLM in
its own process on loopback, seeing only the HTTP requests), and its recording replays."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from onboard.base.errors import RecordingFormatError, SkillError
from onboard.cli.main import main
from onboard.loop.recording import images_dir
from onboard.loop.skill import load_skill_text
from onboard.replan.checks import DECIDED
from onboard.replan.episode import code_skill
from onboard.replan.names import CODE_COMMANDS
from onboard.replan.replay import replay_code_recording

ROOT = Path(__file__).resolve().parent.parent
TASK2 = "Put the red block into the box."


def test_the_shipped_code_skill_declares_the_seeds_rounds() -> None:
    skill = code_skill()
    assert (skill.kind, skill.start, skill.end, skill.fallback) == ("code", "look", "done", "halt")
    assert (skill.max_rounds + 1, skill.max_replans, skill.max_fallbacks) == (5, 3, 0)
    verified = [name for name, action in skill.actions.items() if action.spec.verify]
    assert verified == ["run", "done"]  # neither the look nor the halt moves anything


def _skill_text(**swap: str) -> str:
    text = (ROOT / "skills" / "code.toml").read_text(encoding="utf-8")
    for old, new in swap.items():
        assert old in text
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ('command = "code.run"', 'command = "arm.pick"', "unknown command 'arm.pick'"),
        ('kind = "code"', 'kind = "person"', "a reply is mapped onto actions by their references"),
        ("[actions.run]", '[scene]\nsafe = "x"\n\n[actions.run]', "no [scene] table"),
        ("max_replans = 3", "max_replans = -1", "max_replans"),
    ],
)
def test_a_broken_code_skill_is_refused_with_file_key_and_line(
    old: str, new: str, problem: str
) -> None:
    with pytest.raises(SkillError) as caught:
        load_skill_text(_skill_text(**{old: new}), "my-code.toml", (), {"code": CODE_COMMANDS})
    assert problem in str(caught.value) and "my-code.toml" in str(caught.value)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path]:
    path = tmp_path_factory.mktemp("code") / "run.jsonl"
    args = ["--robot", str(ROOT / "robot.toml"), "run", "code", "--goal", TASK2]
    args += ["--scene", "tower", "--llm", "standin", "--record", str(path)]
    return main(args), path


def test_onboard_run_code_verifies_its_run_and_records_the_runner_s_loop(
    recorded: tuple[int, Path],
) -> None:
    code, path = recorded
    assert code == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    header = records[0]
    assert header["skill_kind"] == "code" and "[actions.run]" in header["skill"]["toml"]
    # the runner's seams: the goal read first, checks before the run, and after it the goal's
    # relation checked in the camera's look (the Extra Bot not asked: the relation decides)
    goal = next(r for r in records if r["kind"] == "goal")
    assert goal["relations"] == [{"relation": "in", "object": "red block", "target": "box"}]
    assert "transition" in kinds and kinds.count("run") == 1
    checks = {r["check"] for r in records if r["kind"] == "check"}
    assert {"format", "refused", "match", "dry_run", "compare"} <= checks
    verified = [(v["verifier"], v["ok"], v["feedback"]) for v in records if v["kind"] == "verify"]
    assert verified == [("goal", True, "the camera sees the red block in the box"),
                        ("extra", True, DECIDED)]  # fmt: skip
    assert not [r for r in records if r["kind"] == "request" and r["bot"] == "extra"]
    outcome = next(r for r in records if r["kind"] == "outcome")
    assert outcome["done"] and outcome["decisions"][-2:] == ["run: ok", "goal: met"]
    end = next(r for r in records if r["kind"] == "end")
    assert end["finished"] and [a for _, a in end["actions"]] == ["look", "run", "done"]


def test_a_code_skill_s_recording_replays_from_its_recorded_looks(
    recorded: tuple[int, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = recorded[1]
    assert main(["replay", str(path)]) == 0
    assert "replay reproduces" in capsys.readouterr().out


def test_a_format_2_code_episode_is_refused_in_one_line_naming_its_format(
    recorded: tuple[int, Path], tmp_path: Path
) -> None:
    # format 2 code episodes ran on ReplanVLM's own loop: their records are not the runner's
    records = [json.loads(x) for x in recorded[1].read_text().splitlines()]
    records[0]["format"] = 2
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in records))
    shutil.copytree(images_dir(recorded[1]), images_dir(old))
    with pytest.raises(RecordingFormatError, match="a format 2 code episode: it ran on Replan"):
        replay_code_recording(old)


def test_onboard_eval_of_a_code_skill_is_the_code_tasks_evaluation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the code skill has no scenarios: its evaluation is `onboard code eval`'s seven tasks
    code = main(["--robot", str(ROOT / "robot.toml"), "eval", "code", "--scenario", "x"])
    assert code == 2
    assert "evaluated on the seven code tasks" in capsys.readouterr().err
