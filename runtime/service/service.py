"""The service's loop: missions' steps one after another, systemd's watchdog pinged from a
timer on the same loop, until a stop signal (or, with ``once``, until the queue is empty).

Steps run as callbacks on the loop, on the main thread: each step's episode handles a stop
signal as ``onboard run`` does (the arm stopped, the recording closed). While a step runs
the loop runs nothing else, so the pings pause: before each step the service stretches
systemd's watchdog to the step's timeout (``WATCHDOG_USEC``), and a step hung past it gets
the service killed and restarted by systemd. Between steps a blocked loop stops the pings.

The queue, each attempt and its verdict live in a :class:`Store` (SQLite): an attempt is
committed before its episode starts, and its verdict with the mission's next step after it,
so a restart knows what was interrupted (onboard.service.store).

A mission with a ``[schedule]`` is queued by a timer on the loop when it is due (never twice
at once: a due time while a run of it is queued or running waits for that run to end, and
is logged). A step
that fails with ``on_failure = "operator"`` holds its mission until the operator retries
it, skips it or aborts the mission (the control API); the call is logged at level error and,
when robot.toml names a variable holding a URL, posted there (onboard.service.operator_call).
"""

from __future__ import annotations

import functools
import gc
import math
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from onboard.base.signals import Terminated, on_stop_signals
from onboard.config import RobotConfig
from onboard.loop.clock import WallClock
from onboard.loop.exitcodes import ExitCode, for_signal
from onboard.loop.quota import RecordingsQuota
from onboard.service.estop import EStop
from onboard.service.log import JsonLog
from onboard.service.mission import Mission, SkipTo
from onboard.service.notify import Notifier, watchdog_seconds
from onboard.service.steps import StepResult, recording_path, run_step
from onboard.service.store import Run, Store

__all__ = ["Service", "Watchdog"]

#: a step ended by a stop signal: the service stops with it
_SIGNALLED = (ExitCode.SIGINT, ExitCode.SIGTERM)


class Watchdog:
    """``WATCHDOG=1`` every half of systemd's timeout, from a timer on ``clock``'s loop."""

    def __init__(self, clock: WallClock, notifier: Notifier, timeout: float | None) -> None:
        self.clock, self.notifier, self.timeout = clock, notifier, timeout
        self.pings = 0

    def start(self) -> None:
        if self.timeout is not None:
            self.clock.post(self._ping)

    def _ping(self) -> None:
        self.notifier.send("WATCHDOG=1")
        self.pings += 1
        assert self.timeout is not None
        self.clock.call_later(self.timeout / 2, self._ping)

    def stretch(self, seconds: float) -> None:
        """systemd's timeout becomes ``seconds`` (a step about to block the loop) and the
        count starts again."""
        if self.timeout is not None:
            self.notifier.send(f"WATCHDOG_USEC={int(seconds * 1e6)}", "WATCHDOG=1")

    def restore(self) -> None:
        if self.timeout is not None:
            self.notifier.send(f"WATCHDOG_USEC={int(self.timeout * 1e6)}", "WATCHDOG=1")


@dataclass
class Options:
    llm: str | None = None  # each step's --llm: a URL, "standin", or None (robot.toml)
    clock: str | None = None  # person and scene steps' clock (None: robot.toml's)
    once: bool = False  # stop when the queue is empty, else wait for a stop signal
    #: called with what the log says when the operator is called (a URL's poster)
    call_operator: Callable[[dict[str, Any]], None] | None = None


class Service:
    def __init__(
        self,
        robot: RobotConfig,
        queue: list[Mission],
        options: Options,
        log: JsonLog,
        notifier: Notifier,
        clock: WallClock | None = None,
        store: Store | None = None,
    ) -> None:
        """``queue``: this start's mission files, queued in ``store`` (default: one in
        memory) unless its open batch holds them already (a restart continues it); those
        with a schedule are queued when due instead (never with ``once``)."""
        self.robot, self.options = robot, options
        self.store = store or Store.memory()
        self.scheduled = [m for m in queue if m.schedule is not None]
        self.queue: list[Run] = self.store.enqueue([m for m in queue if m.schedule is None])
        self.log, self.notifier = log, notifier
        self.clock = clock or WallClock(workers=1)
        self.watchdog = Watchdog(self.clock, notifier, watchdog_seconds())
        self.failed_steps = 0
        self._signal: str | None = None
        self._in_step = False
        # the operator's controls (onboard.service.api): read from any thread, changed on the loop
        self.estop = EStop(log)
        self.estop.on_reset(lambda: self.clock.post(self._release))
        self.paused = False
        #: the mission run under way (None: idle)
        self.mission: Run | None = None
        #: the step running or held: mission, step, skill, attempt, started (time.time())
        self.current: dict[str, Any] | None = None
        #: the last steps' ends, newest last (the log's step_end fields)
        self.recent: deque[dict[str, Any]] = deque(maxlen=50)
        #: time.time() of the loop's last heartbeat (a timer on the loop, every second)
        self.loop_beat = time.time()
        #: the loop has returned: no beat is due any more (the heartbeats stop calling it late)
        self.loop_ended = False
        self._held: Callable[[], None] | None = None
        #: the step held for the operator's decision: run, step index, its next attempt, why
        self.waiting: tuple[Run, int, int, str] | None = None
        #: scheduled missions come due while a run of theirs was pending: queued after it
        self._deferred: list[Mission] = []
        #: the recordings quota, its ledger kept across steps: each episode measured once
        self.quota = RecordingsQuota(robot.recordings_dir, int(robot.recordings_max_mb * 1e6))
        self._swept = False  # the index checked once against the folder
        self._announced: dict[str | None, datetime] = {}  # each scheduled mission's next time
        self._cancel = False
        self._lock = threading.Lock()

    # -- controls: any thread; each posted onto the loop, so a step is never cut in two ----

    def enqueue(self, mission: Mission) -> None:
        """Queue ``mission`` after the others (in the state); it starts when the service is
        idle."""
        self.clock.post(lambda: self._enqueue(mission))

    def cancel(self) -> None:
        """Drop the rest of the current mission (a running step ends first)."""
        self.clock.post(self._cancel_now)

    def pause(self) -> None:
        """Start no new step until :meth:`resume` (a running step ends first)."""
        self.clock.post(lambda: self._set_paused(True))

    def resume(self) -> None:
        self.clock.post(lambda: self._set_paused(False))

    def decide(self, action: Literal["retry", "skip", "abort"]) -> bool:
        """The operator's answer to a held step: run it again, go on after it, or abort
        its mission. False when no step waits for the operator (nothing done)."""
        if self.waiting is None:
            return False
        self.clock.post(lambda: self._decided(action))
        return True

    def queued(self) -> list[str]:
        with self._lock:
            return [r.name for r in self.queue]

    def _enqueue(self, mission: Mission) -> None:
        run = self.store.add(mission)
        with self._lock:
            self.queue.append(run)
        self.log.event("mission_queued", mission=run.name, run=run.id, path=str(mission.path))
        if self.mission is None:
            self._next_mission()

    def _cancel_now(self) -> None:
        if self.mission is None:
            return
        if self.waiting is not None:
            self._decided("abort", "cancelled")
            return
        if self._held is not None:  # a held step is dropped now, else at the step's end
            self._held = None
            self._end_mission("cancelled")
        else:
            self._cancel = True

    def _set_paused(self, paused: bool) -> None:
        if paused != self.paused:
            self.paused = paused
            self.log.event("paused" if paused else "resumed")
        self._release()

    def _release(self) -> None:
        """Run the held step when nothing holds it any more."""
        if self._held is not None and not self.paused and self.estop.engaged is None:
            held, self._held = self._held, None
            held()

    def _wait_for_operator(self, run: Run, index: int, attempt: int, why: str) -> None:
        self.waiting = (run, index, attempt, why)
        step = run.mission.steps[index]
        fields = {"mission": run.name, "run": run.id, "step": step.name, "why": why}
        self.log.event("operator_called", level="error", **fields)
        if self.options.call_operator is not None:
            self.options.call_operator({"event": "operator_called", "robot": self.robot.name,
                                        **fields})  # fmt: skip

    def _decided(self, action: str, result: str = "aborted") -> None:
        if self.waiting is None:
            return
        run, index, attempt, _ = self.waiting
        self.waiting = None
        self.log.event("operator_decided", mission=run.name, run=run.id,
                       step=run.mission.steps[index].name, action=action)  # fmt: skip
        if action == "abort":
            detail = f"{'cancelled' if result == 'cancelled' else 'aborted'} by the operator"
            self.store.end(run, "aborted", detail, repeat=False)
            self._end_mission(result, at_step=run.mission.steps[index].name, stored=True)
            return
        then = (index, attempt) if action == "retry" else self._then(run, index + 1)
        if not isinstance(then, tuple):
            self._queue_round(self.store.end(run, "done"))
            self._end_mission("done")
            return
        self.store.release(run, then)
        self.clock.post(lambda: self._step(run, *then))

    def _queue_round(self, again: Run | None) -> None:
        """A repeating mission's next round, queued by the store as the last one ended."""
        if again is not None:
            with self._lock:
                self.queue.append(again)

    def _end_mission(self, result: str, stored: bool = False, **fields: Any) -> None:
        """The run ends: "done", "aborted", or "cancelled" (recorded as aborted, with why,
        and no further round). ``stored``: the state has the end already."""
        run = self.mission
        level = "info" if result == "done" else "warning"
        if run is not None and result == "cancelled" and not stored:
            self.store.end(run, "aborted", "cancelled by the operator", repeat=False)
        self.log.event("mission_end", level=level, mission=None if run is None else run.name,
                       run=None if run is None else run.id, result=result, **fields)  # fmt: skip
        self.mission, self.current, self._cancel = None, None, False
        deferred, self._deferred = self._deferred, []
        for mission in deferred:
            self.clock.post(functools.partial(self._due, mission))
        self.clock.post(self._next_mission)

    def _heartbeat(self) -> None:
        self.loop_beat = time.time()
        self.clock.call_later(1.0, self._heartbeat)

    def run(self, ready: Callable[[], None] | None = None) -> int:
        """Run until stopped; ``ready`` is called on the loop first (tests)."""
        # what start-up built lives as long as the process: out of the collector's sight, so
        # no collection walks it again, the last one at exit included (about a second of a
        # stop's two on a loaded controller, measured by bench/soak.py)
        gc.collect()
        gc.freeze()
        with on_stop_signals(self._on_signal):
            self.notifier.send("READY=1", "STATUS=connected; running missions")
            self.log.event("ready", missions=[r.name for r in self.queue],
                           resumed=[r.name for r in self.queue if r.resumed],
                           watchdog_seconds=self.watchdog.timeout)  # fmt: skip
            self.watchdog.start()
            self.clock.post(self._heartbeat)
            if not self.options.once:
                for mission in self.scheduled:
                    self.clock.post(functools.partial(self._plan, mission))
            if ready is not None:
                self.clock.post(ready)
            self.clock.post(self._next_mission)
            try:
                self.clock.run(until=math.inf)
            except (Terminated, KeyboardInterrupt):
                pass  # raised by _on_signal to unwind a step: self._signal says which
            finally:
                self.loop_ended = True
                self.notifier.send("STOPPING=1")
        if self._signal is not None:
            self.log.event("stopped", signal=self._signal)
            return for_signal(self._signal)
        self.log.event("stopped", failed_steps=self.failed_steps)
        return ExitCode.TASK_FAILED if self.failed_steps else ExitCode.SUCCESS

    def _on_signal(self, name: str) -> None:
        self._signal = name
        self.clock.stop()
        if self._in_step:  # a step whose episode has no handler of its own: unwind it
            raise Terminated if name == signal.Signals.SIGTERM.name else KeyboardInterrupt

    def _plan(self, mission: Mission) -> None:
        """Queue ``mission`` if its schedule says it is due, else look again when it will be
        (a timer may fire a little early: the time is checked again, never trusted)."""
        assert mission.schedule is not None
        now = datetime.now().astimezone()
        due = mission.schedule.due(self.store.last_queued(mission), now)
        delay = (due - now).total_seconds()
        if delay <= 0:
            self._due(mission)
            return
        if self._announced.get(mission.name) != due:
            self._announced[mission.name] = due
            self.log.event("scheduled", mission=mission.name, due=due.isoformat(timespec="seconds"))
        self.clock.call_later(delay, functools.partial(self._plan, mission))

    def _due(self, mission: Mission) -> None:
        if self.store.is_pending(mission):  # never two runs at once: this one waits
            self.log.event("schedule_deferred", level="warning", mission=mission.name,
                           why="a run of it is queued or running")  # fmt: skip
            self._deferred.append(mission)
            return
        self._enqueue(mission)
        self._plan(mission)

    def _next_mission(self) -> None:
        if self.mission is not None:
            return
        with self._lock:
            run = self.queue.pop(0) if self.queue else None
        if run is None:
            self.store.close_batch()
            self.log.event("idle", detail="no mission queued")
            if self.options.once:
                self.clock.stop()
            return
        self.mission = run
        self.store.begin(run)
        resumed: dict[str, Any] = {"at_step": run.mission.steps[run.step].name,
                                   "attempt": run.attempt}  # fmt: skip
        rounds: dict[str, Any] = {"round": run.round} if run.mission.repeat != 1 else {}
        self.log.event("mission_start", mission=run.name, run=run.id, path=str(run.mission.path),
                       steps=[s.name for s in run.mission.steps], **rounds,
                       **(resumed if run.resumed else {}))  # fmt: skip
        if run.held is not None:  # held for the operator when the service stopped
            self._wait_for_operator(run, run.step, run.attempt, run.held)
            return
        self.clock.post(lambda: self._step(run, run.step, run.attempt))

    def _step(self, run: Run, index: int, attempt: int) -> None:
        if self._signal is not None:
            return
        step = run.mission.steps[index]
        self.current = {"mission": run.name, "step": step.name, "skill": step.skill,
                        "attempt": attempt, "index": index, "started": time.time()}  # fmt: skip
        if self._cancel:
            self._end_mission("cancelled", at_step=step.name)
            return
        if self.paused or self.estop.engaged is not None:
            why = "e-stop" if self.estop.engaged is not None else "paused"
            self.log.event("step_held", mission=run.name, run=run.id, step=step.name, why=why)
            self._held = lambda: self._step(run, index, attempt)
            return
        record = recording_path(self.robot, run.name, step, attempt, run.id)
        self.current["recording"] = str(record)
        attempt_id = self.store.step_started(run, index, attempt, record)
        self.log.event("step_start", mission=run.name, run=run.id, step=step.name,
                       skill=step.skill, attempt=attempt, **step.parameters())  # fmt: skip
        if self.watchdog.timeout is not None:
            self.watchdog.stretch(step.timeout + self.watchdog.timeout)
        self._in_step = True
        try:
            with self.quota.in_force():
                result = run_step(self.robot, run.name, step, attempt, self.options.llm,
                                  self.options.clock, record)  # fmt: skip
        except (Terminated, KeyboardInterrupt):
            self.store.step_stopped(attempt_id, None)
            self.log.event("step_end", level="warning", mission=run.name, run=run.id,
                           step=step.name, skill=step.skill, attempt=attempt,
                           verdict="stopped", signal=self._signal)  # fmt: skip
            raise
        finally:
            self._in_step = False
            self.watchdog.restore()
        if result.code in _SIGNALLED:
            self.store.step_stopped(attempt_id, result.code)
            self._log_result(run, index, attempt, result)
            self._signal = "SIGINT" if result.code == ExitCode.SIGINT else "SIGTERM"
            self.clock.stop()
            return
        then = self._decide(run, index, attempt, result)
        held = None
        if then == "operator":
            then, held = (index, attempt + 1), f"step {step.name} failed ({result.verdict})"
        again = self.store.step_finished(
            attempt_id, result.verdict, result.code, result.seconds, result.error, then,
            f"at step {step.name}" if then == "aborted" else None, held)  # fmt: skip
        self._log_result(run, index, attempt, result)
        self._rotated()
        self._queue_round(again)
        if held is not None:
            self._wait_for_operator(run, index, attempt + 1, held)
        elif then == "done":
            self._end_mission("done")
        elif then == "aborted":
            self._end_mission("aborted", at_step=step.name)
        else:
            self.clock.post(lambda: self._step(run, *then))

    def _rotated(self) -> None:
        """Recordings the quota deleted to make room for the step's (or that left the folder
        otherwise) are marked in the index: at the first step every indexed one is looked
        for, as what went while the service was down is known to no quota; then only those
        the quota says are gone."""
        if self._swept:
            gone = self.store.mark_rotated([str(p) for p in self.quota.take_gone()])
        else:
            self.quota.take_gone()
            gone, self._swept = self.store.rotated(), True
        if gone:
            self.log.event("recordings_rotated", count=len(gone),
                           max_mb=self.robot.recordings_max_mb,
                           recordings=[p.rsplit("/", 1)[-1] for p in gone[:20]])  # fmt: skip

    def _decide(
        self, run: Run, index: int, attempt: int, result: StepResult
    ) -> tuple[int, int] | Literal["done", "aborted", "operator"]:
        """What follows a judged attempt: the next (step, attempt), the mission's end, or
        the operator's decision. An interrupted attempt of the step spends none of its
        retries."""
        step = run.mission.steps[index]
        if result.success:
            return self._then(run, index + 1)
        if attempt - run.interrupted.get(index, 0) <= step.retries:
            return (index, attempt + 1)
        self.failed_steps += 1
        if isinstance(step.on_failure, SkipTo):
            return self._then(run, run.mission.index_of(step.on_failure.skip_to))
        if step.on_failure == "continue":
            return self._then(run, index + 1)
        if step.on_failure == "operator":
            return "operator"
        return "aborted"

    @staticmethod
    def _then(run: Run, index: int) -> tuple[int, int] | Literal["done"]:
        return "done" if index >= len(run.mission.steps) else (index, 1)

    def _log_result(self, run: Run, index: int, attempt: int, result: StepResult) -> None:
        step = run.mission.steps[index]
        recording = str(result.recording) if result.recording else None
        self.recent.append({"mission": run.name, "step": step.name, "skill": step.skill,
                            "attempt": attempt, "verdict": result.verdict, "ended": time.time(),
                            "seconds": round(result.seconds, 3), "error": result.error,
                            "recording": recording})  # fmt: skip
        self.log.event(
            "step_end",
            level="info" if result.success else "warning",
            mission=run.name,
            run=run.id,
            step=step.name,
            skill=step.skill,
            attempt=attempt,
            verdict=result.verdict,
            exit_code=result.code,
            seconds=round(result.seconds, 3),
            recording=str(result.recording) if result.recording else None,
            error=result.error,
            output=result.output[-6:],
        )
