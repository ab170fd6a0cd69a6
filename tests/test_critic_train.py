"""Training a critic (torch, the ``train`` extra) on a chain whose values are known.

Skipped without torch: CI installs ``dev``, not ``train``, so these run where ``train`` is
installed (``make`` on a development machine); tests/test_critic.py runs in CI.

The chain: two agents push a counter from its start (0..3) to 6 within 8 steps. Alice moves
it with PUSH, Bob with PULL; every other action (WAIT, the other's verb, SPIN) does nothing;
each unit of progress is reward 1 (a sub-goal). The behaviour policy is uniform, so in every
state short of the end the progressing action's advantage is about +1 and every other's
about 0: a critic that learned anything ranks the progressing action first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="torch is the train extra (pip install -e '.[train]')")

from test_cli import ONBOARD, onboard, one_line_error

from onboard.collab.card import CriticCard, card_path, load_card, write_card
from onboard.collab.critic import Critic, file_sha256
from onboard.collab.dataset import (
    Dataset,
    DatasetMeta,
    mc_returns,
    save_dataset,
    split_episodes,
)
from onboard.collab.mlp import MlpWeights, to_onnx
from onboard.collab.train import (
    TrainSettings,
    advantage_pairs,
    spearman,
    torch_module,
    train_critic,
)

LENGTH, LIMIT = 6, 8
VOCABULARY = ["ABSENT", "WAIT", "PULL", "PUSH", "SPIN"]
WAIT, PULL, PUSH, SPIN = 1, 2, 3, 4
PROGRESS = {0: PUSH, 1: PULL}  # agent slot -> its progressing action
ACTIONS = [WAIT, PULL, PUSH, SPIN]


def features(position: int, step: int) -> np.ndarray:
    return np.array([position / LENGTH, step / LIMIT], np.float32)


def chain_data(episodes: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    states, actions, rewards, episode, t = [], [], [], [], []
    for e in range(episodes):
        position = int(rng.integers(0, 4))
        for step in range(LIMIT):
            joint = rng.choice(ACTIONS, size=2)
            gain = min(LENGTH - position, int(joint[0] == PUSH) + int(joint[1] == PULL))
            states.append(features(position, step))
            actions.append(joint)
            rewards.append(float(gain))
            episode.append(e)
            t.append(step)
            position += gain
            if position == LENGTH:
                break
    meta = DatasetMeta(
        task="chain", level="L6", agents=["Alice", "Bob"], vocabulary=VOCABULARY,
        feature_names=["position", "step"], behaviour="uniform", seeds=[seed],
    )  # fmt: skip
    return Dataset(
        np.stack(states), np.stack(actions).astype(np.int64), np.asarray(rewards, np.float32),
        np.asarray(episode, np.int64), np.asarray(t, np.int64), meta,
    )  # fmt: skip


def exact_q(gamma: float) -> dict[tuple[int, int, int, int], float]:
    """Q(position, step, alice, bob) under the uniform behaviour policy, by backward
    induction over the chain (the expectation its Monte Carlo returns estimate)."""
    value: dict[tuple[int, int], float] = {}
    q: dict[tuple[int, int, int, int], float] = {}
    for step in reversed(range(LIMIT)):
        for position in range(LENGTH):
            for a in ACTIONS:
                for b in ACTIONS:
                    gain = min(LENGTH - position, int(a == PUSH) + int(b == PULL))
                    done = position + gain == LENGTH or step + 1 == LIMIT
                    later = 0.0 if done else value[(position + gain, step + 1)]
                    q[(position, step, a, b)] = gain + gamma * later
            value[(position, step)] = float(
                np.mean([q[(position, step, a, b)] for a in ACTIONS for b in ACTIONS])
            )
    return q


def ranking_failures(critic: Critic) -> list[str]:
    """States (short of the end, where both agents' progress counts) at which the critic
    does not put the progressing action first, for Alice, for Bob after each of Alice's
    actions, and for the joint action."""
    failures = []
    for position in range(LENGTH - 1):
        for step in range(LIMIT):
            state = features(position, step)
            alice = critic.local_advantages(state, [], ACTIONS).values
            if ACTIONS[int(np.argmax(alice))] != PUSH or np.sum(alice == alice.max()) > 1:
                failures.append(f"Alice at {position},{step}: {alice}")
            for first in ACTIONS:
                bob = critic.local_advantages(state, [first], ACTIONS).values
                if ACTIONS[int(np.argmax(bob))] != PULL:
                    failures.append(f"Bob after {first} at {position},{step}: {bob}")
            joints = [[a, b] for a in ACTIONS for b in ACTIONS]
            joint = critic.joint_advantages(state, joints).values
            if joints[int(np.argmax(joint))] != [PUSH, PULL]:
                failures.append(f"joint at {position},{step}")
    return failures


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("chain")
    data = folder / "chain.npz"
    save_dataset(chain_data(400, seed=1), data)
    model = folder / "chain" / "L6.onnx"
    train_critic(data, model, TrainSettings(steps=1500, seed=0, gamma=0.9))
    return data, model


def test_the_trained_critic_ranks_the_progressing_action_first(trained: tuple[Path, Path]) -> None:
    critic = Critic.load(trained[1])
    assert ranking_failures(critic) == []


def test_the_same_check_fails_for_random_weights_of_the_same_shape(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    card = load_card(card_path(trained[1]))
    for seed in range(3):
        model = tmp_path / f"random{seed}.onnx"
        to_onnx(MlpWeights.random(2, 2, len(VOCABULARY), tuple(card.training.hidden), seed), model)
        write_card(card.model_copy(update={"sha256": file_sha256(model)}), card_path(model))
        assert ranking_failures(Critic.load(model)), f"random weights (seed {seed}) ranked right"


def test_the_card_carries_the_data_and_held_out_metrics(trained: tuple[Path, Path]) -> None:
    data, model = trained
    card = load_card(card_path(model))
    assert (card.task, card.level, card.agents) == ("chain", "L6", ["Alice", "Bob"])
    assert card.vocabulary == VOCABULARY and card.features == ["position", "step"]
    assert card.sha256 == file_sha256(model) and card.gamma == 0.9
    assert card.training.data == str(data) and card.training.data_sha256 == file_sha256(data)
    assert card.training.episodes == 320 and card.training.heldout_episodes == 80
    assert card.training.trainer.startswith("torch ")
    m = card.metrics
    assert m.mse is not None and m.mse_baseline is not None
    assert m.mse < 0.5 * m.mse_baseline, m  # far better than predicting the mean return
    assert m.advantage_pairs > 50
    # the Monte Carlo advantages are single noisy returns: the exact advantages correlate
    # with them only so far, and the trained critic must come close to that ceiling
    held = chain_heldout(card)
    returns = mc_returns(held.rewards, held.episode, held.t, card.gamma)
    q = exact_q(card.gamma)
    exact = np.array([q[key(s, a)] for s, a in zip(held.states, held.actions, strict=True)])
    baseline = np.array(
        [np.mean([q[key(s, (a, b))] for a in ACTIONS for b in ACTIONS]) for s in held.states]
    )
    ideal, mc = advantage_pairs(held, returns, (exact - baseline).astype(np.float32))
    ceiling = spearman(ideal, mc)
    assert ceiling is not None and m.spearman_advantage is not None
    assert m.spearman_advantage > ceiling - 0.1, (m, ceiling)
    assert m.wait_gap is not None and m.wait_gap < 0.5, m
    # the training range is the guard's: the chain's own states pass, others are flagged
    critic = Critic.load(model)
    assert not critic.ood(features(2, 3)) and critic.ood(features(9, 3))


def key(state: np.ndarray, joint: object) -> tuple[int, int, int, int]:
    a, b = joint  # type: ignore[misc]
    return (round(float(state[0]) * LENGTH), round(float(state[1]) * LIMIT), int(a), int(b))


def chain_heldout(card: CriticCard) -> Dataset:
    data = chain_data(400, seed=1)
    _, test_ids = split_episodes(data.episode, 0.2, card.training.seed)
    return data.select(test_ids)


def test_q_is_close_to_the_exact_values(trained: tuple[Path, Path]) -> None:
    critic = Critic.load(trained[1])
    card = critic.card
    q = exact_q(critic.gamma)
    held = chain_heldout(card)  # states as the behaviour policy visits them
    exact = np.array([q[key(s, a)] for s, a in zip(held.states, held.actions, strict=True)])
    error = np.abs(critic.q(held.states, held.actions) - exact)
    # 320 episodes of noisy returns: about 0.1 off on a spread of about 0.65
    spread = np.abs(exact - exact.mean()).mean()
    assert error.mean() < 0.2 * spread, (error.mean(), spread)


def test_the_export_equals_torch_and_numpy(trained: tuple[Path, Path]) -> None:
    import torch

    weights = MlpWeights.random(2, 2, len(VOCABULARY), (16, 8), seed=3)
    rng = np.random.default_rng(0)
    states = rng.random((50, 2), dtype=np.float32)
    actions = rng.integers(0, len(VOCABULARY), (50, 2)).astype(np.int64)
    with torch.no_grad():
        q_torch = torch_module(weights)(torch.from_numpy(states), torch.from_numpy(actions))
    np.testing.assert_allclose(q_torch.numpy(), weights.forward(states, actions), atol=1e-5)


def test_same_data_and_seed_give_the_same_model(trained: tuple[Path, Path], tmp_path: Path) -> None:
    data, model = trained
    again = tmp_path / "again.onnx"
    train_critic(data, again, TrainSettings(steps=1500, seed=0, gamma=0.9))
    assert file_sha256(again) == file_sha256(model)


def test_onboard_critic_train_and_check(trained: tuple[Path, Path], tmp_path: Path) -> None:
    data = trained[0]
    out = tmp_path / "cli" / "L6.onnx"
    done = onboard("critic", "train", "--data", data, "--out", out, "--steps", "300",
                   "--task", "chain", "--level", "L6", timeout=300)  # fmt: skip
    assert done.code == 0, done.err
    assert out.is_file() and card_path(out).is_file()
    assert "Spearman" in done.out
    checked = onboard("critic", "check", out)
    assert checked.code == 0, checked.err
    assert "task: chain  level: L6" in checked.out
    wrong = onboard("critic", "train", "--data", data, "--out", out, "--level", "L9")
    assert "the data is for chain L6, not chain L9" in one_line_error(wrong)


def test_without_torch_training_names_the_extra(trained: tuple[Path, Path], tmp_path: Path) -> None:
    # a real interpreter in which torch cannot be imported (a meta-path entry refusing it)
    code = (
        "import sys\n"
        "class NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('no torch here')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from onboard.cli.main import main\n"
        f"sys.exit(main(['critic', 'train', '--data', {str(trained[0])!r},"
        f" '--out', {str(tmp_path / 'x.onnx')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "pip install 'onboard[train]'" in done.stderr
    assert ONBOARD.exists()
