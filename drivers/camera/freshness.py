"""The freshness rules every camera states: blocking read, read with timeout, latest with a max age.

A :class:`FrameSlot` holds the newest frame a producer thread delivered. Readers wait on it:

* :meth:`FrameSlot.next` waits for a frame that arrived *after* the call (never a repeat);
* :meth:`FrameSlot.latest` returns the newest frame only if it is younger than ``max_age``.

A frozen camera (a cable pulled, a recording that ended) therefore shows up as
:class:`~onboard.base.errors.StaleFrame`, never as an old frame passed off as new.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from onboard.base.errors import CameraError, StaleFrame
from onboard.drivers.camera.base import Frame

__all__ = ["FrameSlot"]


class FrameSlot:
    """The newest frame from one producer, with the time it arrived.

    ``clock`` must be the clock that stamped ``Frame.timestamp`` (``time.monotonic``).
    """

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._name = name
        self._clock = clock
        self._cond = threading.Condition()
        self._frame: Frame | None = None
        self._count = 0
        self._closed: CameraError | None = None

    @property
    def count(self) -> int:
        """How many frames were delivered so far."""
        with self._cond:
            return self._count

    def put(self, frame: Frame) -> None:
        """Deliver a new frame (producer side) and wake every waiting reader."""
        with self._cond:
            self._frame = frame
            self._count += 1
            self._cond.notify_all()

    def close(self, error: CameraError) -> None:
        """No more frames will come (stream ended or failed); waiting readers get ``error``."""
        with self._cond:
            if self._closed is None:
                self._closed = error
            self._cond.notify_all()

    def reopen(self) -> None:
        """Forget the frames and the end of a previous stream (before a reconnect)."""
        with self._cond:
            self._frame, self._count, self._closed = None, 0, None

    def next(self, timeout: float, after: int | None = None) -> Frame:
        """The first frame delivered after this call (or after the ``after``-th frame), within
        ``timeout`` seconds, else StaleFrame."""
        deadline = self._clock() + timeout
        with self._cond:
            seen = self._count if after is None else after
            while self._count <= seen:
                if self._closed is not None:
                    raise type(self._closed)(str(self._closed))
                left = deadline - self._clock()
                if left <= 0:
                    why = f"no new frame within {timeout:.3g} s{self._hint()}"
                    raise StaleFrame(f"{self._name}: {why}")
                self._cond.wait(left)
            assert self._frame is not None
            return self._frame

    def latest(self, max_age: float) -> Frame:
        """The newest frame if it is at most ``max_age`` seconds old, else StaleFrame."""
        with self._cond:
            frame = self._frame
            closed = self._closed
        if frame is None:
            why = f": {closed}" if closed is not None else self._hint()
            raise StaleFrame(f"{self._name}: no frame yet{why}")
        age = self._clock() - frame.timestamp
        if age > max_age:
            why = f" ({closed})" if closed is not None else self._hint()
            raise StaleFrame(
                f"{self._name}: newest frame is {age:.3g} s old, over max_age {max_age:.3g} s{why}"
            )
        return frame

    def _hint(self) -> str:
        return ": is the camera frozen or unplugged? reconnect it, or check its USB link"
