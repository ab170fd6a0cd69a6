"""Calling the operator: a step that failed with ``on_failure = "operator"`` holds its
mission, and the call is posted as JSON to a URL (a chat webhook, a pager's endpoint) held
in the variable robot.toml's ``[service] operator_url_env`` names.

The post runs on a thread of its own, so a slow or dead endpoint never blocks the loop; its
outcome is logged (``operator_notified``, or ``operator_notify_failed`` at level error),
the URL as :func:`~onboard.base.urls.public_url` shows it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import httpx

from onboard.base.errors import ConfigError, Problem
from onboard.base.urls import public_url, url_problem
from onboard.service.log import JsonLog
from onboard.service.settings import ServiceConfig

__all__ = ["OperatorCall", "operator_url"]

#: seconds a post may take before it counts as failed
TIMEOUT = 10.0


def operator_url(settings: ServiceConfig, where: Path) -> str | None:
    """The URL the variable ``operator_url_env`` holds (None: unset or empty); a value that
    is no http(s) URL is a ConfigError naming robot.toml's key."""
    url = os.environ.get(settings.operator_url_env, "").strip()
    if not url:
        return None
    problem = url_problem(url)
    if problem is not None:
        why = f"the variable {settings.operator_url_env} holds {problem}"
        raise ConfigError([Problem(where, "service.operator_url_env", None, why)])
    return url


class OperatorCall:
    """Posts each call to ``url``, one thread per call; :meth:`join` waits for them."""

    def __init__(self, url: str, log: JsonLog) -> None:
        self.url, self.log = url, log
        self._threads: list[threading.Thread] = []

    def __call__(self, payload: dict[str, Any]) -> None:
        thread = threading.Thread(target=self._post, args=(payload,), name="operator-call",
                                  daemon=True)  # fmt: skip
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _post(self, payload: dict[str, Any]) -> None:
        shown = public_url(self.url)
        try:
            reply = httpx.post(self.url, json=payload, timeout=TIMEOUT)
        except httpx.HTTPError as exc:
            why = " ".join(str(exc).split()) or type(exc).__name__
            self.log.event("operator_notify_failed", level="error", url=shown, error=why)
            return
        if reply.is_success:
            self.log.event("operator_notified", url=shown, status=reply.status_code)
        else:
            self.log.event("operator_notify_failed", level="error", url=shown,
                           error=f"HTTP {reply.status_code}")  # fmt: skip

    def join(self, timeout: float = TIMEOUT) -> None:
        for thread in self._threads:
            thread.join(timeout)
