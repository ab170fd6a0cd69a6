"""A scripted stand-in for the ReplanVLM bots (tests only): an OpenAI-compatible loopback
server that answers each bot (told apart by the system message's first line, as a model
would read its role) from its own queue of replies, and keeps every request it saw. It sees
only the HTTP request. The loop's tests script the replies that drive each correction; the
goal reader, unless scripted, answers with no relation (the goal is judged by the Extra
Bot)."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

from onboard.replan import prompts
from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_server import completion_json

ROLE_OF = {
    prompts.DECISION_ROLE: "decision",
    prompts.MATCH_ROLE: "inner",
    prompts.EXTRA_ROLE: "extra",
    prompts.SAYCAN_ROLE: "saycan",
    prompts.GOAL_ROLE: "goal",
}
JUDGED = json.dumps({"mentions": [], "relations": []})


def role_of(body: Mapping[str, Any]) -> str:
    first = str(body["messages"][0]["content"]).splitlines()[0]
    return ROLE_OF.get(first, "unknown")


class ScriptedBots(LoopbackServer):
    def __init__(self, **replies: Iterable[str]) -> None:
        self.queues = {"goal": deque([JUDGED])} | {role: deque(r) for role, r in replies.items()}
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        super().__init__()

    def seen(self, role: str) -> list[dict[str, Any]]:
        return [body for r, body in self.requests if r == role]

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        role = role_of(body)
        with self._lock:
            self.requests.append((role, body))
            queue = self.queues.get(role)
            if not queue:
                return 500, {"error": {"message": f"no scripted reply left for {role}"}}
            content = queue.popleft() if len(queue) > 1 else queue[0]  # the last one repeats
        return 200, completion_json("scripted", content, 1)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length))
        owner = cast(ScriptedBots, cast(OwnedHTTPServer, self.server).owner)
        status, reply = owner.answer(body)
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ScriptedBots.handler = _Handler


def proposal(plan: Iterable[str], code: str) -> str:
    steps = "\n".join(f"{i}. {s}" for i, s in enumerate(plan, 1))
    return f"PLAN:\n{steps}\nCODE:\n```python\n{code}```"


def verdict(key: str, value: bool, reason: str) -> str:
    return json.dumps({key: value, "reason": reason})
