"""The reference for bench/parsers.py: the JSON splitter the JAKA driver and emulator used
before the one-pass JsonStream (drivers/arm/jaka.py as of main before this change), kept
verbatim apart from the name, to show what the new one replaced: it rescans the buffer for
every stray ``{``, so 32 KB of ``{`` cost 37 s of a core."""

from __future__ import annotations

import json
import re
from typing import Any

_MAX_OBJECT = 1 << 20  # bytes: a buffer this long without a whole object is noise


class OldJsonStream:
    """Splits a byte stream into JSON objects, with or without separators between them.

    Noise is skipped and counted in :attr:`skipped`: bytes outside an object, an object that
    does not parse, and a stray ``{`` that would swallow the objects after it (an unfinished
    object is taken as noise once a whole object follows it at the top level).
    """

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.skipped = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        objects: list[dict[str, Any]] = []
        while self._skip_to_object():
            end = _object_end(self._buffer)
            if end < 0 and not self._drop_unfinished():
                break
            if end < 0:
                continue
            value = _parse(bytes(self._buffer[:end]))
            if value is None:  # not JSON: drop the "{" and look again from the next one
                self.skipped += 1
                del self._buffer[:1]
                continue
            objects.append(value)
            del self._buffer[:end]
        return objects

    def _skip_to_object(self) -> bool:
        start = self._buffer.find(b"{")
        noise = self._buffer if start < 0 else self._buffer[:start]
        if noise.strip():
            self.skipped += 1
        del self._buffer[: len(self._buffer) if start < 0 else start]
        return start >= 0

    def _drop_unfinished(self) -> bool:
        """Drop the unfinished object at the start if it cannot be one; True if dropped."""
        buffer = self._buffer
        if len(buffer) > _MAX_OBJECT:
            self.skipped += 1
            del buffer[:1]
            return True
        later = buffer.find(b"{", 1)
        while later > 0:
            end = _object_end(buffer[later:])
            rest = bytes(buffer[later + end :]).lstrip() if end > 0 else b""
            # a whole object followed by another is at the top level; one at the end of the
            # data may be nested in the unfinished one, unless that one is not JSON text
            top_level = end > 0 and (
                rest.startswith(b"{") or (not rest and not _is_text(bytes(buffer[:later])))
            )
            if top_level and _parse(bytes(buffer[later : later + end])) is not None:
                self.skipped += 1
                del buffer[:later]
                return True
            later = buffer.find(b"{", later + 1)
        return False


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _is_text(raw: bytes) -> bool:
    """Could be (part of) JSON text: UTF-8 without control characters."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _CONTROL.search(raw) is None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _object_end(buffer: bytearray) -> int:
    """The end of the JSON object at the start of ``buffer``, or -1 if it is not whole yet."""
    depth = 0
    in_string = escaped = False
    for i, byte in enumerate(buffer):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte == 0x7B:  # {
            depth += 1
        elif byte == 0x7D:  # }
            depth -= 1
            if depth == 0:
                return i + 1
    return -1
