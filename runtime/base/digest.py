"""The sha256 of a file, hashed once per path, modification time and size in a process.

Recordings name every model file by its sha256, the embedding cache keys its vectors on the
model's, and critic cards carry their model's: a process that opens many recordings (a replay
of an evaluation) would otherwise hash the same model files for each.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

__all__ = ["file_sha256"]

_known: dict[tuple[str, int, int], str] = {}
_lock = threading.Lock()


def file_sha256(path: Path) -> str:
    """The file's sha256 in hex; raises OSError when it cannot be read."""
    info = path.stat()
    key = (str(path.resolve()), info.st_mtime_ns, info.st_size)
    with _lock:
        known = _known.get(key)
    if known is not None:
        return known
    with path.open("rb") as file:
        digest = hashlib.file_digest(file, "sha256").hexdigest()
    with _lock:
        _known[key] = digest
    return digest
