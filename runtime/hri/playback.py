"""A person episode's inputs played back from its recording (format 3): the first look, each
observation perception pushed (the person's activity, gaze and distance, visible or not) and
each completion of a robot command, at the time the episode got it (runtime/loop/playback.py).

Nothing is simulated: no scenario, no person, no base moving. A run on the wall clock, on a
real robot, or with the person doing what no scenario file says replays as the robot saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from onboard.base.errors import RecordingError
from onboard.hri.person import PersonObservation
from onboard.hri.world import SimRobot
from onboard.loop.clock import Clock, Timer
from onboard.loop.playback import PlaybackDriver, schedule_pushed

__all__ = ["PersonPlayback", "PlaybackWorld"]


class PlaybackWorld:
    """The person's world as the episode saw it: what ``run_episode`` starts, looks at first
    and closes, in place of the simulated one."""

    def __init__(
        self,
        records: Sequence[dict[str, Any]],
        first: PersonObservation,
        clock: Clock,
        publish: Callable[[PersonObservation], None],
    ) -> None:
        self.records, self.first, self.clock, self.publish = records, first, clock, publish
        self._timers: list[Timer] = []

    def observation(self) -> PersonObservation:
        return self.first

    def start(self) -> None:
        deliver = lambda record: self.publish(PersonObservation.from_record(record))  # noqa: E731
        self._timers = schedule_pushed(self.records, self.clock, deliver)

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()


class PersonPlayback:
    """A person recording's looks and robot, as ``run_episode`` plays them back."""

    def __init__(self, records: Sequence[dict[str, Any]], path: Path) -> None:
        self.records = records
        first = next((r for r in records if r["kind"] == "observation"), None)
        if first is None:
            raise RecordingError(f"{path}: a person episode with no observation record; "
                                 "not a valid onboard recording")  # fmt: skip
        self.first = PersonObservation.from_record(first)

    def world(self, clock: Clock, publish: Callable[[PersonObservation], None]) -> PlaybackWorld:
        return PlaybackWorld(self.records, self.first, clock, publish)

    def driver(self, clock: Clock) -> PlaybackDriver:
        return PlaybackDriver(self.records, clock, SimRobot.COMMANDS)
