"""The one way onboard talks to an LLM: OpenAI-compatible chat completions over httpx.

One pooled client per endpoint; retries with exponential backoff on 429, 5xx and timeouts,
all within one decision deadline. The API key comes from the environment variable that
robot.toml names and is never logged or recorded.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from onboard.base.errors import LLMError, LLMReplyError, LLMTimeout
from onboard.config import LLMConfig

__all__ = ["ChatClient", "ChatResult", "Message", "server_timing", "timing_hooks"]

Message = Mapping[str, str]
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


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


class ChatClient:
    """Chat completions against ``base_url`` (which ends in ``/v1``)."""

    def __init__(
        self,
        config: LLMConfig,
        base_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
        seed: int | None = None,
    ) -> None:
        self.config = config
        self.base_url = (base_url or config.base_url).rstrip("/")
        headers = {"Content-Type": "application/json"}
        key = config.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(config.read_timeout, connect=config.connect_timeout),
            limits=httpx.Limits(max_keepalive_connections=4, max_connections=8),
            transport=transport,
            event_hooks=timing_hooks(event_hooks),
        )
        self._jitter = random.Random(seed)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def body(self, messages: Sequence[Message], schema: Mapping[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if schema is not None:
            # llama.cpp's servers read `schema` from a json_object response format
            body["response_format"] = {"type": "json_object", "schema": dict(schema)}
        return body

    def complete(
        self,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> ChatResult:
        """One exchange, retried within the deadline; raises LLMTimeout or LLMError."""
        body = self.body(messages, schema)
        start = time.monotonic()
        until = start + (deadline if deadline is not None else self.config.deadline)
        attempt, last = 0, "no attempt"
        while attempt <= self.config.retries:
            attempt += 1
            left = until - time.monotonic()
            if left <= 0:
                break
            try:
                response = self._http.post(
                    "/chat/completions",
                    json=body,
                    timeout=httpx.Timeout(
                        min(self.config.read_timeout, left),
                        connect=min(self.config.connect_timeout, left),
                    ),
                )
            except httpx.TimeoutException:
                last = "timed out"
            except httpx.TransportError as exc:
                last = f"cannot reach {self.base_url}: {type(exc).__name__}"
            else:
                if response.status_code == 200:
                    result = _result(response, time.monotonic() - start, attempt, self.base_url)
                    sent, received = (
                        response.request.extensions.get("onboard_sent", 0.0),
                        (response.extensions.get("onboard_received", 0.0)),
                    )
                    return replace(result, sent_at=sent, received_at=received)
                if response.status_code not in _RETRY_STATUS:
                    raise LLMError(_status_message(response, self.base_url, self.config))
                last = f"HTTP {response.status_code}"
            self._backoff(attempt, until)
        allowed = deadline if deadline is not None else self.config.deadline
        raise LLMTimeout(
            f"LLM at {self.base_url}: no answer within {allowed:g} s "
            f"after {attempt} attempt(s) (last: {last})"
        )

    def _backoff(self, attempt: int, until: float) -> None:
        delay = min(0.05 * 2**attempt, 1.0) * (0.5 + self._jitter.random())
        time.sleep(max(0.0, min(delay, until - time.monotonic())))


def timing_hooks(
    hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
) -> dict[str, list[Callable[..., Any]]]:
    """Stamp each request when it is sent and each response when its headers arrive."""

    def sent(request: httpx.Request) -> None:
        request.extensions["onboard_sent"] = time.perf_counter()

    def received(response: httpx.Response) -> None:
        response.extensions["onboard_received"] = time.perf_counter()

    merged = {k: list(v) for k, v in (hooks or {}).items()}
    merged.setdefault("request", []).append(sent)
    merged.setdefault("response", []).append(received)
    return merged


def _result(response: httpx.Response, latency: float, attempts: int, url: str) -> ChatResult:
    try:
        payload = response.json()
        text = payload["choices"][0]["message"]["content"]
    except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
        raise LLMReplyError(f"LLM at {url}: not a chat completion ({exc!r})") from exc
    if not isinstance(text, str):
        raise LLMReplyError(f"LLM at {url}: reply content is {type(text).__name__}, not text")
    usage = payload.get("usage") or {}
    return ChatResult(
        text=text,
        latency=latency,
        attempts=attempts,
        prompt_tokens=int(usage.get("prompt_tokens", 0) or 0),
        completion_tokens=int(usage.get("completion_tokens", 0) or 0),
        model=str(payload.get("model", "")),
        timings=server_timing(response.headers.get("server-timing", "")),
    )


def server_timing(header: str) -> dict[str, float]:
    """``Server-Timing: policy;dur=0.4`` -> ``{"policy": 0.0004}`` (seconds)."""
    timings: dict[str, float] = {}
    for entry in filter(None, (e.strip() for e in header.split(","))):
        name, *params = (p.strip() for p in entry.split(";"))
        for param in params:
            if param.startswith("dur="):
                with contextlib.suppress(ValueError):
                    timings[name] = float(param[4:]) / 1000.0
    return timings


def _status_message(response: httpx.Response, url: str, config: LLMConfig) -> str:
    code = response.status_code
    hint = ""
    if code in (401, 403):
        hint = (
            f"; set the API key in ${config.api_key_env}"
            if config.api_key_env
            else "; name the key's environment variable in robot.toml [llm] api_key_env"
        )
    elif code == 404:
        hint = "; base_url must end in /v1 and the model must exist"
    detail = response.text[:120].replace("\n", " ")
    return f"LLM at {url}: HTTP {code}{hint} ({detail})"
