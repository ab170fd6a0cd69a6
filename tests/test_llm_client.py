"""runtime/llm/client.py ChatClient over real loopback HTTP (the stand-in server, no mocks)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from onboard.base.errors import LLMError, LLMReplyError, LLMTimeout
from onboard.config import LLMConfig
from onboard.llm.client import ChatClient
from onboard.testing.standin_server import StandInServer, completion_json

MESSAGES = [
    {"role": "user", "content": "Initiate a conversation at a facility."},
    {"role": "user", "content": "The person is looking at the robot."},
]
FAST = LLMConfig(model="standin-test", read_timeout=2.0, deadline=5.0, retries=2)


def words(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"].split()) for m in messages)


# ---------------------------------------------------------------------------- plain exchange


def test_plain_completion(standin: StandInServer) -> None:
    with ChatClient(FAST, base_url=standin.base_url, seed=0) as client:
        result = client.complete(MESSAGES)
    assert result.text.strip()
    assert result.attempts == 1
    assert result.model == "standin-test"  # the stand-in echoes the requested model
    assert result.prompt_tokens == words(MESSAGES)
    assert result.completion_tokens == len(result.text.split()) > 0
    assert 0.0 < result.latency < 30.0
    assert 0.0 < result.sent_at < result.received_at
    assert "policy" in result.timings
    [body] = standin.requests
    assert body["messages"] == MESSAGES
    assert body["model"] == "standin-test"
    assert body["temperature"] == FAST.temperature
    assert body["max_tokens"] == FAST.max_tokens
    assert "response_format" not in body


def test_latency_and_server_timing_reflect_a_slow_server() -> None:
    with (
        StandInServer(seed=0, noise=0.0, format_noise=0.0, latency=0.3) as server,
        ChatClient(FAST, base_url=server.base_url) as client,
    ):
        result = client.complete(MESSAGES)
    assert result.latency >= 0.3
    assert result.received_at - result.sent_at >= 0.3
    assert result.timings["policy"] >= 0.3


def test_schema_is_sent_as_response_format(standin: StandInServer) -> None:
    """In the OpenAI form for any URL but the embedded model's (tests/test_structured_output.py
    has every form)."""
    schema = {
        "type": "object",
        "properties": {"action": {"type": "string", "enum": ["pause", "speak"]}},
        "required": ["action"],
    }
    with ChatClient(FAST, base_url=standin.base_url) as client:
        client.complete(MESSAGES, schema=schema)
    [body] = standin.requests
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": schema, "strict": True},
    }


# ---------------------------------------------------------------------------- retries


@pytest.mark.parametrize("fault", ["500", "429"])
def test_retryable_status_is_retried(fault: str) -> None:
    with (
        StandInServer(seed=0, noise=0.0, format_noise=0.0, faults=[fault, "ok"]) as server,
        ChatClient(FAST, base_url=server.base_url, seed=0) as client,
    ):
        result = client.complete(MESSAGES)
        assert result.attempts == 2
        assert result.text.strip()
        assert len(server.requests) == 2


def test_retries_exhausted_raise_timeout_naming_the_last_failure() -> None:
    config = FAST.model_copy(update={"retries": 2})
    with (
        StandInServer(seed=0, faults=["500", "429", "500", "ok"]) as server,
        ChatClient(config, base_url=server.base_url, seed=0) as client,
    ):
        with pytest.raises(LLMTimeout, match=r"after 3 attempt\(s\) \(last: HTTP 500\)"):
            client.complete(MESSAGES)
        assert len(server.requests) == 3  # retries + 1, never more


def test_slow_server_times_out_within_the_deadline() -> None:
    config = LLMConfig(read_timeout=0.3, deadline=1.0, retries=10)
    with (
        StandInServer(seed=0, faults=["timeout"] * 30, fault_sleep=2.0) as server,
        ChatClient(config, base_url=server.base_url, seed=0) as client,
    ):
        began = time.monotonic()
        with pytest.raises(LLMTimeout, match="timed out") as info:
            client.complete(MESSAGES)
        took = time.monotonic() - began
        # 11 attempts of 0.3 s would take over 3 s: the 1 s deadline cut them short (the
        # bound leaves a loaded machine slack)
        assert 0.9 <= took < 3.0
        assert isinstance(info.value, TimeoutError)
        assert 1 <= len(server.requests) <= 6


def test_one_slow_answer_then_a_fast_retry_succeeds() -> None:
    config = LLMConfig(read_timeout=0.3, deadline=3.0, retries=2)
    with (
        StandInServer(seed=0, faults=["timeout"], fault_sleep=5.0) as server,
        ChatClient(config, base_url=server.base_url, seed=0) as client,
    ):
        result = client.complete(MESSAGES)
        assert result.attempts == 2
        assert 0.3 <= result.latency < 3.0  # did not wait out the 5 s answer


def test_deadline_argument_overrides_the_config() -> None:
    config = LLMConfig(read_timeout=5.0, deadline=30.0, retries=5)
    with (
        StandInServer(seed=0, faults=["timeout"] * 10, fault_sleep=5.0) as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        began = time.monotonic()
        with pytest.raises(LLMTimeout):
            client.complete(MESSAGES, deadline=0.5)
        assert time.monotonic() - began < 4.0  # not the 5 s answer, nor the 30 s deadline


def test_timeout_message_names_the_effective_deadline() -> None:
    config = LLMConfig(read_timeout=5.0, deadline=30.0, retries=5)
    with (
        StandInServer(seed=0, faults=["timeout"] * 10, fault_sleep=2.0) as server,
        ChatClient(config, base_url=server.base_url) as client,
        pytest.raises(LLMTimeout) as info,
    ):
        client.complete(MESSAGES, deadline=0.5)
    assert "within 0.5 s" in str(info.value)


# ---------------------------------------------------------------------------- hard failures


def test_wrong_path_raises_llm_error_at_once(standin: StandInServer) -> None:
    config = LLMConfig(read_timeout=2.0, deadline=5.0, retries=5)
    with ChatClient(config, base_url=standin.base_url + "/nope") as client:
        began = time.monotonic()
        with pytest.raises(LLMError, match="HTTP 404") as info:
            client.complete(MESSAGES)
        assert time.monotonic() - began < 4.0  # no retries until the 5 s deadline
    assert not isinstance(info.value, LLMTimeout)
    assert "base_url must end in /v1" in str(info.value)
    assert "\n" not in str(info.value)
    assert standin.requests == []  # the 404 path never reached the completions handler


def test_unreachable_port_raises_timeout_mentioning_cannot_reach() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # nothing listens on `port` now
    config = LLMConfig(connect_timeout=0.5, read_timeout=0.5, deadline=2.0, retries=2)
    with ChatClient(config, base_url=f"http://127.0.0.1:{port}/v1", seed=0) as client:
        began = time.monotonic()
        with pytest.raises(LLMTimeout, match="cannot reach") as info:
            client.complete(MESSAGES)
        assert time.monotonic() - began < 10.0
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "3 attempt(s)" in str(info.value)


# ---------------------------------------------------------------------------- API key and bodies


class _Recorder(BaseHTTPRequestHandler):
    """Answers chat completions with ``content`` and records each request's headers."""

    protocol_version = "HTTP/1.1"
    content: Any = "Hello."
    seen: list[dict[str, str]]

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        type(self).seen.append(dict(self.headers.items()))
        content = self.content
        if isinstance(content, bytes):
            data = content
        elif content is None:
            data = json.dumps({"choices": [{"message": {"content": None}}]}).encode()
        else:
            data = json.dumps(completion_json("recorder", content, 1)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def recorder() -> Iterator[tuple[str, type[_Recorder]]]:
    handler = type("Recorder", (_Recorder,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_api_key_from_the_named_environment_variable(
    recorder: tuple[str, type[_Recorder]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = recorder
    monkeypatch.setenv("ONBOARD_TEST_KEY", "sk-test-1234")
    config = LLMConfig(api_key_env="ONBOARD_TEST_KEY")
    with ChatClient(config, base_url=url) as client:
        assert client.complete(MESSAGES).text == "Hello."
    [headers] = handler.seen
    assert headers["Authorization"] == "Bearer sk-test-1234"


def test_no_authorization_header_without_a_key(
    recorder: tuple[str, type[_Recorder]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, handler = recorder
    monkeypatch.delenv("ONBOARD_TEST_KEY", raising=False)
    with ChatClient(LLMConfig(api_key_env="ONBOARD_TEST_KEY"), base_url=url) as client:
        client.complete(MESSAGES)
    with ChatClient(LLMConfig(api_key_env=None), base_url=url) as client:
        client.complete(MESSAGES)
    assert len(handler.seen) == 2
    assert all("Authorization" not in h for h in handler.seen)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param(b"this is not json", "not a chat completion", id="not-json"),
        pytest.param(b'{"choices": []}', "not a chat completion", id="no-choices"),
        pytest.param(None, "NoneType, not text", id="null-content"),
    ],
)
def test_unusable_200_raises_reply_error(
    recorder: tuple[str, type[_Recorder]], content: object, match: str
) -> None:
    url, handler = recorder
    handler.content = content
    with ChatClient(FAST, base_url=url) as client, pytest.raises(LLMReplyError, match=match):
        client.complete(MESSAGES)
    assert len(handler.seen) == 1  # an unusable answer is not retried
