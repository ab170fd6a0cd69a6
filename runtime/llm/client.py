"""The one way onboard talks to an LLM: OpenAI-compatible chat completions over httpx.

One pooled client per endpoint; retries with exponential backoff on 429, 5xx and timeouts,
all within one decision deadline. The deadline bounds the whole exchange (connect, headers,
body, retries, Retry-After waits): every socket read and write of the pool waits at most
until the deadline (:class:`_DeadlineBackend`), so a server that drips its headers or its
body a byte at a time is cut off at the deadline, not after it. A reply is streamed and
read up to ``[llm] max_reply_bytes``; more is a failed exchange. ``Retry-After`` (seconds or
an HTTP date) is waited out when it ends before the deadline, else the exchange fails at
once. An optional budget per endpoint (requests a minute, tokens an hour) refuses to ask
once it is spent. The API key comes from the environment variable that robot.toml names and
is scrubbed from every reply, error and record.

A request with a JSON schema carries it in the ``response_format`` form the server reads
(``[llm] structured_output``, onboard.llm.structured), and its reply is checked against the
schema here whatever the server claims: a reply that is not JSON or breaks the schema is a
failed exchange (LLMReplyError), as is a server that refuses the form (named in the error).
"""

from __future__ import annotations

import collections
import contextlib
import email.utils
import json
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import httpcore
import httpx

from onboard.base.errors import LLMError, LLMRefused, LLMReplyError, LLMTimeout
from onboard.base.secrets import scrub
from onboard.base.urls import public_url, url_secrets
from onboard.config import LLMConfig
from onboard.llm.local_server import exit_reason, serves
from onboard.llm.structured import Form, reply_problem, resolve, response_format
from onboard.llm.types import ChatResult, Completes, Message

__all__ = [
    "ChatClient",
    "ChatResult",
    "Completes",
    "Message",
    "retry_after",
    "server_timing",
    "timing_hooks",
]

_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class ChatClient:
    """Chat completions against ``base_url`` (which ends in ``/v1``)."""

    def __init__(
        self,
        config: LLMConfig,
        base_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        event_hooks: Mapping[str, list[Callable[..., Any]]] | None = None,
        seed: int | None = None,
        user: str | None = None,
    ) -> None:
        """``user``: sent as every request's ``user`` field (OpenAI's end-user identifier;
        the evaluation names its episode with it, which a stand-in keys its draws by)."""
        self.config = config
        self.user = user
        url = (base_url or config.base_url).rstrip("/")
        #: the endpoint as printed, logged and recorded: its userinfo (a password) as ***
        self.base_url = public_url(url)
        #: the form a schema is sent in: [llm] structured_output, "auto" resolved for this URL
        self.structured_output: Form = resolve(
            config.structured_output, local=serves(self.base_url)
        )
        headers = {"Content-Type": "application/json"}
        key = config.api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._secrets = ([key] if key else []) + url_secrets(url)
        self._until = threading.local()
        self._generation = 0
        limits = httpx.Limits(max_keepalive_connections=4, max_connections=8)
        if transport is None:
            transport = _deadline_transport(limits, self._deadline)
        self._http = httpx.Client(
            base_url=url,  # its userinfo, if any, goes as basic auth
            headers=headers,
            timeout=httpx.Timeout(config.read_timeout, connect=config.connect_timeout),
            limits=limits,
            transport=transport,
            event_hooks=timing_hooks(event_hooks),
        )
        self._jitter = random.Random(seed)
        self._budget = _Budget(config.requests_per_minute, config.tokens_per_hour)

    def _deadline(self) -> float | None:
        """The monotonic deadline of this thread's exchange (None outside one); ``-inf`` once
        the exchange is cancelled."""
        until: float | None = getattr(self._until, "value", None)
        if until is not None and self._until.generation != self._generation:
            return float("-inf")
        return until

    def cancel(self) -> None:
        """End the exchanges in flight (within ``SLICE`` seconds), as if their deadline had
        passed; later exchanges are not affected. Safe in a signal handler."""
        self._generation += 1

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
        if self.user is not None:
            body["user"] = self.user
        if schema is not None:
            form = response_format(self.structured_output, schema)
            if form is not None:
                body["response_format"] = form
        return body

    def complete(
        self,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None = None,
        deadline: float | None = None,
    ) -> ChatResult:
        """One exchange, retried within the deadline; raises LLMTimeout or LLMError.

        With a ``schema`` the reply is JSON matching it, or the exchange fails with
        LLMReplyError. The key never leaves in a result or an error: it is scrubbed from both."""
        try:
            return self._complete(messages, schema, deadline)
        except LLMError as exc:
            raise type(exc)(scrub(str(exc), self._secrets)) from None

    def _complete(
        self,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None,
        deadline: float | None,
    ) -> ChatResult:
        body = self.body(messages, schema)
        allowed = deadline if deadline is not None else self.config.deadline
        start = time.monotonic()
        until = start + allowed
        generation = self._generation
        attempt, last = 0, "no attempt"
        while attempt <= self.config.retries:
            if self._generation != generation:
                last = "cancelled"
                break
            left = until - time.monotonic()
            if left <= 0:
                break
            self._budget.take_request(self.base_url)
            attempt += 1
            wait: float | None = None
            try:
                reply = self._exchange(body, until, left, generation)
            except httpx.TimeoutException:
                last = "timed out"
            except httpx.TransportError as exc:
                last = f"cannot reach {self.base_url}: {type(exc).__name__}"
                died = exit_reason(self.base_url)
                last += f" ({died})" if died else ""
            else:
                if reply.status == 200:
                    result = _result(reply, time.monotonic() - start, attempt, self.base_url)
                    self._budget.spend_tokens(result.prompt_tokens + result.completion_tokens)
                    if schema is not None:
                        self._check(result, schema)
                    return replace(result, text=scrub(result.text, self._secrets))
                refused = "response_format" in body and "response_format" in reply.text
                if reply.status not in _RETRY_STATUS or refused:  # asking again changes nothing
                    form = self.structured_output if refused else None
                    raise LLMError(_status_message(reply, self.base_url, self.config, form))
                last = f"HTTP {reply.status}"
                wait = retry_after(reply.headers.get("retry-after"))
                if wait is not None and wait > until - time.monotonic():
                    last += f", Retry-After {wait:g} s is past the deadline"
                    break
            if wait is None:
                wait = min(0.05 * 2**attempt, 1.0) * (0.5 + self._jitter.random())
            self._sleep(min(wait, until - time.monotonic()), generation)
        raise LLMTimeout(
            f"LLM at {self.base_url}: no answer within {allowed:g} s "
            f"after {attempt} attempt(s) (last: {last})"
        )

    def _check(self, result: ChatResult, schema: Mapping[str, Any]) -> None:
        problem = reply_problem(result.text, schema)
        if problem is None:
            return
        form = self.structured_output
        if result.finish_reason == "length":
            why = f"the reply was cut off at [llm] max_tokens = {self.config.max_tokens}"
        elif form == "none":
            why = '[llm] structured_output = "none" asked the server for no constraint'
        else:
            why = (f'asked in the {form} form: if this server reads another, set [llm] '
                   f"structured_output")  # fmt: skip
        raise LLMReplyError(
            f"LLM at {self.base_url}: reply does not match the JSON schema: {problem}; {why}"
        )

    def _sleep(self, seconds: float, generation: int) -> None:
        """Sleep in slices, so a cancel ends the wait within SLICE s."""
        ends = time.monotonic() + seconds
        while self._generation == generation:
            left = ends - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, SLICE))

    def _exchange(self, body: dict[str, Any], until: float, left: float, generation: int) -> _Reply:
        """One request, streamed, read up to the byte cap and the deadline."""
        cap = self.config.max_reply_bytes
        self._until.value, self._until.generation = until, generation
        try:
            with self._http.stream(
                "POST",
                "/chat/completions",
                json=body,
                timeout=httpx.Timeout(
                    min(self.config.read_timeout, left),
                    connect=min(self.config.connect_timeout, left),
                ),
            ) as response:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > cap:
                    raise LLMReplyError(
                        f"LLM at {self.base_url}: reply of {int(declared)} bytes "
                        f"(Content-Length) is over max_reply_bytes = {cap}"
                    )
                data, size = bytearray(), 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > cap:
                        raise LLMReplyError(
                            f"LLM at {self.base_url}: reply over max_reply_bytes = {cap} "
                            f"(read {size} bytes)"
                        )
                    if time.monotonic() > until or self._generation != generation:
                        raise httpx.ReadTimeout("deadline passed mid-reply")
                    data += chunk
                return _Reply(
                    status=response.status_code,
                    headers=response.headers,
                    data=bytes(data),
                    sent_at=response.request.extensions.get("onboard_sent", 0.0),
                    received_at=response.extensions.get("onboard_received", 0.0),
                )
        finally:
            self._until.value = None


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: httpx.Headers
    data: bytes
    sent_at: float
    received_at: float

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (seconds or an HTTP date); None if unset
    or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Budget:
    """Requests a minute and tokens an hour for one endpoint (sliding windows); a request
    over either is refused before it is sent."""

    def __init__(self, requests_per_minute: int | None, tokens_per_hour: int | None) -> None:
        self.requests_per_minute = requests_per_minute
        self.tokens_per_hour = tokens_per_hour
        self._requests: collections.deque[float] = collections.deque()
        self._tokens: collections.deque[tuple[float, int]] = collections.deque()
        self._lock = threading.Lock()

    def take_request(self, url: str) -> None:
        now = time.monotonic()
        with self._lock:
            if self.requests_per_minute is not None:
                while self._requests and self._requests[0] <= now - 60.0:
                    self._requests.popleft()
                if len(self._requests) >= self.requests_per_minute:
                    raise LLMRefused(
                        f"LLM at {url}: not asked, requests_per_minute = "
                        f"{self.requests_per_minute} spent"
                    )
            if self.tokens_per_hour is not None:
                while self._tokens and self._tokens[0][0] <= now - 3600.0:
                    self._tokens.popleft()
                spent = sum(n for _, n in self._tokens)
                if spent >= self.tokens_per_hour:
                    raise LLMRefused(
                        f"LLM at {url}: not asked, tokens_per_hour = {self.tokens_per_hour} "
                        f"spent ({spent} tokens in the last hour)"
                    )
            self._requests.append(now)

    def spend_tokens(self, tokens: int) -> None:
        if self.tokens_per_hour is not None:
            with self._lock:
                self._tokens.append((time.monotonic(), tokens))


def _deadline_transport(
    limits: httpx.Limits, deadline: Callable[[], float | None]
) -> httpx.HTTPTransport:
    """httpx's own transport, whose every socket operation ends by the exchange's deadline."""
    transport = httpx.HTTPTransport(limits=limits)
    pool = transport._pool  # httpx has no public seam for the network backend
    if isinstance(pool, httpcore.ConnectionPool):
        pool._network_backend = _DeadlineBackend(pool._network_backend, deadline)
    return transport


#: the longest one socket read waits before the deadline and a cancel are looked at again
SLICE = 0.2


def _clamp(timeout: float | None, deadline: Callable[[], float | None], what: str) -> float | None:
    until = deadline()
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise (httpcore.ConnectTimeout if what == "connect" else httpcore.ReadTimeout)(
            "the decision deadline passed" if left > float("-inf") else "cancelled"
        )
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: Callable[[], float | None]):
        self._stream = stream
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._deadline() is None:
            return self._stream.read(max_bytes, timeout)
        # in slices, so a cancel is seen within SLICE s; a timed-out read consumed nothing
        ends = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if ends is None else ends - time.monotonic()
            if left is not None and left <= 0:
                raise httpcore.ReadTimeout("timed out")
            step = _clamp(left, self._deadline, "read")
            try:
                return self._stream.read(max_bytes, SLICE if step is None else min(step, SLICE))
            except httpcore.ReadTimeout:
                continue

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamp(timeout, self._deadline, "write"))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._stream.start_tls(
            ssl_context, server_hostname, _clamp(timeout, self._deadline, "connect")
        )
        return _DeadlineStream(stream, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, backend: Any, deadline: Callable[[], float | None]) -> None:
        self._backend = backend
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            host, port, _clamp(timeout, self._deadline, "connect"), local_address, socket_options
        )
        return _DeadlineStream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_unix_socket(
            path, _clamp(timeout, self._deadline, "connect"), socket_options
        )
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


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


def _result(response: _Reply, latency: float, attempts: int, url: str) -> ChatResult:
    try:
        payload = json.loads(response.data)
        choice = payload["choices"][0]
        text = choice["message"]["content"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, IndexError, TypeError) as exc:
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
        sent_at=response.sent_at,
        received_at=response.received_at,
        finish_reason=str(choice.get("finish_reason") or ""),
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


def _status_message(
    response: _Reply, url: str, config: LLMConfig, refused: Form | None = None
) -> str:
    """``refused``: the form of the response_format the server refused."""
    code = response.status
    hint = ""
    if refused is not None:
        hint = (
            f"; the server refused the {refused} response_format: set [llm] structured_output "
            f"to the form it reads (llama-cpp, openai or none)"
        )
    elif code in (401, 403):
        hint = (
            f"; set the API key in ${config.api_key_env}"
            if config.api_key_env
            else "; name the key's environment variable in robot.toml [llm] api_key_env"
        )
    elif code == 404:
        hint = "; base_url must end in /v1 and the model must exist"
    return f"LLM at {url}: HTTP {code}{hint} ({_error_detail(response.text)})"


def _error_detail(body: str) -> str:
    """What an error body says, on one line: an OpenAI-style ``{"error": {"message": ...}}``
    gives its message (up to 300 characters), any other body its first 120."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message.strip():
        return " ".join(message.split())[:300]
    return body[:120].replace("\n", " ")
