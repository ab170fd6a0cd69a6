"""Heartbeats the operator watches: the service's loop and the LLM link.

The loop's beat is a timer on the loop itself (:meth:`Service._heartbeat`, every second): a
step runs on the loop, so the beat pauses while a step runs and goes on after it; outside a
step and before the loop has returned, a beat older than ``LATE`` seconds is a loop that
hangs. The LLM link's beat is a probe from a thread of its own: ``GET {base_url}/models``
every ``every`` seconds (the OpenAI-style listing the local server and the hosted APIs
answer), with the API key.

:class:`Heartbeats` logs ``heartbeat`` every ``log_every`` seconds, ``loop_late`` and
``llm_link_down`` / ``llm_link_up`` when they change; ``status()`` is what the page shows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from onboard.base.urls import public_url
from onboard.service.log import JsonLog

__all__ = ["LATE", "Heartbeats"]

#: seconds without a loop beat, outside a step, that make the loop late
LATE = 3.0


class Heartbeats:
    def __init__(
        self,
        log: JsonLog,
        loop_beat: Callable[[], float],
        in_step: Callable[[], bool],
        llm: str | None,
        api_key: str | None = None,
        every: float = 5.0,
        log_every: float = 60.0,
        late: float = LATE,
        loop_ended: Callable[[], bool] = lambda: False,
    ) -> None:
        self.log, self._loop_beat, self._in_step = log, loop_beat, in_step
        #: the loop has returned: its last beat ages, but it no longer hangs
        self._loop_ended = loop_ended
        self.late = late
        self.llm, self._key, self.every, self.log_every = llm, api_key, every, log_every
        #: the LLM link: ok (None: not probed yet), the probe's ms, the last answer's time
        self.llm_ok: bool | None = None
        self.llm_ms: float | None = None
        self.llm_seen: float | None = None
        self.llm_error: str | None = None
        self._late = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def probed(self) -> bool:
        """The link is an HTTP endpoint (not the in-process stand-in)."""
        return self.llm is not None and self.llm.startswith(("http://", "https://"))

    def status(self) -> dict[str, Any]:
        age = time.time() - self._loop_beat()
        in_step = self._in_step()
        return {
            "loop": {
                "age": round(age, 3),
                "in_step": in_step,
                "late": age > self.late and not in_step and not self._loop_ended(),
            },
            "llm": {
                "url": public_url(self.llm) if self.llm else None,
                "probed": self.probed,
                "ok": self.llm_ok,
                "ms": self.llm_ms,
                "age": round(time.time() - self.llm_seen, 3) if self.llm_seen else None,
                "error": self.llm_error,
            },
        }

    def start(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="heartbeats", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _watch(self) -> None:
        logged = time.monotonic()  # the first after log_every: "ready" says the rest
        while not self._done.is_set():
            if self.probed:
                self._probe()
            status = self.status()
            late = status["loop"]["late"]
            if late != self._late:
                self._late = late
                level = "warning" if late else "info"
                event = "loop_late" if late else "loop_beating"
                self.log.event(event, level=level, age=status["loop"]["age"])
            if time.monotonic() - logged >= self.log_every:
                logged = time.monotonic()
                self.log.event("heartbeat", **status)
            self._done.wait(self.every)

    def _probe(self) -> None:
        import httpx

        assert self.llm is not None
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        began = time.monotonic()
        try:
            reply = httpx.get(self.llm.rstrip("/") + "/models", headers=headers, timeout=2.0)
            ok, error = (
                reply.status_code < 500,
                None if reply.status_code < 500 else reply.reason_phrase,
            )
        except httpx.HTTPError as exc:
            ok, error = False, type(exc).__name__
        self.llm_ms = round((time.monotonic() - began) * 1000, 1)
        if ok:
            self.llm_seen = time.time()
        if ok != self.llm_ok:
            event, level = ("llm_link_up", "info") if ok else ("llm_link_down", "error")
            self.log.event(event, level=level, url=public_url(self.llm), error=error)
        self.llm_ok, self.llm_error = ok, error
