"""Names that stay the same from one look to the next: "apple", "apple 2", ...

Each look's objects take the names of the tracks of their label, nearest first; an object no
track of its label is left for gets a new name (the label, else "label 2", "label 3", ...).
A track not seen in a look keeps its name and where it was last seen, and counts as
:data:`STALE` metres further away than it is from then on (a spurious detection once named
"label 2" does not take the name of the object it was seen beside, the next look the two
estimates fall close); an object the robot itself puts somewhere has its track moved there
(:meth:`Tracker.moved`), so it keeps its name wherever it was set down.

An object that moves between looks (carried by a belt) is met where it is expected: its track's
last position carried on at the velocity of its last two sightings, for at most :data:`AHEAD`
seconds. Without it, a weak box just behind a moving block, nearer the block's last position
than the block now is, took the block's name, and the block kept a "label 2" once the box was
gone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

__all__ = ["AHEAD", "STALE", "Seen", "Tracker"]

#: metres a track not seen in the last look counts as further away than it is
STALE = 0.02
#: seconds ahead at most that a track's velocity carries it (a block stopped since keeps still)
AHEAD = 0.5

Point = tuple[float, float, float]


@dataclass(frozen=True)
class Seen:
    """One object as last seen, base frame, metres."""

    name: str
    label: str
    position: Point  # its centre, as the scene observer estimates it
    size: float  # its width in the image, at its depth
    top: float  # the height of its top surface
    time: float  # robot time of the look


class Tracker:
    def __init__(self) -> None:
        self.tracks: dict[str, Seen] = {}
        #: metres per second in x, y, z, from each track's last two sightings
        self.velocity: dict[str, Point] = {}
        #: the tracks seen in the last look, or moved there by the robot since
        self._current: set[str] = set()

    def names(
        self, labels: Sequence[str], positions: Sequence[Point], time: float | None = None
    ) -> list[str]:
        """The names of one look's objects (in the order given), matched to the tracks;
        ``time``: the look's (robot time), where the moving tracks are expected."""
        names: list[str | None] = [None] * len(labels)
        for label in dict.fromkeys(labels):
            mine = [i for i, seen in enumerate(labels) if seen == label]
            tracks = [t for t in self.tracks.values() if t.label == label]
            pairs = sorted(
                (self._distance(positions[i], t, time), i, t.name) for i in mine for t in tracks
            )
            taken: set[str] = set()
            for _, i, name in pairs:
                if names[i] is None and name not in taken:
                    names[i] = name
                    taken.add(name)
            for i in mine:
                if names[i] is None:
                    names[i] = self._new_name(label, taken)
                    taken.add(names[i] or "")
        return [n or "" for n in names]

    def update(self, seen: Sequence[Seen]) -> None:
        """One look's objects (a look that saw nothing leaves the last look's as current)."""
        for s in seen:
            last = self.tracks.get(s.name)
            if last is not None and s.time > last.time:
                dt = s.time - last.time
                self.velocity[s.name] = _point(
                    (a - b) / dt for a, b in zip(s.position, last.position, strict=True)
                )
            self.tracks[s.name] = s
        if seen:
            self._current = {s.name for s in seen}

    def moved(self, name: str, position: Point, top: float, time: float) -> None:
        """``name`` was put down by the robot: its centre is at ``position`` now."""
        if name in self.tracks:
            self.tracks[name] = replace(self.tracks[name], position=position, top=top, time=time)
            self.velocity.pop(name, None)
            self._current.add(name)

    def expected(self, track: Seen, time: float | None) -> Point:
        """Where ``track`` is expected at ``time``: carried on at its velocity, at most
        :data:`AHEAD` seconds; where it was last seen without a time or a velocity."""
        velocity = self.velocity.get(track.name)
        if time is None or velocity is None:
            return track.position
        ahead = min(max(time - track.time, 0.0), AHEAD)
        return _point(p + v * ahead for p, v in zip(track.position, velocity, strict=True))

    def _distance(self, position: Point, track: Seen, time: float | None) -> float:
        stale = 0.0 if track.name in self._current else STALE
        return math.dist(position, self.expected(track, time)) + stale

    def _new_name(self, label: str, taken: set[str]) -> str:
        used = set(self.tracks) | taken
        if label not in used:
            return label
        k = 2
        while f"{label} {k}" in used:
            k += 1
        return f"{label} {k}"


def _point(values: Iterable[float]) -> Point:
    x, y, z = values
    return (float(x), float(y), float(z))
