"""The shipped team-task critics (models/critics, rebuilt by models/critics/build.py): every
level of every task file has one, it loads, its card matches the task file and simulator,
and at probe states from fresh seeds it scores an oracle-useful first action above WAIT far
more often than an untrained critic of the same shape does. No torch: runs in CI.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from onboard.cli.critic import check_command
from onboard.collab.card import check_card
from onboard.collab.collect import CollectSettings, explore_joint
from onboard.collab.critic import WAIT_INDEX, Critic, QModel
from onboard.collab.envs import WAIT, TeamEnv, make_env
from onboard.collab.envs.search import oracle_steps
from onboard.collab.mlp import MlpWeights, to_onnx
from onboard.collab.taskfile import TeamTask, load_team_task, shipped_tasks_dir, team_task_files

#: the share of probe states at which a shipped critic must score the useful action above WAIT
RANK_FLOOR = 0.9
#: levels where the floor is out of reach for any critic, with their own: on Forced
#: Coordination the Monte Carlo values themselves rank the useful action above WAIT at only
#: 0.625 of the card's probe states (the pot-side chef's useful move is often a move to wait
#: somewhere else; with 2 steps of slack one WAIT seldom changes the outcome); random weights
#: of the critic's shape reach 0.29 here, the shipped critic 0.71
LEVEL_FLOOR = {"overcooked_forced_coordination/forced_coordination": 0.6}
#: probe states per level (fresh seeds: the build's episodes and probes used 0..1,999,999)
STATES = 40

TASKS = [load_team_task(path) for path in team_task_files(shipped_tasks_dir())]
LEVELS = [(task, level) for task in TASKS for level in task.levels]


def ids(case: tuple[TeamTask, str]) -> str:
    return f"{case[0].name}/{case[1]}"


def probe_pairs(env: TeamEnv, seed: int) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    """States reached from fresh seeds (and, with ``env.starts = "held_out"``, from start
    states the critics never trained on) by the augmented policy (the oracle with exploration
    and waits), where the first agent has a useful action besides WAIT: the states [P, S]
    and that action's index [P] (the oracle's first)."""
    rng = random.Random(f"shipped-probes/{seed}")
    settings = CollectSettings()
    states, useful = [], []
    first = env.agents[0]
    for k in range(STATES * 3):
        if len(states) == STATES:
            break
        env.reset(3_000_000 + 1000 * seed + k)
        for _ in range(rng.randrange(env.step_limit // 2 + 1)):
            env.step(explore_joint(env, rng, settings))
            if env.done:
                break
        if env.done:
            continue
        helpful = [a for a in env.useful(first) if a != WAIT]
        # only where a plan can still succeed: past that every action's Q is 0 (Overcooked's
        # step limits leave no slack after a few wasted steps) and the order is noise
        if helpful and oracle_steps(env) is not None:
            states.append(env.features())
            useful.append(env.action_index(helpful[0]))
    return np.stack(states), np.asarray(useful, np.int64)


def rank_rate(model: QModel, states: np.ndarray, useful: np.ndarray) -> float:
    """The share of states at which the first agent's useful action outscores its WAIT:
    ``Q(s, [a, ABSENT...]) > Q(s, [WAIT, ABSENT...])``, the local advantages' order."""
    rows = np.zeros((2 * len(states), model.n_agents), np.int64)
    rows[0::2, 0], rows[1::2, 0] = useful, WAIT_INDEX
    q = model(np.repeat(states, 2, axis=0).astype(np.float32), rows)
    return float(np.mean(q[0::2] > q[1::2]))


@pytest.mark.parametrize("case", LEVELS, ids=ids)
def test_every_level_ships_a_critic_that_matches_its_task(
    case: tuple[TeamTask, str], capsys: pytest.CaptureFixture[str]
) -> None:
    task, level = case
    path = task.critic_file(level)
    assert path.is_file(), f"{path}: missing (python models/critics/build.py)"
    assert path.stat().st_size < 400_000
    critic = Critic.load(path)
    env = make_env(task, level)
    assert check_card(critic.card, task.name, level, env.vocabulary, env.feature_names,
                      agents=task.agent_names) == []  # fmt: skip
    assert check_command(path, None) == 0  # what onboard critic check runs
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == f"task file: {task.path}: matches"
    card = critic.card
    m = card.metrics
    # the card's honest figures: held out, better than predicting the mean return
    assert m.mse is not None and m.mse_baseline is not None
    assert m.mse < 0.85 * m.mse_baseline, (m.mse, m.mse_baseline)
    assert m.advantage_basis == "probes" and m.probe_states > 0 and m.probe_rollouts > 0
    assert card.training.behaviour.startswith("central_plan by standin@")


@pytest.fixture(scope="module")
def rates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[float, float]]:
    """Per level: (the shipped critic's rate, the rate of random weights of its shape)."""
    folder = tmp_path_factory.mktemp("random-critics")
    out = {}
    for task, level in LEVELS:
        path = task.critic_file(level)
        card = Critic.load(path).card
        weights = MlpWeights.random(len(card.features), len(card.agents), len(card.vocabulary),
                                    tuple(card.training.hidden), seed=0)  # fmt: skip
        untrained = folder / f"{task.name}-{level}.onnx"
        to_onnx(weights, untrained)
        states, useful = probe_pairs(make_env(task, level, starts="held_out"), seed=1)
        out[f"{task.name}/{level}"] = (
            rank_rate(QModel(path), states, useful),
            rank_rate(QModel(untrained), states, useful),
        )
    return out


def test_shipped_critics_rank_a_useful_first_action_above_wait(
    rates: dict[str, tuple[float, float]],
) -> None:
    low = {
        level: rate
        for level, (rate, _) in rates.items()
        if rate < LEVEL_FLOOR.get(level, RANK_FLOOR)
    }
    assert low == {}, f"under {RANK_FLOOR} (or the level's own floor): {low}"
    for level, floor in LEVEL_FLOOR.items():  # still well above an untrained critic's
        assert rates[level][0] > rates[level][1] + 0.3, (level, rates[level], floor)


def test_random_weights_of_the_same_shape_fail_the_same_check(
    rates: dict[str, tuple[float, float]],
) -> None:
    """An untrained net prefers some actions to others whatever the state, so on a level
    where the useful first action is mostly one action it may pass by luck; over the
    levels it does not."""
    untrained = {level: rate for level, (_, rate) in rates.items()}
    assert np.mean(list(untrained.values())) < RANK_FLOOR - 0.2, untrained
    low = [level for level, rate in untrained.items() if rate < RANK_FLOOR]
    assert len(low) > len(untrained) / 2, untrained
