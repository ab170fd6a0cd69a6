"""Keep the physics engine's chatter off the user's terminal.

PyBullet's C code prints "pybullet build time: ..." when the module loads and "argv[0]="
at every connect, with C stdio: into libc's buffers, flushed whenever libc decides (for a
pipe, at exit). :func:`engine_quiet` flushes those buffers, points file descriptors 1 and 2
at temporary files around the call, flushes again, and then passes on everything written
meanwhile except those known lines, to the descriptor it was written to. Nothing else is
dropped: a real error of the engine still reaches stderr.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

__all__ = ["CHATTER", "engine_quiet"]

#: the starts of the lines the engine prints on its own account
CHATTER = (b"pybullet build time:", b"argv[0]=")

_libc = ctypes.CDLL(None)
# two threads swapping the process's descriptors at once would restore each other's sinks
_swapping = threading.RLock()


@contextmanager
def engine_quiet() -> Iterator[None]:
    """Run the block with the engine's known chatter on fds 1 and 2 filtered out."""
    with _swapping, _filtered():
        yield


@contextmanager
def _filtered() -> Iterator[None]:
    sys.stdout.flush()
    sys.stderr.flush()
    _libc.fflush(None)
    with ExitStack() as stack:
        sinks = {fd: stack.enter_context(tempfile.TemporaryFile()) for fd in (1, 2)}
        saved = {fd: os.dup(fd) for fd in sinks}
        try:
            for fd, sink in sinks.items():
                os.dup2(sink.fileno(), fd)
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            _libc.fflush(None)
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
            for fd, sink in sinks.items():
                sink.seek(0)
                kept = [line for line in sink.read().splitlines(keepends=True)
                        if not line.startswith(CHATTER)]  # fmt: skip
                if kept:
                    os.write(fd, b"".join(kept))
