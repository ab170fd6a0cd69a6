"""Scores from a learned critic: Q, the out-of-distribution guard, local and joint advantages.

The critic is an ONNX model (inputs ``state`` float32 [B, S] and ``actions`` int64 [B, N],
output ``q`` float32 [B]) with a TOML card beside it (:mod:`onboard.collab.card`). This
module sees only arrays and action indices: it imports no environment module, so a critic
scores any simulator or robot whose features and vocabulary match its card.

The seed's equations (gamma the discount, w the joint WAIT action)::

    local  A_i(s, a_1..i-1, a_i) = Q(s, a_1..i) - Q(s, a_1..i-1)      (ReAd-S)
    joint  A(s, a)               = Q(s, a) - Q(s, w) / gamma           (ReAd-J)

where agents outside the subset get the ABSENT index (0), so ``Q(s, a_1..0)`` is Q of the
empty subset, the state's value under the behaviour policy.

A state outside the per-feature range seen in training (plus a margin) is *flagged*: its
scores carry ``ood=True`` and the caller records the flag and treats the score as unknown.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onboard.base.digest import file_sha256
from onboard.base.errors import CriticError
from onboard.collab.card import ABSENT, CriticCard, card_path, load_card

__all__ = [
    "ABSENT_INDEX",
    "WAIT_INDEX",
    "Critic",
    "QModel",
    "Score",
    "Scores",
    "file_sha256",
]

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

ABSENT_INDEX, WAIT_INDEX = 0, 1  # the card's vocabulary starts ABSENT, WAIT
#: batch sizes with inputs and output bound once: a proposal alone (1) and a proposal with
#: the row it is compared with (2: ReAd-S's prefix, ReAd-J's joint WAIT)
BOUND_BATCHES = (1, 2)
CHUNK = 4096  # rows a run at most: many candidates go in cache-sized batches (bench/critic.py)
_META_VOCABULARY = "onboard.critic.vocabulary_size"  # as onboard.collab.mlp writes it


@dataclass(frozen=True)
class Score:
    """One advantage; ``ood``: the state lies outside the training range (score unknown)."""

    value: float
    ood: bool


@dataclass(frozen=True)
class Scores:
    """Advantages of several candidates in one state (``ood`` is the state's flag)."""

    values: FloatArray
    ood: bool

    def __getitem__(self, k: int) -> Score:
        return Score(float(self.values[k]), self.ood)

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class _Bound:
    """The buffers of a batch of one size, bound to the session once (QModel's fast path)."""

    state: FloatArray
    actions: IntArray
    q: FloatArray
    binding: ort.IOBinding
    raw: Any = None  # the binding's C++ object, run without the Python wrapper's checks
    lock: threading.Lock = field(default_factory=threading.Lock)


class QModel:
    """The ONNX graph alone (no card): checks its inputs and output, runs batches.

    One intra-op thread, sequential execution: at these sizes more threads only add
    synchronisation (bench/critic.py).
    """

    def __init__(self, path: Path, threads: int = 1) -> None:
        self.path = path
        if not path.is_file():
            raise CriticError(f"{path}: no such critic model")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(
                str(path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise CriticError(f"{path}: not a readable ONNX model ({_first_line(exc)})") from exc
        self._options = ort.RunOptions()
        self._options.log_severity_level = 4  # a failed run is a CriticError, not a log line
        self.state_size, self.n_agents = self._check_signature()
        meta = self._session.get_modelmeta().custom_metadata_map
        self.vocabulary_size: int | None = (
            int(meta[_META_VOCABULARY]) if meta.get(_META_VOCABULARY, "").isdigit() else None
        )
        # The binding's own run skips the Python wrapper's per-call input checks (a third of
        # the batch-1 time); this class checks shapes and dtypes itself, once per call.
        self._run: Any = getattr(self._session, "_sess", None)
        if self._run is None or not hasattr(self._run, "run"):
            self._run = None
        self._bound = {rows: self._bind(rows) for rows in BOUND_BATCHES}

    def _check_signature(self) -> tuple[int, int]:
        inputs = {i.name: i for i in self._session.get_inputs()}
        outputs = self._session.get_outputs()
        expected = "inputs state float32 [B, S] and actions int64 [B, N], output q float32 [B]"
        if set(inputs) != {"state", "actions"}:
            raise CriticError(f"{self.path}: inputs {sorted(inputs)}; expected {expected}")
        if len(outputs) != 1 or outputs[0].name != "q":
            names = [o.name for o in outputs]
            raise CriticError(f"{self.path}: outputs {names}; expected {expected}")
        sizes = []
        for name, dtype in (("state", "tensor(float)"), ("actions", "tensor(int64)")):
            node = inputs[name]
            shape = list(node.shape)
            if node.type != dtype:
                raise CriticError(f"{self.path}: input {name} is {node.type}; expected {expected}")
            if len(shape) != 2 or not isinstance(shape[1], int):
                raise CriticError(
                    f"{self.path}: input {name} has shape {_fmt(shape)}; expected {expected}"
                )
            sizes.append(shape[1])
        q = outputs[0]
        if q.type != "tensor(float)" or len(q.shape) != 1:
            raise CriticError(
                f"{self.path}: output q is {q.type} {_fmt(q.shape)}; expected {expected}"
            )
        return sizes[0], sizes[1]

    def _bind(self, rows: int) -> _Bound | None:
        """Inputs and output of ``rows`` rows, bound once: a call of that size then only
        copies its rows in, skipping the feed's conversion and the output's allocation
        (bench/critic.py: the IOBinding row). None where the binding lacks the hooks; calls
        then take the general path."""
        if self._run is None or not hasattr(self._run, "run_with_iobinding"):
            return None
        try:
            row = _Bound(
                np.zeros((rows, self.state_size), np.float32),
                np.zeros((rows, self.n_agents), np.int64),
                np.zeros(rows, np.float32),
                self._session.io_binding(),
            )
            row.binding.bind_ortvalue_input("state", ort.OrtValue.ortvalue_from_numpy(row.state))
            row.binding.bind_ortvalue_input(
                "actions", ort.OrtValue.ortvalue_from_numpy(row.actions)
            )
            row.binding.bind_ortvalue_output("q", ort.OrtValue.ortvalue_from_numpy(row.q))
            row.raw = row.binding._iobinding
        except Exception:
            return None
        return row

    def __call__(self, states: FloatArray, actions: IntArray) -> FloatArray:
        """Q for each row: ``states`` [B, S] float32, ``actions`` [B, N] int64."""
        if states.dtype != np.float32 or actions.dtype != np.int64:
            raise TypeError(f"state {states.dtype} / actions {actions.dtype}: need float32/int64")
        if states.ndim != 2 or states.shape[1] != self.state_size:
            raise ValueError(f"state shape {states.shape}; the critic takes [B, {self.state_size}]")
        if actions.shape != (states.shape[0], self.n_agents):
            raise ValueError(
                f"actions shape {actions.shape}; the critic takes [{states.shape[0]},"
                f" {self.n_agents}]"
            )
        try:
            return self._infer(states, actions)
        except Exception as exc:
            raise CriticError(f"{self.path}: inference failed: {_first_line(exc)}") from exc

    def _infer(self, states: FloatArray, actions: IntArray) -> FloatArray:
        row = self._bound.get(states.shape[0])
        if row is not None and row.lock.acquire(blocking=False):
            try:  # the bound buffers are one: a second thread meanwhile takes the general path
                row.state[...] = states
                row.actions[...] = actions
                self._run.run_with_iobinding(row.raw, self._options)
                return row.q.copy()
            finally:
                row.lock.release()
        runner = self._run if self._run is not None else self._session
        (q,) = runner.run(["q"], {"state": states, "actions": actions}, self._options)
        out: FloatArray = q
        return out


def _first_line(exc: Exception) -> str:
    """onnxruntime's message cut to one line (its type when it has none)."""
    text = str(exc)
    return text.splitlines()[0][:160] if text else type(exc).__name__


class Critic:
    """A critic model with its card: Q, the OOD guard and the seed's advantages."""

    def __init__(self, model: QModel, card: CriticCard, path: Path) -> None:
        self.model, self.card, self.path = model, card, path
        self.gamma = float(card.gamma)
        self.n_agents = len(card.agents)
        self._index = {name: k for k, name in enumerate(card.vocabulary)}
        low = np.asarray(card.ood.low, np.float32)
        high = np.asarray(card.ood.high, np.float32)
        slack = np.float32(card.ood.margin) * (high - low)
        self._low, self._high = low - slack, high + slack
        self._wait = np.full(self.n_agents, WAIT_INDEX, np.int64)

    @classmethod
    def load(cls, path: Path, threads: int = 1) -> Critic:
        """Open ``path`` (.onnx) and its card (.toml beside it); every mismatch between the
        two is one :class:`CriticError` line."""
        if not path.is_file():
            raise CriticError(f"{path}: no such critic model")
        card = load_card(card_path(path))
        digest = file_sha256(path)
        if digest != card.sha256:
            raise CriticError(
                f"{path}: sha256 {digest[:12]}... differs from its card's {card.sha256[:12]}..."
                f" ({card_path(path).name} describes another model)"
            )
        model = QModel(path, threads)
        where = f"{path}: the card ({card_path(path).name})"
        if model.state_size != len(card.features):
            raise CriticError(
                f"{where} names {len(card.features)} features, the model's state input has"
                f" {model.state_size}"
            )
        if model.n_agents != len(card.agents):
            raise CriticError(
                f"{where} names {len(card.agents)} agents, the model's actions input has"
                f" {model.n_agents}"
            )
        vocabulary = len(card.vocabulary)
        if model.vocabulary_size is not None and model.vocabulary_size != vocabulary:
            raise CriticError(
                f"{where} has a vocabulary of {vocabulary}, the model's embedding has"
                f" {model.vocabulary_size} actions per agent"
            )
        cls._probe(model, vocabulary, where)
        return cls(model, card, path)

    @staticmethod
    def _probe(model: QModel, vocabulary: int, where: str) -> None:
        """Run the largest index in every slot: a model built for a smaller vocabulary
        (without the size in its metadata) fails here, not mid-episode."""
        states = np.zeros((2, model.state_size), np.float32)
        actions = np.full((2, model.n_agents), vocabulary - 1, np.int64)
        actions[1] = WAIT_INDEX
        try:
            q = model(states, actions)
        except CriticError as exc:
            raise CriticError(
                f"{where} has a vocabulary of {vocabulary}, the model fails on action index"
                f" {vocabulary - 1}"
            ) from exc
        if q.shape != (2,):
            raise CriticError(f"{model.path}: output q has shape {list(q.shape)} for a batch of 2")

    # -- names and indices --------------------------------------------------------------

    @property
    def vocabulary(self) -> list[str]:
        return self.card.vocabulary

    def index(self, action: str) -> int:
        """The vocabulary index of an action (``ValueError`` if the critic does not know it)."""
        k = self._index.get(action)
        if k is None or action == ABSENT:
            raise ValueError(f"{action!r} is not an action of critic {self.path}")
        return k

    # -- Q and the guard ----------------------------------------------------------------

    def q(self, states: FloatArray, actions: IntArray) -> FloatArray:
        """Q [B] for states [B, S] float32 and action indices [B, N] int64."""
        return self.model(states, actions)

    def guard_only(self, names: Collection[str]) -> None:
        """Range-check only the named features (the others may take any value): a box per
        dimension suits counts and distances, not a sentence embedding, whose new wordings
        fall outside some of its 384 ranges however close their meaning is."""
        unknown = set(names) - set(self.card.features)
        if unknown:
            raise ValueError(f"{self.path}: no features {sorted(unknown)}")
        free = np.asarray([name not in names for name in self.card.features])
        self._low = np.where(free, -np.inf, self._low).astype(np.float32)
        self._high = np.where(free, np.inf, self._high).astype(np.float32)

    def ood(self, states: FloatArray) -> BoolArray:
        """Per row (or for one state [S]): outside the training range plus the margin
        (NaN is outside too)."""
        inside = (states >= self._low) & (states <= self._high)
        flagged: BoolArray = np.asarray(~inside.all(axis=-1), dtype=np.bool_)
        return flagged

    def clip(self, states: FloatArray) -> FloatArray:
        """``states`` moved into the training range (plus the margin), feature by feature:
        the nearest state the guard would not flag."""
        clipped: FloatArray = np.clip(states, self._low, self._high).astype(np.float32)
        return clipped

    # -- the seed's advantages ----------------------------------------------------------

    def local_advantages(
        self, state: FloatArray, prefix: Sequence[int], actions: Sequence[int]
    ) -> Scores:
        """ReAd-S: ``Q(s, prefix + [a]) - Q(s, prefix)`` for each candidate ``a`` of the next
        agent (slot ``len(prefix)``), in one batch."""
        u = len(prefix)
        if u >= self.n_agents:
            raise ValueError(f"a prefix of {u} leaves no agent to score ({self.n_agents} agents)")
        rows = np.zeros((len(actions) + 1, self.n_agents), np.int64)
        rows[:, :u] = prefix
        rows[1:, u] = actions
        self._check_indices(rows[1:, : u + 1])
        q = self._score(state, rows)
        return Scores(q[1:] - q[0], bool(self.ood(state)))

    def local_advantage(self, state: FloatArray, prefix: Sequence[int], action: int) -> Score:
        return self.local_advantages(state, prefix, [action])[0]

    def joint_advantages(
        self, state: FloatArray, joints: IntArray | Sequence[Sequence[int]]
    ) -> Scores:
        """ReAd-J: ``Q(s, a) - Q(s, w) / gamma`` for each candidate joint action [K, N]."""
        candidates = np.asarray(joints, np.int64).reshape(-1, self.n_agents)
        self._check_indices(candidates)
        rows = np.concatenate([self._wait[None], candidates])
        q = self._score(state, rows)
        return Scores(q[1:] - q[0] / np.float32(self.gamma), bool(self.ood(state)))

    def joint_advantage(self, state: FloatArray, joint: Sequence[int]) -> Score:
        return self.joint_advantages(state, [joint])[0]

    def _score(self, state: FloatArray, rows: IntArray) -> FloatArray:
        """Q of one state with each row of actions, in chunks that stay in cache."""
        if state.shape != (self.model.state_size,):
            raise ValueError(
                f"state shape {state.shape}; the critic takes [{self.model.state_size}]"
            )
        tiled = np.repeat(state.astype(np.float32, copy=False)[None], min(len(rows), CHUNK), 0)
        if len(rows) <= CHUNK:
            return self.q(tiled, rows)
        q = np.empty(len(rows), np.float32)
        for start in range(0, len(rows), CHUNK):
            chunk = rows[start : start + CHUNK]
            q[start : start + len(chunk)] = self.q(tiled[: len(chunk)], chunk)
        return q

    def _check_indices(self, rows: IntArray) -> None:
        if rows.size and (rows.min() < WAIT_INDEX or rows.max() >= len(self.card.vocabulary)):
            raise ValueError(
                f"action indices must be within {WAIT_INDEX}..{len(self.card.vocabulary) - 1}"
                f" ({ABSENT} is not an action): got {rows.tolist()}"
            )


def _fmt(shape: Sequence[object]) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else str(d or "?") for d in shape) + "]"
