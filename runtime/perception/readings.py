"""One place, one object: a weaker reading of a place a stronger one holds is dropped when
what it claims is accounted for.

A detector scores every class at every anchor and suppresses overlaps class by class, so one
object can come out twice: its own box and, weaker, a box over it and a neighbour, under its
own class (a box between two blocks in a queue) or under the class of the block beside it (a
stacked block's box scored also as the block on it). Counted as two objects, the robot plans
with a "red block 2" that is the blue block. Two solid objects are not at one place, so where
the depth puts two readings at one place (as :func:`onboard.perception.unknown.stacks` tells one
place), the weaker is a *second reading* when the stronger is of its class, or when its class
is accounted for: read more strongly at a place other than the stronger one's (a box straddling
two blocks may be at one place with both), where no stronger reading of another class is (in a
tower facing the camera whose boxes merge, a block read at the place of the one under it
accounts for nothing). Otherwise both stay, and the place is an unsure stack. The scene
observer applies this after its hand check, so a box on the robot's hand never stands for an
object; containers (a box, a drawer) share their place with what is in them and are never
either side of the rule.

What it cannot tell: two objects of one class where one is merged into the place of another
object and read more weakly than it are taken for one (a tower's lower block is then seen
clear), so the goal checks see one object of that class fewer.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onboard.perception.unknown import one_place as at_one_place

__all__ = ["Reading", "accounted", "clear", "one_place", "second_readings"]

Vec = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Reading:
    """One located detection: its class (as words), score, centre and width (metres)."""

    label: str
    score: float
    position: Vec
    size: float


def one_place(a: Reading, b: Reading, up: Vec) -> bool:
    """Whether ``a`` and ``b`` are seen at one place (:func:`unknown.one_place`)."""
    return at_one_place(a.position, a.size, b.position, b.size, up)


def second_readings(
    readings: Sequence[Reading], up: Vec, containers: Collection[str] = ()
) -> set[int]:
    """The indices of ``readings`` that are second readings of a place a stronger reading
    holds (of their class, or of another while theirs is accounted for). ``up``: the unit
    vector up in the readings' frame; ``containers``: labels never either side."""
    found = set()
    for i, weak in enumerate(readings):
        if weak.label in containers:
            continue
        holders = [
            other
            for other in readings
            if other.label not in containers
            and other.score > weak.score
            and one_place(weak, other, up)
        ]
        if any(
            holder.label == weak.label or accounted(i, holder, readings, up, containers)
            for holder in holders
        ):
            found.add(i)
    return found


def accounted(
    i: int,
    holder: Reading,
    readings: Sequence[Reading],
    up: Vec,
    containers: Collection[str] = (),
) -> bool:
    """Whether reading ``i``'s class is read more strongly, and clear, at a place other than
    ``holder``'s."""
    weak = readings[i]
    return any(
        j != i
        and other.label == weak.label
        and other.score > weak.score
        and not one_place(other, holder, up)
        and clear(j, readings, up, containers)
        for j, other in enumerate(readings)
    )


def clear(i: int, readings: Sequence[Reading], up: Vec, containers: Collection[str] = ()) -> bool:
    """Whether no stronger reading of another class is at reading ``i``'s place (in a tower
    whose boxes merge, a block read at the place of the one under it accounts for nothing)."""
    this = readings[i]
    return not any(
        other.label != this.label
        and other.label not in containers
        and other.score > this.score
        and one_place(this, other, up)
        for other in readings
    )
