"""The detector's data: random tabletop scenes rendered by the twin, labelled from its masks.

Each scene is built as an :class:`onboard.drivers.twin.Scene` with random objects (kind, size,
colour, yaw), then rendered several times, every time with the objects placed anew on the table
(some stacked, some fruit on the plate), the arm in another pose and the camera moved
around the scene file's viewpoint. Boxes are the tight boxes of each object's pixels in the
segmentation image. An object whose visible part is tiny (under MIN_PIXELS, or under
MIN_VISIBLE of the box its 3-D extent projects to: hidden or cut off by the image border)
is not a label but an *ignored* box: training asks nothing of the cells on it, and the mAP
neither rewards nor punishes a detection on it (VOC's "difficult").

The splits use disjoint seeds. Train and validation images are letterboxed to the network
input with ``onboard.perception.detector.letterbox`` (the runtime's own preprocessing); the
test split keeps the raw renders, so its figures go through the whole runtime path. Rendering
takes a few minutes; the result is cached under ``~/.cache/onboard/``, keyed by this file and the
split sizes (``train.py --no-cache`` renders again, e.g. after the twin changed).

No torch here: numpy, the twin (pybullet) and onboard.perception.detector only.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from onboard.drivers.twin import SCENES, Scene, Twin, load_scene
from onboard.drivers.twin.scene import CameraSpec, ObjectSpec
from onboard.perception.detector import Box, letterbox

CLASSES = (
    "red_block",
    "green_block",
    "blue_block",
    "yellow_block",
    "apple",
    "orange",
    "lemon",
    "banana",
    "plate",
    "box",
    "duck",
    "teddy",
    "drawer",
)
BLOCK_COLORS = {  # as the twin's scene files colour them
    "red_block": (0.85, 0.1, 0.1),
    "green_block": (0.1, 0.7, 0.2),
    "blue_block": (0.1, 0.25, 0.85),
    "yellow_block": (0.95, 0.85, 0.1),
}
DEFAULT_COLORS = {  # drivers/twin/bodies.py KIND_DEFAULTS
    "apple": (0.8, 0.05, 0.05),
    "orange": (1.0, 0.5, 0.0),
    "lemon": (1.0, 0.92, 0.2),
    "banana": (0.95, 0.8, 0.15),
    "plate": (0.95, 0.95, 0.95),
    "box": (0.55, 0.4, 0.25),
    "duck": (1.0, 0.85, 0.1),
    "teddy": (0.6, 0.4, 0.25),
    "drawer": (0.85, 0.85, 0.8),
    "bar": (0.1, 0.7, 0.1),
    "conveyor": (0.2, 0.2, 0.22),
}
SIZES = {  # metres: default size (or extent) of each kind
    "block": 0.04,
    "apple": 0.07,
    "orange": 0.07,
    "lemon": 0.07,
    "banana": 0.18,
    "plate": 0.2,
    "box": 0.26,
    "duck": 0.08,
    "teddy": 0.1,
    "bar": 0.1,
}
BIG = ("plate", "box", "drawer")  # at most one of each per scene
DISTRACTORS = ("bar", "conveyor")  # twin kinds that are not classes
TABLE_COLORS = ((0.72, 0.6, 0.45), (0.55, 0.42, 0.3), (0.8, 0.8, 0.78), (0.4, 0.4, 0.42))
VIEWS = ("tabletop.toml", "fruit.toml")  # scene files whose cameras are jittered
MIN_PIXELS = 24  # visible pixels, at the network's input scale
MIN_SIDE = 4.0  # input pixels
MIN_VISIBLE = 0.2  # visible box area / projected box area
RENDERS_PER_SCENE = 8
LARGE_FRACTION = 0.2  # renders at 640x480 instead of the scene's 320x240

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "onboard"
SPLITS = {"train": (3000, 1), "val": (300, 2), "test": (400, 3)}  # images, seed

ImageArray = npt.NDArray[np.uint8]
Truth = list[tuple[str, Box]]


@dataclass
class Sample:
    """One render: the RGB image, its labelled boxes and its ignored boxes (image pixels)."""

    image: ImageArray
    truth: Truth
    ignored: Truth


@dataclass
class Split:
    """Letterboxed images (n, h, w, 3) uint8 with boxes in input pixels."""

    images: ImageArray
    boxes: list[npt.NDArray[np.float32]]  # each (k, 4) xyxy
    labels: list[npt.NDArray[np.int64]]  # each (k,): class index c, or -1 - c if ignored

    def truths(self) -> list[Truth]:
        return [
            [(CLASSES[c], _box(b)) for b, c in zip(bs, ls, strict=True) if c >= 0]
            for bs, ls in zip(self.boxes, self.labels, strict=True)
        ]

    def ignored(self) -> list[Truth]:
        return [
            [(CLASSES[-1 - c], _box(b)) for b, c in zip(bs, ls, strict=True) if c < 0]
            for bs, ls in zip(self.boxes, self.labels, strict=True)
        ]


@dataclass
class Data:
    train: Split
    val: Split
    test_images: list[ImageArray]  # raw renders
    test_truths: list[Truth]
    test_ignored: list[Truth]
    seconds: float  # rendering time (0 when read from the cache)


# -- scenes ---------------------------------------------------------------------------------


def random_scene(rng: np.random.Generator, base: Scene) -> tuple[Scene, dict[str, str]]:
    """A scene with random objects around ``base``'s camera; returns it and name -> class."""
    kinds: list[str] = []
    for big in BIG:
        if rng.random() < 0.4:
            kinds.append(big)
    small = [c for c in CLASSES if c not in BIG]
    kinds += list(rng.choice(small, size=int(rng.integers(3, 9)), replace=True))
    if rng.random() < 0.25:
        kinds.append(str(rng.choice(DISTRACTORS)))
    objects, classes = [], {}
    for k, label in enumerate(kinds):
        name = f"{label}-{k}"
        objects.append(_object(rng, name, str(label)))
        if label in CLASSES:
            classes[name] = str(label)
    table_color = np.clip(
        np.array(TABLE_COLORS[rng.integers(len(TABLE_COLORS))]) + rng.normal(0, 0.04, 3), 0, 1
    )
    table = base.table.model_copy(update={"color": (*map(float, table_color), 1.0)})
    scene = base.model_copy(update={"objects": objects, "table": table})
    return scene, classes


def _object(rng: np.random.Generator, name: str, label: str) -> ObjectSpec:
    kind = "block" if label.endswith("_block") else label
    base = BLOCK_COLORS.get(label) or DEFAULT_COLORS[kind]
    color = np.clip(np.array(base) + rng.uniform(-0.08, 0.08, 3), 0, 1)
    spec: dict[str, object] = {
        "name": name,
        "kind": kind,
        "position": (5.0 + len(name), 5.0),  # off the table until placed
        "color": (*map(float, color), 1.0),
        "yaw": float(rng.uniform(-180, 180)),
    }
    if kind == "drawer":
        spec["extent"] = tuple(
            float(v) for v in rng.uniform([0.22, 0.22, 0.15], [0.32, 0.32, 0.22])
        )
        spec["opening"] = float(rng.uniform(0.0, 0.15))
    elif kind == "conveyor":
        spec["extent"] = (float(rng.uniform(0.5, 0.8)), 0.2, 0.05)
    else:
        spec["size"] = float(SIZES[kind] * rng.uniform(0.85, 1.2))
    return ObjectSpec.model_validate(spec)


def _jitter_camera(rng: np.random.Generator, camera: CameraSpec, large: bool) -> CameraSpec:
    position = np.array(camera.position) + rng.uniform([-0.15, -0.25, -0.15], [0.15, 0.25, 0.15])
    target = np.array(camera.target) + rng.uniform([-0.08, -0.1, -0.03], [0.08, 0.1, 0.05])
    update: dict[str, object] = {
        "position": tuple(map(float, position)),
        "target": tuple(map(float, target)),
        "fov": float(rng.uniform(40.0, 52.0)),
    }
    if large:
        update["width"], update["height"] = 640, 480
    return camera.model_copy(update=update)


def _footprint(spec: ObjectSpec) -> float:
    """Radius (metres) of the circle an object covers on the table."""
    if spec.extent is not None:
        return 0.5 * math.hypot(spec.extent[0] + (spec.opening or 0.0), spec.extent[1])
    size = spec.size or 0.05
    return {"block": 0.72, "box": 0.72, "banana": 0.5, "bar": 0.5}.get(spec.kind, 0.55) * size


def place(twin: Twin, rng: np.random.Generator, rest_z: dict[str, float]) -> None:
    """Put every object somewhere new on the table, without overlaps; some blocks stacked,
    some fruit on the plate."""
    specs = {s.name: s for s in twin.scene.objects}
    placed: list[tuple[float, float, float]] = []  # x, y, radius
    order = sorted(specs, key=lambda n: -_footprint(specs[n]))  # big things first
    tops: list[tuple[str, float, float, float]] = []  # name, x, y, top z (stack targets)
    for name in order:
        spec = specs[name]
        yaw = float(rng.uniform(-math.pi, math.pi))
        quat = _yaw_quat(yaw if spec.kind not in ("drawer", "conveyor") else yaw / 4)
        stack = [t for t in tops if spec.kind in ("block", "apple", "orange", "lemon")]
        if stack and rng.random() < 0.2:
            under, x, y, top = stack[int(rng.integers(len(stack)))]
            if specs[under].kind == "plate" or spec.kind == "block":
                twin.set_object_pose(name, (x, y, top + rest_z[name] + 0.001), quat)
                tops.remove((under, x, y, top))
                continue
        spot = _free_spot(rng, placed, _footprint(spec))
        if spot is None:
            continue  # stays off the table, out of view
        x, y = spot
        placed.append((x, y, _footprint(spec)))
        twin.set_object_pose(name, (x, y, rest_z[name]), quat)
        if spec.kind in ("block", "plate"):
            top = 0.012 if spec.kind == "plate" else 2 * rest_z[name]
            tops.append((name, x, y, top))


def _free_spot(
    rng: np.random.Generator, placed: list[tuple[float, float, float]], radius: float
) -> tuple[float, float] | None:
    for _ in range(40):
        x, y = float(rng.uniform(0.22, 0.8)), float(rng.uniform(-0.42, 0.42))
        if math.hypot(x, y) < 0.2 + radius:
            continue  # the arm's base
        if all(math.hypot(x - px, y - py) > radius + pr + 0.01 for px, py, pr in placed):
            return x, y
    return None


def _yaw_quat(yaw: float) -> tuple[float, float, float, float]:
    return (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))


# -- labels ---------------------------------------------------------------------------------


def label(
    twin: Twin, seg: npt.NDArray[np.int32], classes: dict[str, str], scale: float
) -> tuple[Truth, Truth]:
    """Tight boxes from the mask of each class object; tiny or mostly hidden ones ignored.

    ``scale``: network input pixels per image pixel (for the size thresholds).
    """
    truth: Truth = []
    ignored: Truth = []
    height, width = seg.shape
    for name, cls in classes.items():
        ys, xs = np.nonzero(seg == twin.segmentation_id(name))
        if xs.size == 0:
            continue
        box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
        area = (box[2] - box[0]) * (box[3] - box[1])
        projected = _projected_area(twin, name, width, height)
        small = (
            xs.size * scale**2 < MIN_PIXELS
            or min(box[2] - box[0], box[3] - box[1]) * scale < MIN_SIDE
        )
        hidden = projected > 0 and area / projected < MIN_VISIBLE
        (ignored if small or hidden else truth).append((cls, box))
    return truth, ignored


def _projected_area(twin: Twin, name: str, width: int, height: int) -> float:
    """Area of the image box of the object's 3-D extent (its whole self, seen or not)."""
    spec = next(s for s in twin.scene.objects if s.name == name)
    half = _half_extent(spec)
    position, quat = twin.object_pose(name)
    yaw = 2 * math.atan2(quat[2], quat[3])
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half
    rot = np.array(
        [[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]]
    )
    world = corners @ rot.T + np.array(position)
    to_camera = np.linalg.inv(twin.camera_pose())
    cam = world @ to_camera[:3, :3].T + to_camera[:3, 3]
    if (cam[:, 2] <= 0.01).any():
        return 0.0
    k = twin.intrinsics()
    u = k.fx * cam[:, 0] / cam[:, 2] + k.cx + 0.5
    v = k.fy * cam[:, 1] / cam[:, 2] + k.cy + 0.5
    return float((u.max() - u.min()) * (v.max() - v.min()))


def _half_extent(spec: ObjectSpec) -> npt.NDArray[np.float64]:
    if spec.extent is not None:
        return np.array(spec.extent) / 2
    s = spec.size or 0.05
    if spec.kind in ("banana", "bar"):
        return np.array([s / 2, 0.02, 0.02])
    if spec.kind == "plate":
        return np.array([s / 2, s / 2, 0.006])
    if spec.kind == "box":
        return np.array([s / 2, s / 2, 0.05 * s / 0.3])
    if spec.kind == "lemon":
        return np.array([s / 2, 0.36 * s, 0.36 * s])
    return np.array([s / 2, s / 2, s / 2])


# -- rendering the splits -------------------------------------------------------------------


def render(count: int, seed: int) -> list[Sample]:
    """``count`` random renders from the seed."""
    rng = np.random.default_rng(seed)
    views = [load_scene(SCENES / view) for view in VIEWS]
    samples: list[Sample] = []
    while len(samples) < count:
        base = views[int(rng.integers(len(views)))]
        scene, classes = random_scene(rng, base)
        with Twin(scene) as twin:
            rest_z = {n: twin.object_pose(n)[0][2] for n in twin.object_names()}
            home = np.array(scene.arm.home)
            for _ in range(min(RENDERS_PER_SCENE, count - len(samples))):
                place(twin, rng, rest_z)
                twin.reset_joints(tuple(map(float, home + rng.normal(0, 0.3, 7))))
                large = rng.random() < LARGE_FRACTION
                camera = _jitter_camera(rng, base.camera, large)
                twin.scene = twin.scene.model_copy(update={"camera": camera})
                rgb, _, seg = twin.render()
                truth, ignored = label(twin, seg, classes, 320 / camera.width)
                samples.append(Sample(rgb, truth, ignored))
    return samples


def to_split(samples: Sequence[Sample], size: int) -> Split:
    images, boxes, labels = [], [], []
    for sample in samples:
        padded, box = letterbox(sample.image, (size, size))
        entries = [(CLASSES.index(c), b) for c, b in sample.truth] + [
            (-1, b) for _, b in sample.ignored
        ]
        images.append(padded)
        boxes.append(
            box.to_input([b for _, b in entries]) if entries else np.zeros((0, 4), np.float32)
        )
        labels.append(np.array([c for c, _ in entries], dtype=np.int64))
    return Split(np.stack(images), boxes, labels)


def load(size: int = 320, cache: bool = True, scale: float = 1.0) -> Data:
    """All three splits, rendered or read from the cache."""
    counts = {name: (max(1, round(n * scale)), seed) for name, (n, seed) in SPLITS.items()}
    key = hashlib.sha256(
        json.dumps([counts, size, CLASSES, _source_digest()]).encode()
    ).hexdigest()[:16]
    path = CACHE / f"detector-data-{key}.npz"
    if cache and path.exists():
        return _read(path)
    started = time.perf_counter()
    rendered = {name: render(n, seed) for name, (n, seed) in counts.items()}
    data = Data(
        train=to_split(rendered["train"], size),
        val=to_split(rendered["val"], size),
        test_images=[s.image for s in rendered["test"]],
        test_truths=[s.truth for s in rendered["test"]],
        test_ignored=[s.ignored for s in rendered["test"]],
        seconds=time.perf_counter() - started,
    )
    if cache:
        _write(path, data)
    return data


def _source_digest() -> str:
    """This file: a change to it renders the data again (``--no-cache`` after twin changes)."""
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def _box(row: npt.ArrayLike) -> Box:
    a = np.asarray(row, dtype=np.float64)
    return (float(a[0]), float(a[1]), float(a[2]), float(a[3]))


def _write(path: Path, data: Data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, npt.NDArray[object]] = {}  # type: ignore[type-var]
    for name in ("train", "val"):
        split: Split = getattr(data, name)
        arrays[f"{name}_images"] = split.images
        arrays[f"{name}_boxes"] = np.array(split.boxes, dtype=object)
        arrays[f"{name}_labels"] = np.array(split.labels, dtype=object)
    arrays["test_images"] = np.array(data.test_images, dtype=object)
    meta = {"truths": data.test_truths, "ignored": data.test_ignored, "seconds": data.seconds}
    arrays["test_meta"] = np.array(json.dumps(meta))
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, **arrays)
    tmp.replace(path)


def _read(path: Path) -> Data:
    z = np.load(path, allow_pickle=True)
    meta = json.loads(str(z["test_meta"]))

    def split(name: str) -> Split:
        return Split(z[f"{name}_images"], list(z[f"{name}_boxes"]), list(z[f"{name}_labels"]))

    def truths(rows: list[list[list[object]]]) -> list[Truth]:
        return [[(str(c), _box(b)) for c, b in row] for row in rows]  # type: ignore[arg-type]

    return Data(
        train=split("train"),
        val=split("val"),
        test_images=list(z["test_images"]),
        test_truths=truths(meta["truths"]),
        test_ignored=truths(meta["ignored"]),
        seconds=0.0,
    )
