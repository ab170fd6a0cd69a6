"""Episodes as JSON lines, flushed per record, so a crash loses nothing already written.

Images in a record's ``messages`` are written once each, by hash, into the folder beside the
recording (``<stem>.images/``, runtime/loop/recording.py) before the record that references
them; :func:`read_recording` with ``images=True`` puts them back.

The recorder is the one source of truth for everything that watches an episode: each record,
as written (secrets scrubbed, images as references), is published to its subscribers
(:meth:`Recorder.subscribe`): the MCAP writer (runtime/loop/mcapfile.py), the metrics
(runtime/loop/metrics.py), the live Foxglove view (runtime/loop/live.py), the ROS 2 bridge
(runtime/fleet/ros2.py). A recording path ending in ``.mcap`` is written as MCAP instead of
JSON lines, by the same writer, subscribed as the recording itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from onboard.base.errors import RecordingError, RecordingWriteError
from onboard.base.nesting import MAX_NESTING, TOO_DEEP, nesting
from onboard.base.secrets import scrub
from onboard.loop.recording import Image, image_file, images_dir, restore_images, split_images

__all__ = [
    "MCAP_MAGIC",
    "MemoryRecorder",
    "Published",
    "Recorder",
    "Subscriber",
    "is_mcap",
    "load_image",
    "read_recording",
    "subscribe_every",
    "with_images",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    """One record as the recorder wrote it, handed to each subscriber."""

    #: the record (secrets scrubbed, each image in ``messages`` a reference)
    record: dict[str, Any]
    #: its JSON line, without the newline: the bytes the JSON-lines file holds
    line: str
    #: the images its ``messages`` reference, with their bytes
    images: tuple[Image, ...]


#: a recorder's subscriber: called with each record, in order, on the writer's thread
Subscriber = Callable[[Published], None]

#: what each recording (a Recorder with a path) made from now on in this process is
#: subscribed to: ``onboard up --metrics`` counts every mission step's episode
_EVERY: list[Callable[[], Subscriber]] = []


@contextlib.contextmanager
def subscribe_every(make: Callable[[], Subscriber]) -> Iterator[None]:
    """While inside, each recording made in this process is subscribed to a new ``make()``
    (its own subscriber: recordings may be written at once, on several threads)."""
    _EVERY.append(make)
    try:
        yield
    finally:
        _EVERY.remove(make)


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

    Each record is then published to the subscribers (:meth:`subscribe`). A subscriber that
    raises is detached and logged once (a warning naming it and the error); the episode
    and the recording go on without it. An *essential* subscriber is the recording itself
    (the MCAP writer of a ``.mcap`` path): its failure is a failed write, as above.
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
        self._subscribers: list[tuple[Subscriber, bool]] = []
        #: subscribers detached after they raised, each with its error in one line
        self.detached: list[tuple[Subscriber, str]] = []
        self._mcap: Any = None
        if path is None:
            return
        self._subscribers += [(make(), False) for make in _EVERY]
        if not path.parent.parent.is_dir():  # a typo must not build a tree from the root
            raise RecordingError(
                f"{path}: cannot record: folder {path.parent.parent} does not exist (onboard "
                f"creates the recording's folder, never its parents)"
            )
        if path.suffix == ".mcap":  # the images go into the file: kept in memory until then
            from onboard.loop.mcapfile import McapWriter

            self._mcap = McapWriter.create(path)
            self.subscribe(self._mcap, essential=True)
            return
        try:
            path.parent.mkdir(exist_ok=True)
            self._file = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise RecordingError(f"{path}: cannot open for recording: {exc.strerror}") from exc

    def subscribe(self, subscriber: Subscriber, *, essential: bool = False) -> None:
        """Call ``subscriber`` with each record written from here on (:class:`Published`)."""
        self._subscribers.append((subscriber, essential))

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers = [(s, e) for s, e in self._subscribers if s != subscriber]

    def _publish(self, published: Published) -> None:
        for subscriber, essential in list(self._subscribers):
            try:
                subscriber(published)
            except Exception as exc:
                self.unsubscribe(subscriber)
                if essential:
                    if subscriber is self._mcap:  # keep what it wrote, as a torn JSON line
                        self._mcap = None
                        with contextlib.suppress(Exception):
                            subscriber.abandon()
                    self.images.update((i.sha256, i.data) for i in published.images)
                    self._failed(exc if isinstance(exc, OSError) else OSError(str(exc)))
                    continue
                why = f"{type(exc).__name__}: {exc}"
                self.detached.append((subscriber, why))
                log.warning("%s: a recording subscriber (%r) failed and was detached, the "
                            "recording goes on: %s", self.path, subscriber, why)  # fmt: skip

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
            if self._subscribers:
                self._publish(Published(record, _line(record), tuple(images)))
            return
        line = _line(record)
        try:
            for image in images:
                self._store(image)
            self._file.write(line + "\n")
            self._file.flush()
        except OSError as exc:
            self.images.update((image.sha256, image.data) for image in images)
            self._failed(exc)
        if self._subscribers:
            self._publish(Published(record, line, tuple(images)))

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
        if self._mcap is not None:
            try:
                self._mcap.sync()
            except OSError as exc:
                self._failed(exc)
        if self._file is not None:
            try:
                os.fsync(self._file.fileno())
            except OSError as exc:
                self._failed(exc)

    def close(self) -> None:
        if self._mcap is not None:
            mcap, self._mcap = self._mcap, None
            try:
                mcap.close()
            except OSError as exc:
                self._failed(exc)
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


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, default=str, ensure_ascii=False)


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


def read_recording(path: Path, *, images: bool = False) -> Iterator[dict[str, Any]]:
    """The records of a recording; a torn last line (a crash mid-write) is skipped. With
    ``images``, each image reference is back to its data URL (:func:`with_images`)."""
    records = _records(path)
    return with_images(records, path) if images else records


def with_images(records: Iterable[dict[str, Any]], path: Path) -> Iterator[dict[str, Any]]:
    """``records`` of the recording at ``path`` with their images read back from its images
    folder (an MCAP recording: from its attachments), each checked against its hash: a
    missing or corrupt image is a RecordingError."""
    folder = images_dir(path)
    loaded: dict[str, bytes] = {}
    attached: dict[str, bytes] | None = None
    if is_mcap(path):
        from onboard.loop.mcapfile import read_mcap

        attached = read_mcap(path).images

    def load(sha256: str, media_type: str) -> bytes:
        if sha256 not in loaded:
            loaded[sha256] = (
                _load_image(folder, sha256, media_type, path)
                if attached is None
                else _attached(attached, sha256, media_type, path)
            )
        return loaded[sha256]

    for record in records:
        if "messages" in record:
            record = {**record, "messages": restore_images(record["messages"], load)}
        yield record


def load_image(recording: Path, sha256: str, media_type: str) -> bytes:
    """An image a JSON-lines recording references, from its images folder, checked against
    its hash (a RecordingError if missing or corrupt)."""
    return _load_image(images_dir(recording), sha256, media_type, recording)


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


#: the first bytes of every MCAP file
MCAP_MAGIC = b"\x89MCAP0\r\n"


def is_mcap(path: Path) -> bool:
    """Whether the file at ``path`` is MCAP (by its first bytes, whatever its name)."""
    try:
        with path.open("rb") as file:
            return file.read(len(MCAP_MAGIC)) == MCAP_MAGIC
    except OSError:
        return False


def _attached(images: dict[str, bytes], sha256: str, media_type: str, path: Path) -> bytes:
    name = image_file(Path(), sha256, media_type).name
    data = images.get(name)
    if data is None:
        raise RecordingError(f"{path}: image {name} missing (a record references it)")
    if hashlib.sha256(data).hexdigest() != sha256:
        raise RecordingError(f"{path}: image {name} corrupt: its bytes have another sha256")
    return data


def _records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        if is_mcap(path):
            from onboard.loop.mcapfile import read_mcap

            lines = read_mcap(path).lines
        else:
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
