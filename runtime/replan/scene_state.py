"""What the robot perceives of the table, as structured state: the objects seen with their
positions and what each rests on or in, and what the gripper holds.

The Extra Bot's prompt carries a state before and after a program ran and the changes
between them; the text-only rows (SmolLM2, SayCan, ProgPrompt) carry one state instead of an
image; the Inner Bot's dry run builds its twin from one. A state comes from perception
(the detector's names and the depth camera's positions: runtime/replan/perceive.py), never
from the twin's truth.

The text is a contract: the stand-in VLM (runtime/testing/vlm_standin/) reads it as a model
would, so its form is fixed here and tested::

    Objects seen (centre x, y, z in metres, robot base frame):
    - red block at (0.420, 0.200, 0.020), on the table
    - yellow block at (0.420, 0.200, 0.060), on the red block
    - apple at (0.550, -0.300, 0.060), in the box
    The gripper holds: nothing.

then, when the look cannot tell everything (runtime/perception/unknown.py), one line each::

    Not sure: the camera cannot tell all of what is in the box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from onboard.perception.unknown import Unknown

__all__ = ["ObjectState", "SceneState", "changes", "changes_text"]

#: an object that moved less than this (m) between two states did not move
MOVED = 0.02


@dataclass(frozen=True)
class ObjectState:
    """One object seen: its name (as ``detect()`` gives it), its class, where its centre is,
    its size (x, y, z extents, m) when known, and what it rests on (``"table"``, another
    object's name) or is inside (a box, a plate, a drawer: ``inside``)."""

    name: str
    kind: str
    position: tuple[float, float, float]
    size: tuple[float, float, float] | None = None
    on: str | None = None
    inside: str | None = None

    def line(self) -> str:
        x, y, z = self.position
        where = f"- {self.name} at ({x:.3f}, {y:.3f}, {z:.3f})"
        if self.inside is not None:
            return f"{where}, in the {self.inside}"
        if self.on == "table":
            return f"{where}, on the table"
        if self.on is not None:
            return f"{where}, on the {self.on}"
        return where

    def to_record(self) -> dict[str, object]:
        return {
            "name": self.name,
            "kind": self.kind,
            "position": [round(v, 4) for v in self.position],
            "size": None if self.size is None else [round(v, 4) for v in self.size],
            "on": self.on,
            "inside": self.inside,
        }


@dataclass(frozen=True)
class SceneState:
    """The table as perceived at one moment."""

    objects: tuple[ObjectState, ...] = ()
    held: str | None = None
    extra: dict[str, object] = field(default_factory=dict)
    #: why the frame cannot be trusted ("too dark (...)": runtime/perception/view.py), or
    #: None; what such a view does not show is unknown, not absent
    view: str | None = None
    #: what else the look cannot tell (runtime/perception/unknown.py): an object not seen
    #: that one of these may hide is unknown, not absent
    unknown: tuple[Unknown, ...] = ()

    def named(self, name: str) -> ObjectState | None:
        return next((o for o in self.objects if o.name == name), None)

    def text(self) -> str:
        lines = ["Objects seen (centre x, y, z in metres, robot base frame):"]
        lines += [o.line() for o in self.objects] or ["- nothing"]
        lines.append(f"The gripper holds: {self.held or 'nothing'}.")
        if self.view is not None:
            lines.append(f"The view is {self.view}: what is not seen may be there.")
        lines += [f"Not sure: {u.why}." for u in self.unknown]
        return "\n".join(lines)

    def to_record(self) -> dict[str, object]:
        seen: dict[str, object] = {
            "objects": [o.to_record() for o in self.objects],
            "held": self.held,
        }
        if self.view is not None:
            seen["view"] = self.view
        if self.unknown:
            seen["unknown"] = [u.to_record() for u in self.unknown]
        return seen


def _rests(o: ObjectState) -> str:
    if o.inside is not None:
        return f"in the {o.inside}"
    if o.on == "table":
        return "on the table"
    return f"on the {o.on}" if o.on is not None else "somewhere"


def changes(before: SceneState, after: SceneState) -> list[str]:
    """What changed, one sentence each: objects that moved (and from what to what), that
    appeared or went out of sight, and what the gripper holds."""
    out: list[str] = []
    for old in before.objects:
        new = after.named(old.name)
        if new is None:
            out.append(f"the {old.name} is no longer seen (it was {_rests(old)})")
            continue
        moved = math.dist(old.position, new.position)
        if moved >= MOVED:
            out.append(f"the {old.name} moved {moved:.2f} m: from {_rests(old)} to {_rests(new)}")
        elif _rests(old) != _rests(new):
            out.append(f"the {old.name} is now {_rests(new)} (was {_rests(old)})")
    seen = {o.name for o in before.objects}
    out += [f"the {o.name} appeared, {_rests(o)}" for o in after.objects if o.name not in seen]
    if before.held != after.held:
        out.append(f"the gripper holds {after.held or 'nothing'} (held {before.held or 'nothing'})")
    return out


def changes_text(before: SceneState, after: SceneState) -> str:
    found = changes(before, after)
    return "\n".join(f"- {c}" for c in found) if found else "- nothing changed"
