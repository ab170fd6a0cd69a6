"""The client against a hostile endpoint (runtime/testing/fault_server.py, real loopback HTTP):
the deadline bounds the whole exchange, replies are capped, Retry-After is honoured within
the deadline, the budget refuses, and the key never comes back out."""

from __future__ import annotations

import email.utils
import threading
import time

import pytest

from onboard.base.errors import LLMError, LLMRefused, LLMReplyError, LLMTimeout
from onboard.config import LLMConfig
from onboard.llm.client import ChatClient, retry_after
from onboard.testing.fault_server import FaultServer

MESSAGES = [{"role": "user", "content": "The person is looking at the robot."}]
CONFIG = LLMConfig(read_timeout=5.0, deadline=1.0, retries=2)
SECRET = "sk-fault-test-5b2e8d"


def timed(client: ChatClient) -> tuple[BaseException | None, float]:
    began = time.monotonic()
    try:
        client.complete(MESSAGES)
    except LLMError as exc:
        return exc, time.monotonic() - began
    return None, time.monotonic() - began


@pytest.mark.parametrize("mode", ["drip_headers", "drip_body", "hang"])
def test_a_dripping_or_hanging_server_is_cut_off_at_the_deadline(mode: str) -> None:
    # every drip comes before the 5 s read timeout: only the 1 s total deadline stops it
    with (
        FaultServer([mode] * 5, drip=0.05) as server,
        ChatClient(CONFIG, base_url=server.base_url) as client,
    ):
        error, took = timed(client)
    assert isinstance(error, LLMTimeout)
    # the fault alone would hold the exchange far longer; the bound leaves a loaded machine slack
    assert 0.9 <= took < 4.0


def test_a_late_answer_past_the_deadline_times_out() -> None:
    with (
        FaultServer(["late"], late=3.0) as server,
        ChatClient(CONFIG, base_url=server.base_url) as client,
    ):
        error, took = timed(client)
    assert isinstance(error, LLMTimeout) and took < 2.8  # the answer comes at 3 s


def test_a_huge_reply_is_a_failed_exchange_naming_its_size() -> None:
    config = CONFIG.model_copy(update={"deadline": 5.0, "max_reply_bytes": 65536})
    with (
        FaultServer(["huge"]) as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        error, took = timed(client)
        assert len(server.requests) == 1  # not retried
    assert isinstance(error, LLMReplyError)
    assert "max_reply_bytes = 65536" in str(error) and "read" in str(error)
    assert took < 4.5  # the size ended it, not the 5 s deadline


def test_a_reset_is_retried_and_then_answered() -> None:
    with (
        FaultServer(["reset"]) as server,
        ChatClient(CONFIG, base_url=server.base_url, seed=0) as client,
    ):
        result = client.complete(MESSAGES)
    assert result.attempts == 2


def test_malformed_is_a_reply_error() -> None:
    with (
        FaultServer(["malformed"]) as server,
        ChatClient(CONFIG, base_url=server.base_url) as client,
        pytest.raises(LLMReplyError, match="not a chat completion"),
    ):
        client.complete(MESSAGES)


@pytest.mark.parametrize("status", ["429", "503"])
def test_retry_after_within_the_deadline_is_waited_out(status: str) -> None:
    config = CONFIG.model_copy(update={"deadline": 3.0})
    with (
        FaultServer([status], retry_after="1") as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        result = client.complete(MESSAGES)
        (first, _), (second, _) = server.requests
    assert result.attempts == 2
    assert second - first >= 0.95  # not the 0.15 s back-off


@pytest.mark.parametrize("status", ["429", "503"])
def test_retry_after_past_the_deadline_fails_at_once(status: str) -> None:
    with (
        FaultServer([status] * 3, retry_after="30") as server,
        ChatClient(CONFIG, base_url=server.base_url) as client,
    ):
        error, took = timed(client)
        assert len(server.requests) == 1
    assert isinstance(error, LLMTimeout) and "Retry-After 30 s" in str(error)
    assert took < 0.9  # at once: not after waiting out the 1 s deadline


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry_after("7") == 7.0
    assert retry_after(None) is None and retry_after("soon") is None
    date = email.utils.formatdate(1_000_010.0, usegmt=True)
    assert retry_after(date, now=1_000_000.0) == pytest.approx(10.0)


def test_the_request_budget_refuses_before_sending() -> None:
    config = CONFIG.model_copy(update={"requests_per_minute": 2})
    with (
        FaultServer() as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        client.complete(MESSAGES)
        client.complete(MESSAGES)
        with pytest.raises(LLMRefused, match="requests_per_minute = 2"):
            client.complete(MESSAGES)
        assert len(server.requests) == 2


def test_the_token_budget_refuses_once_spent() -> None:
    config = CONFIG.model_copy(update={"tokens_per_hour": 5})
    with (
        FaultServer(content="one two three four five six") as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        client.complete(MESSAGES)
        with pytest.raises(LLMRefused, match="tokens_per_hour = 5"):
            client.complete(MESSAGES)


@pytest.mark.parametrize("mode", ["echo_key", "echo_key_401"])
def test_an_echoed_key_never_comes_back_out(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONBOARD_FAULT_KEY", SECRET)
    config = CONFIG.model_copy(update={"api_key_env": "ONBOARD_FAULT_KEY"})
    with (
        FaultServer([mode]) as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        try:
            text = client.complete(MESSAGES).text
        except LLMError as exc:
            text = str(exc)
    assert "***" in text and SECRET not in text


@pytest.mark.parametrize(("mode", "retry"), [("hang", "1"), ("drip_body", "1"), ("503", "20")])
def test_cancel_ends_the_exchange_in_flight_and_its_waits(mode: str, retry: str) -> None:
    config = CONFIG.model_copy(update={"deadline": 30.0, "read_timeout": 60.0})
    with (
        FaultServer([mode], retry_after=retry, drip=0.05) as server,
        ChatClient(config, base_url=server.base_url) as client,
    ):
        timer = threading.Timer(0.3, client.cancel)
        timer.start()
        error, took = timed(client)
        timer.cancel()
        assert isinstance(error, LLMTimeout)
        assert took < 0.3 + 4.0  # the 30 s deadline did not end it
        assert client.complete(MESSAGES).text  # a later exchange is not cancelled
