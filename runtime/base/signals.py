"""SIGINT and SIGTERM as a stop request, for as long as a ``with`` block runs; outside one,
SIGTERM unwinds the command as SIGINT does (:func:`terminate_raises`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Terminated", "on_stop_signals", "terminate_raises"]


class Terminated(BaseException):
    """SIGTERM arrived outside an episode (start-up, loading, writing the report): raised in
    the main thread like KeyboardInterrupt, so every ``with`` block closes on the way out
    and ``onboard`` exits 143 instead of dying of the signal."""


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


@contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while the block runs (from the first line of
    ``main``: a supervisor's SIGTERM during start-up must not kill the process before the
    episode's own handlers exist); the old handler is back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def on_stop_signals(stop: Callable[[str], None], enabled: bool = True) -> Iterator[None]:
    """Call ``stop(signal name)`` on SIGINT/SIGTERM; restore the old handlers after.

    Only the main thread may install handlers; elsewhere (or when not ``enabled``) this is
    a no-op. ``stop`` runs in the signal handler: it should only post or set a flag.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        stop(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
