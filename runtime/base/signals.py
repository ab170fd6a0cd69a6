"""SIGINT and SIGTERM as a stop request, for as long as a ``with`` block runs; outside one,
SIGTERM unwinds the command as SIGINT does (:func:`terminate_raises`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Terminated", "on_stop_signals", "sigterm_arrived", "terminate_raises"]


class Terminated(BaseException):
    """SIGTERM arrived outside an episode (start-up, loading, writing the report): raised in
    the main thread like KeyboardInterrupt, so every ``with`` block closes on the way out
    and ``onboard`` exits 143 instead of dying of the signal."""


#: Whether SIGTERM arrived in the current :func:`terminate_raises` block. A library may
#: catch :class:`Terminated` where it calls back into Python and raise its own error instead
#: (pydantic-core turns it into a SchemaError while it builds a model's validators) or drop
#: it: the latch remembers the signal whatever became of the exception.
_sigterm = threading.Event()


def sigterm_arrived() -> bool:
    """SIGTERM arrived while :func:`terminate_raises` was in force, whatever a library made
    of the :class:`Terminated` it raised."""
    return _sigterm.is_set()


def _raise_terminated(_signum: int, _frame: object) -> None:
    _sigterm.set()
    raise Terminated


@contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while the block runs (from the first line of
    ``main``: a supervisor's SIGTERM during start-up must not kill the process before the
    episode's own handlers exist); the old handler is back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _sigterm.clear()
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def on_stop_signals(stop: Callable[[str], None], enabled: bool = True) -> Iterator[None]:
    """Call ``stop(signal name)`` on SIGINT/SIGTERM; restore the old handlers after.

    Only the main thread may install handlers; elsewhere (or when not ``enabled``) this is
    a no-op. ``stop`` runs in the signal handler: it should only post or set a flag. A SIGTERM
    that arrived during start-up and was swallowed on the way (:func:`sigterm_arrived`) is
    passed on at once: the episode stops before its first step.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        stop(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if sigterm_arrived():
            stop(signal.SIGTERM.name)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
