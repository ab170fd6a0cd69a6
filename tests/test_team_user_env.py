"""A user's own team environment from outside the package: docs/team-envs.md's worked
example (its module and task file, read from the page) in a temporary folder on sys.path.
The task file names it by dotted path or by entry point; ``onboard check`` accepts it,
``onboard critic collect`` collects for it, ``onboard critic train`` trains on it (the train
extra: skipped without torch), ``onboard task run`` runs an episode; the team stand-in
refuses it in one line that says it is the stand-in; a bad ``task.env`` is one line."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_cli import ROOT, line_of, onboard, robot_copy

from onboard.base.errors import TeamTaskError
from onboard.collab.dataset import load_dataset
from onboard.collab.envs import make_env
from onboard.collab.envs.registry import ENTRY_POINTS, env_names
from onboard.collab.taskfile import load_team_task
from onboard.loop.exitcodes import ExitCode

PAGE = ROOT / "docs" / "team-envs.md"
MODULE = "stack_env"  # the page's module name


def _heredoc(target: str) -> str:
    """The text the page's ``cat > TARGET <<'EOF'`` block writes."""
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(rf"cat > {re.escape(target)} <<'EOF'[^\n]*\n(.*?\n)EOF\n", text, re.DOTALL)
    assert found, f"{PAGE}: no block writes {target}"
    return found.group(1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A robot folder with the page's module (importable: the folder is on sys.path) and its
    task file in tasks/."""
    where = tmp_path_factory.mktemp("user-env")
    (where / f"{MODULE}.py").write_text(_heredoc(f"{MODULE}.py"), encoding="utf-8")
    (where / "tasks").mkdir()
    (where / "tasks" / "stack_blocks.toml").write_text(
        _heredoc("tasks/stack_blocks.toml"), encoding="utf-8"
    )
    robot_copy(where)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(where))
        yield where
        sys.modules.pop(MODULE, None)


@pytest.fixture(scope="module")
def task_file(folder: Path) -> Path:
    return folder / "tasks" / "stack_blocks.toml"


def test_the_env_is_imported_from_outside_the_package(task_file: Path) -> None:
    task = load_team_task(task_file)
    env = make_env(task, "tower3")
    assert type(env).__module__ == MODULE and type(env).__name__ == "StackBlocks"
    assert env.vocabulary == ("ABSENT", "WAIT", "PUT blue", "PUT green", "PUT red")
    env.reset(0)
    while not env.done:  # the oracle builds the tower: the class's rules hold together
        joint: dict[str, str] = {}
        for agent in env.agents:
            joint[agent] = env.useful(agent, joint)[0]
        env.step(joint)
    assert env.success and env.reward_total == 3.0


def test_onboard_check_accepts_the_task_file(folder: Path) -> None:
    result = onboard("--robot", folder / "robot.toml", "check")
    assert result.code == 0, result.err
    assert "stack_blocks (2 agents, 2 levels)" in result.out
    assert "note: stack_blocks: no critic for level(s) tower2, tower3" in result.out


@pytest.fixture(scope="module")
def dataset(folder: Path, task_file: Path) -> Path:
    out = folder / "tower3.npz"
    result = onboard("--robot", folder / "robot.toml", "critic", "collect", task_file, "--level",
                     "tower3", "--episodes", "40", "--augment", "1", "--out", out)  # fmt: skip
    assert result.code == 0, result.err
    return out


def test_critic_collect_collects_for_it(dataset: Path, task_file: Path) -> None:
    data = load_dataset(dataset)
    env = make_env(load_team_task(task_file), "tower3")
    assert (data.meta.task, data.meta.level) == ("stack_blocks", "tower3")
    assert tuple(data.meta.feature_names) == env.feature_names
    assert tuple(data.meta.vocabulary) == env.vocabulary
    assert data.meta.augmentation == 1.0 and len(set(data.meta.seeds)) == 40
    assert float(np.sum(data.rewards)) > 0  # the oracle's share of the episodes stacks blocks


def test_critic_train_trains_on_it_and_read_s_runs_with_the_critic(
    folder: Path, dataset: Path, task_file: Path
) -> None:
    pytest.importorskip("torch", reason="the train extra (torch) is not installed here: "
                        "onboard critic train on a user's env is not exercised")  # fmt: skip
    model = folder / "critics" / "stack_blocks" / "tower3.onnx"
    result = onboard("critic", "train", "--data", dataset, "--out", model, "--task",
                     "stack_blocks", "--level", "tower3", "--steps", "300")  # fmt: skip
    assert result.code == 0, result.err
    result = onboard("--robot", folder / "robot.toml", "task", "run", task_file, "--level",
                     "tower3", "--method", "read_s", "--llm", "random", "--critics", folder,
                     "--json")  # fmt: skip
    assert result.code in (ExitCode.SUCCESS, ExitCode.TASK_FAILED), result.err
    assert json.loads(result.out)["queries"] >= 1


def test_an_episode_runs_on_it_with_a_baseline(folder: Path, task_file: Path) -> None:
    """Central Plan needs no critic; the planner is the random proposer (the team stand-in
    has solvers for the shipped tasks only: the next test)."""
    result = onboard("--robot", folder / "robot.toml", "task", "run", task_file, "--level",
                     "tower3", "--method", "central_plan", "--llm", "random", "--json")  # fmt: skip
    assert result.code in (ExitCode.SUCCESS, ExitCode.TASK_FAILED), result.err
    episode = json.loads(result.out)
    assert episode["success"] == (result.code == ExitCode.SUCCESS)
    assert 1 <= episode["steps"] <= 8 and episode["queries"] >= episode["steps"]
    records = [json.loads(line) for line in Path(episode["recording"]).read_text().splitlines()]
    assert records[0]["task"]["env"] == "stack_env:StackBlocks"
    assert sum(r["kind"] == "env_step" for r in records) == episode["steps"]


def test_the_team_stand_in_refuses_it_in_one_line(folder: Path, task_file: Path) -> None:
    result = onboard("--robot", folder / "robot.toml", "task", "run", task_file, "--level",
                     "tower2", "--method", "central_plan", "--llm", "standin")  # fmt: skip
    assert result.code == ExitCode.LLM_UNREACHABLE, result.out
    (line,) = result.err.strip().splitlines()
    assert line.startswith("onboard: error: LLM at http://127.0.0.1:") and "HTTP 400" in line
    assert "team stand-in: the '## Task' is none of its tasks (sweep, sandwich, sort," in line
    assert '{"' not in line and line.endswith(")")  # the error's message, not its raw JSON
    (recording,) = (folder / "recordings").glob("team-stack_blocks-tower2-*.jsonl")
    records = [json.loads(x) for x in recording.read_text(encoding="utf-8").splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds.count("request") == kinds.count("error") >= 1 and "reply" not in kinds
    assert kinds[-1] == "outcome"  # the recording is whole; the command ends with the line


# (task.env, words of the one-line reason)
BAD_ENVS = [
    ("stack_env:StackBlock", "stack_env:StackBlock: module stack_env has no StackBlock"),
    ("no_such_module:StackBlocks", "no_such_module:StackBlocks: cannot import no_such_module"),
    ("stack_env:COLORS", "stack_env:COLORS: tuple is not a TeamEnv subclass"),
    ("stack_env:StackLevel", "stack_env:StackLevel: StackLevel is not a TeamEnv subclass"),
    ("onboard.collab.envs.sweep:SweepFloor", "SweepFloor has no class attribute spec"),
    ("onboard.collab.envs.base:TeamEnv", "TeamEnv does not define _apply, _describe"),
    ("stack_env:", "'stack_env:' is not a dotted path package.module:Class"),
    ("stack_blocks", "unknown env 'stack_blocks' (envs: sweep_floor, make_sandwich, sort_cubes,"
                     " overcooked; or a class by its dotted path, package.module:Class)"),
]  # fmt: skip


def _with_env(folder: Path, task_file: Path, env: str, name: str = "bad.toml") -> Path:
    text = task_file.read_text(encoding="utf-8")
    path = folder / name
    path.write_text(text.replace('env = "stack_env:StackBlocks"', f'env = "{env}"'), "utf-8")
    return path


@pytest.mark.parametrize(("env", "words"), BAD_ENVS, ids=[e for e, _ in BAD_ENVS])
def test_a_bad_env_is_one_line_naming_the_file_and_key(
    folder: Path, task_file: Path, env: str, words: str
) -> None:
    path = _with_env(folder, task_file, env)
    with pytest.raises(TeamTaskError) as caught:
        load_team_task(path)
    (problem,) = caught.value.problems
    assert (problem.key, problem.line) == ("task.env", line_of(path, "env = "))
    assert words in problem.message, problem.message


def test_onboard_reports_a_bad_env_in_one_line(folder: Path, task_file: Path) -> None:
    path = _with_env(folder, task_file, "stack_env:StackBlock")
    result = onboard("--robot", folder / "robot.toml", "task", "run", path, "--llm", "random")
    assert result.code == ExitCode.INPUT_ERROR and "Traceback" not in result.err
    (line,) = result.err.strip().splitlines()
    assert line == (f"onboard: error: {path}:{line_of(path, 'env = ')}: [task.env] "
                    "stack_env:StackBlock: module stack_env has no StackBlock")  # fmt: skip


def test_an_installed_package_names_its_env_by_entry_point(
    folder: Path, task_file: Path, tmp_path: Path
) -> None:
    """A distribution's metadata on sys.path (as pip installs it) registers the env under
    the group onboard.team_envs; a task file names it by that name."""
    info = tmp_path / "stack_blocks_env-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stack-blocks-env\n"
                                   "Version: 0.1\n", encoding="utf-8")  # fmt: skip
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINTS}]\nstack_blocks = stack_env:StackBlocks\n", encoding="utf-8"
    )
    path = _with_env(folder, task_file, "stack_blocks", "by_entry_point.toml")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        assert env_names()[-1] == "stack_blocks"
        env = make_env(load_team_task(path), "tower2")
    assert type(env).__name__ == "StackBlocks" and env.agents == ("Alice", "Bob")
    importlib.invalidate_caches()
    assert "stack_blocks" not in env_names()  # gone with its metadata
