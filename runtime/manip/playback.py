"""A scene episode's inputs played back from its recording (format 3): every look, and
every completion of an arm command (runtime/loop/playback.py), at the time the episode got it.

The loop runs again with nothing behind it: no camera, detector, arm or twin. Each look the
replay takes is the next look the episode recorded (its objects, relations and what the
gripper held, exactly; its PNG from the images folder when the skill sends images), and each
command the replay starts completes when the episode's did (the ``done`` record after the
``transition`` that started it), or never, when it was cut short. So a run on the wall clock,
on hardware, or with the world disturbed behind the robot's back (a block knocked off while
a step is planned) replays as the robot saw it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from onboard.base.errors import ReplayDivergence
from onboard.loop.clock import Clock
from onboard.loop.playback import PlaybackDriver
from onboard.loop.recording import images_dir
from onboard.manip.commands import ARM_COMMANDS
from onboard.manip.observation import SceneObservation

__all__ = ["RecordedLooks", "ScenePlayback"]


class RecordedLooks:
    """The episode's looks, in the order it took them."""

    def __init__(self, records: Sequence[dict[str, Any]], path: Path) -> None:
        self.path = path
        self._records = [r for r in records if r["kind"] == "observation"]
        self._next = 0
        #: when the last look handed out came back in the episode
        self.last_t = 0.0

    def look(self) -> SceneObservation:
        if self._next >= len(self._records):
            raise ReplayDivergence(
                f"{self.path}: the replay looked more often than the episode did "
                f"({len(self._records)} looks)"
            )
        record = self._records[self._next]
        self._next += 1
        self.last_t = float(record["t"])
        return SceneObservation.from_record(record, self._png(record.get("png")))

    def latency(self, now: Callable[[], float]) -> Callable[[], float]:
        """A look's virtual latency, asked after it ran: until its recorded time."""
        return lambda: max(0.0, self.last_t - now())

    def _png(self, sha256: object) -> bytes | None:
        if not isinstance(sha256, str):
            return None
        found = images_dir(self.path) / f"{sha256}.png"
        return found.read_bytes() if found.is_file() else None


class ScenePlayback:
    """A recording's looks and arm, as a scene episode plays them back on its clock."""

    def __init__(self, records: Sequence[dict[str, Any]], path: Path) -> None:
        self.records = records
        self.looks = RecordedLooks(records, path)

    def arm(self, clock: Clock) -> PlaybackDriver:
        return PlaybackDriver(self.records, clock, ARM_COMMANDS)
