"""What an exchange with an LLM is made of, apart from the HTTP client that carries it: code
that builds prompts or reads replies imports these without importing httpx."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["ChatResult", "Completes", "Message"]

#: {"role": ..., "content": text or OpenAI content parts} (onboard.llm.content)
Message = Mapping[str, Any]


@dataclass(frozen=True)
class ChatResult:
    """One answered exchange: the reply text and what it cost."""

    text: str
    latency: float
    attempts: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    #: perf_counter() when the request left and the response headers came back (0 = unknown)
    sent_at: float = 0.0
    received_at: float = 0.0
    #: why the server stopped: "stop", "length" (cut at max_tokens), ... ("" = not said)
    finish_reason: str = ""


class Completes(Protocol):
    """What answers one exchange: :class:`ChatClient`, or a recording's replies (a replay,
    a test's scripted model)."""

    def complete(
        self,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> ChatResult: ...
