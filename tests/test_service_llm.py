"""``onboard up`` supervises the local LLM server it starts: killed, it is restarted after
a back-off, the log says so, and the next exchange is answered. The real SmolLM2 server."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import signal
import threading

import httpx
import pytest

from onboard.service.log import JsonLog
from onboard.service.up import BACKOFF, supervised_llm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

if importlib.util.find_spec("llama_cpp") is None:
    if os.environ.get("ONBOARD_REQUIRE_LOCAL_LLM") == "1":
        raise RuntimeError("the local-llm extra is required here: pip install -e '.[local-llm]'")
    pytest.skip("the local-llm extra is not installed", allow_module_level=True)


class Lines(io.StringIO):
    """The log's stream: each event kept, and an Event set when one named ``awaited`` comes."""

    def __init__(self, awaited: str) -> None:
        super().__init__()
        self.awaited, self.arrived = awaited, threading.Event()

    def write(self, text: str) -> int:
        if f'"event": "{self.awaited}"' in text:
            self.arrived.set()
        return super().write(text)


def test_a_killed_llm_server_is_restarted_with_a_back_off_logged_and_answers_again() -> None:
    from onboard.llm.local_server import server_pid

    lines = Lines("llm_server_restarted")
    with supervised_llm(JsonLog(lines)) as url:
        first = server_pid(url)
        assert first is not None
        os.kill(first, signal.SIGKILL)
        assert lines.arrived.wait(300)
        body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        reply = httpx.post(f"{url}/chat/completions", json=body, timeout=120.0)
        assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
        assert server_pid(url) not in (None, first)
    events = [json.loads(line) for line in lines.getvalue().splitlines()]
    names = [e["event"] for e in events]
    assert names == ["llm_server_starting", "llm_server_ready", "llm_server_died",
                     "llm_server_restarted", "llm_server_stopping"]  # fmt: skip
    died = events[2]
    assert died["level"] == "error" and "exited with code -9" in died["reason"]
    assert died["restart"] == 1 and died["in_seconds"] == BACKOFF[0] and died["limit"] is None
    assert events[3]["pid"] != first and events[1]["pid"] == first
