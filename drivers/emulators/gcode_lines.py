"""Reading G-code lines as firmware does: comments, line numbers, checksums and words.

Shared by the Marlin and GRBL emulators. A word whose number is not a plain finite decimal
(``X1e9``, ``X nan``) or is out of :data:`~onboard.drivers.arm.gcode.WORD_LIMITS` raises
:class:`BadWord`; the emulator answers it with its firmware's error.
"""

from __future__ import annotations

import math
import re

from onboard.drivers.arm.gcode import word_range

__all__ = ["BadWord", "checksum", "normalize", "parse_line", "split_line_number"]

_WORD = re.compile(r"([A-Z])\s*([^A-Z\s]*)")
_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")
_EXPONENT = re.compile(r"\d\.?E[-+]?\d")
_NUMBERED = re.compile(r"^\s*N(\d+)\s*(.*?)\*(\d+)\s*$", re.IGNORECASE)


class BadWord(ValueError):
    """A word whose number is not a plain, finite decimal in range."""


def checksum(text: str) -> int:
    """Marlin's and RepRap's line checksum: the XOR of every byte before the ``*``."""
    value = 0
    for byte in text.encode("ascii", errors="replace"):
        value ^= byte
    return value


def split_line_number(raw: str) -> tuple[int, str, bool] | None:
    """``"N12 G1 X1*97"`` -> ``(12, "G1 X1", checksum_ok)``; None for a line without ``N..*``."""
    match = _NUMBERED.match(raw)
    if match is None:
        return None
    before_star = raw[: raw.rindex("*")]
    return int(match.group(1)), match.group(2), checksum(before_star) == int(match.group(3))


def normalize(line: str) -> str:
    """Upper case, comments (``;`` and ``( )``) and line numbers/checksums removed."""
    line = line.split(";", 1)[0]
    line = re.sub(r"\(.*?\)", "", line)
    line = line.split("*", 1)[0]
    line = re.sub(r"^\s*N\d+\s+", "", line.upper())
    return " ".join(line.split())


def parse_line(line: str) -> tuple[str, dict[str, float]]:
    """A normalised line -> its head (``G1``) and words; raises BadWord for a bad word."""
    head = line.split()[0]
    return head, _words(line[len(head) :])


def _words(text: str) -> dict[str, float]:
    """``" X10 Y-2.5 F600"`` -> ``{"X": 10.0, ...}``; a word whose number is not a plain
    finite decimal (an exponent, nan, inf, nothing), is out of range or repeated raises
    BadWord."""
    if _EXPONENT.search(text):
        raise BadWord("a number in exponent form: write plain decimals")
    if _WORD.sub("", text).strip():
        raise BadWord(f"not a G-code word: {text.strip()[:40]!r}")
    words: dict[str, float] = {}
    for letter, raw in _WORD.findall(text):
        if not _DECIMAL.fullmatch(raw):
            raise BadWord(f"{letter} needs a plain decimal number, got {raw[:20]!r}")
        value = float(raw)
        low, high = word_range(letter)
        if not (math.isfinite(value) and low <= value <= high):
            raise BadWord(f"{letter}{raw[:20]} is out of range [{low:g}, {high:g}]")
        if letter in words:  # as GRBL: X0X10 is not X10
            raise BadWord(f"{letter} is given twice")
        words[letter] = value
    return words
