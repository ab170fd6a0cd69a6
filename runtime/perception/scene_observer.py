"""What the camera sees, as the prompts need it and as the checks need it.

Detections (label, score, box) + depth aligned to color + the hand-eye transform become a
:class:`SceneState`: each object's position in the robot base frame, a size estimate, and its
spatial relations to the others (on, under, left of, right of, near). ``SceneState.text()`` is
the prompt's line per object::

    a red block at (0.42, -0.10, 0.03) m, under a yellow block

Left and right are as the camera sees them (the image a VLM planner reasons about), or with
``sides = "base"`` the robot's own (base +y is left); on and under follow gravity (base-frame
z up; without a hand-eye, the camera's -y is taken as up). Positions of objects that others
hide in part are less sure: the centre is estimated from the part that shows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CameraError
from onboard.drivers.camera.base import Frame
from onboard.perception.pose import Box, HandEye, Located, locate
from onboard.perception.readings import Reading, second_readings
from onboard.perception.self_filter import Hand, HandZone
from onboard.perception.unknown import UP, Unknown, behind_hand, faint, inside, stacks
from onboard.perception.view import view_problem

if TYPE_CHECKING:
    from onboard.perception.detector import Detection

__all__ = [
    "CONTAINERS",
    "RELATIONS",
    "Relation",
    "RelationKind",
    "SceneObserver",
    "SceneState",
    "SeenObject",
    "relate",
]

RelationKind = Literal["on", "under", "left of", "right of", "near"]
RELATIONS: tuple[str, ...] = get_args(RelationKind)
Vector = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Relation:
    kind: RelationKind
    other: str  # the other object's name


@dataclass(frozen=True, eq=False)
class SeenObject:
    """One located object. ``position`` is in the base frame (the camera's without hand-eye)."""

    name: str  # unique in the scene: the label, or "label 2" when a label repeats
    label: str
    score: float
    box: Box
    position: Vector
    camera: Vector  # the same point in the camera frame
    size: float  # metres: the box's width at the object's depth
    relations: tuple[Relation, ...] = ()

    def related(self, kind: RelationKind) -> list[str]:
        return [r.other for r in self.relations if r.kind == kind]

    def to_record(self) -> dict[str, object]:
        """Everything the loop reads of it, exactly (a replay plays the look back from it)."""
        return {
            "name": self.name,
            "label": self.label,
            "score": float(self.score),
            "box": [float(v) for v in self.box],
            "position": [float(v) for v in self.position],
            "camera": [float(v) for v in self.camera],
            "size": float(self.size),
            "relations": [[r.kind, r.other] for r in self.relations],
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SeenObject:
        """The object :meth:`to_record` wrote (a recording before format 3 has no camera
        point: the base-frame one stands in)."""
        x1, y1, x2, y2 = (float(v) for v in record["box"])
        position = np.array([float(v) for v in record["position"]], dtype=np.float64)
        camera = record.get("camera")
        return cls(
            name=str(record["name"]),
            label=str(record["label"]),
            score=float(record["score"]),
            box=(x1, y1, x2, y2),
            position=position,
            camera=position if camera is None else np.array(camera, dtype=np.float64),
            size=float(record["size"]),
            relations=tuple(Relation(kind, str(other)) for kind, other in record["relations"]),
        )


@dataclass(frozen=True)
class SceneState:
    """The structured state for checks, and :meth:`text` for the prompts."""

    objects: tuple[SeenObject, ...]
    unlocated: tuple[str, ...] = ()  # labels seen without valid depth
    frame: Literal["base", "camera"] = "base"
    #: why the frame cannot be trusted ("too dark (...)", runtime/perception/view.py), or
    #: None: what such a view does not show is unknown, not absent
    view: str | None = None
    #: what else the look cannot tell (runtime/perception/unknown.py): an object not seen
    #: that one of these may hide is unknown, not absent
    unknown: tuple[Unknown, ...] = ()

    def get(self, name: str) -> SeenObject:
        for obj in self.objects:
            if obj.name == name:
                return obj
        raise KeyError(f"no object named {name!r}; seen: {[o.name for o in self.objects]}")

    def named(self, label: str) -> list[SeenObject]:
        return [obj for obj in self.objects if obj.label == label]

    def holds(self, subject: str, kind: RelationKind, other: str) -> bool:
        """Whether ``subject`` is ``kind`` ``other`` (names, or labels when unique)."""
        return any(
            r.kind == kind and other in (r.other, self.get(r.other).label)
            for obj in self.objects
            if subject in (obj.name, obj.label)
            for r in obj.relations
        )

    def text(self) -> str:
        """One line per object, for the prompt, by name: the detector's order (by score)
        changes with a pixel of noise, and a prompt should not."""
        if self.view is not None:
            unsure = f"The view is {self.view}: what is not seen may be there."
            return unsure if not self.objects else f"{unsure}\n{self._lines()}"
        if not self.objects and not self.unlocated and not self.unknown:
            return "No objects are seen."
        return self._lines()

    def _lines(self) -> str:
        counts = Counter(obj.label for obj in self.objects)
        lines = [self._line(obj, counts) for obj in sorted(self.objects, key=lambda o: o.name)]
        lines += [
            f"{_article(label)} {label} (position unknown: no depth)" for label in self.unlocated
        ]
        lines += [f"Not sure: {u.why}." for u in self.unknown]
        return "\n".join(lines)

    def _line(self, obj: SeenObject, counts: Counter[str]) -> str:
        x, y, z = (float(v) for v in obj.position)
        head = f"{self._ref(obj, counts)} at ({x:.2f}, {y:.2f}, {z:.2f}) m"
        said = [f"{r.kind} {self._ref(self.get(r.other), counts)}" for r in _spoken(obj)]
        return ", ".join([head, *said])

    @staticmethod
    def _ref(obj: SeenObject, counts: Counter[str]) -> str:
        return obj.name if counts[obj.label] > 1 else f"{_article(obj.label)} {obj.label}"

    def to_record(self) -> dict[str, object]:
        return {
            "frame": self.frame,
            "objects": [obj.to_record() for obj in self.objects],
            "unlocated": list(self.unlocated),
            **({"view": self.view} if self.view is not None else {}),
            **({"unknown": [u.to_record() for u in self.unknown]} if self.unknown else {}),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SceneState:
        frame = record.get("frame", "base")
        return cls(
            objects=tuple(SeenObject.from_record(o) for o in record.get("objects", [])),
            unlocated=tuple(str(x) for x in record.get("unlocated", [])),
            frame="camera" if frame == "camera" else "base",
            view=None if record.get("view") is None else str(record["view"]),
            unknown=tuple(Unknown.from_record(u) for u in record.get("unknown", [])),
        )


def _article(label: str) -> str:
    return "an" if label[:1].lower() in "aeiou" else "a"


def _spoken(obj: SeenObject) -> list[Relation]:
    """The relations the text states: stacking, then side or nearness for near objects only."""
    stacked = [r for r in obj.relations if r.kind in ("on", "under")]
    near = {r.other for r in obj.relations if r.kind == "near"}
    sides = [r for r in obj.relations if r.kind in ("left of", "right of") and r.other in near]
    sided = {r.other for r in sides}
    plain = [r for r in obj.relations if r.kind == "near" and r.other not in sided]
    return stacked + sides + plain


class SceneObserver:
    """Turns detections and a frame into a :class:`SceneState`.

    ``near``: the largest gap (m) between two objects' surfaces that counts as near;
    ``min_score``: detections below it are ignored; ``centre``: the fraction of each box whose
    median depth places it; ``sides``: left and right as the camera sees them, or as the robot
    does (base frame, +y left; needs the hand-eye); ``table``: the table's height in the base
    frame, which tells an object resting raised with nothing seen under it (an unsure stack);
    ``zone``: the robot's hand around its tool axis (runtime/perception/self_filter.py).
    Positions are the visible surface at the box centre pushed back by half the object's width
    along the viewing ray: an estimate of the object's centre.
    """

    def __init__(
        self,
        hand_eye: HandEye | None = None,
        near: float = 0.05,
        min_score: float = 0.0,
        centre: float = 0.5,
        sides: Literal["camera", "base"] = "camera",
        table: float | None = None,
        zone: HandZone | None = None,
    ) -> None:
        if sides == "base" and hand_eye is None:
            raise ValueError('sides = "base" needs the hand-eye transform')
        self.hand_eye = hand_eye
        self.sides = sides
        self.near = near
        self.min_score = min_score
        self.centre = centre
        self.table = table
        self.zone = zone if zone is not None else HandZone()

    def observe(
        self,
        detections: Iterable[Detection],
        frame: Frame,
        faint: Sequence[Detection] = (),
        threshold: float = 0.25,
        hand: Hand | None = None,
    ) -> SceneState:
        """Locate each detection; labels read as words ("red_block" becomes "red block").
        ``faint``: boxes the detector scored under its ``threshold`` (unknowns, never
        objects). ``hand``: where the robot's hand is (base frame; needs the hand-eye): a
        box whose depth puts it on the hand (``zone``) is unknown, never an object. A second
        reading of a place a stronger one holds is dropped (runtime/perception/readings.py)."""
        kept = [d for d in detections if d.score >= self.min_score]
        located: list[tuple[Detection, Located]] = []
        unlocated: list[str] = []
        on_hand: list[str] = []
        for det in kept:
            try:
                seen = locate(det.box, frame.depth, frame.intrinsics, self.centre)
            except CameraError:
                unlocated.append(_words(det.label))
                continue
            if self.on_hand(seen, hand):
                on_hand.append(_words(det.label))
                continue
            located.append((det, seen))
        based = self.hand_eye is not None
        up = UP if based else np.array([0.0, -1.0, 0.0])
        objects = [self._object(_words(d.label), d, seen) for d, seen in located]
        readings = [Reading(o.label, o.score, o.position, o.size) for o in objects]
        twice = second_readings(readings, up, CONTAINERS)
        objects = [o for i, o in enumerate(objects) if i not in twice]
        names = _names([o.label for o in objects])
        objects = [replace(o, name=name) for o, name in zip(objects, names, strict=True)]
        frame_name: Literal["base", "camera"] = "base" if based else "camera"
        related = relate(objects, up, self.near, self.sides)
        unknown = self._unknown(related, faint, threshold, on_hand) if based else ()
        view = view_problem(frame.color)
        return SceneState(related, tuple(unlocated), frame_name, view, tuple(unknown))

    def on_hand(self, seen: Located, hand: Hand | None) -> bool:
        """Whether the surface the box's depth found lies on the robot's hand."""
        if hand is None or self.hand_eye is None:
            return False
        return self.zone.holds(hand, self.hand_eye.apply(seen.point))

    def _unknown(
        self,
        objects: Sequence[SeenObject],
        dim: Sequence[Detection],
        threshold: float,
        on_hand: Sequence[str],
    ) -> list[Unknown]:
        """What this look cannot tell: faint classes, boxes on the hand, unsure stacks,
        containers (a drawer's opening is not measured here: what is in one is unknown)."""
        labels = [o.label for o in objects]
        found = faint([(_words(d.label), d.score) for d in dim], labels, threshold)
        found += behind_hand(on_hand, labels)
        loose = [(o.name, o.position, o.size) for o in objects if o.label not in CONTAINERS]
        found += stacks(loose, self.table, {o.name for o in objects if o.related("on")})
        found += [inside(o.name) for o in objects if o.label in CONTAINERS]
        return found

    def _object(self, name: str, det: Detection, seen: Located) -> SeenObject:
        width = seen.size[0]
        camera = seen.behind(width / 2)
        position = camera if self.hand_eye is None else self.hand_eye.apply(camera)
        box = (float(det.box[0]), float(det.box[1]), float(det.box[2]), float(det.box[3]))
        label = _words(det.label)
        return SeenObject(name, label, float(det.score), box, position, camera, width)


#: the classes (as words) of containers the camera cannot see all of the inside of
CONTAINERS = frozenset({"box", "drawer"})


def _words(label: str) -> str:
    return " ".join(label.replace("_", " ").split())


def _names(labels: Sequence[str]) -> list[str]:
    counts, seen = Counter(labels), Counter[str]()
    names = []
    for label in labels:
        seen[label] += 1
        names.append(label if counts[label] == 1 else f"{label} {seen[label]}")
    return names


def relate(
    objects: Sequence[SeenObject],
    up: npt.ArrayLike,
    near: float = 0.05,
    sides: Literal["camera", "base"] = "camera",
) -> tuple[SeenObject, ...]:
    """The objects with their relations to each other filled in. ``sides = "camera"``: left
    is the camera's -x; ``"base"``: left is the base frame's +y."""
    up_v = np.asarray(up, dtype=np.float64) / np.linalg.norm(up)
    out = []
    for a in objects:
        rels = [r for b in objects if b is not a for r in _pair(a, b, up_v, near, sides)]
        out.append(
            SeenObject(a.name, a.label, a.score, a.box, a.position, a.camera, a.size, tuple(rels))
        )
    return tuple(out)


def _pair(
    a: SeenObject, b: SeenObject, up: Vector, near: float, sides: Literal["camera", "base"]
) -> list[Relation]:
    """How ``a`` stands to ``b``: stacked (on/under), else side (left/right of) and/or near."""
    d = a.position - b.position
    rise = float(d @ up)
    across = float(np.linalg.norm(d - rise * up))
    scale = (a.size + b.size) / 2
    if _stacked(a, b, across, abs(rise), scale):
        return [Relation("on" if rise > 0 else "under", b.name)]
    rels: list[Relation] = []
    if sides == "camera":
        rightward = float(a.camera[0] - b.camera[0])
    else:
        rightward = float(b.position[1] - a.position[1])  # base +y is the robot's left
    if abs(rightward) > scale / 2:
        rels.append(Relation("left of" if rightward < 0 else "right of", b.name))
    if float(np.linalg.norm(d)) - scale < near:
        rels.append(Relation("near", b.name))
    return rels


def _stacked(a: SeenObject, b: SeenObject, across: float, rise: float, scale: float) -> bool:
    """One rests on the other: about one object-height apart vertically, not sideways, and
    their boxes overlap left to right in the image."""
    overlap = min(a.box[2], b.box[2]) - max(a.box[0], b.box[0])
    narrower = min(a.box[2] - a.box[0], b.box[2] - b.box[0])
    return (
        overlap > 0.3 * narrower
        and across < 0.6 * max(a.size, b.size)
        and 0.4 * scale < rise < 1.6 * scale
    )
