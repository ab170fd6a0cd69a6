"""A bounded queue whose producer never waits: when it is full, the oldest item is dropped.

For work handed off the control loop to a consumer that may fall behind (the live view):
the loop's ``put`` costs a lock and an append, however slow the consumer.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

__all__ = ["DropOldestQueue"]

T = TypeVar("T")


class DropOldestQueue(Generic[T]):
    """Holds at most ``capacity`` items; ``put`` on a full queue drops the oldest one
    (counted in ``dropped``). ``close`` lets ``get`` return what is left, then ``None``."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity {capacity}: must be at least 1")
        self._items: deque[T] = deque(maxlen=capacity)
        self._ready = threading.Condition(threading.Lock())
        self._closed = False
        #: items dropped since the queue was made
        self.dropped = 0

    def put(self, item: T) -> bool:
        """Add ``item``; False when the queue was full and its oldest item was dropped (or
        when the queue is closed: ``item`` itself is dropped)."""
        with self._ready:
            if self._closed:
                self.dropped += 1
                return False
            full = len(self._items) == self._items.maxlen
            self.dropped += full
            self._items.append(item)
            self._ready.notify()
            return not full

    def get(self, timeout: float | None = None) -> T | None:
        """The oldest item, waiting for one (up to ``timeout`` s); None when closed and
        empty, or when the wait timed out."""
        with self._ready:
            self._ready.wait_for(lambda: self._items or self._closed, timeout)
            return self._items.popleft() if self._items else None

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def __len__(self) -> int:
        with self._ready:
            return len(self._items)
