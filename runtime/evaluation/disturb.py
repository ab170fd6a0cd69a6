"""Disturbances for the error-correction experiment: while a program runs, the twin moves an
object or makes the gripper drop what it holds (a step hook, :meth:`Twin.on_step`).

A :class:`Disturbance` says what happens (``move`` an object to a point on the table, or
``drop`` the held one) and when: ``on = "held"`` the first time the gripper holds the object
(any object when none is named), ``on = "step"`` at physics step ``step``; ``after`` seconds
later. Each one happens once and is logged with the twin's time (:attr:`Disturber.events`,
and the ``log`` callback). Evaluation only: with the judges, the only code that reads and
changes the twin's truth behind the robot's back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

from onboard.drivers.twin.world import DT, Snapshot, Twin

__all__ = ["Disturbance", "Disturber", "Event", "disturbed"]

log = logging.getLogger(__name__)

#: metres above its resting height a dropped object is let fall from
DROP_CLEARANCE = 0.005


@dataclass(frozen=True)
class Disturbance:
    """``move``: ``object`` to ``to`` (world x, y) on the table; ``drop``: the gripper lets
    go of what it holds (``object``, or whatever it holds when None), which falls to the
    table below it."""

    kind: Literal["move", "drop"]
    on: Literal["held", "step"] = "held"
    object: str | None = None
    step: int = 0
    after: float = 0.0
    to: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.kind == "move" and (self.object is None or self.to is None):
            raise ValueError("a move disturbance names the object and where to (to = [x, y])")
        if self.after < 0 or self.step < 0:
            raise ValueError("a disturbance's step and after are not negative")


@dataclass(frozen=True)
class Event:
    """What a disturber did, at which twin time and step."""

    time: float
    step: int
    what: str


@dataclass
class Disturber:
    """A step hook that does its :class:`Disturbance` once, when it is due."""

    twin: Twin
    disturbance: Disturbance
    log: Callable[[Event], None] = lambda _event: None
    events: list[Event] = field(default_factory=list)
    _due: int | None = None
    _rest: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # where each loose object rests now: a moved or dropped object is put back that high
        self._rest = {n: self.twin.object_pose(n)[0][2] for n in self.twin.object_names()}
        if self.disturbance.on == "step":
            self._due = self.disturbance.step + round(self.disturbance.after / DT)

    @property
    def done(self) -> bool:
        return bool(self.events)

    def __call__(self, snapshot: Snapshot) -> None:
        if self.done:
            return
        wanted = self.disturbance.object
        if self._due is None:
            held = snapshot.held
            if held is None or (wanted is not None and held != wanted):
                return
            self._due = snapshot.step + round(self.disturbance.after / DT)
        if snapshot.step < self._due:
            return
        what = self._move() if self.disturbance.kind == "move" else self._drop(snapshot)
        if what is None:
            return  # nothing held to drop (yet): try again next step
        event = Event(round(snapshot.time, 4), snapshot.step, what)
        self.events.append(event)
        log.info("disturbance at %.3f s (step %d): %s", event.time, event.step, what)
        self.log(event)

    def _move(self) -> str:
        name, to = self.disturbance.object, self.disturbance.to
        assert name is not None and to is not None
        with self.twin.lock:
            if self.twin.held_object() == name:
                self.twin.panda.release()
            self.twin.set_object_pose(name, (to[0], to[1], self._rest[name] + DROP_CLEARANCE))
        return f"moved {name} to ({to[0]:.3f}, {to[1]:.3f})"

    def _drop(self, snapshot: Snapshot) -> str | None:
        name = snapshot.held
        if name is None or (self.disturbance.object not in (None, name)):
            return None
        with self.twin.lock:
            (x, y, _), _ = self.twin.object_pose(name)
            self.twin.panda.release()  # the weld breaks; out of the fingers, it falls
            self.twin.set_object_pose(name, (x, y, self._rest[name] + DROP_CLEARANCE))
        return f"dropped {name} at ({x:.3f}, {y:.3f})"


@contextmanager
def disturbed(
    twin: Twin, disturbance: Disturbance, log: Callable[[Event], None] = lambda _event: None
) -> Iterator[Disturber]:
    """Run ``disturbance`` on ``twin`` while the block runs; the disturber keeps its events."""
    disturber = Disturber(twin, disturbance, log)
    with twin.on_step(disturber):
        yield disturber
