"""Answers from a recording: every kind's replay asks the LLM what it asked in the episode
and gets what the episode got, in order.

A recording keeps each exchange as a ``request`` record and the ``reply`` (or ``error``)
record that answered it: paired by ``id`` (the runner's and the team loop's records) or by
the asker's name (ReplanVLM's bots and the code baselines, ``bot`` on the request).
:class:`RecordedExchanges` hands them out in order, each request checked against the
recorded one (:func:`onboard.loop.divergence.request_difference`). A strict replay stops at
the first difference (person, scene and team episodes: what follows would be another
episode); a lenient one notes it and goes on, so the whole sequence of decisions can be
compared (code episodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from onboard.base.errors import LLMError, LLMTimeout, ReplayDivergence
from onboard.llm.types import ChatResult, Message
from onboard.loop.divergence import request_difference

__all__ = ["Exchange", "RecordedExchanges", "exchanges_by_id", "exchanges_of"]

#: a request record and the record that answered it (None: it was in flight at the end)
Exchange = tuple[dict[str, Any], dict[str, Any] | None]


def exchanges_by_id(records: Iterable[Mapping[str, Any]]) -> list[Exchange]:
    """Each ``request`` record, in order, with the ``reply`` or ``error`` of the same id."""
    records = list(records)
    answers = {
        r["id"]: dict(r) for r in records if r.get("kind") in ("reply", "error") and "id" in r
    }
    return [(dict(r), answers.get(r.get("id"))) for r in records if r.get("kind") == "request"]


def exchanges_of(records: Iterable[Mapping[str, Any]], name: str) -> list[Exchange]:
    """The exchanges of the asker ``name`` (``bot`` on its requests and replies, ``source``
    on its errors), in order."""
    exchanges: list[Exchange] = []
    request: dict[str, Any] | None = None
    for record in records:
        kind = record.get("kind")
        if kind == "request" and record.get("bot") == name:
            request = dict(record)
        elif request is not None and (
            (kind == "reply" and record.get("bot") == name)
            or (kind == "error" and record.get("source") == name)
        ):
            exchanges.append((request, dict(record)))
            request = None
    return exchanges


class RecordedExchanges:
    """One asker's recorded exchanges, handed out in order.

    ``source`` starts every divergence message (the recording's path, or a bot's name);
    ``strict``: a request that differs, or one past the recording, raises ReplayDivergence;
    else it is noted in ``diverged`` (a differing request still gets the recorded answer,
    one past the recording gets none: an LLMError). ``check_schema``: the request's schema
    must be the recorded one too."""

    def __init__(
        self,
        exchanges: Sequence[Exchange],
        source: str,
        *,
        strict: bool = True,
        check_schema: bool = False,
    ) -> None:
        self.exchanges = list(exchanges)
        self.source = source
        self.strict = strict
        self.check_schema = check_schema
        self.asked = 0
        self.diverged: list[str] = []

    def peek(self) -> Exchange | None:
        """The exchange the next request gets (None: the recording holds no more)."""
        return self.exchanges[self.asked] if self.asked < len(self.exchanges) else None

    def take(
        self,
        messages: Sequence[Message],
        purpose: str | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> Exchange:
        """The next recorded exchange, its request checked against this one."""
        if self.asked >= len(self.exchanges):
            self._diverged(
                f"{self.source}: the replay asks more than was recorded "
                f"({len(self.exchanges)} requests)"
            )
            raise LLMError(f"{self.source}: no more recorded replies")
        request, answer = self.exchanges[self.asked]
        self.asked += 1
        what = request_difference(
            request, messages, purpose, schema=schema, check_schema=self.check_schema
        )
        if what is not None:
            number = request.get("id", self.asked)
            named = f" ({request.get('purpose')})" if request.get("purpose") else ""
            self._diverged(
                f"{self.source}: request {number}{named} differs from the recording: {what}"
            )
        return request, answer

    def answer(
        self,
        messages: Sequence[Message],
        purpose: str | None = None,
        schema: Mapping[str, Any] | None = None,
    ) -> ChatResult:
        """The recorded reply as the client gave it; the recorded error (or none, for a
        request still in flight at the end) raised as an LLMError."""
        _, answer = self.take(messages, purpose, schema)
        if answer is None:
            raise LLMTimeout("no reply was recorded")
        if answer.get("kind") == "error":
            raise LLMError(str(answer.get("message", "")))
        return ChatResult(
            text=str(answer.get("text", "")),
            latency=float(answer.get("latency", 0.0) or 0.0),
            attempts=1,
            model=str(answer.get("model", "")),
        )

    def complete(
        self,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> ChatResult:
        """:meth:`answer` as a client's ``complete`` (``Completes``): a loop that talks to a
        client replays with this in its place."""
        return self.answer(messages, schema=schema)

    def _diverged(self, message: str) -> None:
        self.diverged.append(message)
        if self.strict:
            raise ReplayDivergence(message)
