"""Running a service in a test: its loop on this (the main) thread, as ``onboard up`` runs
it, its control API on a free loopback port, and the test's side on another thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from onboard.service.api import ApiServer, make_app
from onboard.service.service import Service

#: seconds any one wait may last before the test fails (a guard, not a timing)
WAIT = 120.0
#: the header every control request carries
CONTROL = {"X-Onboard": "1"}


def serve_beside(service: Service, drive: Callable[[str], None]) -> None:
    """Run ``service`` with its API until ``drive(url)``, on another thread, returns; what
    ``drive`` raised is raised here, once the service has stopped."""
    server = ApiServer(make_app(service, None), "127.0.0.1", 0)
    server.start()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            drive(server.url)
        except BaseException as exc:
            failed.append(exc)
        finally:
            service.clock.stop()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        service.run()
    finally:
        thread.join()
        server.close()
    if failed:
        raise failed[0]


def until(url: str, holds: Callable[[Any], bool], what: str) -> dict[str, Any]:
    """The first answer of ``url`` (polled) that ``holds``; a list comes as ``{"items": it}``."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        got = httpx.get(url, timeout=WAIT).json()
        if holds(got):
            return dict(got) if isinstance(got, dict) else {"items": got}
        time.sleep(0.02)
    raise AssertionError(f"never seen: {what}")
