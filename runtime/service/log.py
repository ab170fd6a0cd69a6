"""The service's log: one JSON object per line on stdout (journald keeps each as an entry).

Every line is ``{"ts", "level", "event", ...fields}``; fields go through the secrets scrub
(the API key and any password in a URL), so the log never holds a secret.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from onboard.base.secrets import scrub

__all__ = ["JsonLog"]


class JsonLog:
    """Writes events as JSON lines; thread-safe (the LLM server's watcher logs too)."""

    def __init__(self, stream: TextIO | None = None, secrets: Iterable[str | None] = ()) -> None:
        self._stream = stream
        self._secrets = [s for s in secrets if s]
        self._lock = threading.Lock()

    def event(self, event: str, level: str = "info", **fields: Any) -> None:
        ts = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        record = {"ts": ts, "level": level, "event": event, **scrub(fields, self._secrets)}
        line = json.dumps(record, default=str, ensure_ascii=True)
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(line + "\n")
            stream.flush()
