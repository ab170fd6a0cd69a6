"""Protocol emulators backed by any Arm, so the real drivers can be tested over a real link.

Each is written from its firmware's or controller's public source, cited rule by rule:

- :mod:`onboard.drivers.emulators.marlin_pty`: Marlin 2.1 (MarlinFirmware/Marlin) on a pty
  (also in joint space, its axes a joint-space arm's joints:
  :mod:`onboard.drivers.emulators.moveo`, a kinematic model of the BCN3D Moveo);
- :mod:`onboard.drivers.emulators.grbl_pty`: GRBL 1.1h (gnea/grbl) on a pty, with its G-code
  reading in :mod:`onboard.drivers.emulators.grbl_gcode`;
- :mod:`onboard.drivers.emulators.jaka_server`: a JAKA controller's JSON protocol on TCP
  (10001 + 10000);
- :mod:`onboard.drivers.emulators.feetech_pty`: the SO-101's Feetech servo bus on a pty, backed
  by a kinematic model of that arm or by the twin's SO-101
  (:mod:`~onboard.drivers.emulators.so101_twin`; not an Arm);
- :mod:`onboard.drivers.emulators.pty_controller`: the pty plumbing the two G-code ones share;
- :mod:`onboard.drivers.emulators.serve`: all three on one physics twin, until SIGTERM, with
  that twin's camera (:mod:`~onboard.drivers.emulators.camera_server`) and its ground truth
  for judges (:mod:`~onboard.drivers.emulators.truth_server`; the judges' client:
  :mod:`~onboard.drivers.emulators.truth_client`) on TCP
  (:mod:`~onboard.drivers.emulators.tcp_service`, the plumbing those two share).

They run the backend arm's blocking calls in order on one thread (:class:`BackendWorker`), as a
controller's motion planner does, so their command links stay free for ``stop``. A stop
latches the backend arm; each worker resumes it to run a motion it accepted after its own last
stop, whoever latched it (``onboard sim serve`` puts three controllers on one arm: another
board's boot or stop must not freeze the next motion of this one).
``worker.wait_started(n)`` lets a test wait until the controller has begun its n-th motion.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from onboard.base.errors import OnboardError
from onboard.drivers.arm.base import Arm

__all__ = ["BackendWorker", "Job"]

log = logging.getLogger(__name__)

#: one blocking call on the backend arm
Job = Callable[[Arm], None]


class BackendWorker:
    """A bounded queue of jobs run in order on the backend arm, on one thread.

    ``stop()`` empties the queue and stops (latches) the arm at once, from any thread; the job
    under way then raises at the arm's next step. Every job queued after the worker's last
    stop resumes the arm before it runs, whatever latched it (another controller sharing the
    arm): that is this controller deliberately moving. Both happen under the worker's lock,
    so a stop can never be cleared by the resume of a job queued before it. An error raised
    by a job (other than one cut short by this worker's ``stop()``) is kept until
    ``take_error()``.
    """

    def __init__(self, arm: Arm, capacity: int = 8) -> None:
        self.arm = arm
        self.capacity = capacity
        self._jobs: deque[tuple[int, Job]] = deque()
        self._cond = threading.Condition()
        self._generation = 0
        self._busy = False
        self._started = 0  # jobs begun, for wait_started()
        self._current = 0  # the generation of the job under way
        self._closed = False
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="backend-worker", daemon=True)
        self._thread.start()

    def submit(self, job: Job, timeout: float | None = None, *, stops: int | None = None) -> bool:
        """Queue ``job``; blocks while the queue is full. False if it timed out or closed,
        or, with ``stops`` (the :attr:`stops` count the caller has dealt with), at once if
        :meth:`stop` has been called since: a controller then finishes its own stop first
        (the room a stop frees must not let a waiting move in ahead of it)."""
        with self._cond:
            if not self._cond.wait_for(
                lambda: (
                    self._closed
                    or (stops is not None and stops != self._generation)
                    or len(self._jobs) < self.capacity
                ),
                timeout,
            ):
                return False
            if self._closed or (stops is not None and stops != self._generation):
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

    def wait_started(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` jobs have begun on the arm (see :attr:`started`); False on
        timeout. A test takes ``started`` before it sends a motion and waits for one more."""
        with self._cond:
            return self._cond.wait_for(lambda: self._started >= count, timeout)

    def dwell(self, seconds: float) -> bool:
        """Wait ``seconds`` inside a job, as a controller's G4 does, unless ``stop()`` (or
        ``close()``) comes first; True if the whole dwell ran."""
        with self._cond:
            generation = self._current
            return not self._cond.wait_for(
                lambda: self._closed or self._generation != generation, max(0.0, seconds)
            )

    @property
    def started(self) -> int:
        """How many jobs have begun on the arm so far."""
        with self._cond:
            return self._started

    @property
    def waiting(self) -> int:
        """How many jobs are queued behind the one under way (at most :attr:`capacity`)."""
        with self._cond:
            return len(self._jobs)

    @property
    def stops(self) -> int:
        """How many times :meth:`stop` was called: a job that raised while this changed was
        cut short by it."""
        with self._cond:
            return self._generation

    @property
    def idle(self) -> bool:
        with self._cond:
            return not self._jobs and not self._busy

    def stop(self) -> None:
        """Drop every queued job and stop the arm now; the job under way ends at the arm's
        next step (the arm latches the stop), so ``wait_idle()`` soon returns."""
        with self._cond:
            self._generation += 1
            self._jobs.clear()
            self.arm.stop()
            self._cond.notify_all()

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
                self.arm.resume()  # accepted after this worker's last stop: it runs
                self._busy = True
                self._current = generation
                self._started += 1
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
