"""SIGINT and SIGTERM as a stop request, for as long as a ``with`` block runs."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["on_stop_signals"]


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
