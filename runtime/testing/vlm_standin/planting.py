"""The stand-in VLM's planted errors: their rates under the competence knob, the words by
which feedback names each, and the seeded draws. ``ERRORS.md`` beside this file is the
documentation these numbers follow (committed before any table was run with them)."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from onboard.replan.bots import request_hash  # the hash the runtime records with a request

__all__ = [
    "BASE",
    "DEFAULT_COMPETENCE",
    "FIX_NAMED",
    "TASKS_OF",
    "TOPICS",
    "Draws",
    "named_kinds",
    "rate",
    "request_hash",
]

DEFAULT_COMPETENCE = 0.5

#: each kind's rate at the default competence
BASE: dict[str, float] = {
    "unstack": 0.40,
    "wrong_fruit": 0.30,
    "no_open_drawer": 0.30,
    "mismatch": 0.15,
    "format": 0.05,
    "extra_false_done": 0.05,
}

#: the tasks each Decision kind applies to
TASKS_OF: dict[str, frozenset[int]] = {
    "unstack": frozenset({2}),
    "wrong_fruit": frozenset({5}),
    "no_open_drawer": frozenset({6}),
    "mismatch": frozenset(range(1, 8)),
    "format": frozenset(range(1, 8)),
}

#: the words by which an earlier message names a kind
TOPICS: dict[str, re.Pattern[str]] = {
    "unstack": re.compile(
        r"stack|on top|on it\b|above|take off|taken off|remove|yellow block|blue block", re.I
    ),
    "wrong_fruit": re.compile(r"apple|lemon|orange|fruit", re.I),
    "no_open_drawer": re.compile(r"drawer|\bopen", re.I),
    "mismatch": re.compile(r"match|\bsteps?\b|the plan", re.I),
    "format": re.compile(r"PLAN:|CODE:|fence|format|parse|numbered", re.I),
}

#: the chance an error is fixed when an earlier message names it (else it repeats: 0)
FIX_NAMED: dict[str, float] = {
    "unstack": 0.9,
    "wrong_fruit": 0.9,
    "no_open_drawer": 0.9,
    "mismatch": 0.9,
    "format": 0.95,
}


def rate(kind: str, competence: float) -> float:
    """``min(1, base * (1 - competence) / 0.5)``: the base rate at the default competence
    0.5, none at 1.0, twice the base at 0."""
    return min(1.0, BASE[kind] * (1.0 - competence) / (1.0 - DEFAULT_COMPETENCE))


def named_kinds(errors: Iterable[str]) -> list[str]:
    """The Decision kinds the earlier messages name."""
    texts = list(errors)
    return [k for k, topic in TOPICS.items() if any(topic.search(t) for t in texts)]


@dataclass
class Draws:
    """The seeded draws of one reply: from the server's seed, the request's hash and how
    many times that request was answered before."""

    seed: int
    digest: str
    seen: int
    competence: float

    def __post_init__(self) -> None:
        key = f"{self.seed}/{self.digest}/{self.seen}".encode()
        self.rng = random.Random(hashlib.sha256(key).hexdigest())

    def planted(self, task: int | None, named: Sequence[str]) -> list[str]:
        """The Decision kinds planted in this reply, each drawn at its rate (cut by the fix
        when an earlier message named it)."""
        out = []
        for kind in TASKS_OF:
            draw = self.rng.random()  # drawn for every kind: one kind's rate moves no other
            if task is None or task not in TASKS_OF[kind]:
                continue
            chance = rate(kind, self.competence)
            if kind in named:
                chance *= 1.0 - FIX_NAMED[kind]
            if draw < chance:
                out.append(kind)
        return out

    def chance(self, probability: float) -> bool:
        return self.rng.random() < probability

    def choice(self, options: Sequence[int]) -> int:
        return options[self.rng.randrange(len(options))]
