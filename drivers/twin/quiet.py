"""Keep stdout clean of what the physics engine's C code prints."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["stdout_to_stderr"]


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send what C code writes to file descriptor 1 to 2 meanwhile: PyBullet prints
    "argv[0]=" on each connect, which would corrupt ``--json`` output on stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
