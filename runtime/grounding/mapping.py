"""Map an LLM's free-text answer onto the skill's action set (the seed's NLP component).

A reply is normalised (the shared "The robot should" frame and trailing reasons removed),
split into clauses (strong connectors always; commas and "and" only when the parts are
clearly different actions), and each clause is compared by cosine similarity with every
action's reference responses. A clause is accepted when its best action scores at least
``threshold`` and beats the nearest out-of-set anchor (the skill's ``[mapping] reject``
replies) by ``margin``. A margin between the two best *actions* was tried and rejected: the
dev set showed it refuses correct answers between close actions (wait / wait for cue)
without rejecting more out-of-set replies. One clause that matches no
action makes the whole reply "no match" (a bottom-up candidate), because acting on part
of a plan is not what the LLM asked for.

A decision has three boundaries: the best action against the second, the score against
``threshold`` and the lead over the out-of-set anchors against ``margin``. A clause that
lies within ``near_tie`` of any of them is refused too, recorded as a near tie: the
embedder's int8-stored weights move these quantities by up to 0.0075 from the full fp32
model, and kernels of different CPUs by about 1e-6. With ``near_tie`` above both (robot.toml
``[mapping] near_tie``, 0.01 by default), a clause the robot acts on is one the fp32 model
would accept with the same action, and no CPU maps it to another action
(models/minilm/CARD.md has the measurements).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "ActionMapper",
    "ClauseMatch",
    "Embeds",
    "MappingResult",
    "Refusal",
    "normalise",
    "split_clauses",
]


class Embeds(Protocol):
    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...


_FRAME = re.compile(
    r"^(?:i (?:would )?(?:suggest|recommend)(?: that)?(?: the robot)?\s+|"
    r"it (?:would|might) be (?:best|wise|good)(?: for the robot)? to\s+|"
    r"in this situation,?\s+|first,?\s+|next,?\s+|"
    r"(?:the |this )?(?:humanoid )?robot (?:should|could|must|needs to|can|will|would)(?:\s+|$)"
    r"(?:now\s+|first\s+|probably\s+|just\s+)?|"
    r"(?:it|you) (?:should|could|must|needs to|can)\s+(?:now\s+|first\s+|then\s+)?|"
    r"please\s+|let's\s+)+",
    re.IGNORECASE,
)
_LEADING_REASON = re.compile(r"^(?:since|because|as|given that|if|when)\b[^,]*,\s*", re.IGNORECASE)
_PERSON = re.compile(
    r"\b(?:(?:the|this|that) (?:man|woman|lady|gentleman|guy|customer|visitor|guest|user|human|"
    r"individual|elderly (?:man|woman|gentleman|lady|person))|him|her|them|he|she|they)\b",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"(?:(?:^|,?\s+)(?:since|because|so that|as the person|as they|in order to|to avoid|"
    r"to show|to let|to make sure|such as|for example|e\.g\.|"
    r"before (?:continuing|proceeding|moving on|going on|doing anything)|"
    r"so (?:they|the person|it|as))\b.*)$",
    re.IGNORECASE,
)
_STRONG = re.compile(
    r"\s*(?:;|\.\s+|,?\s*\band then\b|,?\s*\bthen\b|,?\s*\bafter that\b,?|"
    r",?\s*\bafterwards\b,?|,?\s*\bfollowed by\b|,?\s*(?:\band\s+)?\b(?:finally|lastly)\b,?|"
    r",?\s*\bbefore\b(?!\s+(?:doing|the person|they|continuing|proceeding|moving on|going on)))\s*",
    re.IGNORECASE,
)
_WEAK = re.compile(r"\s*(?:,\s*and\b|,|:|\band\b)\s*", re.IGNORECASE)
_LEADING_BEFORE = re.compile(r"^before\s+([^,]+),\s*(.+)$", re.IGNORECASE)
_QUOTE = re.compile(r""""[^"]{2,}?"|“[^”]*”|(?<![A-Za-z])'[^']{2,}?'(?![A-Za-z])""")
OUT_OF_SET = "(out of set)"


class Refusal(StrEnum):
    """Why a clause maps to no action (recorded as the clause's ``refused``)."""

    BELOW_THRESHOLD = "below threshold"
    OUT_OF_SET = "nearer an out-of-set reply"
    NEAR_TIE = "near tie: two actions"
    NEAR_THRESHOLD = "near tie: threshold"
    NEAR_MARGIN = "near tie: out-of-set margin"


def normalise(text: str) -> str:
    """Lower-case, without the shared frame, a trailing reason or closing punctuation."""
    text = " ".join(text.strip().split())
    text = _LEADING_REASON.sub("", text)
    text = _FRAME.sub("", text)
    text = _REASON.sub("", text)
    text = _PERSON.sub("the person", text)
    text = _QUOTE.sub("something", text)
    return text.strip(" .!,;:").lower()


def split_clauses(reply: str) -> list[list[str]]:
    """Strong segments in order, each with its weak parts: ``[[part, ...], ...]``."""
    quotes: list[str] = []

    def hide(match: re.Match[str]) -> str:
        quotes.append(match.group(0))
        return f"QUOTE{len(quotes) - 1}Q"

    hidden = _QUOTE.sub(hide, " ".join(reply.split()))

    def show(text: str) -> str:
        return re.sub(r"QUOTE(\d+)Q", lambda m: quotes[int(m.group(1))], text)

    segments: list[str] = []
    for sentence in re.split(r"[.!?;]\s+", hidden.strip().rstrip(".!")):
        before = _LEADING_BEFORE.match(sentence.strip())
        ordered = [before.group(2), before.group(1)] if before else [sentence]
        for part in ordered:
            segments += _STRONG.split(part)
    out = []
    for segment in segments:
        whole = normalise(show(segment))
        if not whole:
            continue
        parts = [normalise(show(p)) for p in _WEAK.split(segment)]
        out.append([whole, *[p for p in parts if p and p != whole]])
    return out


@dataclass(frozen=True)
class ClauseMatch:
    clause: str
    action: str | None
    score: float
    runner_up: str | None
    runner_up_score: float
    out_of_set_score: float = -1.0
    refused: Refusal | None = None

    def to_record(self) -> dict[str, object]:
        return {
            "clause": self.clause,
            "action": self.action,
            "score": round(self.score, 4),
            "runner_up": self.runner_up,
            "runner_up_score": round(self.runner_up_score, 4),
            "out_of_set_score": round(self.out_of_set_score, 4),
            "refused": None if self.refused is None else str(self.refused),
        }


@dataclass(frozen=True)
class MappingResult:
    reply: str
    actions: list[str]
    clauses: list[ClauseMatch] = field(default_factory=list)

    @property
    def matched(self) -> bool:
        return bool(self.actions)

    def to_record(self) -> dict[str, object]:
        return {
            "reply": self.reply,
            "actions": self.actions,
            "clauses": [c.to_record() for c in self.clauses],
        }


class ActionMapper:
    """Nearest-action search over reference responses, with threshold, margin and near-tie band."""

    def __init__(
        self,
        embedder: Embeds,
        references: Mapping[str, Sequence[str]],
        threshold: float = 0.5,
        margin: float = 0.04,
        reject: Sequence[str] = (),
        ambiguity: float = 0.9,
        near_tie: float = 0.0,
    ) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self.margin = margin
        self.ambiguity = ambiguity
        self.near_tie = near_tie
        self._names = list(references)
        references = {**references, OUT_OF_SET: list(reject)}
        self._lookup = {" ".join(n.lower().split()): n for n in self._names}
        self._owner: list[int] = []
        texts: list[str] = []
        for index, name in enumerate([*self._names, OUT_OF_SET]):
            for ref in references[name]:
                texts.append(normalise(ref))
                self._owner.append(index)
        self._refs = embedder.embed(texts)
        self._ref_texts = texts

    def map(self, reply: str) -> MappingResult:
        """The ordered actions ``reply`` asks for, or none ("no match")."""
        exact = self._lookup.get(" ".join(normalise(reply).split()))
        if exact is not None:
            return MappingResult(reply, [exact], [ClauseMatch(reply, exact, 1.0, None, 0.0)])
        segments = split_clauses(reply)
        flat = [text for segment in segments for text in segment]
        if not flat:
            return MappingResult(reply, [])
        matches = dict(zip(flat, self._score(flat), strict=True))
        chosen: list[ClauseMatch] = []
        for whole, *parts in segments:
            chosen += self._choose(matches[whole], [matches[p] for p in parts])
        if any(m.action is None for m in chosen):
            return MappingResult(reply, [], chosen)
        actions: list[str] = []
        for match in chosen:
            if match.action is not None and (not actions or actions[-1] != match.action):
                actions.append(match.action)
        return MappingResult(reply, actions, chosen)

    def _choose(self, whole: ClauseMatch, parts: list[ClauseMatch]) -> list[ClauseMatch]:
        """Split at commas/"and" only when every part is clearly an action of its own."""
        if len(parts) < 2:
            return [whole]
        if any(p.action is None for p in parts):
            return [whole]
        distinct = {p.action for p in parts}
        if whole.action is None or (
            len(distinct) > 1 and min(p.score for p in parts) >= whole.score - 0.12
        ):
            return parts
        return [whole]

    def scores(self, clauses: Sequence[str]) -> npt.NDArray[np.float32]:
        """Each clause's best cosine per action, in skill order, then over the reject anchors.

        ``clauses`` are normalised text (as :func:`split_clauses` returns them); the
        result has shape ``(len(clauses), len(actions) + 1)``.
        """
        vectors = self.embedder.embed(list(clauses))
        sims = vectors @ self._refs.T
        per_action = np.full((len(clauses), len(self._names) + 1), -1.0, dtype=np.float32)
        for col, owner in enumerate(self._owner):
            per_action[:, owner] = np.maximum(per_action[:, owner], sims[:, col])
        return per_action

    def _score(self, clauses: Sequence[str]) -> list[ClauseMatch]:
        per_action = self.scores(clauses)
        out = []
        for row, clause in enumerate(clauses):
            in_set = per_action[row, :-1]
            # stable: equal scores keep skill order, whatever order numpy's sort visits them
            order = np.argsort(-in_set, kind="stable")
            best, second = int(order[0]), int(order[1])
            score, runner = float(in_set[best]), float(in_set[second])
            rejected = float(per_action[row, -1])
            refused = self._refusal(score, runner, rejected)
            action = self._names[best] if refused is None else None
            out.append(
                ClauseMatch(clause, action, score, self._names[second], runner, rejected, refused)
            )
        return out

    def _refusal(self, score: float, runner: float, rejected: float) -> Refusal | None:
        """None to accept the best action, else why not (the plain rule first)."""
        band = self.near_tie
        if score < self.threshold:
            return Refusal.BELOW_THRESHOLD
        if score - rejected < self.margin:
            return Refusal.OUT_OF_SET
        if score - runner < band:
            return Refusal.NEAR_TIE
        if score < self.threshold + band:
            return Refusal.NEAR_THRESHOLD
        if score - rejected < self.margin + band:
            return Refusal.NEAR_MARGIN
        return None

    def ambiguities(self) -> list[tuple[str, str, str, str, float]]:
        """Pairs of references of different actions closer than the threshold allows."""
        sims = self._refs @ self._refs.T
        found = []
        for i in range(len(self._owner)):
            for j in range(i + 1, len(self._owner)):
                owners = (self._owner[i], self._owner[j])
                if owners[0] != owners[1] and sims[i, j] >= self.ambiguity:
                    found.append(
                        (
                            [*self._names, OUT_OF_SET][owners[0]],
                            [*self._names, OUT_OF_SET][owners[1]],
                            self._ref_texts[i],
                            self._ref_texts[j],
                            float(sims[i, j]),
                        )
                    )
        return found
