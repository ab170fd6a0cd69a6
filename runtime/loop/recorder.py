"""Episodes as JSON lines, flushed per record, so a crash loses nothing already written.

Images in a record's ``messages`` are written once each, by hash, into the folder beside the
recording (``<stem>.images/``, runtime/loop/recording.py) before the record that references
them; :func:`read_recording` with ``images=True`` puts them back.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from onboard.base.errors import RecordingError, RecordingWriteError
from onboard.base.nesting import MAX_NESTING, TOO_DEEP, nesting
from onboard.base.secrets import scrub
from onboard.loop.recording import Image, image_file, images_dir, restore_images, split_images

__all__ = ["MemoryRecorder", "Recorder", "enforce_quota", "read_recording", "with_images"]


class Recorder:
    """Appends one JSON object per line: ``{"seq", "t", "kind", ...}``.

    A write that fails (a full disk, a file-size limit) never raises into the episode: the
    file is closed with every record before it intact (each was flushed), ``fault`` holds
    the one-line :class:`RecordingWriteError`, ``on_fault`` is called once (the episode
    stops the robot) and the records go on in memory only.

    An image in a record's ``messages`` is stored once in ``<stem>.images/<sha256>.<ext>``
    (a temporary file renamed into place) before the record that references it; an image
    that cannot be written is a failed write like any other, and its record is not written.
    Records kept in memory only keep their images in memory (``images``).
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
        #: images of the records kept in memory only, by sha256
        self.images: dict[str, bytes] = {}
        self._stored: set[Path] = set()
        if path is None:
            return
        if not path.parent.parent.is_dir():  # a typo must not build a tree from the root
            raise RecordingError(
                f"{path}: cannot record: folder {path.parent.parent} does not exist (onboard "
                f"creates the recording's folder, never its parents)"
            )
        try:
            path.parent.mkdir(exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise RecordingError(f"{path}: cannot open for recording: {exc.strerror}") from exc

    def write(self, kind: str, **fields: Any) -> None:
        record = {"seq": self._seq, "t": self._t(), "wall": round(time.time(), 3), "kind": kind}
        record.update(fields)
        images: list[Image] = []
        if "messages" in record:  # images first: the secrets are scrubbed from text only
            record["messages"], images = split_images(record["messages"])
        if self._secrets:
            record = scrub(record, self._secrets)
        self._seq += 1
        self.records.append(record)
        if self._file is None:
            self.images.update((image.sha256, image.data) for image in images)
            return
        try:
            for image in images:
                self._store(image)
            self._file.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            self._file.flush()
        except OSError as exc:
            self.images.update((image.sha256, image.data) for image in images)
            self._failed(exc)

    def _store(self, image: Image) -> None:
        """Write an image once, atomically: it is complete on disk or not there at all."""
        target = image_file(images_dir(self.path), image.sha256, image.media_type)
        if target in self._stored:
            return
        if not target.is_file():
            _write_atomically(target, image.data)
        self._stored.add(target)

    def image(self, sha256: str, media_type: str) -> bytes:
        """The bytes of an image a record references (kept in memory, or on disk)."""
        if sha256 in self.images:
            return self.images[sha256]
        return _load_image(images_dir(self.path), sha256, media_type, self.path)

    def restored(self, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` with its images back as data URLs (as the episode sent them)."""
        if "messages" not in record:
            return record
        return {**record, "messages": restore_images(record["messages"], self.image)}

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
        # exactly (format 4): a replay delivers each recorded input at its time, and a tick's
        # 4.999999999999998 rounded to 5.0 would fall after a timer due at 5.0
        return None if self._now is None else float(self._now())

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


def _write_atomically(target: Path, data: bytes) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


class MemoryRecorder(Recorder):
    """Keeps records, and their images, in memory only (benchmarks, evaluation without
    --record)."""

    def __init__(self, clock_now: Any = None) -> None:
        super().__init__(None, clock_now)


def enforce_quota(folder: Path, max_bytes: int, keep: Path) -> list[Path]:
    """Delete the oldest episodes (``*.jsonl`` in ``folder``, each with its images folder)
    until the rest fit ``max_bytes``.

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
                size = info.st_size + _folder_size(images_dir(path))
                episodes.append((info.st_mtime, path.name, size, path))
    episodes.sort()
    total = sum(size for _, _, size, _ in episodes)
    dropped = []
    for _, _, size, path in episodes:
        if total <= max_bytes:
            break
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        shutil.rmtree(images_dir(path), ignore_errors=True)
        total -= size
        dropped.append(path)
    return dropped


def _folder_size(folder: Path) -> int:
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def read_recording(path: Path, *, images: bool = False) -> Iterator[dict[str, Any]]:
    """The records of a recording; a torn last line (a crash mid-write) is skipped. With
    ``images``, each image reference is back to its data URL (:func:`with_images`)."""
    records = _records(path)
    return with_images(records, path) if images else records


def with_images(records: Iterable[dict[str, Any]], path: Path) -> Iterator[dict[str, Any]]:
    """``records`` of the recording at ``path`` with their images read back from its images
    folder, each checked against its hash: a missing or corrupt image is a RecordingError."""
    folder = images_dir(path)
    loaded: dict[str, bytes] = {}

    def load(sha256: str, media_type: str) -> bytes:
        if sha256 not in loaded:
            loaded[sha256] = _load_image(folder, sha256, media_type, path)
        return loaded[sha256]

    for record in records:
        if "messages" in record:
            record = {**record, "messages": restore_images(record["messages"], load)}
        yield record


def _load_image(folder: Path, sha256: str, media_type: str, recording: Path) -> bytes:
    file = image_file(folder, sha256, media_type)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise RecordingError(
            f"{file}: image missing ({recording} references it): copy the recording with "
            f"its images folder {folder.name}/"
        ) from None
    except OSError as exc:
        raise RecordingError(f"{file}: cannot read the image: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise RecordingError(
            f"{file}: image corrupt: its bytes have sha256 {digest}, not the one its name "
            f"and {recording} give"
        )
    return data


def _records(path: Path) -> Iterator[dict[str, Any]]:
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
        except RecursionError:  # json recurses per nested array or object
            raise RecordingError(f"{path}:{number}: {TOO_DEEP}") from None
        if nesting(record) > MAX_NESTING:
            raise RecordingError(f"{path}:{number}: {TOO_DEEP}")
        if not isinstance(record, dict) or "kind" not in record:
            raise RecordingError(f"{path}:{number}: not an onboard record (no 'kind')")
        yield record
