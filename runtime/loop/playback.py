"""What a recording answers the loop with, for every kind of skill: the driver's
completions and the observations the world pushed, each at the time the episode got it.

The loop runs again with nothing behind it: no world, no robot, no simulator. Each command
the replay starts completes when the episode's did (the ``done`` record after the
``transition`` that started it), or never, when it was cut short; each observation the
world pushed arrives at its recorded time. Pulled inputs (a scene's looks, a team's
environment) and the LLM's replies (runtime/loop/replies.py) are answered in order by the
kind's own playback. So a run on the wall clock, on hardware, or in a world disturbed
behind the robot's back replays as the robot saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from onboard.drivers.base import Args, Done, Running
from onboard.loop.clock import Clock, Timer

__all__ = ["PlaybackDriver", "completions", "pushed_after_start", "schedule_pushed"]


def completions(records: Sequence[dict[str, Any]]) -> list[float | None]:
    """For each command the episode started (one per ``transition``), when it completed
    (its ``done`` record's time), or None: cut short by the next transition or the end."""
    done_at: list[float | None] = []
    for record in records:
        if record["kind"] == "transition":
            done_at.append(None)
        elif record["kind"] == "done" and done_at and done_at[-1] is None:
            done_at[-1] = float(record["t"])
    return done_at


def pushed_after_start(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``observation`` records after the ``start`` record: what the world pushed to the
    loop (the first look, before ``start``, is what the loop started from)."""
    started = False
    pushed: list[dict[str, Any]] = []
    for record in records:
        if record["kind"] == "start":
            started = True
        elif started and record["kind"] == "observation":
            pushed.append(record)
    return pushed


class _Pending:
    def __init__(self, timer: Timer | None) -> None:
        self.timer = timer

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()


class PlaybackDriver:
    """Implements :class:`~onboard.drivers.base.RobotDriver`: the k-th command started
    completes at the time the episode's k-th did; nothing moves."""

    def __init__(
        self, records: Sequence[dict[str, Any]], clock: Clock, commands: frozenset[str]
    ) -> None:
        self.clock = clock
        self._commands = commands
        self._done_at = completions(records)
        self._started = 0

    @property
    def commands(self) -> frozenset[str]:
        return self._commands

    @property
    def holding(self) -> str | None:
        return None  # a scene's recorded looks say what the gripper held

    def start(self, command: str, args: Args, done: Done) -> Running:
        k, self._started = self._started, self._started + 1
        at = self._done_at[k] if k < len(self._done_at) else None
        return _Pending(None if at is None else self.clock.call_at(at, done))

    def stop(self) -> None:
        """Nothing moves in a replay."""

    def resume(self) -> None:
        """Nothing moves in a replay."""


def schedule_pushed(
    records: Sequence[dict[str, Any]],
    clock: Clock,
    deliver: Callable[[dict[str, Any]], None],
) -> list[Timer]:
    """Each observation the world pushed, delivered at its recorded time (scheduled now,
    before anything the loop schedules, as a world schedules what it will report)."""
    return [clock.call_at(float(r["t"]), partial(deliver, r)) for r in pushed_after_start(records)]
