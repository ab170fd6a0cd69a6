"""Clocks: one single-threaded event loop, on wall time or on virtual (discrete-event) time.

All skill logic runs in callbacks on the clock's loop thread, so it never needs a lock.
Blocking work (an LLM call over HTTP) goes through :meth:`Clock.submit`:

- :class:`WallClock` runs it on a worker thread and delivers the result back on the loop,
  so a slow LLM never blocks perception events, timers or a stop;
- :class:`VirtualClock` runs it at once while virtual time stands still, then delivers the
  result after the measured (or a configured) latency of virtual time. Runs are
  deterministic and faster than real time, yet the LLM's latency is still felt. The work
  blocks the loop thread, which is also the thread Python runs signal handlers on: a stop
  signal's handler cancels the exchange in flight (``ChatClient.cancel``, seen within
  ``client.SLICE`` seconds) and :meth:`Clock.interrupt` keeps later work from starting.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

__all__ = ["Clock", "Interrupted", "Timer", "VirtualClock", "WallClock"]

T = TypeVar("T")
#: virtual seconds a piece of submitted work takes: a number, or a function asked after the
#: work ran (the simulated time an arm motion took in the physics twin)
Latency = float | Callable[[], float] | None


class Interrupted(Exception):
    """Delivered to ``done`` for work the loop stopped waiting for (a stop signal came)."""


class Timer:
    """A scheduled callback; ``cancel()`` is idempotent."""

    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Clock(Protocol):
    def now(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer: ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer: ...

    def post(self, callback: Callable[[], None]) -> None: ...

    def submit(
        self,
        work: Callable[[], T],
        done: Callable[[T | BaseException, float], None],
        latency: Latency = None,
    ) -> None: ...

    def run(self, until: float) -> None: ...

    def stop(self) -> None:
        """End ``run``; sticky, so a stop that comes before ``run`` still counts."""

    def interrupt(self) -> None:
        """A stop signal came: start no more submitted work; safe in a signal handler."""


class _Loop:
    """The heap of timers shared by both clocks."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._stopped = False

    def now(self) -> float:
        raise NotImplementedError

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(when, callback)
        self._push(timer)
        return timer

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return self.call_at(self.now() + max(0.0, delay), callback)

    def post(self, callback: Callable[[], None]) -> None:
        self.call_at(self.now(), callback)

    def _push(self, timer: Timer) -> None:
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))

    def _pop_due(self, now: float) -> Timer | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        if self._heap and self._heap[0][0] <= now:
            return heapq.heappop(self._heap)[2]
        return None

    def _next_when(self) -> float | None:
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


class VirtualClock(_Loop):
    """Discrete-event time: jumps from one timer to the next; deterministic."""

    def __init__(self, start: float = 0.0) -> None:
        super().__init__()
        self._now = start
        self._interrupted = threading.Event()
        self._advance_hooks: list[Callable[[float], None]] = []

    def on_advance(self, hook: Callable[[float], None]) -> None:
        """Call ``hook(now)`` each time virtual time moves forward, before the timers then
        due run (the physics twin steps to keep time with the loop)."""
        self._advance_hooks.append(hook)

    def now(self) -> float:
        return self._now

    def interrupt(self) -> None:
        self._interrupted.set()

    def submit(
        self,
        work: Callable[[], T],
        done: Callable[[T | BaseException, float], None],
        latency: Latency = None,
    ) -> None:
        began = time.perf_counter()
        result: T | BaseException
        if self._interrupted.is_set():
            result, latency = Interrupted("stopped before asking"), 0.0
        else:
            try:
                result = work()
            except Exception as exc:  # delivered to `done`, which decides
                result = exc
        took = time.perf_counter() - began
        delay = took if latency is None else latency() if callable(latency) else latency
        self.call_later(delay, lambda: done(result, delay))

    def run(self, until: float) -> None:
        """Process timers in order until virtual time ``until`` or :meth:`stop`."""
        while not self._stopped:
            when = self._next_when()
            if when is None or when > until:
                self._now = max(self._now, until)
                return
            if when > self._now:
                self._now = when
                for hook in self._advance_hooks:
                    hook(when)
            timer = self._pop_due(self._now)
            if timer is not None:
                timer.callback()

    def stop(self) -> None:
        self._stopped = True


class WallClock(_Loop):
    """Monotonic wall time, seconds since the clock was made; thread-safe ``post``.

    On the loop, during a callback, the time is the callback's own: the time it fell due (a
    timer's, or when a posted result arrived), as on the virtual clock, not the moment the
    loop got to it. The loop runs callbacks in the order they fell due, so what a callback
    records and schedules depends only on that order and those times, which the recording
    keeps: a replay that delivers the recorded inputs at their recorded times runs the same
    callbacks in the same order, however late a loaded controller ran them. Submitted work
    runs at the time it was submitted, as on the virtual clock, where time stands still while
    it runs: a critic timing a look, or perception stamping a frame, reads that time, which a
    replay reproduces. Elsewhere off the loop (a signal, a driver's own thread) the time is
    the monotonic clock's."""

    def __init__(self, workers: int = 2) -> None:
        super().__init__()
        self._origin = time.monotonic()
        self._wake = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="onboard-io")
        #: per thread, the time it runs at: a callback's due time on the loop, a worker's
        #: submission time (unset elsewhere: the monotonic clock's)
        self._running = threading.local()

    def now(self) -> float:
        at: float | None = getattr(self._running, "at", None)
        return at if at is not None else time.monotonic() - self._origin

    def _push(self, timer: Timer) -> None:
        with self._wake:
            super()._push(timer)
            self._wake.notify()

    def submit(
        self,
        work: Callable[[], T],
        done: Callable[[T | BaseException, float], None],
        latency: Latency = None,
    ) -> None:
        began = self.now()

        def run() -> None:
            result: T | BaseException
            self._running.at = began
            try:
                result = work()
            except Exception as exc:
                result = exc
            finally:
                self._running.at = None
            self.post(lambda: done(result, self.now() - began))

        self._pool.submit(run)

    def run(self, until: float) -> None:
        """Run callbacks as they fall due until ``until`` seconds or :meth:`stop`."""
        while True:
            with self._wake:
                if self._stopped:
                    return
                now = self.now()
                # what falls due after ``until`` waits, as on the virtual clock: a loop that
                # ran late does not run past the end it was given
                timer = self._pop_due(min(now, until))
                if timer is None:
                    if now >= until:
                        return
                    when = self._next_when()
                    wait = until - now if when is None else min(when, until) - now
                    # no end and nothing due: wait for a post (a timeout of inf overflows)
                    self._wake.wait(timeout=None if math.isinf(wait) else max(0.0, wait))
                    continue
            self._running.at = timer.when
            try:
                timer.callback()
            finally:
                self._running.at = None

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def interrupt(self) -> None:
        """Nothing to do: the loop never waits for submitted work."""

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
