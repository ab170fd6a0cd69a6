"""Protocol emulators backed by any Arm, so the real drivers can be tested over a real link.

- :mod:`drivers.emulators.gcode_pty`: a Marlin/GRBL-style controller on a pty (``/dev/pts/N``).
- :mod:`drivers.emulators.jaka_server`: a JAKA-style JSON controller on TCP (10001 + 10000).
- :mod:`drivers.emulators.serve`: both on one physics twin, until SIGTERM.

Both run the backend arm's blocking calls in order on one thread (:class:`BackendWorker`), as a
controller's motion planner does, so their command channels stay free for ``stop``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from drivers.arm.base import Arm
from runtime.errors import OnboardError

__all__ = ["BackendWorker", "Job"]

log = logging.getLogger(__name__)

#: one blocking call on the backend arm
Job = Callable[[Arm], None]


class BackendWorker:
    """A bounded queue of jobs run in order on the backend arm, on one thread.

    ``stop()`` empties the queue and stops the arm at once, from any thread. An error raised
    by a job (other than one cut short by ``stop()``) is kept until ``take_error()``.
    """

    def __init__(self, arm: Arm, capacity: int = 8) -> None:
        self.arm = arm
        self.capacity = capacity
        self._jobs: deque[tuple[int, Job]] = deque()
        self._cond = threading.Condition()
        self._generation = 0
        self._busy = False
        self._running = 0  # the generation of the job being run
        self._closed = False
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="backend-worker", daemon=True)
        self._thread.start()

    def submit(self, job: Job, timeout: float | None = None) -> bool:
        """Queue ``job``; blocks while the queue is full. False if it timed out or closed."""
        with self._cond:
            if not self._cond.wait_for(
                lambda: self._closed or len(self._jobs) < self.capacity, timeout
            ):
                return False
            if self._closed:
                return False
            self._jobs.append((self._generation, job))
            self._cond.notify_all()
            return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until every queued job is done; False on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._closed or (not self._jobs and not self._busy), timeout
            )

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._jobs and not self._busy

    def stop(self, wait: float = 2.0) -> None:
        """Drop every queued job and stop the arm now; wait up to ``wait`` s for the running
        job to end, stopping again meanwhile (a stop that lands just before a motion starts
        must not be lost)."""
        with self._cond:
            self._generation += 1
            generation = self._generation
            self._jobs.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + wait
        while True:
            self.arm.stop()
            with self._cond:
                if not (self._busy and self._running < generation):
                    return
                self._cond.wait(0.01)
            if time.monotonic() > deadline:
                log.warning("emulator backend: the running job did not end after stop()")
                return

    def take_error(self) -> str | None:
        with self._cond:
            errors, self._errors = self._errors, []
        return "; ".join(errors) if errors else None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._jobs.clear()
            self._cond.notify_all()
        self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or bool(self._jobs))
                if self._closed:
                    return
                generation, job = self._jobs.popleft()
                if generation != self._generation:
                    continue
                self._busy, self._running = True, generation
                self._cond.notify_all()
            try:
                job(self.arm)
            except (OnboardError, ValueError) as exc:
                with self._cond:
                    if generation == self._generation:  # not cut short by stop()
                        self._errors.append(str(exc))
            except Exception as exc:  # a backend bug must not kill the controller
                log.exception("emulator backend job failed")
                with self._cond:
                    self._errors.append(f"{type(exc).__name__}: {exc}")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
