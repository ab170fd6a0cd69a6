"""The team evaluation end to end: ``onboard task eval`` and ``onboard task run`` through the
CLI's functions, on the real team stand-in (its own process), the real simulators and ONNX
critics run by onnxruntime.

The critics: the trained ones ship later (models/critics/<task>/<level>.onnx). Until then
each test builds its own with :func:`linear_critic`: a critic *fitted* by least squares (no
torch in the dev venv) on augmented data from ``onboard.collab.collect`` (no LLM: the joint
WAIT, uniform actions and the oracle's useful ones), Q linear in the features and in one
learned value per (agent slot, action) -- the agent-prefix targets of
``onboard.collab.dataset`` -- written with the critic module's MLP export (a linear function
through ReLUs as relu(x) - relu(-x)) beside a card. It carries some signal, not the trained
critic's: the figures here test the plumbing, not the seed's claim.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from team_args import eval_args

from onboard.cli.main import main
from onboard.cli.replay import replay_recording
from onboard.cli.task import eval_cells, evaluate
from onboard.collab.card import CriticCard, Metrics, OodRange, Training, card_path, write_card
from onboard.collab.collect import CollectSettings, collect
from onboard.collab.critic import file_sha256
from onboard.collab.dataset import mc_returns, prefix_targets
from onboard.collab.evaluate import env_seed
from onboard.collab.mlp import MlpWeights, to_onnx
from onboard.collab.report import Report
from onboard.collab.taskfile import TeamTask, find_team_task
from onboard.config import RobotConfig
from onboard.loop.recorder import read_recording

GAMMA = 0.95
#: (task, level) pairs the short evaluation runs: the easiest level of each task
SHORT = (("sweep_floor", "Y1_G1"), ("make_sandwich", "recipe1"), ("sort_cubes", "level1"))


def linear_critic(task: TeamTask, level: str, root: Path, episodes: int = 40) -> Path:
    """Fit and write ``root/<the task file's template for level>`` (see the module's doc)."""
    data = collect(task, level, None, CollectSettings(episodes=episodes, seed=1))
    returns = mc_returns(data.rewards, data.episode, data.t, GAMMA)
    states, actions, targets = prefix_targets(data.states, data.actions, returns)
    size, n = actions.shape
    v = len(data.meta.vocabulary)
    onehot = np.zeros((size, n * v), np.float32)
    onehot[np.arange(size)[:, None], actions + np.arange(n) * v] = 1.0
    design = np.hstack([states, onehot, np.ones((size, 1), np.float32)])
    coef, *_ = np.linalg.lstsq(design, targets, rcond=None)
    s = states.shape[1]
    w_state, w_action, bias = coef[:s], coef[s : s + n * v], float(coef[-1])
    weights = MlpWeights(
        state_in=np.stack([w_state, -w_state], axis=1).astype(np.float32),
        embed=np.stack([w_action, -w_action], axis=1).astype(np.float32),
        bias_in=np.array([bias, -bias], np.float32),
        hidden=(),
        out_w=np.array([1.0, -1.0], np.float32),
        out_b=0.0,
        n_agents=n,
    )
    model = task.critic_path(level, root)
    to_onnx(weights, model)
    card = CriticCard(
        task=task.name, level=level, agents=data.meta.agents, vocabulary=data.meta.vocabulary,
        features=data.meta.feature_names, gamma=GAMMA, sha256=file_sha256(model),
        ood=OodRange(low=[float(x) for x in data.states.min(0)],
                     high=[float(x) for x in data.states.max(0)], margin=0.05),
        training=Training(data="(in memory)", episodes=episodes, heldout_episodes=0,
                          transitions=len(data), behaviour="augmented only", augmentation=1.0,
                          seed=1, hidden=[2], trainer="numpy lstsq (a test's linear critic)"),
        metrics=Metrics(heldout_transitions=0, advantage_pairs=0),
    )  # fmt: skip
    write_card(card, card_path(model))
    return model


@pytest.fixture(scope="module")
def critics(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Linear critics for the levels the tests run, under one root (about 8 s)."""
    root = tmp_path_factory.mktemp("critics")
    for name, level in (*SHORT, ("sweep_floor", "Y1_G2")):
        linear_critic(find_team_task(name), level, root)
    return root


def short_eval(robot: RobotConfig, critics: Path, **changes: object) -> Report:
    """ReAd-S, ReAd-J and Central Plan on the easiest level of each task, 2 trials each."""
    reports = []
    for name, level in SHORT:
        args = eval_args(critics=critics, task=name, levels=[level],
                         methods=["read_s", "read_j", "central_plan"], **changes)  # fmt: skip
        reports.append(evaluate(robot, args, quiet=True))
    first = reports[0]
    for other in reports[1:]:
        first.episodes += other.episodes
        first.levels.update(other.levels)
    return first


def test_a_short_eval_on_the_stand_in_has_its_figures_and_records_nq(
    robot: RobotConfig, critics: Path, tmp_path: Path
) -> None:
    """About 15 s on a busy 2-core machine: 18 episodes, each recorded; NQ equals each
    recording's request records, every method meets the same environment seeds, the JSON
    round-trips."""
    report = short_eval(robot, critics, recordings=tmp_path / "rec")
    assert len(report.episodes) == 3 * 3 * 2
    for e in report.episodes:
        assert e.recording is not None
        records = list(read_recording(tmp_path / "rec" / e.recording))
        assert sum(r["kind"] == "request" for r in records) == e.queries > 0
        assert records[0]["kind"] == "header" and records[0]["skill_kind"] == "team"
        assert e.seed == env_seed(0, e.task, e.level, e.trial)
        assert e.steps <= 15 and (e.critic == "trained") == e.method.startswith("read_")
    summaries = report.summaries
    assert len(summaries) == 9
    for s in summaries:
        mine = [e for e in report.episodes if (e.task, e.level, e.method) == (s.task, s.level,
                                                                             s.method)]  # fmt: skip
        assert s.sr.mean == pytest.approx(sum(e.success for e in mine) / len(mine))
        assert s.nq.mean == pytest.approx(sum(e.queries for e in mine) / len(mine))
    again = Report.from_json(report.to_json())
    assert again.to_json() == report.to_json()


def test_same_seed_same_json_and_a_png(robot: RobotConfig, critics: Path, tmp_path: Path) -> None:
    """About 12 s: the CLI three times; twice with one seed it writes the same JSON (the
    wall time is kept apart under "timing"); the PNG decodes; another seed differs."""
    from PIL import Image

    outs = []
    for run, seed in enumerate((3, 3, 4)):
        out, png = tmp_path / f"{run}.json", tmp_path / f"{run}.png"
        code = main(
            [
                "task",
                "eval",
                "sweep_floor",
                "--levels",
                "Y1_G1",
                "Y1_G2",
                "--methods",
                "read_s",
                "central_plan",
                "--trials",
                "2",
                "--seed",
                str(seed),
                "--critics",
                str(critics),
                "--json",
                str(out),
                "--png",
                str(png),
            ]
        )
        assert code == 0
        outs.append(Report.from_json(out.read_text(encoding="utf-8"), str(out)))
        with Image.open(png) as image:
            image.load()
            assert image.size[0] > 600 and image.size[1] > 200
    assert outs[0].same_as(outs[1])
    assert not outs[0].same_as(outs[2])
    assert "timing" in json.loads(outs[0].to_json())


def test_task_run_records_an_episode_that_onboard_replay_reproduces(
    robot: RobotConfig, critics: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """About 2 s: ``onboard task run`` (ReAd-S, the task file's mode) writes a team
    recording; ``onboard replay`` re-runs it on the recorded task text, level and critic and
    reproduces its joint actions step by step; a changed critic is refused by its sha256."""
    root = tmp_path / "critics"
    shutil.copytree(critics, root)
    record = tmp_path / "episode.jsonl"
    code = main(["task", "run", "sort_cubes", "--level", "level1", "--seed", "5", "--critics",
                 str(root), "--record", str(record), "--json"])  # fmt: skip
    episode = json.loads(capsys.readouterr().out)
    assert code == (0 if episode["success"] else 1)
    assert episode["method"] == "read_s" and episode["recording"] == str(record)
    records = list(read_recording(record))
    assert sum(r["kind"] == "request" for r in records) == episode["queries"]
    recorded, replayed = replay_recording(record)
    joints = [r["joint"] for r in records if r["kind"] == "env_step"]
    assert len(recorded) == len(joints) == episode["steps"] and replayed == recorded
    assert main(["replay", str(record)]) == 0
    assert "replay reproduces" in capsys.readouterr().out
    linear_critic(find_team_task("sort_cubes"), "level1", root, episodes=12)  # another model
    assert main(["replay", str(record)]) == 2
    assert "the critic model differs from the one recorded" in capsys.readouterr().err


def test_ends_asks_for_each_tasks_easiest_and_hardest_level(
    critics: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SmolLM2 rows' command: ``--all --ends`` runs each task's first and last level."""
    tasks = [(name, find_team_task(name)) for name in ("sweep_floor", "sort_cubes")]
    cells = eval_cells(eval_args(critics=critics, ends=True, methods=["read_s"]), tasks)
    assert [(c.task, c.level) for c in cells] == [
        ("sweep_floor", "Y1_G1"), ("sweep_floor", "Y3_G3"),
        ("sort_cubes", "level1"), ("sort_cubes", "level5"),
    ]  # fmt: skip
    assert main(["task", "eval", "sweep_floor", "--levels", "Y1_G1", "--ends"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "onboard: error: give --levels or --ends, not both"


def test_first_trial_runs_a_later_trial_of_a_cell_from_its_environment_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """About 3 s: how a cell too long for one sitting is measured an episode at a time.
    ``--trials 1 --first-trial 2`` runs trial 2 of the cell, from the environment seed trial 2
    of a whole run starts from, recorded under its own index; a negative index is one line."""
    cell = ["task", "eval", "sweep_floor", "--levels", "Y1_G1", "--methods", "central_plan"]
    whole, alone = tmp_path / "whole.json", tmp_path / "alone.json"
    assert main([*cell, "--trials", "3", "--json", str(whole)]) == 0
    assert main([*cell, "--trials", "1", "--first-trial", "2", "--json", str(alone),
                 "--recordings", str(tmp_path / "rec")]) == 0  # fmt: skip
    (third,) = Report.from_json(alone.read_text(encoding="utf-8")).episodes
    episodes = Report.from_json(whole.read_text(encoding="utf-8")).episodes
    assert [e.trial for e in episodes] == [0, 1, 2] and third.trial == 2
    assert third.seed == episodes[2].seed == env_seed(0, "sweep_floor", "Y1_G1", 2)
    assert len({e.seed for e in episodes}) == 3
    assert third.recording is not None and third.recording.endswith("-t2.jsonl")
    assert (tmp_path / "rec" / third.recording).is_file()
    capsys.readouterr()
    assert main([*cell, "--first-trial", "-1"]) == 2
    assert capsys.readouterr().err.strip() == "onboard: error: --first-trial -1: must be 0 or more"


def test_a_missing_critic_is_one_line_before_any_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under 1 s: no episode runs and no LLM starts; one line names the file."""
    code = main(["task", "eval", "sweep_floor", "--levels", "Y2_G2", "--methods", "read_s",
                 "--critics", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1] == (f"onboard: error: {tmp_path}/models/critics/sweep_floor/Y2_G2.onnx: "
                       "no such critic model")  # fmt: skip
    assert "Traceback" not in "\n".join(err)


def test_the_controls_run_a_random_critic_a_random_proposer_and_one_that_ignores_feedback(
    robot: RobotConfig, critics: Path
) -> None:
    """About 4 s: --controls adds ReAd-S with a random critic of the trained one's shape, the
    random proposer with the trained critic, and the stand-in that ignores all feedback with
    the trained critic; the report compares their SR, and none is in the main table."""
    report = evaluate(robot, eval_args(critics=critics, task="sort_cubes", levels=["level1"],
                                       methods=["read_s", "central_plan"], controls=True,
                                       trials=1), quiet=True)  # fmt: skip
    kinds = {(e.method, e.critic, e.llm, e.proposer) for e in report.episodes}
    standin = "standin@0.6"
    assert kinds == {("read_s", "trained", standin, ""), ("central_plan", "", standin, ""),
                     ("read_s", "random", standin, ""), ("read_s", "trained", "random", "random"),
                     ("read_s", "trained", "control@0.6", "control")}  # fmt: skip
    from onboard.collab.report import _main, controls

    (control,) = controls(report.summaries, report.hardest)
    assert (control.task, control.level, control.method) == ("sort_cubes", "level1", "read_s")
    assert control.trained is not None and control.random_critic is not None
    assert control.random_proposer is not None and control.feedback_ignored is not None
    assert not control.hardest
    assert {(s.method, s.llm) for s in _main(report.summaries)} == {
        ("read_s", standin),
        ("central_plan", standin),
    }
    markdown = report.markdown()
    assert "| task | level | method | trained | random critic | random proposer | feedback " \
        "ignored |" in markdown  # fmt: skip
    assert "infeasible (the environment's check) / vetoed (the critic)" in markdown


def test_reflexion_carries_its_reflection_to_the_next_trial_of_its_cell(
    robot: RobotConfig, tmp_path: Path
) -> None:
    """The evaluation gives each cell one trial memory: a stand-in that never plans well
    (competence 0) fails trial 0, and trial 1's requests carry that trial's reflection."""
    from onboard.cli.task import Endpoints
    from onboard.collab.evaluate import Cell, EvalSettings, run_cells

    settings = EvalSettings(trials=2, competence=0.0, recordings=tmp_path)
    with Endpoints(robot, settings) as llms:
        cells = [Cell("sweep_floor", "Y1_G1", "reflexion")]
        first, second = run_cells(robot, cells, settings, llms)
    assert not first.success and first.recording and second.recording
    reflected = [r for r in read_recording(tmp_path / first.recording)
                 if r["kind"] == "request" and r["purpose"] == "reflect"]  # fmt: skip
    assert len(reflected) == 1
    later = [json.dumps(r["messages"]) for r in read_recording(tmp_path / second.recording)
             if r["kind"] == "request"]  # fmt: skip
    assert later and all("Reflection 1" in text for text in later if "## Feedback" in text)
    assert any("Reflection 1" in text for text in later)
