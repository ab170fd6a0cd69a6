"""SIGINT and SIGTERM as a stop request, for as long as a ``with`` block runs; outside one,
SIGTERM unwinds the command as SIGINT does, and either is remembered even when a library
swallows the exception it raised (:func:`terminate_raises`)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["Terminated", "on_stop_signals", "stop_signal_arrived", "terminate_raises"]


class Terminated(BaseException):
    """SIGTERM arrived outside an episode (start-up, loading, writing the report): raised in
    the main thread like KeyboardInterrupt, so every ``with`` block closes on the way out
    and ``onboard`` exits 143 instead of dying of the signal."""


#: The stop signal that arrived in the current :func:`terminate_raises` block, if one did. A
#: library may catch the exception a handler raises where it calls back into Python and
#: raise its own error instead (pydantic-core turns it into a SchemaError while it builds a
#: model's validators) or drop it: the latch remembers the signal whatever became of it.
_arrived: list[str] = []


def stop_signal_arrived() -> str | None:
    """The name of the first stop signal ("SIGTERM", "SIGINT") that arrived while
    :func:`terminate_raises` was in force, whatever a library made of the exception it
    raised; else None."""
    return _arrived[0] if _arrived else None


def _raise_terminated(_signum: int, _frame: object) -> None:
    _arrived.append(signal.SIGTERM.name)
    raise Terminated


def _raise_interrupt(_signum: int, _frame: object) -> None:
    _arrived.append(signal.SIGINT.name)
    raise KeyboardInterrupt


@contextmanager
def terminate_raises() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` and SIGINT KeyboardInterrupt while the block runs
    (from the first line of ``main``: a supervisor's SIGTERM during start-up must not kill
    the process before the episode's own handlers exist), and both are latched
    (:func:`stop_signal_arrived`); the old handlers are back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _arrived.clear()
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
        signal.SIGINT: signal.signal(signal.SIGINT, _raise_interrupt),
    }
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextmanager
def on_stop_signals(stop: Callable[[str], None], enabled: bool = True) -> Iterator[None]:
    """Call ``stop(signal name)`` on SIGINT/SIGTERM; restore the old handlers after.

    Only the main thread may install handlers; elsewhere (or when not ``enabled``) this is
    a no-op. ``stop`` runs in the signal handler: it should only post or set a flag. A stop signal
    that arrived during start-up and was swallowed on the way (:func:`stop_signal_arrived`)
    is passed on at once: the episode stops before its first step.
    """
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        stop(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if (arrived := stop_signal_arrived()) is not None:
            stop(arrived)
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
