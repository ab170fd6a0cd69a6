"""A critic's card: the TOML file beside ``<level>.onnx`` that says what the model scores.

::

    task = "sweep_floor"
    level = "Y2_G3"
    agents = ["Alice", "Bob"]            # the model's agent-slot order
    vocabulary = ["ABSENT", "WAIT", ...] # index -> action, the same for every slot
    features = ["cube_0_x", ...]         # the state vector's names, in order
    gamma = 0.95
    sha256 = "..."                       # of the .onnx file beside it

    [ood]                                # the range each feature had in training
    low = [...]
    high = [...]
    margin = 0.05                        # share of the range allowed beyond it

    [training]                           # where the model came from
    data = "...", episodes = ..., transitions = ..., behaviour = "...", augmentation = 0.3,
    seed = 0, ...

    [metrics]                            # on held-out episodes
    mse = ..., mse_baseline = ..., spearman_advantage = ..., wait_gap = ..., ...

Every error is a :class:`CriticError` of one line naming the card file (and the key's line).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Self

import pydantic
import tomlkit

from onboard.base.errors import ConfigError, CriticError
from onboard.base.tomlfile import KeyLines, read_toml, validation_problems

__all__ = [
    "ABSENT",
    "WAIT",
    "CriticCard",
    "Metrics",
    "OodRange",
    "Training",
    "card_path",
    "check_card",
    "load_card",
    "write_card",
]

ABSENT, WAIT = "ABSENT", "WAIT"  # vocabulary[0] and vocabulary[1], by contract


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class OodRange(_Strict):
    low: list[float]
    high: list[float]
    margin: float = pydantic.Field(0.05, ge=0.0)


class Training(_Strict):
    data: str
    data_sha256: str = ""
    episodes: int = pydantic.Field(ge=1)
    heldout_episodes: int = pydantic.Field(ge=0)
    transitions: int = pydantic.Field(ge=1)
    behaviour: str
    augmentation: float = pydantic.Field(ge=0.0, le=1.0)
    seed: int
    hidden: list[int] = []
    steps: int = pydantic.Field(0, ge=0)  # gradient steps run
    batch: int = pydantic.Field(0, ge=0)
    weight_decay: float = pydantic.Field(0.0, ge=0.0)
    #: training episodes set aside to choose the stopping point (not fitted on)
    validation_episodes: int = pydantic.Field(0, ge=0)
    best_step: int = pydantic.Field(0, ge=0)  # the gradient step whose weights were kept
    trainer: str = ""  # e.g. "torch 2.13.0"
    #: the start states the episodes drew from (onboard.collab.envs.base): "training" keeps
    #: the ones evaluation uses out; "all" (cards before the split) does not
    starts: str = "all"


class Metrics(_Strict):
    """On held-out episodes. ``None`` where the held-out data cannot give a figure."""

    heldout_transitions: int = pydantic.Field(ge=0)
    mse: float | None = None  # Q(s, a) against the Monte Carlo return
    mse_baseline: float | None = None  # the return's variance: the MSE of predicting its mean
    spearman_advantage: float | None = None  # predicted vs Monte Carlo advantages
    advantage_pairs: int = pydantic.Field(ge=0)  # (state, action) pairs that went into it
    #: where the Monte Carlo advantages come from: "probes" (rollouts from held-out probe
    #: states, the first agent's local advantage) or "groups" (held-out transitions that
    #: share a state)
    advantage_basis: str = "groups"
    wait_gap: float | None = None  # mean |Q(s, empty) - Q(s, WAIT...) / gamma|
    #: on probe states: the joint advantage Q(s, a) - Q(s, w) / gamma against its MC value
    spearman_joint: float | None = None
    joint_pairs: int = pydantic.Field(default=0, ge=0)
    #: on probe states: the share of (state, oracle-useful first action) pairs the critic
    #: scores above the first agent's WAIT; the same share by the Monte Carlo values
    useful_over_wait: float | None = None
    useful_over_wait_mc: float | None = None
    useful_pairs: int = pydantic.Field(default=0, ge=0)
    probe_states: int = pydantic.Field(default=0, ge=0)
    probe_rollouts: int = pydantic.Field(default=0, ge=0)  # per candidate
    probe_policy: str = ""  # the policy the rollouts continue under


class CriticCard(_Strict):
    task: str
    level: str
    agents: list[str] = pydantic.Field(min_length=1)
    vocabulary: list[str] = pydantic.Field(min_length=2)
    features: list[str] = pydantic.Field(min_length=1)
    #: each agent's reach (the places it can act on); None on a card written before it was
    #: recorded (then a task differing only in reach is not told apart)
    reach: dict[str, list[str]] | None = None
    gamma: float = pydantic.Field(gt=0.0, le=1.0)
    sha256: str = pydantic.Field(pattern=r"^[0-9a-f]{64}$")
    ood: OodRange
    training: Training
    metrics: Metrics

    @pydantic.model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.vocabulary[:2] != [ABSENT, WAIT]:
            raise ValueError(
                f"vocabulary must start with {ABSENT!r}, {WAIT!r}; it starts {self.vocabulary[:2]}"
            )
        for name, values in (("agents", self.agents), ("vocabulary", self.vocabulary)):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"{name} lists {', '.join(map(repr, twice))} more than once")
        n = len(self.features)
        for side in ("low", "high"):
            values = getattr(self.ood, side)
            if len(values) != n:
                raise ValueError(f"ood.{side} has {len(values)} values for {n} features")
            if not all(math.isfinite(v) for v in values):
                raise ValueError(f"ood.{side} holds a value that is not finite")
        bad = [f for f, lo, hi in zip(self.features, self.ood.low, self.ood.high, strict=True)
               if lo > hi]  # fmt: skip
        if bad:
            raise ValueError(f"ood.low is above ood.high for {', '.join(bad[:3])}")
        return self

    @property
    def vocabulary_size(self) -> int:
        return len(self.vocabulary)


def card_path(model: Path) -> Path:
    """The card beside a model: ``x/recipe3.onnx`` -> ``x/recipe3.toml``."""
    return model.with_suffix(".toml")


def load_card(path: Path) -> CriticCard:
    """Read and validate a card; any problem is one :class:`CriticError` line."""
    if not path.is_file():
        raise CriticError(f"{path}: no card (the critic's TOML card must sit beside the model)")
    try:
        data, source = read_toml(path)
    except ConfigError as exc:
        raise CriticError(str(exc.problems[0])) from exc
    try:
        return CriticCard.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = validation_problems(path, KeyLines(source), exc)
        # a key in the file (with its line: a misspelling) says more than the key it lacks
        problems.sort(key=lambda p: (p.line is None, p.line or 0))
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise CriticError(f"{problems[0]}{more}") from exc


def write_card(card: CriticCard, path: Path) -> None:
    """Write ``card`` as TOML (tables last, so the top-level keys stay top-level)."""
    data = card.model_dump(mode="json")
    doc = tomlkit.document()
    doc.add(tomlkit.comment("A critic's card (onboard.collab.card); regenerate with the model."))
    for key, value in data.items():
        if value is not None and not isinstance(value, dict):
            doc[key] = value
    for key, value in data.items():
        if isinstance(value, dict):
            table = tomlkit.table()
            for k, v in value.items():
                if v is not None:  # TOML has no null: a missing metric reads back as None
                    table[k] = v
            doc[key] = table
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def check_card(
    card: CriticCard,
    task: str,
    level: str,
    vocabulary: Sequence[str],
    feature_names: Sequence[str],
    agents: Sequence[str] | None = None,
    reach: Mapping[str, Iterable[str]] | None = None,
) -> list[str]:
    """Where ``card`` disagrees with what a task level provides; empty when it fits (reach
    is compared when both the card and the caller give it)."""
    problems = []
    if card.task != task:
        problems.append(f"the card is for task {card.task!r}, not {task!r}")
    if card.level != level:
        problems.append(f"the card is for level {card.level!r}, not {level!r}")
    if agents is not None and list(agents) != card.agents:
        problems.append(f"agents {card.agents} in the card, {list(agents)} in the task")
    problems += _list_diff("vocabulary", card.vocabulary, list(vocabulary))
    problems += _list_diff("features", card.features, list(feature_names))
    if card.reach is not None and reach is not None:
        for agent in sorted(set(card.reach) | set(reach)):
            was, now = sorted(card.reach.get(agent, [])), sorted(reach.get(agent, []))
            if was != now:
                problems.append(f"{agent} reaches {was} in the card, {now} in the task")
                break
    return problems


def _list_diff(name: str, card: list[str], task: list[str]) -> list[str]:
    if card == task:
        return []
    if len(card) != len(task):
        extra = [v for v in task if v not in card][:3]
        missing = [v for v in card if v not in task][:3]
        detail = "".join(
            [
                f"; the task adds {extra}" if extra else "",
                f"; the task lacks {missing}" if missing else "",
            ]
        )
        return [f"{name}: {len(card)} in the card, {len(task)} in the task{detail}"]
    first = next(i for i, (a, b) in enumerate(zip(card, task, strict=True)) if a != b)
    return [f"{name}[{first}] is {card[first]!r} in the card, {task[first]!r} in the task"]
