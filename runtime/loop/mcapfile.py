"""Recordings as MCAP (the ``mcap`` extra): written by a recorder subscriber, read back.

An onboard MCAP file holds the recording twice over, once to give back and once to look at:

- every record on the channel of its kind, ``/onboard/<kind>`` (message encoding ``json``,
  a JSON schema ``onboard.<kind>``, channel metadata ``onboard.kind``): the message's data is
  the record's JSON line byte for byte, its ``sequence`` the line's index, its log and
  publish times the record's ``wall`` in nanoseconds;
- every image the records reference as an attachment named as in the images folder
  (``<sha256>.<ext>``, with its media type), written once;
- what Foxglove draws (runtime/loop/foxglove.py): ``/camera``, ``/detections``, ``/tf``.

The channels are runtime/loop/channels.py's table, which the live view (runtime/loop/live.py)
serves too.

So JSON lines -> MCAP -> JSON lines gives the same bytes, the images folder included
(:func:`export_mcap`, :func:`export_jsonl`; ``onboard export``). A recording made as MCAP
(``--record x.mcap``) is written unchunked and flushed per record, as JSON lines are: a crash
loses nothing already written, and :func:`read_mcap` reads a file cut short up to its last
whole record. An exported one is chunked and zstd-compressed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from onboard.base.errors import MissingExtraError, RecordingError
from onboard.loop.channels import MESSAGE_ENCODING, SCHEMA_ENCODING, ChannelSpec, RecordChannels
from onboard.loop.foxglove import wall_ns
from onboard.loop.recorder import Published, is_mcap, load_image
from onboard.loop.recording import IMAGE_REF, Image, image_file, images_dir

if TYPE_CHECKING:
    from mcap.writer import Writer

__all__ = ["EXTRA", "McapContents", "McapWriter", "export_jsonl", "export_mcap", "read_mcap"]

EXTRA = "pip install 'onboard[mcap]' (the mcap extra)"
#: the metadata record that marks an onboard recording
METADATA = "onboard.recording"
_IMAGE_NAME = re.compile(r"[0-9a-f]{64}\.[a-z0-9]{1,16}")


def _writer_class() -> type[Writer]:
    try:
        from mcap.writer import Writer
    except ImportError as exc:
        raise MissingExtraError(f"MCAP recordings need the mcap package: {EXTRA}") from exc
    return Writer


class McapWriter:
    """Writes records to an MCAP stream: a recorder subscriber (``writer(published)``)."""

    def __init__(self, stream: IO[bytes], path: Path, *, chunked: bool) -> None:
        self.path = path
        self._stream = stream
        self._writer = _writer_class()(stream, use_chunking=chunked)
        self._writer.start(profile="", library="onboard")
        self._writer.add_metadata(METADATA, {"format": "json lines, one record per message"})
        self._channels: dict[ChannelSpec, int] = {}
        self._attached: set[str] = set()
        self._messages = RecordChannels()
        self._lines = 0
        self._finished = False
        stream.flush()

    @classmethod
    def create(cls, path: Path) -> McapWriter:
        """A new MCAP recording at ``path``, flushed per record. An MCAP file is never
        appended to (a JSON-lines recording is): an existing one is refused."""
        _writer_class()
        try:
            path.parent.mkdir(exist_ok=True)
            stream = path.open("xb")
        except FileExistsError:
            raise RecordingError(
                f"{path}: exists; an MCAP recording is written once, never appended to: "
                "record to a new path"
            ) from None
        except OSError as exc:
            raise RecordingError(f"{path}: cannot open for recording: {exc.strerror}") from exc
        return cls(stream, path, chunked=False)

    def __call__(self, published: Published) -> None:
        self.add(published.line, published.record, published.images)
        self._stream.flush()

    def add(self, line: str, record: dict[str, Any], images: tuple[Image, ...]) -> None:
        """One record: its JSON line as the JSON-lines file holds it, the record, and the
        images its messages reference."""
        ns = wall_ns(record)
        for image in images:
            name = image_file(Path(), image.sha256, image.media_type).name
            if name not in self._attached:
                self._attached.add(name)
                self._writer.add_attachment(ns, ns, name, image.media_type, image.data)
        for message in self._messages.messages(line, record, images):
            channel = self._channel(message.channel)
            self._writer.add_message(channel, message.ns, message.data, message.ns, self._lines)
        self._lines += 1

    def _channel(self, spec: ChannelSpec) -> int:
        if spec not in self._channels:
            schema_id = self._writer.register_schema(spec.schema_name, SCHEMA_ENCODING, spec.schema)
            self._channels[spec] = self._writer.register_channel(
                spec.topic, MESSAGE_ENCODING, schema_id, dict(spec.metadata)
            )
        return self._channels[spec]

    def sync(self) -> None:
        self._stream.flush()
        os.fsync(self._stream.fileno())

    def close(self) -> None:
        """Write the summary and close: the file is whole, indexed for seeking readers."""
        if self._finished:
            return
        self._finished = True
        try:
            self._writer.finish()  # type: ignore[no-untyped-call]
            self._stream.flush()
        finally:
            self._stream.close()

    def abandon(self) -> None:
        """Close without the summary (after a failed write): what was written stays."""
        self._finished = True
        with contextlib.suppress(OSError):
            self._stream.close()


@dataclass
class McapContents:
    """What an onboard MCAP file gives back: the JSON lines in order, and the images."""

    lines: list[str] = field(default_factory=list)
    #: each image's bytes by its file name in the images folder (``<sha256>.<ext>``)
    images: dict[str, bytes] = field(default_factory=dict)


def read_mcap(path: Path) -> McapContents:
    """The records (as their JSON lines) and images of an onboard MCAP recording; a file cut
    short (a crash mid-write) is read up to its last whole record."""
    try:
        from mcap.exceptions import EndOfFile, McapError
        from mcap.records import Attachment, Channel, Message
        from mcap.stream_reader import StreamReader
    except ImportError as exc:
        raise MissingExtraError(f"{path}: reading MCAP needs the mcap package: {EXTRA}") from exc
    kinds: dict[int, str] = {}
    found: list[tuple[int, int, str]] = []
    contents = McapContents()
    try:
        with path.open("rb") as file:
            try:
                for record in StreamReader(file).records:
                    if isinstance(record, Channel) and "onboard.kind" in record.metadata:
                        kinds[record.id] = record.metadata["onboard.kind"]
                    elif isinstance(record, Message) and record.channel_id in kinds:
                        found.append((record.sequence, len(found), record.data.decode("utf-8")))
                    elif isinstance(record, Attachment) and _IMAGE_NAME.fullmatch(record.name):
                        contents.images[record.name] = bytes(record.data)
            except (EndOfFile, EOFError):  # cut short: what came before stands
                pass
            except McapError as exc:
                raise RecordingError(f"{path}: not a readable MCAP file ({exc})") from exc
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read recording: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise RecordingError(f"{path}: a record is not UTF-8 text") from exc
    if not kinds:
        raise RecordingError(f"{path}: an MCAP file, but not an onboard recording (no record "
                             "channel)")  # fmt: skip
    contents.lines = [line for _, _, line in sorted(found)]
    return contents


def _raw_lines(path: Path) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """Each record of a JSON-lines recording: (line number, line, record); a torn last line
    is left out, as :func:`onboard.loop.recorder.read_recording` does."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read recording: {exc.strerror}") from exc
    lines = raw.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    for number, data in enumerate(lines, start=1):
        try:
            line = data.decode("utf-8")
            record = json.loads(line)
            if not isinstance(record, dict) or "kind" not in record:
                raise ValueError("not an onboard record (no 'kind')")
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            if number == len(lines) and not isinstance(exc, UnicodeDecodeError):
                return
            raise RecordingError(f"{path}:{number}: not an onboard record ({exc})") from None
        yield number, line, record


def _images(record: dict[str, Any], path: Path) -> tuple[Image, ...]:
    """The images a record's messages reference, read from the recording's images folder."""
    found: list[Image] = []
    messages = record.get("messages")
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else []:
            url = part.get("image_url") if isinstance(part, dict) else None
            ref = url.get("url") if isinstance(url, dict) else None
            media_type = url.get("media_type") if isinstance(url, dict) else None
            if isinstance(ref, str) and ref.startswith(IMAGE_REF) and isinstance(media_type, str):
                sha256 = ref[len(IMAGE_REF) :]
                found.append(Image(sha256, media_type, load_image(path, sha256, media_type)))
    return tuple(found)


def export_mcap(source: Path, target: Path) -> int:
    """Write the JSON-lines recording ``source`` (with its images folder) as the MCAP file
    ``target``; returns the records written. ``target`` appears whole or not at all."""
    if is_mcap(source):
        raise RecordingError(f"{source}: already MCAP (export it --jsonl to get JSON lines)")
    _refuse_existing(target)
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as stream:
            writer = McapWriter(stream, target, chunked=True)
            count = 0
            for _, line, record in _raw_lines(source):
                writer.add(line, record, _images(record, source))
                count += 1
            writer.close()
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return count


def export_jsonl(source: Path, target: Path) -> int:
    """Write the MCAP recording ``source`` as the JSON-lines recording ``target`` and its
    images folder; returns the records written."""
    if not is_mcap(source):
        raise RecordingError(f"{source}: not MCAP (export it --mcap to get MCAP)")
    contents = read_mcap(source)
    _refuse_existing(target)
    folder = images_dir(target)
    if folder.exists():
        raise RecordingError(f"{folder}: exists; remove it or export to another path")
    try:
        if contents.images:
            folder.mkdir()
            for name, data in contents.images.items():
                (folder / name).write_bytes(data)
        target.write_bytes("".join(line + "\n" for line in contents.lines).encode("utf-8"))
    except OSError as exc:
        raise RecordingError(f"{target}: cannot write: {exc.strerror or exc}") from exc
    return len(contents.lines)


def _refuse_existing(target: Path) -> None:
    if target.exists():
        raise RecordingError(f"{target}: exists; remove it or export to another path")
    if not target.parent.is_dir():
        raise RecordingError(f"{target}: cannot write: folder {target.parent} does not exist")
