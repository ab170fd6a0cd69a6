"""Which object in view a reply means: "the ruby cube" finds the red block, or is refused.

References resolve through the sentence embedder, not a synonym table: the phrase (without
its article) is compared with each candidate's name; the best must reach ``threshold`` and
beat the second by ``margin``, else the reference is refused. A phrase within ``near_tie`` of
either boundary is refused too, as the action mapping does, so a decision never hangs on a
floating-point tie.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onboard.grounding.mapping import Embeds

__all__ = ["ObjectResolver", "Resolution"]

_ARTICLE = re.compile(r"^(?:the|a|an|that|this|my|your)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class Resolution:
    phrase: str
    name: str | None  # None: refused
    score: float
    runner_up: str | None = None
    runner_up_score: float = -1.0
    why: str = ""

    def to_record(self) -> dict[str, object]:
        return {
            "phrase": self.phrase,
            "name": self.name,
            "score": round(self.score, 4),
            "runner_up": self.runner_up,
            "runner_up_score": round(self.runner_up_score, 4),
            "why": self.why,
        }


class ObjectResolver:
    def __init__(
        self,
        embedder: Embeds,
        threshold: float = 0.55,
        margin: float = 0.1,
        near_tie: float = 0.01,
    ) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self.margin = margin
        self.near_tie = near_tie

    def resolve(self, phrase: str, candidates: Sequence[str]) -> Resolution:
        text = _ARTICLE.sub("", " ".join(phrase.strip().lower().split())).strip(" .")
        if not candidates:
            return Resolution(phrase, None, 0.0, why="nothing to refer to")
        exact = [c for c in candidates if c.lower() == text]
        if exact:
            return Resolution(phrase, exact[0], 1.0, why="exact")
        vectors = self.embedder.embed([text, *candidates])
        scores = vectors[1:] @ vectors[0]
        order = np.argsort(-scores, kind="stable")
        best = int(order[0])
        score = float(scores[best])
        second = int(order[1]) if len(candidates) > 1 else None
        runner = float(scores[second]) if second is not None else -1.0
        found = Resolution(
            phrase,
            candidates[best],
            score,
            None if second is None else candidates[second],
            runner,
        )
        band = self.near_tie
        if score < self.threshold + band:
            return _refused(found, f"nothing in view is near enough ({score:.2f})")
        if second is not None and score - runner < self.margin + band:
            return _refused(found, f"as near {candidates[second]!r} as {candidates[best]!r}")
        return found


def _refused(found: Resolution, why: str) -> Resolution:
    return Resolution(
        found.phrase, None, found.score, found.runner_up, found.runner_up_score, why=why
    )
