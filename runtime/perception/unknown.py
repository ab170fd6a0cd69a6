"""What a look cannot tell: an object not seen is *unknown*, not absent, where the look gives
a reason it may be there unseen (issue 30, item 4). A view too dark or too blurred
(runtime/perception/view.py) leaves everything unknown; the reasons here are narrower:

- ``faint``: the detector scored a box of that class under its threshold but at least
  :data:`FAINT` (measured: ``python bench/faint_band.py``, docs/perception.md);
- ``stack``: two objects seen at one place (a stack facing the camera whose boxes merge, so a
  block shows as another or is placed where the one under it is), or an object resting
  raised with nothing seen under it: what is in the stack, and what rests on what, is unsure;
- ``inside``: a container the camera cannot see into: a box (what lies in it may be hidden
  by its rim or taken for something else) or a drawer not seen open;
- ``hand``: a box of that class whose depth puts it on the robot's own hand
  (runtime/perception/self_filter.py): the hand taken for an object, or one behind it.

The goal checks read these through :func:`why_unknown`: a relation that does not hold, of an
object not seen (or, for ``on`` and ``off``, of an object in an unsure stack), is unknown, so
the robot looks again and then says it could not verify: never success, never "not done".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

__all__ = [
    "FAINT",
    "UP",
    "Unknown",
    "UnknownKind",
    "behind_hand",
    "faint",
    "inside",
    "one_place",
    "stacks",
    "why_unknown",
]

#: a detection scored from this up to the detector's threshold says its class may be there
#: (with the shipped model, on the hard set about one such box in twelve is an object the
#: threshold misses; from 0.10 to 0.15 one in twenty-five: bench/faint_band.py)
FAINT = 0.15
#: two objects whose centres are closer than this many of the smaller one's widths across
#: and in height are seen at one place: one of them is not where it is said to be
SAME_PLACE = 0.6
#: an object whose centre is this many of its widths above the table rests raised
RAISED = 1.2

UnknownKind = Literal["faint", "stack", "inside", "hand"]


@dataclass(frozen=True)
class Unknown:
    """One thing a look cannot tell. ``names``: for ``faint`` and ``hand`` the class (as
    words), for ``stack`` the objects in it, for ``inside`` the container; ``why``: said to
    the robot."""

    kind: UnknownKind
    names: tuple[str, ...]
    why: str

    def to_record(self) -> dict[str, object]:
        return {"kind": self.kind, "names": list(self.names), "why": self.why}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Unknown:
        kind = str(record["kind"])
        if kind not in get_args(UnknownKind):
            raise ValueError(f"unknown kind {kind!r}")
        names = tuple(str(n) for n in record.get("names", []))
        return cls(kind, names, str(record["why"]))  # type: ignore[arg-type]


def faint(labels: Sequence[tuple[str, float]], seen: Sequence[str], conf: float) -> list[Unknown]:
    """The classes scored only faintly (``labels``: (class as words, score) under ``conf``),
    one each, of those no object ``seen`` has."""
    best: dict[str, float] = {}
    for label, score in labels:
        if label not in seen and FAINT <= score < conf:
            best[label] = max(score, best.get(label, 0.0))
    said = "may be there: seen only faintly (score {:.2f}, under the detector's {:.2f})"
    return [
        Unknown("faint", (label,), f"a {label} {said.format(score, conf)}")
        for label, score in sorted(best.items())
    ]


Vec = npt.NDArray[np.float64]
#: up in the base frame
UP = np.array([0.0, 0.0, 1.0])


def one_place(pa: Vec, sa: float, pb: Vec, sb: float, up: Vec = UP) -> bool:
    """Whether centres ``pa`` and ``pb`` (widths ``sa``, ``sb``) are seen at one place: closer
    than :data:`SAME_PLACE` of the smaller width across and along ``up``."""
    apart = pa - pb
    along = float(apart @ up)
    limit = SAME_PLACE * min(sa, sb)
    return abs(along) < limit and float(np.linalg.norm(apart - along * up)) < limit


def stacks(
    objects: Sequence[tuple[str, Vec, float]],
    table: float | None = None,
    supported: Collection[str] = (),
) -> list[Unknown]:
    """Unsure stacks among ``objects`` ((name, centre (x, y, z) with z up, width)): two at one
    place, or, with ``table`` (its height), one resting raised with nothing seen under it
    (``supported``: those seen resting on something, a container or a belt)."""
    found: list[Unknown] = []
    done: set[str] = set()
    for i, (a, pa, sa) in enumerate(objects):
        for b, pb, sb in objects[i + 1 :]:
            if one_place(pa, sa, pb, sb):
                column = _column(objects, pa)
                if not done.issuperset(column):
                    done.update(column)
                    found.append(Unknown("stack", tuple(column), (
                        f"the {a} and the {b} are seen at one place: a stack facing the camera "
                        "may hide a block or show one as another")))  # fmt: skip
    if table is None:
        return found
    for name, p, size in objects:
        if name in done or name in supported or float(p[2]) - table < RAISED * size:
            continue
        below = [o for o, q, _ in objects if o != name and np.hypot(*(q[:2] - p[:2])) < size
                 and float(q[2]) < float(p[2])]  # fmt: skip
        if not below:
            done.add(name)
            found.append(Unknown("stack", (name,), f"the {name} rests raised with nothing seen "
                                 "under it: something may be hidden under it"))  # fmt: skip
    return found


def _column(objects: Sequence[tuple[str, Vec, float]], at: Vec) -> list[str]:
    """The objects standing over one spot (within a width across)."""
    return sorted(n for n, p, s in objects if np.hypot(*(p[:2] - at[:2])) < s)


def inside(container: str, closed: bool = False) -> Unknown:
    """A container whose inside the camera cannot see all of."""
    why = (f"the {container} is closed: what is in it is not seen" if closed
           else f"the camera cannot tell all of what is in the {container}")  # fmt: skip
    return Unknown("inside", (container,), why)


def behind_hand(labels: Sequence[str], seen: Sequence[str]) -> list[Unknown]:
    """The classes (as words) of boxes on the robot's hand, one each, of those no object
    ``seen`` has."""
    return [
        Unknown(
            "hand",
            (label,),
            f"a {label} may be behind the robot's hand: a box of one "
            "is seen there, and the depth puts it on the hand",
        )
        for label in sorted(set(labels) - set(seen))
    ]


def why_unknown(
    view: str | None,
    unknowns: Sequence[Unknown],
    names: Sequence[str],
    seen: Sequence[str],
    relation: str,
) -> str | None:
    """Why a relation that does not hold is unknown, or None (it does not hold, as seen).
    ``names``: the objects it relates ("red block", "red block 2"); ``seen``: those of them
    seen; ``relation``: on, in, off, held or given."""
    if view is not None:
        return f"the view is {view}"
    missing = [n for n in names if n not in seen]
    kinds = {n.rstrip(" 0123456789") for n in missing}
    for u in unknowns:
        if u.kind in ("faint", "hand") and set(u.names) & kinds:
            return u.why
    for u in unknowns:
        if missing and u.kind in ("inside", "stack"):
            return f"the {missing[0]} is not seen, and {u.why}"
        if u.kind == "stack" and relation in ("on", "off") and set(u.names) & set(names):
            return u.why
    return None
