"""`onboard code eval`'s episodes in CI: one trial of each of the seven tasks by ReplanVLM on
the stand-in VLM (its own process, planting errors at competence 0.5), each recorded and
replayed to the same decisions; the rows the tables are made of; the command's names."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from scripted_bots import ScriptedBots

from onboard.cli.code_eval import METHOD_NAMES
from onboard.config import RobotConfig
from onboard.evaluation.code_eval import (
    METHODS,
    InnerBot,
    internal_errors,
    planted_log,
    replay_baseline,
    run_episode,
)
from onboard.evaluation.code_report import EpisodeRow
from onboard.evaluation.code_tasks import CodeTask, load_code_tasks
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.replan.replay import replay_code_recording
from onboard.testing.vlm_standin import start_vlm_standin

TASKS = load_code_tasks()


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("standin") / "planted.jsonl"
    with start_vlm_standin(0, 0.5, log) as url:
        yield url, log


def test_the_commands_methods_are_the_harnesss() -> None:
    assert tuple(METHODS) == METHOD_NAMES


# bounded by the loop's cycles and replans, not by time: on another CPU the detector's boxes,
# hence the stand-in's draws, may differ and send an episode round its replans (task 4's
# belt runs take ~40 s each under load)
@pytest.mark.timeout(900)
@pytest.mark.parametrize("task", TASKS, ids=[f"task{t.number}" for t in TASKS])
def test_one_trial_of_each_task_runs_is_recorded_and_replays(
    robot: RobotConfig,
    embedder: Embedder,
    standin: tuple[str, Path],
    task: CodeTask,
    tmp_path: Path,
) -> None:
    url, log = standin
    path = tmp_path / "episode.jsonl"
    row = run_episode(
        robot, task, 0, 0, METHODS["full"], "standin", url, embedder, detector(), path,
        planted_log(log),
    )  # fmt: skip
    assert isinstance(row, EpisodeRow) and row.task == task.number and row.method == "full"
    assert row.asks >= 1 and row.internal_detected <= row.planted
    records = [json.loads(line) for line in path.read_text().splitlines()]
    end = next(r for r in records if r["kind"] == "outcome")
    # the robot's verdict and the judge's are both kept, and a failure says why
    assert end["done"] or end["failed"]
    assert row.runs == sum(r["kind"] == "run" for r in records)
    recorded, replayed = replay_code_recording(path)
    assert recorded == replayed


def test_a_baseline_episode_replays_on_the_twin(
    robot: RobotConfig, embedder: Embedder, tmp_path: Path
) -> None:
    task = next(t for t in TASKS if t.number == 2)
    path = tmp_path / "saycan.jsonl"
    with start_vlm_standin(0, 1.0, None) as url:
        row = run_episode(
            robot, task, 0, 0, METHODS["saycan"], "control", url, embedder, detector(), path
        )
    assert row.success  # the control row takes the stack apart first
    recorded, replayed = replay_baseline(path, embedder)
    assert recorded == replayed and recorded[-1] == "ended: done"


EPISODES = sorted((Path(__file__).parent / "data" / "code" / "episodes").glob("task*.jsonl"))


def test_each_task_has_a_recorded_episode() -> None:
    assert [p.stem for p in EPISODES] == [f"task{t.number}" for t in TASKS]


@pytest.mark.parametrize("path", EPISODES, ids=[p.stem for p in EPISODES])
def test_a_shipped_episode_replays_to_its_decisions(path: Path) -> None:
    recorded, replayed = replay_code_recording(path)
    assert recorded == replayed
    assert recorded[-1] in ("extra: done", "extra: fail", "dry_run: fail", "match: fail")


def test_the_replay_command_reproduces_a_shipped_episode(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from onboard.cli.main import main

    assert main(["replay", str(EPISODES[1])]) == 0
    assert "replay reproduces" in capsys.readouterr().out


def _request(digest: str, purpose: str = "plan", repeat: int = 0) -> dict[str, object]:
    return {"kind": "request", "bot": "decision", "hash": digest, "purpose": purpose,
            "episode": "mine", "repeat": repeat}  # fmt: skip


def _logged(digest: str, n: int, planted: bool, episode: str = "mine") -> dict[str, object]:
    return {"bot": "decision", "episode": episode, "hash": digest, "n": n,
            "planted": ["format"] if planted else []}  # fmt: skip


def test_planted_errors_are_attributed_to_the_episode_that_sent_them() -> None:
    """The stand-in's log holds every episode's requests; an episode reads only the entries
    of its own name, request hash and repeat, whatever ran before it on that server."""
    records = [
        _request("a"), {"kind": "correction", "phase": "match"},
        _request("b"), {"kind": "correction", "phase": "dry_run"},
        _request("b", repeat=1), {"kind": "program"},
    ]  # fmt: skip
    other = [_logged("a", 0, False, "other"), _logged("a", 1, False, "other")]
    log = [*other, _logged("a", 0, True), _logged("b", 0, True), _logged("b", 1, True)]
    found = internal_errors(records, log)
    # three planted, two sent back (one by the runtime's dry run, one by the stand-in's own
    # Inner Bot), none replaced: the program that ran carried the third plant
    assert (found.planted, found.detected, found.by_runtime, found.replaced) == (3, 2, 1, 0)
    fixed = internal_errors(records, [*log[:-1], _logged("b", 1, False)])
    assert (fixed.planted, fixed.detected, fixed.by_runtime, fixed.replaced) == (2, 2, 1, 2)


# four episodes of task 1 (about 10 s each on 2 quiet cores), bounded by their cycles
@pytest.mark.timeout(600)
def test_table_five_is_the_same_whatever_order_the_methods_ran_in(
    robot: RobotConfig, embedder: Embedder, tmp_path: Path
) -> None:
    """Every method's trial sends the same first request; each episode's draws and plants
    are keyed by its own name, so the rows do not depend on what ran before on the server."""
    task = next(t for t in TASKS if t.number == 1)
    rows: dict[tuple[str, ...], list[EpisodeRow]] = {}
    for order in (("full", "no_internal"), ("no_internal", "full")):
        log = tmp_path / f"{order[0]}.jsonl"
        with start_vlm_standin(0, 0.5, log) as url:
            rows[order] = [
                run_episode(robot, task, 6, 0, METHODS[m], "standin", url, embedder, detector(),
                            tmp_path / f"{order[0]}-{m}.jsonl", planted_log(log))
                for m in order
            ]  # fmt: skip
    first, second = rows.values()

    def figures(row: EpisodeRow) -> tuple[object, ...]:
        return (row.method, row.success, row.runs, row.asks, row.planted,
                row.internal_detected, row.internal_by_runtime, row.internal_corrected)  # fmt: skip

    # trial 6 plants an error in both methods' first proposal here (the draws follow the
    # camera's image, so another CPU's renders may plant elsewhere; the rows still agree)
    assert sorted(map(figures, first)) == sorted(map(figures, second))


@pytest.mark.timeout(600)
def test_the_inner_bot_can_be_served_by_another_model_sent_no_image(
    robot: RobotConfig, embedder: Embedder, standin: tuple[str, Path], tmp_path: Path
) -> None:
    """``code eval --inner``: the stand-in plants errors and writes the programs, another
    endpoint (here a scripted one, which sees only the HTTP request) answers every plan/code
    match question, text only; the episode records which and replays."""
    url, log = standin
    task = next(t for t in TASKS if t.number == 1)
    verdict = json.dumps({"match": True, "reason": "checked elsewhere"})
    path = tmp_path / "episode.jsonl"
    with ScriptedBots(inner=[verdict]) as other:
        inner = InnerBot(robot, other.base_url, "scripted", text_only=True)
        run_episode(robot, task, 0, 0, METHODS["full"], "standin, Inner Bot scripted", url,
                    embedder, detector(), path, planted_log(log), inner=inner)  # fmt: skip
        asked = other.seen("inner")
    assert asked and {role for role, _ in other.requests} == {"inner"}
    for body in asked:  # text only: no image part in any message
        parts = [
            p for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]
        ]
        assert all(p.get("type") == "text" for p in parts)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert records[0]["options"]["inner"] == "scripted"
    replies = [r["text"] for r in records if r["kind"] == "reply" and r.get("bot") == "inner"]
    assert replies == [verdict] * len(asked)
    recorded, replayed = replay_code_recording(path)
    assert recorded == replayed
