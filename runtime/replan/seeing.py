"""What the robot API sees: a fresh camera frame through the detector, in the base frame.

One :meth:`Eyes.look` reads a new frame, detects, locates (the scene observer with the
hand-eye transform), names the objects stably (:class:`~onboard.replan.tracking.Tracker`) and
measures what the motions need from the depth: each object's top, and where the drawers'
handles are. Only the camera, the detector and the hand-eye calibration are read, and where
the robot's hand is: a box the depth puts on the robot's hand is no object and no handle
(runtime/perception/self_filter.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CameraError
from onboard.drivers.camera.base import Camera, Frame
from onboard.perception.detector import Detection, Detector
from onboard.perception.latest import LATEST
from onboard.perception.pose import HandEye, centre_region, locate
from onboard.perception.scene_observer import SceneObserver
from onboard.perception.self_filter import Hand, HandZone
from onboard.perception.unknown import FAINT
from onboard.replan.tracking import Point, Seen, Tracker

__all__ = ["PARTS", "Eyes", "Look"]

#: labels of parts of other objects (a drawer's handle): located, never named as objects
PARTS = frozenset({"handle"})
#: metres a handle's grasp point lies behind the surface the camera sees
HANDLE_DEPTH = 0.01
#: the fraction of a box whose depth gives an object's top
TOP_REGION = 0.6


@dataclass(frozen=True)
class Look:
    time: float
    objects: dict[str, Seen]  # by name, in the detector's order
    on: dict[str, str]  # name -> the name of what it rests on
    handles: list[Point] = field(default_factory=list)  # grasp points of handles seen
    classes: frozenset[str] = frozenset()  # what the detector can see at all
    boxes: dict[str, tuple[float, float, float, float]] = field(default_factory=dict)
    frame: Frame | None = None
    #: boxes scored under the detector's threshold (``threshold``) but at least
    #: :data:`~onboard.perception.unknown.FAINT`: (class as words, score), never objects
    faint: tuple[tuple[str, float], ...] = ()
    threshold: float = 0.25
    #: classes (as words) of boxes the depth put on the robot's hand: never objects
    on_hand: tuple[str, ...] = ()

    def points(self, name: str) -> npt.NDArray[np.float64]:
        """The base-frame points (n, 3) the camera sees inside ``name``'s box."""
        if self.frame is None:
            return np.zeros((0, 3))
        rows, cols = centre_region(self.boxes[name], self.frame.depth.shape, 1.0)
        return self._cloud(rows, cols)

    def points_near(self, x: float, y: float, radius: float) -> npt.NDArray[np.float64]:
        """The base-frame points (n, 3) the camera sees within ``radius`` m of (x, y), at any
        height."""
        if self.frame is None:
            return np.zeros((0, 3))
        height, width = self.frame.depth.shape[:2]
        cloud = self._cloud(slice(0, height), slice(0, width))
        return cloud[np.hypot(cloud[:, 0] - x, cloud[:, 1] - y) <= radius]

    _cloud: Callable[[slice, slice], npt.NDArray[np.float64]] = field(
        default=lambda _r, _c: np.zeros((0, 3)), repr=False
    )


class Eyes:
    def __init__(
        self,
        camera: Camera,
        detector: Detector,
        hand_eye: HandEye,
        now: Callable[[], float],
        hand: Callable[[], Hand | None] = lambda: None,
        zone: HandZone | None = None,
    ) -> None:
        self.camera = camera
        self.detector = detector
        self.hand_eye = hand_eye
        self.now = now
        self.hand = hand
        self.observer = SceneObserver(hand_eye, sides="base", zone=zone)
        self.tracker = Tracker()
        self.last: Look | None = None

    def look(self) -> Look:
        frame = self.camera.read()
        time = self.now()
        detections, dim = self.detector.detect_faint(frame.color, FAINT)
        LATEST.offer(frame.color, detections)
        hand = self.hand()
        parts = [d for d in detections if d.label in PARTS]
        scene = self.observer.observe(
            [d for d in detections if d.label not in PARTS], frame, hand=hand
        )
        labels = [o.label for o in scene.objects]
        positions = [_point(o.position) for o in scene.objects]
        names = self.tracker.names(labels, positions, time)
        by_observer = dict(zip((o.name for o in scene.objects), names, strict=True))
        seen = [
            Seen(name, o.label, _point(o.position), o.size, self._top(o.box, frame), time)
            for name, o in zip(names, scene.objects, strict=True)
        ]
        self.tracker.update(seen)
        on = {
            by_observer[o.name]: by_observer[o.related("on")[0]]
            for o in scene.objects
            if o.related("on")
        }
        handles = [p for p in (self._handle(d, frame, hand) for d in parts) if p is not None]
        self.last = Look(
            time,
            {s.name: s for s in seen},
            on,
            handles,
            frozenset(self.detector.classes),
            {n: o.box for n, o in zip(names, scene.objects, strict=True)},
            frame,
            tuple((_words(d.label), d.score) for d in dim if d.label not in PARTS),
            self.detector.conf,
            tuple(u.names[0] for u in scene.unknown if u.kind == "hand"),
            lambda rows, cols: self._cloud(frame, rows, cols),
        )
        return self.last

    def _top(self, box: tuple[float, float, float, float], frame: Frame) -> float:
        """The height of the highest tenth of the box's middle: the object's top."""
        rows, cols = centre_region(box, frame.depth.shape, TOP_REGION)
        points = self._cloud(frame, rows, cols)
        return float(np.percentile(points[:, 2], 90)) if len(points) else 0.0

    def _cloud(self, frame: Frame, rows: slice, cols: slice) -> npt.NDArray[np.float64]:
        """The base-frame points of the pixels with depth in a part of the frame."""
        depth = frame.depth[rows, cols]
        v, u = np.mgrid[rows, cols]
        ok = np.isfinite(depth) & (depth > 0)
        i = frame.intrinsics
        z = depth[ok].astype(np.float64)
        camera = np.stack([(u[ok] - i.cx) / i.fx * z, (v[ok] - i.cy) / i.fy * z, z], axis=1)
        return self.hand_eye.apply(camera).reshape(-1, 3)

    def _handle(self, detection: Detection, frame: Frame, hand: Hand | None) -> Point | None:
        """Where to grasp a handle: just behind its surface as seen, base frame; None when
        its depth puts it on the robot's hand."""
        try:
            seen = locate(detection.box, frame.depth, frame.intrinsics)
        except CameraError:
            return None
        if self.observer.on_hand(seen, hand):
            return None
        return _point(self.hand_eye.apply(seen.behind(HANDLE_DEPTH)))


def _words(label: str) -> str:
    return " ".join(label.replace("_", " ").split())


def _point(v: npt.ArrayLike) -> Point:
    a = np.asarray(v, dtype=np.float64)
    return (float(a[0]), float(a[1]), float(a[2]))
