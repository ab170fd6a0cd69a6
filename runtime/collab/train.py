"""Train a critic from a dataset: Monte Carlo returns, prefix targets, an MLP, ONNX, its card.

Needs torch (the ``train`` extra), imported inside the functions that use it: the runtime
never imports torch. The network is :class:`onboard.collab.mlp.MlpWeights`'s: the state's
standardisation and the return's scale are folded into its first and last layers at export,
so the ONNX graph takes the raw features and answers in returns.

Overfitting is held off by a validation split of the training episodes (the weights of the
best validation loss are kept, training stops after ``patience`` checks without a better
one) and AdamW's weight decay.

The card's metrics come from the exported file (the model that ships), on held-out
episodes: the MSE of ``Q(s, a)`` against the Monte Carlo return (beside the MSE of
predicting the training mean) and the mean ``|Q(s, empty) - Q(s, w) / gamma|``. Advantages:
when the dataset carries probe states (onboard.collab.probes: Monte Carlo rollouts from
held-out states), the Spearman correlation of the predicted local advantage of the first
agent ``Q(s, a_1) - Q(s, empty)`` and of the joint one ``Q(s, a) - Q(s, w) / gamma`` with
their Monte Carlo values, and the share of oracle-useful first actions scored above WAIT;
without probes, the Spearman over held-out states seen with two or more joint actions (the
group's mean return minus the state's), which seldom exist in the task simulators.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CriticError
from onboard.collab.card import CriticCard, Metrics, OodRange, Training, card_path, write_card
from onboard.collab.critic import WAIT_INDEX, QModel, file_sha256
from onboard.collab.dataset import (
    Dataset,
    Probes,
    load_dataset,
    mc_returns,
    prefix_targets,
    split_episodes,
)
from onboard.collab.mlp import MlpWeights, to_onnx

if TYPE_CHECKING:
    import torch

__all__ = [
    "TrainSettings",
    "advantage_pairs",
    "critic_metrics",
    "probe_metrics",
    "spearman",
    "torch_module",
    "train_critic",
]

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
EXTRA = "pip install 'onboard[train]' (the train extra: torch)"


@dataclass(frozen=True)
class TrainSettings:
    gamma: float = 0.95
    hidden: tuple[int, ...] = (64, 64)
    steps: int = 4000  # gradient steps at most
    batch: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-3  # AdamW's, on the weights (not the biases)
    heldout: float = 0.2  # share of episodes held out for the card's metrics
    #: share of the training episodes set aside to pick the stopping point (0: train all
    #: ``steps``, keep the last weights)
    validation: float = 0.15
    every: int = 50  # gradient steps between two validation checks
    patience: int = 8  # checks without a better validation loss before stopping
    seed: int = 0
    ood_margin: float = 0.05


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise CriticError(f"training a critic needs torch: {EXTRA}") from exc
    return torch


def train_critic(
    data_path: Path,
    out: Path,
    settings: TrainSettings = TrainSettings(),
    task: str | None = None,
    level: str | None = None,
) -> CriticCard:
    """Fit a critic on ``data_path``, write ``out`` (.onnx) and its card beside it."""
    torch = _torch()
    data = load_dataset(data_path)
    meta = data.meta
    if (task is not None and task != meta.task) or (level is not None and level != meta.level):
        raise CriticError(
            f"{data_path}: the data is for {meta.task} {meta.level}, not"
            f" {task or meta.task} {level or meta.level}"
        )
    returns = mc_returns(data.rewards, data.episode, data.t, settings.gamma)
    train_ids, test_ids = split_episodes(data.episode, settings.heldout, settings.seed)
    train_rows = np.isin(data.episode, train_ids)
    fit_ids, val_ids = split_episodes(train_ids, settings.validation, settings.seed + 1)
    fit_rows = np.isin(data.episode, fit_ids)
    val_rows = np.isin(data.episode, val_ids)
    fit = prefix_targets(data.states[fit_rows], data.actions[fit_rows], returns[fit_rows])
    validation = prefix_targets(data.states[val_rows], data.actions[val_rows], returns[val_rows])
    fitted = _fit(torch, fit, validation if len(val_ids) else None, len(meta.vocabulary), settings)
    weights = fitted.weights
    states, actions = fit[0], fit[1]
    out = out.with_suffix(".onnx")
    to_onnx(weights, out)
    model = QModel(out)
    _check_export(model, weights, states[:256], actions[:256])

    train_states = data.states[train_rows]
    heldout = data.select(test_ids)
    card = CriticCard(
        task=meta.task,
        level=meta.level,
        agents=meta.agents,
        vocabulary=meta.vocabulary,
        features=meta.feature_names,
        reach=meta.reach,
        gamma=settings.gamma,
        sha256=file_sha256(out),
        ood=OodRange(
            low=[float(v) for v in train_states.min(axis=0)],
            high=[float(v) for v in train_states.max(axis=0)],
            margin=settings.ood_margin,
        ),
        training=Training(
            data=str(data_path),
            data_sha256=hashlib.sha256(data_path.read_bytes()).hexdigest(),
            episodes=len(train_ids),
            heldout_episodes=len(test_ids),
            transitions=int(train_rows.sum()),
            behaviour=meta.behaviour,
            augmentation=meta.augmentation,
            seed=settings.seed,
            starts=meta.starts,
            hidden=list(settings.hidden),
            steps=fitted.ran,
            batch=settings.batch,
            weight_decay=settings.weight_decay,
            validation_episodes=len(val_ids),
            best_step=fitted.best_step,
            trainer=f"torch {torch.__version__}",
        ),
        metrics=critic_metrics(
            model, heldout, returns[~train_rows], settings.gamma, float(returns[train_rows].mean())
        ),
    )
    write_card(card, card_path(out))
    return card


@dataclass(frozen=True)
class Fitted:
    weights: MlpWeights
    #: the gradient step whose weights were kept (the best validation loss)
    best_step: int
    #: gradient steps run (fewer than ``settings.steps`` when it stopped early)
    ran: int


Targets = tuple[FloatArray, IntArray, FloatArray]


def _fit(
    torch: Any,
    fit: Targets,
    validation: Targets | None,
    vocabulary: int,
    settings: TrainSettings,
) -> Fitted:
    """Adam(W) on the standardised MSE; with a validation set, the weights of the best
    validation loss (checked every ``settings.every`` steps) and a stop after ``patience``
    checks without improvement."""
    states, actions, targets = fit
    torch.manual_seed(settings.seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # deterministic, and this machine's cores are shared
    try:
        # float64: a constant feature's float32 std is rounding noise (2e-5), and dividing
        # by it gave weights whose export no longer matched numpy; features are in [0, 1]
        mean = states.mean(axis=0, dtype=np.float64).astype(np.float32)
        std64 = states.std(axis=0, dtype=np.float64)
        std = np.where(std64 > 1e-3, std64, 1.0).astype(np.float32)
        y_mean, y_std = float(targets.mean()), float(targets.std()) or 1.0

        def tensors(part: Targets) -> tuple[Any, Any, Any]:
            s, a, y = part
            return (
                torch.from_numpy(((s - mean) / std).astype(np.float32)),
                torch.from_numpy(a),
                torch.from_numpy(((y - y_mean) / y_std).astype(np.float32)),
            )

        x, a, y = tensors(fit)
        net = _net(torch, states.shape[1], actions.shape[1], vocabulary, settings.hidden)
        decay = [p for name, p in net.named_parameters() if not name.endswith("bias")]
        rest = [p for name, p in net.named_parameters() if name.endswith("bias")]
        optimiser = torch.optim.AdamW(
            [{"params": decay, "weight_decay": settings.weight_decay},
             {"params": rest, "weight_decay": 0.0}],
            lr=settings.lr,
        )  # fmt: skip
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, settings.steps)
        generator = torch.Generator().manual_seed(settings.seed)
        held = None if validation is None or len(validation[2]) == 0 else tensors(validation)
        best = (float("inf"), 0, copy.deepcopy(net.state_dict()))
        waited, ran = 0, 0
        for step in range(1, settings.steps + 1):
            pick = torch.randint(0, len(y), (settings.batch,), generator=generator)
            loss = torch.nn.functional.mse_loss(net(x[pick], a[pick]), y[pick])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            ran = step
            if held is None or (step % settings.every and step != settings.steps):
                continue
            with torch.no_grad():
                score = float(torch.nn.functional.mse_loss(net(held[0], held[1]), held[2]))
            if score < best[0]:
                best, waited = (score, step, copy.deepcopy(net.state_dict())), 0
            else:
                waited += 1
                if waited >= settings.patience:
                    break
        if held is not None:
            net.load_state_dict(best[2])
        return Fitted(_fold(net, mean, std, y_mean, y_std), best[1] if held else ran, ran)
    finally:
        torch.set_num_threads(threads)


def _net(torch: Any, state_size: int, n_agents: int, vocabulary: int, hidden: Sequence[int]) -> Any:
    """The torch twin of :class:`MlpWeights` (a function: torch is imported lazily)."""
    nn = torch.nn
    module: Any = nn.Module

    class Net(module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.n_agents, self.vocabulary = n_agents, vocabulary
            self.state_in = nn.Linear(state_size, hidden[0])
            self.embed = nn.Embedding(n_agents * vocabulary, hidden[0])
            nn.init.normal_(self.embed.weight, std=0.1)
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(hidden))
            self.out = nn.Linear(hidden[-1], 1)
            self.register_buffer("offsets", torch.arange(n_agents) * vocabulary)

        def forward(self, states: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
            h = torch.relu(self.state_in(states) + self.embed(actions + self.offsets).sum(1))
            for layer in self.hidden:
                h = torch.relu(layer(h))
            q: torch.Tensor = self.out(h).squeeze(-1)
            return q

    return Net()


def _fold(net: Any, mean: FloatArray, std: FloatArray, y_mean: float, y_std: float) -> MlpWeights:
    """The raw-input, raw-output weights of a net trained on standardised data."""

    def arr(t: Any) -> FloatArray:
        out: FloatArray = t.detach().numpy().astype(np.float32)
        return out

    w_in = arr(net.state_in.weight).T / std[:, None]  # [S, H]
    b_in = arr(net.state_in.bias) - (mean / std) @ arr(net.state_in.weight).T
    return MlpWeights(
        state_in=w_in.astype(np.float32),
        embed=arr(net.embed.weight),
        bias_in=b_in.astype(np.float32),
        hidden=tuple((arr(layer.weight).T.copy(), arr(layer.bias)) for layer in net.hidden),
        out_w=(arr(net.out.weight)[0] * y_std).astype(np.float32),
        out_b=float(arr(net.out.bias)[0]) * y_std + y_mean,
        n_agents=net.n_agents,
    )


def torch_module(weights: MlpWeights) -> Any:
    """A torch module computing exactly ``weights.forward`` (the benchmark's torch row)."""
    torch = _torch()
    hidden = [weights.bias_in.shape[0], *(b.shape[0] for _, b in weights.hidden)]
    net = _net(torch, weights.state_size, weights.n_agents, weights.vocabulary_size, hidden)
    with torch.no_grad():
        net.state_in.weight.copy_(torch.from_numpy(weights.state_in.T.copy()))
        net.state_in.bias.copy_(torch.from_numpy(weights.bias_in))
        net.embed.weight.copy_(torch.from_numpy(weights.embed))
        for layer, (w, b) in zip(net.hidden, weights.hidden, strict=True):
            layer.weight.copy_(torch.from_numpy(w.T.copy()))
            layer.bias.copy_(torch.from_numpy(b))
        net.out.weight.copy_(torch.from_numpy(weights.out_w[None].copy()))
        net.out.bias.fill_(weights.out_b)
    return net.eval()


def _check_export(
    model: QModel, weights: MlpWeights, states: FloatArray, actions: IntArray
) -> None:
    q_onnx, q_numpy = model(states, actions), weights.forward(states, actions)
    scale = max(1.0, float(np.abs(q_numpy).max()))
    if not np.allclose(q_onnx, q_numpy, atol=1e-4 * scale, rtol=1e-4):
        worst = float(np.abs(q_onnx - q_numpy).max())
        raise CriticError(f"{model.path}: the exported graph differs from the weights by {worst}")


def critic_metrics(
    model: QModel, heldout: Dataset, returns: FloatArray, gamma: float, train_mean: float
) -> Metrics:
    """The card's figures on held-out transitions (``returns`` are theirs, in order) and,
    when the data has them, on its probe states."""
    size = len(heldout)
    if size == 0:
        return Metrics(heldout_transitions=0, mse=None, mse_baseline=None,
                       spearman_advantage=None, advantage_pairs=0, wait_gap=None)  # fmt: skip
    n = heldout.actions.shape[1]
    q = model(heldout.states, heldout.actions)
    empty = model(heldout.states, np.zeros((size, n), np.int64))
    wait = model(heldout.states, np.full((size, n), WAIT_INDEX, np.int64))
    common: dict[str, Any] = {
        "heldout_transitions": size,
        "mse": float(np.mean((q - returns) ** 2)),
        "mse_baseline": float(np.mean((returns - train_mean) ** 2)),
        "wait_gap": float(np.mean(np.abs(empty - wait / gamma))),
    }
    if heldout.probes is not None and len(heldout.probes):
        meta = heldout.meta
        found = probe_metrics(model, heldout.probes, gamma)
        return Metrics(**common, **found, probe_rollouts=meta.probe_rollouts,
                       probe_policy=meta.probe_policy)  # fmt: skip
    predicted, monte_carlo = advantage_pairs(heldout, returns, q - empty)
    return Metrics(**common, spearman_advantage=spearman(predicted, monte_carlo),
                   advantage_pairs=len(predicted), advantage_basis="groups")  # fmt: skip


def probe_metrics(model: QModel, probes: Probes, gamma: float) -> dict[str, Any]:
    """Predicted against Monte Carlo advantages at the probe states: the first agent's local
    advantage and the joint one (Spearman over every (state, candidate) pair), and how often
    an oracle-useful first action is scored above WAIT."""
    p, k = probes.first.shape
    j, n = probes.joints.shape[1:]
    # the first agent's candidates, the others ABSENT; row 0 of each state: all ABSENT
    local = np.zeros((p, k + 1, n), np.int64)
    local[:, 1:, 0] = probes.first
    q_local = model(np.repeat(probes.states, k + 1, axis=0), local.reshape(-1, n)).reshape(p, -1)
    predicted = q_local[:, 1:] - q_local[:, :1]
    measured = probes.first_q - probes.value[:, None]
    q_joint = model(np.repeat(probes.states, j, axis=0), probes.joints.reshape(-1, n))
    q_joint = q_joint.reshape(p, j)
    joint_predicted = q_joint - q_joint[:, :1] / gamma  # candidate 0 is the joint WAIT
    joint_measured = probes.joint_q - probes.joint_q[:, :1] / gamma
    wait = probes.first == WAIT_INDEX
    has_wait = wait.any(axis=1)
    useful = (probes.first_useful == 1) & has_wait[:, None]
    wait_col = np.argmax(wait, axis=1)
    rows = np.arange(p)
    over = predicted > predicted[rows, wait_col][:, None]
    over_mc = measured > measured[rows, wait_col][:, None]
    pairs = int(useful.sum())
    return {
        "spearman_advantage": spearman(predicted.ravel(), measured.ravel()),
        "advantage_pairs": int(predicted.size),
        "advantage_basis": "probes",
        "spearman_joint": spearman(joint_predicted.ravel(), joint_measured.ravel()),
        "joint_pairs": int(joint_predicted.size),
        "useful_over_wait": float(over[useful].mean()) if pairs else None,
        "useful_over_wait_mc": float(over_mc[useful].mean()) if pairs else None,
        "useful_pairs": pairs,
        "probe_states": p,
    }


def advantage_pairs(
    data: Dataset, returns: FloatArray, predicted: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """(predicted, Monte Carlo) advantage per (state, joint action) group, over states seen
    with at least two different joint actions."""
    by_state: dict[bytes, dict[bytes, list[int]]] = defaultdict(lambda: defaultdict(list))
    for k in range(len(data)):
        by_state[data.states[k].tobytes()][data.actions[k].tobytes()].append(k)
    pred, mc = [], []
    for groups in by_state.values():
        if len(groups) < 2:
            continue
        state_mean = float(np.mean([returns[k] for rows in groups.values() for k in rows]))
        for rows in groups.values():
            pred.append(float(predicted[rows[0]]))
            mc.append(float(np.mean(returns[rows])) - state_mean)
    return np.asarray(pred, np.float32), np.asarray(mc, np.float32)


def spearman(x: FloatArray, y: FloatArray) -> float | None:
    """Spearman's rank correlation (ties get their mean rank); None under 3 points or when
    either side is constant."""
    if len(x) < 3:
        return None
    rx, ry = _ranks(x), _ranks(y)
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def _ranks(values: FloatArray) -> npt.NDArray[np.float64]:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), np.float64)
    ranks[order] = np.arange(len(values), dtype=np.float64)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    mean_rank: npt.NDArray[np.float64] = sums[inverse] / counts[inverse]
    return mean_rank
