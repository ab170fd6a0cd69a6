"""The dry run's twin: the workcell's fixtures, and the movable objects where they were seen.

The fixtures (the table, conveyors, a cabinet with its drawer, boxes, plates) come from the
workcell's scene file: the robot knows its workcell. Each movable object comes from the
perceived :class:`~onboard.replan.scene_state.SceneState`: the twin's object of its kind (a
"red block" is a red block of the kind "block") at the position seen, stacked on what it was
seen on; an object the camera did not see is not there (a closed drawer is empty).

This twin *is* the model of the perceived scene, so its own perception is its own state:
:class:`Sight` renders it (colour, depth, segmentation by link) and :class:`SightDetector`
boxes each body's pixels with the detector's class names, in place of the ONNX detector;
the hand-eye is the twin's exact camera pose. Everything after the boxes (positions from
depth, tops, names, handles) is the robot API's own code. This module, and the dry run that
watches this twin for collisions, are the robot's only readers of a twin's state, and read
only this one (tests/test_truth_access.py lists them with that reason).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from onboard.base.errors import StaleFrame
from onboard.config import RobotConfig
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.arm.safety import SafeArm
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.rotations import quat_from_euler
from onboard.drivers.twin.bodies import HANDLE_LINK, KIND_DEFAULTS
from onboard.drivers.twin.camera import split_segmentation
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.scene import KINDS, ObjectSpec, Scene, find_scene, load_scene
from onboard.grounding.embedder import Embedder
from onboard.perception.detector import Detection, Detector
from onboard.perception.pose import HandEye
from onboard.replan.api import RobotAPI
from onboard.replan.perceive import CONTAINERS
from onboard.replan.scene_state import ObjectState, SceneState
from onboard.replan.tracking import Seen

if TYPE_CHECKING:
    from onboard.drivers.twin.world import Twin

__all__ = ["FIXTURES", "DryTwin", "Sight", "SightDetector", "dry_twin", "twin_scene"]

#: kinds of the workcell's scene file that are fixtures; every other object is movable
FIXTURES = frozenset({"conveyor", "drawer", "box", "plate", "panel"})
#: the detector's classes (models/detector/classes.json): the dry run's own sight names these
CLASSES = ("red_block", "green_block", "blue_block", "yellow_block", "apple", "orange", "lemon",
           "banana", "plate", "box", "duck", "teddy", "drawer", "handle")  # fmt: skip
#: the block colours of the scene files (a "red block" seen is built red)
BLOCK_COLORS = {
    "red": (0.85, 0.1, 0.1, 1.0),
    "green": (0.1, 0.7, 0.2, 1.0),
    "blue": (0.1, 0.25, 0.85, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
}
#: metres from the bottom to the top of the kinds built at their default size (blocks are
#: cubes; fruit round; a lemon or a banana a capsule lying down); others: as seen
HEIGHTS = {"block": 0.04, "apple": 0.07, "orange": 0.07, "lemon": 0.0504, "banana": 0.036}
#: metres above its support an object is built, to drop into place as the twin settles
DROP = 0.003
#: seconds the objects settle once built
SETTLE = 0.3
#: metres of a plate's top above the table (drivers/twin/bodies.py)
PLATE_TOP = 0.012
#: m/s of the dry run's hand (the robot API's: 0.2): the solutions' dry runs end the same at
#: either speed (measured), in 30 to 40 % less time
SPEED = 0.4
#: pixels a body needs in a frame to be detected
MIN_PIXELS = 20
#: metres within which a container seen is the workcell's fixture of its kind
SAME_FIXTURE = 0.15


def movable_kind(label: str) -> tuple[str, tuple[float, float, float, float] | None] | None:
    """The twin's kind (and colour) of a detector label ("red block": a red "block"), or
    None for a label the twin has no kind for."""
    words = label.split()
    if len(words) == 2 and words[1] == "block" and words[0] in BLOCK_COLORS:
        return "block", BLOCK_COLORS[words[0]]
    if label in KINDS and label not in FIXTURES:
        return label, None
    return None


def twin_scene(state: SceneState, workcell: Scene) -> tuple[Scene, list[str]]:
    """The dry run's scene: ``workcell``'s fixtures and ``state``'s movable objects (named as
    seen); and what of ``state`` it leaves out, worded."""
    base = _base(workcell)
    fixtures = [o for o in workcell.objects if o.kind in FIXTURES]
    objects: list[ObjectSpec] = list(fixtures)
    left_out: list[str] = []
    tops: dict[str, float] = {}
    for seen in _bottom_up(state):
        if seen.name == state.held:
            left_out.append(f"the {seen.name} held at the start (the dry run starts empty-handed)")
            continue
        if seen.kind in CONTAINERS:
            if not _has_fixture(seen, fixtures, base):
                left_out.append(f"the {seen.name}, not a fixture of the workcell")
            continue
        kind = movable_kind(seen.kind)
        if kind is None:
            left_out.append(f"the {seen.name}: the twin has no {seen.kind}")
            continue
        height = HEIGHTS.get(kind[0], seen.size[2] if seen.size else 0.05)
        floor = _floor(seen, tops, workcell, base)
        tops[seen.name] = floor + height
        x, y, _ = base.apply(seen.position)
        z = floor + height / 2 + DROP
        objects.append(
            ObjectSpec(name=seen.name, kind=kind[0], color=kind[1], position=(x, y, z))  # type: ignore[arg-type]
        )
    return workcell.model_copy(update={"objects": objects}), left_out


def _base(scene: Scene) -> Transform:
    """The arm's base frame in the world (base-frame points to world points)."""
    return Transform(scene.arm.position, quat_from_euler(0.0, 0.0, math.radians(scene.arm.yaw)))


def _bottom_up(state: SceneState) -> list[ObjectState]:
    """The objects, each after the one it rests on."""
    done: list[ObjectState] = []
    names: set[str] = set()
    pending = list(state.objects)
    while pending:
        ready = [o for o in pending if o.on not in {p.name for p in pending} - {o.name}]
        ready = ready or pending[:1]  # a cycle (a perception error): break it anywhere
        for o in ready:
            pending.remove(o)
            done.append(o)
            names.add(o.name)
    return done


def _floor(seen: ObjectState, tops: dict[str, float], workcell: Scene, base: Transform) -> float:
    """The height (world z) of what ``seen`` rests on."""
    if seen.on in tops:
        return tops[seen.on]
    support = seen.inside or seen.on
    for spec in workcell.objects:
        if spec.kind == "conveyor" and support == spec.name:
            ez = (spec.extent or KIND_DEFAULTS["conveyor"].size)[2]  # type: ignore[index]
            z = spec.position[2] if len(spec.position) == 3 else ez / 2
            return z + ez / 2
    kind = support.split()[0] if support else ""
    if kind == "plate":
        return PLATE_TOP
    if kind in ("box", "drawer"):
        # a container's floor is not seen: the object's own bottom as seen
        height = seen.size[2] if seen.size else 0.04
        return max(base.apply(seen.position)[2] - height / 2, 0.0)
    return 0.0


def _has_fixture(seen: ObjectState, fixtures: list[ObjectSpec], base: Transform) -> bool:
    x, y, _ = base.apply(seen.position)
    return any(
        f.kind == seen.kind and math.dist((x, y), f.position[:2]) <= SAME_FIXTURE for f in fixtures
    )


class Sight:
    """The dry-run twin's camera: each read renders the twin as it is now (colour, depth,
    segmentation by link); implements :class:`~onboard.drivers.camera.base.Camera`."""

    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self._lock = threading.Lock()
        self._last: tuple[Frame, npt.NDArray[np.int32]] | None = None
        self._index = 0

    def connect(self) -> None:
        pass

    def close(self) -> None:
        pass

    def read(self) -> Frame:
        rgb, depth, seg = self.twin.render(links=True)
        with self._lock:
            self._index += 1
            frame = Frame(rgb, depth, self.twin.intrinsics(), time.monotonic(), self._index)
            self._last = (frame, seg)
        return frame

    def read_timeout(self, timeout: float) -> Frame:
        return self.read()

    def latest(self, max_age: float) -> Frame:
        if self._last is None:
            raise StaleFrame("dry-run sight: no frame yet; call read() first")
        return self._last[0]

    def intrinsics(self) -> Intrinsics:
        return self.twin.intrinsics()

    def segmentation_of(self, color: npt.NDArray[np.uint8]) -> npt.NDArray[np.int32]:
        """The segmentation of the frame whose colour image is ``color``."""
        last = self._last
        if last is None or last[0].color is not color:
            raise ValueError("dry-run sight: the image is not the last frame read")
        return last[1]


class SightDetector(Detector):
    """The detector of the dry-run twin: the box of each body's pixels in the frame, with
    the class its kind has (a drawer's handle, a link of its own, as "handle"). It replaces
    the ONNX model (never loaded: ``Detector.__init__`` is not called)."""

    def __init__(self, sight: Sight, labels: dict[int, str]) -> None:
        self.sight = sight
        self.labels = labels  # body -> class name
        self.classes = list(CLASSES)
        self.conf = 0.25  # its boxes all score 1.0

    def detect(self, image: npt.NDArray[np.uint8]) -> list[Detection]:
        body, link = split_segmentation(self.sight.segmentation_of(image))
        found = []
        for b, label in self.labels.items():
            mask = body == b
            if label == "drawer":
                handle = mask & (link == HANDLE_LINK)
                found += _boxed("handle", handle)
                mask &= link != HANDLE_LINK
            found += _boxed(label, mask)
        return found

    def detect_faint(
        self, image: npt.NDArray[np.uint8], floor: float
    ) -> tuple[list[Detection], list[Detection]]:
        return self.detect(image), []  # the twin's own segmentation is never faint

    __call__ = detect


def _boxed(label: str, mask: npt.NDArray[np.bool_]) -> list[Detection]:
    if int(mask.sum()) < MIN_PIXELS:
        return []
    rows, cols = np.nonzero(mask)
    box = (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))
    return [Detection(label, 1.0, box)]


def _class_of(kind: str, color: tuple[float, ...] | None) -> str | None:
    """The detector's class of a twin object built from a scene file."""
    if kind == "block":
        word = next((w for w, c in BLOCK_COLORS.items() if color == c), None)
        return f"{word}_block" if word else None
    return kind if kind in CLASSES else None


@dataclass
class DryTwin:
    twin: Twin
    api: RobotAPI
    #: the twin's bodies by the names the dry run gives them
    bodies: dict[int, str]


@cache
def _embedder(folder: Path) -> Embedder:
    return Embedder(folder)


@cache
def _workcell(fixtures: str) -> Scene:
    return load_scene(find_scene(fixtures))


@contextmanager
def dry_twin(
    robot: RobotConfig, state: SceneState, fixtures: str
) -> Iterator[tuple[DryTwin, list[str]]]:
    """A fresh twin of ``state`` in ``fixtures``' workcell, with the robot API over it (the
    arm at home); and what of ``state`` the twin leaves out."""
    try:
        from onboard.drivers.arm.twin_arm import SimArm
        from onboard.drivers.twin.world import Twin
    except ImportError as exc:
        raise ImportError(
            f"the dry run needs the physics twin: install the sim extra, pip install "
            f"'onboard[sim]' ({exc})"
        ) from exc

    workcell = _workcell(fixtures)
    scene, left_out = twin_scene(state, workcell)
    with Twin(scene) as twin:
        twin.settle(SETTLE)
        labels = {}
        bodies = {}
        for spec in scene.objects:
            body = twin.body_of(spec.name)
            bodies[body] = spec.name
            label = _class_of(spec.kind, spec.color)
            if label is not None:
                labels[body] = label
        sight = Sight(twin)
        # the dry run's arm moves faster than the robot's (fewer IK steps); no program asks
        # for a speed, so SafeArm's speed limit is no check a dry run could make
        safety = robot.safety.model_copy(update={"max_speed": max(robot.safety.max_speed, SPEED)})
        arm = SafeArm(SimArm(twin, SimArmConfig()), safety, forward_kinematics=twin.forward)
        arm.connect()
        camera_in_base = _base(workcell).inverse().matrix() @ twin.camera_pose()
        api = RobotAPI(
            arm,
            sight,
            SightDetector(sight, labels),
            HandEye(camera_in_base),
            _embedder(robot.embedder_dir),
            twin.step,
            robot.code.handover,
            now=lambda: twin.time,
            speed=SPEED,
        )
        # the robot remembers what it saw: the twin's objects keep the names seen
        api.eyes.tracker.update([_track(o) for o in state.objects if o.name != state.held])
        try:
            api.home()
            yield DryTwin(twin, api, bodies), left_out
        finally:
            arm.close()


def _track(o: ObjectState) -> Seen:
    top = o.position[2] + (o.size[2] / 2 if o.size else 0.0)
    return Seen(o.name, o.kind, o.position, o.size[0] if o.size else 0.05, top, 0.0)
