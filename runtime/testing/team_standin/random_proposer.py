"""The random proposer, a control of the evaluation (issue 14, item 6): an in-process LLM
that reads a team request as the team stand-in reads it (``reading.read_prompt``: the agents
the ``## Reply`` asks for, the actions ``## Actions`` lists or the schema's enum) and picks
uniformly among each asked agent's actions. With the trained critic it shows how much of a
result is the critic choosing by veto rather than the LLM planning."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from onboard.base.errors import LLMReplyError
from onboard.llm.content import message_text
from onboard.llm.types import ChatResult, Message
from onboard.testing.team_standin.reading import BadRequest, read_prompt
from onboard.testing.team_standin.server import Pick, reply_text

__all__ = ["RandomProposer"]


class RandomProposer:
    """Seeded: each request is drawn from ``seed`` and how many requests came before."""

    label = "random"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.asked = 0

    def complete(
        self,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> ChatResult:
        user = next((m for m in reversed(messages) if m["role"] == "user"), None)
        try:
            prompt = read_prompt(message_text(user) if user is not None else "", schema)
        except BadRequest as exc:
            raise LLMReplyError(f"random proposer: {exc}") from exc
        rng = random.Random(f"{self.seed}/{self.asked}")
        self.asked += 1
        picks = [Pick(a, rng.choice(prompt.candidates[a]), "random") for a in prompt.asked]
        return ChatResult(text=reply_text(prompt, picks), latency=0.0, attempts=1)
