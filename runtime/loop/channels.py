"""The channels a recording is seen on: one table for the MCAP file and the live view.

Every record goes on the channel of its kind, ``/onboard/<kind>`` (message encoding ``json``,
JSON schema ``onboard.<kind>``, channel metadata ``onboard.kind``), its data the record's JSON
line byte for byte; what Foxglove draws of it (runtime/loop/foxglove.py) goes on ``/camera``,
``/detections`` and ``/tf``. Each message is stamped with its record's ``wall`` time.

:class:`RecordChannels` turns one recording's records, in order, into these messages. The MCAP
writer (runtime/loop/mcapfile.py) writes them to a file and the live view (runtime/loop/live.py)
logs them to Foxglove's WebSocket server, both from the recorder's subscribers: the live view
cannot show other channels, schemas or bytes than the recording holds.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from onboard.loop.foxglove import SCHEMAS, TOPICS, Projector, wall_ns
from onboard.loop.recording import Image

__all__ = [
    "FOXGLOVE_CHANNELS",
    "ChannelMessage",
    "ChannelSpec",
    "RecordChannels",
    "foxglove_channel",
    "record_channel",
    "record_topic",
]

#: every channel's message encoding, and its schemas' encoding
MESSAGE_ENCODING = "json"
SCHEMA_ENCODING = "jsonschema"


@dataclass(frozen=True)
class ChannelSpec:
    """One channel: its topic, its schema's name and JSON text, and its metadata."""

    topic: str
    schema_name: str
    #: the JSON schema as the channel carries it (``json.dumps`` of the schema, UTF-8)
    schema: bytes
    metadata: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ChannelMessage:
    """One message: its channel, its time (ns since the epoch) and its JSON bytes."""

    channel: ChannelSpec
    ns: int
    data: bytes


def record_topic(kind: str) -> str:
    """The topic of a record of ``kind``."""
    return f"/onboard/{kind}"


def _kind_schema(kind: str) -> dict[str, Any]:
    return {
        "title": f"onboard.{kind}",
        "description": f"an onboard {kind!r} record (docs/recordings.md); the fields after "
        "seq, t, wall and kind are the kind's own",
        "type": "object",
        "properties": {
            "seq": {"type": "integer", "minimum": 0},
            "t": {"type": ["number", "null"], "description": "the episode clock's time, s"},
            "wall": {"type": "number", "description": "seconds since the epoch"},
            "kind": {"const": kind},
        },
        "required": ["seq", "t", "wall", "kind"],
        "additionalProperties": True,
    }


@functools.lru_cache(maxsize=256)
def record_channel(kind: str) -> ChannelSpec:
    """The channel of the records of ``kind``."""
    return ChannelSpec(record_topic(kind), f"onboard.{kind}",
                       json.dumps(_kind_schema(kind)).encode("utf-8"),
                       (("onboard.kind", kind),))  # fmt: skip


@functools.lru_cache(maxsize=len(TOPICS))
def foxglove_channel(name: str) -> ChannelSpec:
    """The channel of Foxglove's message type ``name`` (``foxglove.CompressedImage``, ...)."""
    return ChannelSpec(TOPICS[name], name, json.dumps(SCHEMAS[name]).encode("utf-8"))


#: the channels of what Foxglove draws, there whatever records come
FOXGLOVE_CHANNELS = tuple(foxglove_channel(name) for name in TOPICS)


class RecordChannels:
    """The channel messages of one recording's records, given in order (a frame a look names
    waits for the record that carries its bytes: :class:`Projector`)."""

    def __init__(self) -> None:
        self._projector = Projector()

    def messages(
        self, line: str, record: Mapping[str, Any], images: tuple[Image, ...]
    ) -> Iterator[ChannelMessage]:
        """The record on its kind's channel, then what Foxglove draws of it."""
        ns = wall_ns(record)
        yield ChannelMessage(record_channel(str(record.get("kind", ""))), ns, line.encode("utf-8"))
        triples = [(i.sha256, i.media_type, i.data) for i in images]
        for name, at, message in self._projector.feed(record, triples):
            data = json.dumps(message, separators=(",", ":")).encode("utf-8")
            yield ChannelMessage(foxglove_channel(name), at, data)
