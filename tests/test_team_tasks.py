"""Team task files (``tasks/*.toml``): the shipped ones load, and every kind of mistake is one
line FILE:LINE: [key] reason from the loader and from ``onboard check`` (a real process)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from test_cli import ROOT, line_of, onboard, robot_copy

from onboard.base.errors import ConfigError, TeamTaskError
from onboard.collab.taskfile import (
    ENV_SPECS,
    load_team_task,
    shipped_tasks_dir,
    sort_starts,
    team_task_files,
)

TASKS = ROOT / "tasks"
ERROR_LINE = re.compile(r"^onboard: error: \S+:\d+: \[\S+\] .+$")  # keys may hold [i]
SEED_LEVELS = {
    "sweep_floor": ["Y1_G1", "Y1_G2", "Y2_G2", "Y2_G3", "Y3_G3"],
    "make_sandwich": ["recipe1", "recipe2", "recipe3", "recipe4"],
    "sort_cubes": ["level1", "level2", "level3", "level4", "level5"],
}


def test_the_shipped_task_files_load_with_the_seeds_settings() -> None:
    assert shipped_tasks_dir().resolve() == TASKS.resolve()
    files = team_task_files(TASKS)
    assert [p.stem for p in files] == ["make_sandwich", "overcooked_cramped_room",
                                       "overcooked_forced_coordination", "sort_cubes",
                                       "sweep_floor"]  # fmt: skip
    for path in (p for p in files if not p.stem.startswith("overcooked")):
        task = load_team_task(path)
        assert task.name == path.stem == task.env
        assert list(task.levels) == SEED_LEVELS[task.name]
        assert task.step_limit == 15
        assert task.refine_limit == (10 if task.name == "sort_cubes" else 15)
        assert "WAIT" in task.verbs
        assert len(task.agent_names) == ENV_SPECS[task.env].agents
        level = SEED_LEVELS[task.name][-1]
        assert task.critic_path(level, Path("/r")) == Path(
            f"/r/models/critics/{task.name}/{level}.onnx"
        )
        assert task.critic.mode in ("sequential", "joint")


def test_the_overcooked_task_files_have_the_seeds_settings() -> None:
    """ReAd's adaptation: Cramped Room in at most 20 steps, Forced Coordination in 25 (a
    file each: the step limit is a task's), 2 onions a soup, cooking time 2."""
    for layout, limit in (("cramped_room", 20), ("forced_coordination", 25)):
        task = load_team_task(TASKS / f"overcooked_{layout}.toml")
        assert (task.env, list(task.levels), task.step_limit) == ("overcooked", [layout], limit)
        level = task.level(layout)
        assert (level.onions, level.cook_time) == (2, 2)  # type: ignore[union-attr]
        assert set(task.verbs) == {"NORTH", "SOUTH", "EAST", "WEST", "INTERACT", "WAIT"}


def test_sort_levels_grow_in_distance() -> None:
    task = load_team_task(TASKS / "sort_cubes.toml")
    bands = [level.distance for level in task.levels.values()]  # type: ignore[union-attr]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(bands))
    assert all(sort_starts(*band) for band in bands)


def test_a_level_not_in_the_file_names_the_levels() -> None:
    task = load_team_task(TASKS / "sweep_floor.toml")
    with pytest.raises(TeamTaskError, match=r"no level 'Y9_G9' \(levels: Y1_G1, "):
        task.level("Y9_G9")


def _broken(tmp_path: Path, old: str, new: str, source: str = "sweep_floor.toml") -> Path:
    text = (TASKS / source).read_text(encoding="utf-8")
    assert old in text, old
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    path = folder / source
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


# (file, text, replacement, the key reported, the line's text, words of the reason)
MISTAKES = [
    ("sweep_floor.toml", "refine_limit = 15", "refine_limt = 15", "task.refine_limt",
     "refine_limt", "unknown key"),
    ("sweep_floor.toml", "[levels.Y1_G1]", "[levels.Y4_G1]", "levels.Y4_G1",
     "[levels.Y4_G1]", "yellow = 1"),
    ("sort_cubes.toml", "[levels.level1]", "[levels.easy]", "levels.easy",
     "[levels.easy]", "does not know level 'easy'"),
    ("make_sandwich.toml", '"cheese", "ham", "bread_slice2"]', '"cheese", "spam", "bread_slice2"]',
     "levels.recipe1.recipe[2]", "recipe = [", "unknown food 'spam'"),
    ("sweep_floor.toml", 'mode = "sequential"', 'mode = "parallel"', "critic.mode",
     "mode = ", "'sequential' or 'joint'"),
    ("sweep_floor.toml", 'verbs = ["MOVE", "SWEEP", "DUMP", "WAIT"]',
     'verbs = ["MOVE", "SWEEP", "DUMP"]', "actions.verbs", "verbs = ", "WAIT is missing"),
    ("sort_cubes.toml", 'name = "Chad"', 'name = "Bob"', "agents[2].name",
     'name = "Bob"\nrole = "in front of panel6"', "'Bob' appears twice"),
    ("sort_cubes.toml", 'reach = ["panel5", "panel6", "panel7"]',
     'reach = ["panel5", "panel6", "panel8"]', "agents[2].reach[2]", 'reach = ["panel5"',
     "'panel8' is not a place"),
    ("sweep_floor.toml", 'env = "sweep_floor"', 'env = "sweep_flor"', "task.env", "env = ",
     "unknown env 'sweep_flor'"),
    ("overcooked_cramped_room.toml", "cook_time = 2", "cook_time = 0",
     "levels.cramped_room.cook_time", "cook_time = 0", "greater than or equal to 1"),
    ("overcooked_cramped_room.toml", "onions = 2", "onions = 2\ntomatoes = 1",
     "levels.cramped_room.tomatoes", "tomatoes = 1", "unknown key for env overcooked"),
    ("overcooked_forced_coordination.toml", "[levels.forced_coordination]",
     "[levels.coordination_ring]", "levels.coordination_ring", "[levels.coordination_ring]",
     "does not know level 'coordination_ring'"),
    ("overcooked_forced_coordination.toml", 'reach = ["pot", "serving_counter"]',
     'reach = ["pot", "serving_hatch"]', "agents[0].reach[1]", 'reach = ["pot", "serving_h',
     "'serving_hatch' is not a place of env overcooked"),
    ("overcooked_cramped_room.toml", '"INTERACT", "WAIT"]', '"WAIT"]', "actions.verbs",
     "verbs = ", "env overcooked needs INTERACT"),
]  # fmt: skip


def _line(path: Path, text: str) -> int:
    if "\n" in text:  # the second of two equal lines: find the block
        source = path.read_text(encoding="utf-8")
        return source[: source.index(text)].count("\n") + 1
    return line_of(path, text)


@pytest.mark.parametrize(("source", "old", "new", "key", "at", "words"), MISTAKES)
def test_each_mistake_is_one_problem_with_file_key_and_line(
    tmp_path: Path, source: str, old: str, new: str, key: str, at: str, words: str
) -> None:
    path = _broken(tmp_path, old, new, source)
    with pytest.raises(TeamTaskError) as caught:
        load_team_task(path)
    assert isinstance(caught.value, ConfigError)
    (problem,) = caught.value.problems
    assert problem.key == key
    assert problem.line == _line(path, at), str(problem)
    assert words in problem.message, str(problem)


@pytest.mark.parametrize("mistake", [m for m in MISTAKES if m[3] in (
    "task.refine_limt", "levels.Y4_G1", "critic.mode", "actions.verbs", "agents[2].name")],
    ids=lambda m: m[3])  # fmt: skip
def test_onboard_check_reports_a_broken_task_file_in_one_line(
    tmp_path: Path, mistake: tuple[str, ...]
) -> None:
    source, old, new, key, at, words = mistake
    path = _broken(tmp_path, old, new, source)
    result = onboard("--robot", robot_copy(tmp_path), "check")
    assert result.code == 2, result.out  # as for every config error (ExitCode.INPUT_ERROR)
    assert "Traceback" not in result.err
    (line,) = result.err.strip().splitlines()
    assert ERROR_LINE.match(line), line
    assert line.startswith(f"onboard: error: {path}:{_line(path, at)}: [{key}] "), line
    assert words in line


def test_onboard_check_lists_the_team_tasks() -> None:
    result = onboard("check")
    assert result.code == 0, result.err
    assert re.search(r"^  5 team tasks: make_sandwich \(2 agents, 4 levels\), "
                     r"overcooked_cramped_room \(2 agents, 1 levels\), "
                     r"overcooked_forced_coordination \(2 agents, 1 levels\), sort_cubes "
                     r"\(3 agents, 5 levels\), sweep_floor \(2 agents, 5 levels\)$",
                     result.out, re.MULTILINE)  # fmt: skip


def test_a_toml_syntax_error_is_one_line(tmp_path: Path) -> None:
    path = _broken(tmp_path, "step_limit = 15", "step_limit = = 15")
    with pytest.raises(TeamTaskError) as caught:
        load_team_task(path)
    (problem,) = caught.value.problems
    assert problem.line == line_of(path, "step_limit") and "TOML syntax error" in problem.message


class _NoLLM:
    """Never asked: the critic is refused before the first request."""

    def complete(self, messages: object, schema: object = None) -> object:
        raise AssertionError("the episode asked the LLM")


NO_LLM: Any = _NoLLM()


def _variant(tmp_path: Path) -> Path:
    """Sweep Floor with its first robot called Ann: the shipped critics' cards name Alice."""
    text = (TASKS / "sweep_floor.toml").read_text(encoding="utf-8").replace("Alice", "Ann")
    folder = tmp_path / "tasks"
    folder.mkdir(exist_ok=True)
    path = folder / "sweep_floor.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_critic_whose_card_does_not_fit_the_level_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    from onboard.base.errors import CriticError
    from onboard.collab.critic import Critic
    from onboard.collab.envs import make_env
    from onboard.collab.episode import TeamSettings, run_team_episode
    from onboard.collab.methods import method
    from onboard.collab.taskfile import load_team_task
    from onboard.loop.recorder import MemoryRecorder

    task = load_team_task(_variant(tmp_path))
    critic = Critic.load(load_team_task(TASKS / "sweep_floor.toml").critic_file("Y1_G1"))
    recorder = MemoryRecorder()
    with pytest.raises(CriticError) as caught:
        run_team_episode(make_env(task, "Y1_G1"), method("read_j"), NO_LLM, critic,
                         TeamSettings(task, "Y1_G1"), recorder, 0)  # fmt: skip
    (line,) = str(caught.value).splitlines()
    assert "Y1_G1.onnx: agents ['Alice', 'Bob'] in the card, ['Ann', 'Bob'] in the task" in line
    assert recorder.records == []  # refused before the first record: nothing asked, nothing run


def test_onboard_check_reports_a_critic_that_does_not_fit_and_notes_a_missing_one(
    tmp_path: Path,
) -> None:
    path = _variant(tmp_path)
    result = onboard("--robot", robot_copy(tmp_path), "check")
    assert result.code == 2, result.out
    lines = result.err.strip().splitlines()
    assert len(lines) == 5  # one per level: every shipped Sweep Floor critic names Alice
    assert all(line.startswith(f"onboard: error: {path}: [critic.model] ") for line in lines)
    assert "does not fit level Y1_G1: agents ['Alice', 'Bob'] in the card" in lines[0]
    # the shipped tasks all have their critics; a task without one is a note, not an error
    text = (TASKS / "sweep_floor.toml").read_text(encoding="utf-8")
    text = text.replace('name = "sweep_floor"', 'name = "sweep_copy"', 1)
    path.write_text(text.replace("critics/sweep_floor/", "critics/sweep_copy/"))
    result = onboard("--robot", robot_copy(tmp_path), "check")
    assert result.code == 0, result.err
    assert (
        "note: sweep_copy: no critic for level(s) Y1_G1, Y1_G2, Y2_G2, Y2_G3, Y3_G3" in result.out
    )
