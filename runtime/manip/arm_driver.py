"""The arm as the loop's driver: a scene skill's commands run off the loop, through the clock.

Each command (pick, place, push, give, home, recover) is a motion of
:mod:`onboard.manip.motions`: :class:`SafeArm` calls, always through its safety limits. It
runs as submitted work: on a worker thread on the wall clock, so perception, timers and a
stop are never blocked; on the virtual clock it takes the simulated time the motion took in
the physics twin (``elapsed``), so a run on the virtual clock keeps the twin's time.

:meth:`stop` reaches :meth:`Arm.stop` at once, from the loop, whatever runs: the motion in
progress aborts before its next step and the arm holds where it is. A stop never opens the
gripper: what to do with a held object is the fallback's decision (``arm.recover``: put it
down in the skill's safe region, then home).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from onboard.base.errors import ArmError, DriverError
from onboard.drivers.arm.safety import SafeArm
from onboard.drivers.base import Args, Done, Running
from onboard.loop.clock import Clock, Timer
from onboard.manip.commands import ARM_COMMANDS
from onboard.manip.motions import Motions

__all__ = ["ArmDriver"]


class _Command:
    """A command in progress: cancelling it stops the arm and drops its ``done``."""

    def __init__(self, driver: ArmDriver, name: str) -> None:
        self.driver, self.name = driver, name
        self.cancelled = False
        self.timer: Timer | None = None

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        if self.timer is not None:
            self.timer.cancel()
        elif self.name.startswith("arm."):
            self.driver.arm.stop()  # aborts the motion; the next command resumes the arm


class ArmDriver:
    """Implements :class:`~onboard.drivers.base.RobotDriver` over a :class:`SafeArm`."""

    COMMANDS = ARM_COMMANDS

    def __init__(
        self,
        arm: SafeArm,
        clock: Clock,
        elapsed: Callable[[], float] | None = None,
        speed: float = 0.2,
        record: Callable[..., None] | None = None,
    ) -> None:
        """``elapsed``: simulated seconds (the twin's clock) for the virtual clock's timing;
        None takes the measured time. ``speed``: tool speed, m/s (SafeArm caps it)."""
        self.arm = arm
        self.clock = clock
        self.elapsed = elapsed
        self.speed = speed
        self.record = record or (lambda *_a, **_k: None)
        self.motions = Motions(arm, speed)
        self._latched = False
        self._motion = threading.Lock()

    @property
    def commands(self) -> frozenset[str]:
        return self.COMMANDS

    # -- RobotDriver ------------------------------------------------------------------------

    def start(self, command: str, args: Args, done: Done) -> Running:
        if command not in self.COMMANDS:
            raise DriverError(f"arm driver: unknown command {command!r}")
        if self._latched:
            raise DriverError(f"arm driver: stopped; {command} refused until resume()")
        running = _Command(self, command)
        if command == "none":
            running.timer = self.clock.call_later(0.0, done)
            return running
        if command == "wait":
            running.timer = self.clock.call_later(float(args.get("seconds", 1.0)), done)
            return running
        motion = getattr(self, "_" + command.removeprefix("arm."))
        began = [0.0]

        def work() -> dict[str, Any] | None:
            with self._motion:
                if self._latched or running.cancelled:
                    raise ArmError(f"{command}: stopped before it began")
                self.arm.resume()  # a cancelled command before this one left the arm stopped
                began[0] = self.elapsed() if self.elapsed is not None else 0.0
                motion(dict(args))
                return self._arm_state()

        def latency() -> float:
            return max(0.0, self.elapsed() - began[0]) if self.elapsed is not None else 0.0

        def finished(result: object, _took: float) -> None:
            if running.cancelled:
                return
            if isinstance(result, BaseException):
                # a motion that failed (out of reach, a fault): the arm holds; the skill's
                # timeout or the next decision moves on, and the record says why
                self.record("error", source="arm", message=f"{command}: {result}")
            elif isinstance(result, dict):
                self.record("arm", command=command, **result)
            done()

        self.clock.submit(work, finished, latency=latency if self.elapsed is not None else None)
        return running

    def _arm_state(self) -> dict[str, Any] | None:
        """Where the arm is after a motion, for the ``arm`` record: its joints (rad, in the
        arm's order), the tool's pose (m, rad) and the gripper; None when the arm cannot say
        (the motion's own outcome stands)."""
        try:
            state = self.arm.state()
        except (ArmError, DriverError, OSError):
            return None
        p = state.pose
        return {"joints": [round(q, 6) for q in state.joints],
                "pose": [round(v, 6) for v in (p.x, p.y, p.z, p.rx, p.ry, p.rz)],
                "gripper_closed": state.gripper_closed}  # fmt: skip

    def stop(self) -> None:
        """Halt the arm now and refuse commands until :meth:`resume`; the gripper stays as
        it is."""
        self._latched = True
        self.arm.stop()

    def resume(self) -> None:
        self._latched = False
        self.arm.resume()

    # -- motions (worker thread; one at a time): onboard.manip.motions ------------------------

    @property
    def holding(self) -> str | None:
        """What the gripper holds, by the driver's own account (the object it picked)."""
        return self.motions.holding

    def home(self) -> None:
        """Home the arm now (blocking), and take its tool orientation for the motions."""
        with self._motion:
            self.arm.resume()
            self.motions.home()

    def _home(self, args: Mapping[str, Any]) -> None:
        self.motions.home()

    def _pick(self, args: Mapping[str, Any]) -> None:
        x, y, z = float(args["x"]), float(args["y"]), float(args["z"])
        self.motions.pick_centre(str(args["object"]), x, y, z, float(args.get("size", 0.04)))

    def _place(self, args: Mapping[str, Any]) -> None:
        """Put what the gripper holds on the target: its bottom on the target's top (an
        object's top, or the table in a region)."""
        self.motions.place(float(args["tx"]), float(args["ty"]), float(args["top"]))

    def _push(self, args: Mapping[str, Any]) -> None:
        x, y, z = float(args["x"]), float(args["y"]), float(args["z"])
        size = float(args.get("size", 0.04))
        self.motions.push(x, y, z, size, float(args["tx"]), float(args["ty"]))

    def _give(self, args: Mapping[str, Any]) -> None:
        self.motions.give(float(args["x"]), float(args["y"]), float(args["z"]))

    def _recover(self, args: Mapping[str, Any]) -> None:
        if self.motions.holding is not None and "tx" in args:
            self._place(args)
        self.motions.home()
