"""The three ReplanVLM bots over HTTP: each its own endpoint, model, token limit and deadline
(``[code.decision]``, ``[code.inner]``, ``[code.extra]`` in robot.toml), each exchange
recorded (the request with its images by hash, the reply, the time it took).

A bot is only a client and a recorder: what it is asked and how its reply is read live in
runtime/replan/prompts.py; what is done with it, in runtime/replan/episode.py. Replay answers
from the recording instead (:class:`RecordedBot`)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from onboard.base.errors import LLMError
from onboard.config import RobotConfig
from onboard.llm.client import ChatClient, Completes, Message
from onboard.loop.recorder import Recorder
from onboard.loop.replies import Exchange, RecordedExchanges

__all__ = ["Ask", "Bots", "HttpBot", "RecordedBot", "open_bots"]

ROLES = ("decision", "inner", "extra")


def request_hash(messages: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of a request's messages as canonical JSON (images included, as sent): what
    names one request in a server's log."""
    canonical = json.dumps(list(messages), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class Ask(Protocol):
    """One bot: ``ask`` returns the reply's text or raises LLMError (no answer)."""

    name: str

    def ask(
        self, purpose: str, messages: Sequence[Message], schema: Mapping[str, Any] | None = None
    ) -> str: ...


@dataclass
class Bots:
    decision: Ask
    inner: Ask
    extra: Ask


class HttpBot:
    """A bot behind an OpenAI-compatible endpoint; every exchange is recorded as a
    ``request`` then a ``reply`` (or an ``error``) record with the bot's name, and counted
    (``calls``, and ``seconds`` of the model's time)."""

    def __init__(
        self, name: str, client: Completes, recorder: Recorder, episode: str | None = None
    ) -> None:
        self.name = name
        self.client = client
        self.recorder = recorder
        self.calls = 0
        self.seconds = 0.0
        #: the episode its requests name (their ``user`` field), and each request's repeats
        self.episode = episode
        self._repeats: dict[str, int] = {}

    def ask(
        self, purpose: str, messages: Sequence[Message], schema: Mapping[str, Any] | None = None
    ) -> str:
        sent = [dict(m) for m in messages]
        digest = request_hash(sent)
        repeat = self._repeats.get(digest, 0)
        self._repeats[digest] = repeat + 1
        named = {} if self.episode is None else {"episode": self.episode, "repeat": repeat}
        self.recorder.write(
            "request",
            bot=self.name,
            purpose=purpose,
            messages=sent,
            schema=schema,
            hash=digest,
            **named,
        )
        began = time.perf_counter()
        self.calls += 1
        try:
            result = self.client.complete(messages, schema)
        except LLMError as exc:
            self.seconds += time.perf_counter() - began
            self.recorder.write("error", source=self.name, purpose=purpose, message=str(exc))
            raise
        took = time.perf_counter() - began
        self.seconds += took
        self.recorder.write(
            "reply",
            bot=self.name,
            purpose=purpose,
            text=result.text,
            model=result.model,
            latency=round(took, 4),
            tokens=[result.prompt_tokens, result.completion_tokens],
            finish_reason=result.finish_reason,
            sent_at=result.sent_at,
            received_at=result.received_at,
        )
        return result.text


@contextmanager
def open_bots(
    robot: RobotConfig,
    recorder: Recorder,
    base_url: str | None = None,
    episode: str | None = None,
    inner: tuple[RobotConfig, str] | None = None,
) -> Iterator[Bots]:
    """The three bots of ``robot``'s ``[code]`` (``base_url``: one endpoint for all three,
    e.g. a stand-in's, overriding robot.toml's; ``episode``: the name every request carries
    in its ``user`` field and its record, with how often this episode sent it before;
    ``inner``: the Inner Bot from another robot's ``[code.inner]`` and endpoint instead, so
    the model that wrote a plan is not the one that checks it)."""
    with ExitStack() as stack:
        made: dict[str, HttpBot] = {}
        for role in ROLES:
            config = getattr(robot.code, role).llm(robot.llm)
            if base_url is not None:
                config = config.model_copy(update={"base_url": base_url})
            if role == "inner" and inner is not None:
                other, url = inner
                config = other.code.inner.llm(other.llm).model_copy(update={"base_url": url})
            client = stack.enter_context(ChatClient(config, user=episode))
            recorder.hide(config.api_key())
            made[role] = HttpBot(role, client, recorder, episode)
        yield Bots(made["decision"], made["inner"], made["extra"])


class RecordedBot:
    """A bot answered from a recording (its exchanges, ``onboard.loop.replies.exchanges_of``),
    in order: a request that differs from the recorded one is noted in ``diverged`` and still
    gets the recorded answer, so the replay's whole sequence of decisions can be compared."""

    def __init__(self, name: str, exchanges: Sequence[Exchange]) -> None:
        self.name = name
        self.replies = RecordedExchanges(exchanges, f"the {name} bot", strict=False)

    @property
    def diverged(self) -> list[str]:
        return self.replies.diverged

    def ask(
        self, purpose: str, messages: Sequence[Message], schema: Mapping[str, Any] | None = None
    ) -> str:
        return self.replies.answer(messages, purpose).text
