"""The random proposer of the person skills: an in-process LLM that fills the request's JSON
schema with random choices, reading nothing else (the schema is part of what a model sees).

Two uses: the control row of the Engage critic's table (``onboard eval --llm random``: what
the critic's veto does with no planner behind it), and the behaviour policy that collects the
critic's training data (``onboard critic collect engage``), where ``weights`` tilt an enum's
draw (speaking seldom, so episodes also reach their later moments).

It needs constrained decoding: without a schema there is nothing to choose from.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any

from onboard.base.errors import LLMReplyError
from onboard.llm.types import ChatResult, Message

__all__ = ["RandomAsk"]


class RandomAsk:
    """Seeded: request ``n`` draws from ``Random(f"{seed}/{n}")``, whatever came before.

    ``weights`` maps an enum value to its relative weight (1 for a value it does not name)."""

    structured_output = "none"

    def __init__(self, seed: int, weights: Mapping[str, float] | None = None) -> None:
        self.seed = seed
        self.weights = dict(weights or {})
        self.asked = 0

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        if schema is None:
            raise LLMReplyError(
                f"random proposer: the {purpose} request has no JSON schema to choose from"
                ' (it needs [llm] decoding = "constrained")'
            )
        rng = random.Random(f"{self.seed}/{self.asked}")
        self.asked += 1
        reply = {key: self._value(rng, spec) for key, spec in schema["properties"].items()}
        return ChatResult(text=json.dumps(reply), latency=0.0, attempts=1, model="random")

    def _value(self, rng: random.Random, spec: Mapping[str, Any]) -> Any:
        choices = spec.get("enum")
        if not choices:
            return "random"  # a free string (the reason): the runtime never acts on it
        weights = [self.weights.get(str(c), 1.0) for c in choices]
        return rng.choices(list(choices), weights)[0]

    def cancel(self) -> None:
        """Nothing is in flight: every answer is immediate."""
