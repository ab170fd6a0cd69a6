"""Untrusted text (a name from a file, a generated program's output, an error naming either)
printed to a terminal: its control characters are shown, never obeyed.

An ANSI or OSC escape sequence in a scenario's name could clear the screen, retitle the
window, hide the rest of a line or plant a link; :func:`shown` writes ESC and every other
control character (C0, DEL, C1, and the bidirectional overrides) as ``\\x1b``-style escapes.
"""

from __future__ import annotations

import re

__all__ = ["shown"]

#: C0 but tab and newline, DEL, C1, and the bidi controls that reorder what a line shows
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAK = re.compile("[\n\t]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def shown(text: object, lines: bool = False) -> str:
    """``str(text)`` safe to print: control characters escaped; tabs and line breaks too,
    unless ``lines`` (a program's output keeps its lines)."""
    out = _CONTROL.sub(_escape, str(text))
    return out if lines else _LINE_BREAK.sub(_escape, out)
