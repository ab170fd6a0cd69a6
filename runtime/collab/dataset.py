"""A critic's training data: one ``.npz`` of transitions, Monte Carlo returns, prefix targets.

The file (written by ``onboard critic collect``, read by ``onboard critic train``) holds

- ``states`` float32 [T, S]: the features before each step;
- ``actions`` int64 [T, N]: the joint action taken (vocabulary indices, never ABSENT);
- ``rewards`` float32 [T]; ``episode`` int64 [T]; ``t`` int64 [T] (0, 1, ... per episode);
- ``meta``: a JSON string, :class:`DatasetMeta` (task, level, agents, vocabulary, feature
  names, the behaviour policy, the seeds, the share of augmented transitions);
- optionally ``probe_*``: :class:`Probes`, Monte Carlo values at held-out probe states
  (onboard.collab.probes), on seeds apart from the episodes' (``meta.probe_seeds``).

The seed's targets: the return ``R_t = sum_k gamma^k r_{t+k}`` to the episode's end, and for
every agent prefix ``u = 0..N`` the same return with the agents after ``u`` set to ABSENT.
Regressing Q on all of them makes ``Q(s, a_1..u)`` the return expected when the first ``u``
agents act so and the rest follow the data (the complement "sampled from the dataset").
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pydantic

from onboard.base.errors import CriticError

__all__ = [
    "Dataset",
    "DatasetMeta",
    "Probes",
    "load_dataset",
    "mc_returns",
    "prefix_targets",
    "save_dataset",
    "split_episodes",
]

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


class DatasetMeta(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    task: str
    level: str
    agents: list[str] = pydantic.Field(min_length=1)
    vocabulary: list[str] = pydantic.Field(min_length=2)
    feature_names: list[str] = pydantic.Field(min_length=1)
    behaviour: str
    seeds: list[int] = []
    augmentation: float = pydantic.Field(0.0, ge=0.0, le=1.0)
    #: the probe states' seeds, and how their Monte Carlo values were made
    probe_seeds: list[int] = []
    probe_rollouts: int = pydantic.Field(0, ge=0)
    probe_policy: str = ""
    #: where each agent reaches (a task that differs only there is another task), and the
    #: start states the episodes drew from (onboard.collab.envs.base); None/"all" before
    reach: dict[str, list[str]] | None = None
    starts: str = "all"


@dataclass(frozen=True)
class Probes:
    """Monte Carlo values at P held-out states (onboard.collab.probes): K candidates of the
    first agent, J joint candidates (the joint WAIT first)."""

    states: FloatArray  # [P, S]
    value: FloatArray  # [P]: MC V(s), the behaviour policy's return
    first: IntArray  # [P, K]: the first agent's candidate actions (vocabulary indices)
    first_q: FloatArray  # [P, K]: MC Q(s, a_1), the others as the behaviour policy acts
    first_useful: IntArray  # [P, K]: 1 where the candidate is one of the oracle's useful ones
    joints: IntArray  # [P, J, N]: joint candidates, [:, 0] the joint WAIT
    joint_q: FloatArray  # [P, J]: MC Q(s, a)

    def __len__(self) -> int:
        return len(self.value)


_PROBE_KEYS = ("states", "value", "first", "first_q", "first_useful", "joints", "joint_q")


@dataclass(frozen=True)
class Dataset:
    states: FloatArray
    actions: IntArray
    rewards: FloatArray
    episode: IntArray
    t: IntArray
    meta: DatasetMeta
    probes: Probes | None = None

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def episodes(self) -> IntArray:
        ids: IntArray = np.unique(self.episode)
        return ids

    def select(self, episodes: IntArray) -> Dataset:
        """The transitions of the given episodes (order kept)."""
        keep = np.isin(self.episode, episodes)
        return Dataset(
            self.states[keep], self.actions[keep], self.rewards[keep], self.episode[keep],
            self.t[keep], self.meta, self.probes,
        )  # fmt: skip


def save_dataset(data: Dataset, path: Path) -> None:
    """Write ``data`` as a compressed ``.npz``, byte for byte the same for the same data
    (numpy's own savez stamps each member with the time; a card names its data's sha256)."""
    arrays: dict[str, npt.NDArray[Any]] = {
        "states": data.states, "actions": data.actions, "rewards": data.rewards,
        "episode": data.episode, "t": data.t, "meta": np.array(data.meta.model_dump_json()),
    }  # fmt: skip
    if data.probes is not None:
        arrays |= {f"probe_{k}": getattr(data.probes, k) for k in _PROBE_KEYS}
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, value in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(member, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(value), allow_pickle=False)


_KEYS = ("states", "actions", "rewards", "episode", "t", "meta")


def load_dataset(path: Path) -> Dataset:
    """Read and check a dataset file; any problem is one :class:`CriticError` line."""
    if not path.is_file():
        raise CriticError(f"{path}: no such dataset")
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in _KEYS if k not in npz.files]
            if missing:
                raise CriticError(f"{path}: not a critic dataset (no {', '.join(missing)})")
            arrays = {k: npz[k] for k in _KEYS}
            probe_arrays = {k: npz[f"probe_{k}"] for k in _PROBE_KEYS if f"probe_{k}" in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise CriticError(f"{path}: not a readable .npz ({exc})") from exc
    try:
        meta = DatasetMeta.model_validate_json(str(arrays["meta"]))
    except pydantic.ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CriticError(f"{path}: meta {where}: {err['msg']}") from exc
    data = Dataset(
        states=_as(arrays["states"], np.float32, path, "states"),
        actions=_as(arrays["actions"], np.int64, path, "actions"),
        rewards=_as(arrays["rewards"], np.float32, path, "rewards"),
        episode=_as(arrays["episode"], np.int64, path, "episode"),
        t=_as(arrays["t"], np.int64, path, "t"),
        meta=meta,
        probes=_probes(probe_arrays, path),
    )
    problem = _problem(data) or (None if data.probes is None else _probe_problem(data))
    if problem:
        raise CriticError(f"{path}: {problem}")
    return data


def _as(value: npt.NDArray[Any], dtype: type[Any], path: Path, name: str) -> npt.NDArray[Any]:
    if value.dtype.kind not in "fiu":
        raise CriticError(f"{path}: {name} is {value.dtype}, not numbers")
    return value.astype(dtype, copy=False)


def _probes(arrays: dict[str, npt.NDArray[Any]], path: Path) -> Probes | None:
    if not arrays:
        return None
    missing = [f"probe_{k}" for k in _PROBE_KEYS if k not in arrays]
    if missing:
        raise CriticError(f"{path}: probes without {', '.join(missing)}")
    types = {"first": np.int64, "first_useful": np.int64, "joints": np.int64}
    return Probes(**{k: _as(v, types.get(k, np.float32), path, f"probe_{k}")
                     for k, v in arrays.items()})  # fmt: skip


def _probe_problem(data: Dataset) -> str | None:
    probes = data.probes
    assert probes is not None
    p = probes.value.shape[0] if probes.value.ndim == 1 else -1
    s, n = len(data.meta.feature_names), len(data.meta.agents)
    k = probes.first.shape[-1] if probes.first.ndim else 0
    j = probes.joint_q.shape[-1] if probes.joint_q.ndim else 0
    expected = {"states": (p, s), "value": (p,), "first": (p, k), "first_q": (p, k),
                "first_useful": (p, k), "joints": (p, j, n), "joint_q": (p, j)}  # fmt: skip
    for name, shape in expected.items():
        if getattr(probes, name).shape != shape:
            got = list(getattr(probes, name).shape)
            return f"probe_{name} has shape {got}; expected {list(shape)}"
    if not all(np.isfinite(getattr(probes, f)).all() for f in ("states", "value", "first_q",
                                                               "joint_q")):  # fmt: skip
        return "probe values hold NaN or infinity"
    for name in ("first", "joints"):
        values = getattr(probes, name)
        if values.size and (values.min() < 1 or values.max() >= len(data.meta.vocabulary)):
            return f"probe_{name}: action indices outside 1..{len(data.meta.vocabulary) - 1}"
    return None


def _problem(data: Dataset) -> str | None:
    n, s = len(data.meta.agents), len(data.meta.feature_names)
    size = len(data.rewards)
    if size == 0:
        return "no transitions"
    if data.states.shape != (size, s):
        return f"states has shape {list(data.states.shape)}; expected [{size}, {s}] ({s} features)"
    if data.actions.shape != (size, n):
        return f"actions has shape {list(data.actions.shape)}; expected [{size}, {n}] ({n} agents)"
    for name in ("rewards", "episode", "t"):
        if getattr(data, name).shape != (size,):
            return f"{name} has shape {list(getattr(data, name).shape)}; expected [{size}]"
    if not (np.isfinite(data.states).all() and np.isfinite(data.rewards).all()):
        return "states or rewards hold NaN or infinity"
    low, high = int(data.actions.min()), int(data.actions.max())
    if low < 1 or high >= len(data.meta.vocabulary):
        return (
            f"action indices {low}..{high} outside 1..{len(data.meta.vocabulary) - 1}"
            " (a taken action is never ABSENT)"
        )
    order = np.lexsort((data.t, data.episode))
    ep, t = data.episode[order], data.t[order]
    starts = np.r_[True, ep[1:] != ep[:-1]]
    expected = np.arange(size) - np.maximum.accumulate(np.where(starts, np.arange(size), 0))
    if not np.array_equal(t, expected):
        bad = int(ep[np.argmax(t != expected)])
        return f"episode {bad}: steps t are not 0, 1, 2, ... (a step missing or repeated)"
    return None


def mc_returns(rewards: FloatArray, episode: IntArray, t: IntArray, gamma: float) -> FloatArray:
    """``R_t = r_t + gamma R_{t+1}`` within each episode (0 after its last step), in the
    transitions' own order."""
    returns = np.zeros(len(rewards), np.float64)
    order = np.lexsort((t, episode))
    running, previous = 0.0, None
    for k in order[::-1]:  # backwards: each episode from its last step
        if episode[k] != previous:
            running, previous = 0.0, episode[k]
        running = float(rewards[k]) + gamma * running
        returns[k] = running
    out: FloatArray = returns.astype(np.float32)
    return out


def prefix_targets(
    states: FloatArray, actions: IntArray, returns: FloatArray
) -> tuple[FloatArray, IntArray, FloatArray]:
    """Every transition ``N + 1`` times: prefix ``u = 0..N`` kept, the rest ABSENT (0)."""
    size, n = actions.shape
    kept = np.arange(n)[None, :] < np.arange(n + 1)[:, None]  # [N + 1, N]
    masked = np.where(kept[None], actions[:, None, :], 0).reshape(size * (n + 1), n)
    tiled_states: FloatArray = np.repeat(states, n + 1, axis=0)
    tiled_returns: FloatArray = np.repeat(returns, n + 1)
    return tiled_states, masked.astype(np.int64), tiled_returns


def split_episodes(episodes: IntArray, heldout: float, seed: int) -> tuple[IntArray, IntArray]:
    """A seeded split of episode ids: (training, held out); at least one of each when there
    are two or more episodes and ``heldout`` > 0."""
    ids = np.unique(episodes)
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(ids)
    count = round(len(ids) * heldout)
    if heldout > 0 and len(ids) >= 2:
        count = min(max(count, 1), len(ids) - 1)
    test, train = np.sort(shuffled[:count]), np.sort(shuffled[count:])
    return train, test
