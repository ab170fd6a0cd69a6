"""File names taken from data (a scenario's or a skill's name) stay inside their folder.

A name read from a file may hold ``../``, slashes, control characters or be empty; it is
turned into a safe file name with :func:`safe_name`, and the path built from it is checked
with :func:`inside` before anything is written there.
"""

from __future__ import annotations

import re
from pathlib import Path

from onboard.base.errors import RecordingError

__all__ = ["inside", "safe_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 80


def safe_name(name: str, default: str = "unnamed") -> str:
    """``name`` as one file-name component: ASCII letters, digits, ``.``, ``_`` and ``-``.

    Every run of other characters (``/``, ``\\``, spaces, quotes, control characters) and
    every ``..`` becomes one ``-``; leading dots and dashes go (no hidden files, no ``..``, no
    options); at most 80 characters; nothing left is ``default``.
    """
    cleaned = re.sub(r"-{2,}", "-", re.sub(r"\.{2,}", "-", _UNSAFE.sub("-", name)))
    cleaned = cleaned.lstrip(".-")[:MAX_NAME].rstrip(".-")
    return cleaned or default


def inside(folder: Path, path: Path) -> Path:
    """``path``, after checking that it resolves to a place under ``folder``."""
    base = folder.resolve()
    resolved = path.resolve()
    if resolved != base and base not in resolved.parents:
        raise RecordingError(f"{path}: outside its folder {folder}; nothing was written")
    return path
