"""Episodes as JSON lines, flushed per record, so a crash loses nothing already written."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from onboard.base.errors import RecordingError, RecordingWriteError
from onboard.base.secrets import scrub

__all__ = ["MemoryRecorder", "Recorder", "enforce_quota", "read_recording"]


class Recorder:
    """Appends one JSON object per line: ``{"seq", "t", "kind", ...}``.

    A write that fails (a full disk, a file-size limit) never raises into the episode: the
    file is closed with every record before it intact (each was flushed), ``fault`` holds
    the one-line :class:`RecordingWriteError`, ``on_fault`` is called once (the episode
    stops the robot) and the records go on in memory only.
    """

    #: called once with the error when a write first fails
    on_fault: Callable[[RecordingWriteError], None] | None = None

    def __init__(self, path: Path | None, clock_now: Any = None) -> None:
        """``path=None`` keeps the records in memory only."""
        self.path = path or Path("<memory>")
        self._now = clock_now
        self._seq = 0
        self._file: TextIO | None = None
        self.fault: RecordingWriteError | None = None
        self._secrets: list[str] = []
        self.records: list[dict[str, Any]] = []
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise RecordingError(f"{path}: cannot open for recording: {exc.strerror}") from exc

    def write(self, kind: str, **fields: Any) -> None:
        record = {"seq": self._seq, "t": self._t(), "wall": round(time.time(), 3), "kind": kind}
        record.update(fields)
        if self._secrets:
            record = scrub(record, self._secrets)
        self._seq += 1
        self.records.append(record)
        if self._file is None:
            return
        try:
            self._file.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            self._file.flush()
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
        if self.fault is not None:
            return
        self.fault = RecordingWriteError(
            f"{self.path}: cannot write the recording: {exc.strerror or exc}; the robot was "
            f"stopped and the records before the failure were kept"
        )
        if self.on_fault is not None:
            self.on_fault(self.fault)

    def hide(self, secret: str | None) -> None:
        """Write ``***`` for ``secret`` (the API key) in every record from here on."""
        if secret and secret not in self._secrets:
            self._secrets.append(secret)

    def use_clock(self, now: Any) -> None:
        """Stamp records with ``now()`` (the episode's clock) from here on."""
        self._now = now

    def _t(self) -> float | None:
        return None if self._now is None else round(float(self._now()), 4)

    def sync(self) -> None:
        if self._file is not None:
            try:
                os.fsync(self._file.fileno())
            except OSError as exc:
                self._failed(exc)

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                self._file.close()
            except OSError as exc:
                self._failed(exc)
            self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class MemoryRecorder(Recorder):
    """Keeps records in memory only (benchmarks, evaluation without --record)."""

    def __init__(self, clock_now: Any = None) -> None:
        super().__init__(None, clock_now)


def enforce_quota(folder: Path, max_bytes: int, keep: Path) -> list[Path]:
    """Delete the oldest episodes (``*.jsonl`` in ``folder``) until the rest fit ``max_bytes``.

    ``keep`` (the recording about to be written) and ``candidates.jsonl`` (the bottom-up
    candidates, not an episode) are never deleted. Returns what was deleted, oldest first.
    """
    episodes = []
    with contextlib.suppress(OSError):
        for path in folder.glob("*.jsonl"):
            if path.name == "candidates.jsonl" or path.resolve() == keep.resolve():
                continue
            with contextlib.suppress(OSError):
                info = path.stat()
                episodes.append((info.st_mtime, path.name, info.st_size, path))
    episodes.sort()
    total = sum(size for _, _, size, _ in episodes)
    dropped = []
    for _, _, size, path in episodes:
        if total <= max_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        total -= size
        dropped.append(path)
    return dropped


def read_recording(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a recording; a torn last line (a crash mid-write) is skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read recording: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise RecordingError(f"{path}: not a recording (not UTF-8 text)") from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):
                return
            raise RecordingError(f"{path}:{number}: not a JSON record ({exc.msg})") from exc
        if not isinstance(record, dict) or "kind" not in record:
            raise RecordingError(f"{path}:{number}: not an onboard record (no 'kind')")
        yield record
