"""The code skill's driver: a checked program runs in the sandbox, through the robot API.

``code.run`` runs the step's program as submitted work (on the virtual clock it takes the
robot's time the run took: the twin's); ``code.halt``, the fallback's command, and a stop
hold the arm where it is. Each run is recorded: the ``program`` before it starts, the
``run`` (how it ended, its steps, its calls, what it printed) when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import numpy.typing as npt

from onboard.base.errors import DriverError
from onboard.drivers.base import Args, Done, Running
from onboard.loop.clock import Clock, Timer
from onboard.replan.api import call_text
from onboard.replan.names import CODE_COMMANDS
from onboard.replan.sandbox import RunResult
from onboard.replan.scene_state import SceneState

__all__ = ["CODE_COMMANDS", "CodeDriver", "CodeWorld"]


class CodeWorld(Protocol):
    """What a code skill acts on and sees: the robot API's arm and camera (or a recording)."""

    fixtures: str

    def look(self) -> tuple[npt.NDArray[np.uint8] | bytes | None, SceneState]:
        """A fresh camera frame (RGB, or already encoded as a replay gives it; None when the
        camera gives none) and the perceived scene."""

    def run(self, program: str) -> RunResult:
        """Runs an accepted program on the robot; an early end stops the arm."""

    def halt(self) -> None:
        """Stops the arm where it is (the next run resumes it)."""

    def now(self) -> float:
        """The robot's clock (the twin's time on the twin)."""


class _Pending:
    def __init__(self) -> None:
        self.cancelled = False
        self.timer: Timer | None = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.timer is not None:
            self.timer.cancel()


class CodeDriver:
    """Implements :class:`~onboard.drivers.base.RobotDriver` over a :class:`CodeWorld`."""

    def __init__(self, world: CodeWorld, clock: Clock, record: Callable[..., None]) -> None:
        self.world, self.clock, self.record = world, clock, record
        self.runs = 0
        self.programs: list[str] = []
        #: how the last run ended: "ok", or "<reason>: <message>"
        self.ended = ""
        self.last: RunResult | None = None

    @property
    def commands(self) -> frozenset[str]:
        return CODE_COMMANDS

    def start(self, command: str, args: Args, done: Done) -> Running:
        pending = _Pending()
        if command == "code.halt":
            self.world.halt()
        elif command == "code.run":
            self._run(str(args["code"]), str(args.get("plan", "")), pending, done)
            return pending
        elif command != "none":
            raise DriverError(f"code driver: unknown command {command!r}")
        pending.timer = self.clock.call_later(0.0, done)
        return pending

    def _run(self, code: str, plan: str, pending: _Pending, done: Done) -> None:
        self.runs += 1
        self.programs.append(code)
        self.record("program", plan=[line for line in plan.split("\n") if line], code=code)
        world, began, wall = self.world, self.world.now(), time.perf_counter()

        def finished(result: RunResult | BaseException, _took: float) -> None:
            if isinstance(result, BaseException):
                result = RunResult(False, "error", f"the run failed: {result!r}", 0, [], "")
            self.last = result
            self.ended = "ok" if result.ok else f"{result.reason}: {result.message}"
            self.record("run", ended=self.ended, steps=result.steps,
                        calls=[call_text(n, a, k) for n, a, k in result.calls],
                        output=result.output,
                        seconds=round(time.perf_counter() - wall, 3))  # fmt: skip
            if not pending.cancelled:
                done()

        self.clock.submit(
            lambda: world.run(code), finished, latency=lambda: max(0.0, world.now() - began)
        )

    def stop(self) -> None:
        self.world.halt()

    def resume(self) -> None:
        """A run resumes the arm itself (the world clears the stop an early end latched)."""
