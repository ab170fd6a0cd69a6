"""Two ROS 2 messages as rmw_zenoh_cpp puts them on the wire: ``sensor_msgs/msg/JointState``
and ``std_msgs/msg/String``, CDR-serialized, with their DDS type names and RIHS01 type hashes.

CDR (XCDR1, little endian, as Fast-CDR writes it for ROS 2): the encapsulation header
``00 01 00 00``, then each field aligned to its size counted from after the header; a string
is a uint32 length that counts its NUL, its UTF-8 bytes and the NUL; a sequence a uint32
count, then its elements (a sequence of doubles aligned to 8 only when it has elements).

A type hash (REP 2011, ``RIHS01_`` and 64 hex digits) is sha256 over the type description's
JSON as rosidl_generator_type_description writes it for hashing: the type and the types it
refers to (sorted by name), each field's name and type (``type_id``, ``capacity``,
``string_capacity``, ``nested_type_name``) without default values, ``", "`` and ``": "`` as
separators. The fields below are the messages' as ROS 2 Jazzy ships them.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "JOINT_STATE",
    "STRING",
    "RosType",
    "joint_state",
    "string",
    "type_hash",
]

#: type_description_interfaces/msg/FieldType: the ids used here
_NESTED, _INT32, _UINT32, _DOUBLE, _STRING = 1, 6, 7, 11, 17
#: added to an element's id for an unbounded sequence of it
_SEQUENCE = 144

#: each type's fields: (name, type id, nested type name)
_FIELDS: dict[str, tuple[tuple[str, int, str], ...]] = {
    "builtin_interfaces/msg/Time": (("sec", _INT32, ""), ("nanosec", _UINT32, "")),
    "std_msgs/msg/Header": (
        ("stamp", _NESTED, "builtin_interfaces/msg/Time"),
        ("frame_id", _STRING, ""),
    ),
    "std_msgs/msg/String": (("data", _STRING, ""),),
    "sensor_msgs/msg/JointState": (
        ("header", _NESTED, "std_msgs/msg/Header"),
        ("name", _STRING + _SEQUENCE, ""),
        ("position", _DOUBLE + _SEQUENCE, ""),
        ("velocity", _DOUBLE + _SEQUENCE, ""),
        ("effort", _DOUBLE + _SEQUENCE, ""),
    ),
}


def _description(name: str) -> dict[str, object]:
    fields = [
        {"name": field, "type": {"type_id": type_id, "capacity": 0, "string_capacity": 0,
                                 "nested_type_name": nested}}
        for field, type_id, nested in _FIELDS[name]
    ]  # fmt: skip
    return {"type_name": name, "fields": fields}


def _referenced(name: str) -> set[str]:
    found: set[str] = set()
    for _, _, nested in _FIELDS[name]:
        if nested:
            found |= {nested, *_referenced(nested)}
    return found


def type_hash(name: str) -> str:
    """The RIHS01 hash of ``name`` (``sensor_msgs/msg/JointState``)."""
    hashable = {
        "type_description": _description(name),
        "referenced_type_descriptions": [_description(n) for n in sorted(_referenced(name))],
    }
    text = json.dumps(hashable, ensure_ascii=True, allow_nan=False, separators=(", ", ": "))
    return "RIHS01_" + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RosType:
    """A message type: its ROS name, its DDS name (the key expression's) and its hash."""

    name: str

    @property
    def dds_name(self) -> str:
        """``sensor_msgs::msg::dds_::JointState_``."""
        package, kind, message = self.name.split("/")
        return f"{package}::{kind}::dds_::{message}_"

    @property
    def hash(self) -> str:
        return type_hash(self.name)


JOINT_STATE = RosType("sensor_msgs/msg/JointState")
STRING = RosType("std_msgs/msg/String")


class _Cdr:
    """A little-endian CDR buffer; offsets for alignment count from after the header."""

    def __init__(self) -> None:
        self.body = bytearray()

    def _align(self, size: int) -> None:
        self.body += b"\0" * (-len(self.body) % size)

    def uint32(self, value: int) -> None:
        self._align(4)
        self.body += struct.pack("<I", value)

    def int32(self, value: int) -> None:
        self._align(4)
        self.body += struct.pack("<i", value)

    def string(self, text: str) -> None:
        data = text.encode("utf-8")
        self.uint32(len(data) + 1)
        self.body += data + b"\0"

    def strings(self, texts: Sequence[str]) -> None:
        self.uint32(len(texts))
        for text in texts:
            self.string(text)

    def doubles(self, values: Sequence[float]) -> None:
        self.uint32(len(values))
        if values:
            self._align(8)
            self.body += struct.pack(f"<{len(values)}d", *values)

    def bytes(self) -> bytes:
        return b"\x00\x01\x00\x00" + bytes(self.body)


def _stamp(cdr: _Cdr, ns: int) -> None:
    sec, nanosec = divmod(ns, 1_000_000_000)
    cdr.int32(sec)
    cdr.uint32(nanosec)


def joint_state(ns: int, names: Sequence[str], positions: Sequence[float],
                frame_id: str = "") -> bytes:  # fmt: skip
    """A ``sensor_msgs/msg/JointState`` stamped ``ns`` (since the epoch), positions only
    (velocity and effort empty, as the message allows)."""
    cdr = _Cdr()
    _stamp(cdr, ns)
    cdr.string(frame_id)
    cdr.strings(names)
    cdr.doubles(positions)
    cdr.doubles(())
    cdr.doubles(())
    return cdr.bytes()


def string(text: str) -> bytes:
    """A ``std_msgs/msg/String``."""
    cdr = _Cdr()
    cdr.string(text)
    return cdr.bytes()
