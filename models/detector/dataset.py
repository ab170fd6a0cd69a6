"""The detector's data: tabletop scenes rendered by the twin, labelled from its masks.

Each scene is an :class:`onboard.drivers.twin.Scene` of one of the COMPOSITIONS: random
objects, or the layout of one of the seed's seven tasks (a red/yellow/blue tower and a box,
stacks, a conveyor with an end stop, two plates, blocks in an open or closed drawer, toys,
food among non-food). It is rendered several times, every time with the objects laid out anew
by :class:`Placer`, the arm in another pose and the camera moved around the scene file's
viewpoint. Boxes are the tight boxes of each object's pixels in a link-level segmentation
image, so a drawer's handle (a link of the drawer's body) gets a box of its own. An object
whose visible part is tiny (under MIN_PIXELS, or under MIN_VISIBLE of the box its 3-D extent
projects to: hidden or cut off by the image border) is not a label but an *ignored* box:
training asks nothing of the cells on it, and the mAP neither rewards nor punishes a detection
on it (VOC's "difficult").

The splits use disjoint seeds. Train and validation images are letterboxed to the network
input with ``onboard.perception.detector.letterbox`` (the runtime's own preprocessing); the
test split keeps the raw renders, so its figures go through the whole runtime path. Rendering
takes a few minutes; the result is cached under ``~/.cache/onboard/``, keyed by this file and the
split sizes (``train.py --no-cache`` renders again, e.g. after the twin changed).

Beyond the scene, each render varies as its :class:`Conditions` say: BASE (the shipped
model's data, and the card's base set on FRESH_SEEDS), HARD (the hard evaluation set on
HARD_SEEDS, never trained on, never edited) or TRAIN (domain randomization: HARD's factors over
wider ranges, plus table and floor textures, and in a share of the scenes the TASK_STATES:
the states the seed's tasks leave that the plain compositions seldom draw; what ``train.py``
renders by default).

No torch here: numpy, the twin (pybullet) and onboard.perception.detector only.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from onboard.drivers.twin import SCENES, Scene, Twin, camera, load_scene
from onboard.drivers.twin.bodies import HANDLE_LINK, WALL
from onboard.drivers.twin.camera import Light
from onboard.drivers.twin.scene import CameraSpec, ObjectSpec, Vec3
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
    "handle",  # a drawer's handle: a link of the drawer's body
)
BLOCKS = ("red_block", "green_block", "blue_block", "yellow_block")
FOOD = ("apple", "orange", "lemon", "banana")
#: how often each small class is drawn: the weak ones (small and red or yellow) more often
SMALL_WEIGHTS = {c: 1.0 for c in (*BLOCKS, *FOOD, "duck", "teddy")} | {
    "red_block": 1.6,
    "yellow_block": 1.4,
    "apple": 1.5,
}
#: kinds of scene and their share of the renders: random ones, and the seven tasks' layouts
COMPOSITIONS = {
    "random": 0.36,
    "tower": 0.1,  # task 2
    "stacks": 0.1,  # task 3
    "conveyor": 0.12,  # tasks 4 and 5
    "plates": 0.08,  # task 5
    "drawer": 0.12,  # task 6
    "toys": 0.06,  # task 7
    "food": 0.06,  # task 1
}
#: Task states drawn only under a Conditions with ``scenes`` (TRAIN): never in BASE or HARD.
#: queue: task 4's belt_order, the red, green and blue blocks queued at a belt's end stop, the
#: queue going away from the camera along its line of sight (the middle block half hidden);
#: facing_tower: a tower with every yaw 0 or squared to the camera, task 2's red-yellow-blue
#: or three blocks of any colours in any order (the tidy skill's stacks);
#: duck_box: task 7's duck in the box, the teddy and others beside it;
#: block_pair: the tidy skill's stack, one block of the four on another (any two colours), the
#: pair squared to the camera, at yaw 0 or any yaw, the other blocks on the table.
#: Each is drawn with its weight: the pair, which the tidy skill's goals read, twice as often.
TASK_STATES = {"queue": 1.0, "facing_tower": 1.0, "duck_box": 1.0, "block_pair": 2.0}
#: Task states drawn only when ``train.py --states`` names them (so TRAIN's default renders,
#: and the shipped model's recipe, stay as they were): lookalikes: yellow blocks beside
#: lemons and red blocks beside apples, a lemon end-on to the camera half the time (under a
#: tinted light only the shape tells them apart); open_drawer: task 6 under way, a drawer
#: pulled half to fully open at any yaw, blocks in it, a lemon and a yellow block beside it.
OPT_IN_STATES = ("lookalikes", "open_drawer")
#: the blocks of task 4's belt_order, which the queue holds in any order
QUEUE = ("red_block", "green_block", "blue_block")
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
SPLITS = {"train": (5000, 1), "val": (300, 2), "test": (400, 3)}  # images, seed
FRESH_SEEDS = (11, 12, 13)  # never used in training: train.py --eval-only renders these
WORKERS = 2  # rendering processes
CHUNK = 250  # renders per task of a worker


@dataclass(frozen=True)
class Conditions:
    """What varies from render to render beyond the scene, as ranges drawn per render.

    The defaults are the conditions the shipped model was trained for (BASE): the camera
    jittered about the scene file's viewpoint, the renderer's default light (from above, no
    shadows), a clean image. A factor left at its default draws nothing from the random
    stream, so BASE renders the same images as before the factors existed, and a set defined
    by some Conditions renders the same images for as long as this file keeps the drawing
    code of the factors it uses. Ranges are (low, high), drawn uniformly.
    """

    #: camera position: +- metres about the viewpoint (x, y, z)
    camera_shift: tuple[float, float, float] = (0.15, 0.25, 0.15)
    #: camera target: metres about the viewpoint's target, low and high (x, y, z)
    target_low: tuple[float, float, float] = (-0.08, -0.1, -0.03)
    target_high: tuple[float, float, float] = (0.08, 0.1, 0.05)
    #: vertical field of view, degrees
    fov: tuple[float, float] = (40.0, 52.0)
    #: vary the light; False keeps the renderer's default and draws none of the light ranges
    light: bool = False
    #: the light's elevation above the table, degrees (its azimuth is any)
    light_elevation: tuple[float, float] = (90.0, 90.0)
    light_ambient: tuple[float, float] = (0.6, 0.6)
    light_diffuse: tuple[float, float] = (0.35, 0.35)
    light_specular: tuple[float, float] = (0.05, 0.05)
    #: the light's colour: 1 + U(-tint, tint) per channel, scaled to a maximum of 1
    light_tint: float = 0.0
    #: the share of renders with cast shadows (drawn only with ``light``)
    shadow: float = 0.0
    #: extra small objects of the classes per scene (clutter), on top of the composition's
    clutter: tuple[int, int] = (0, 0)
    #: objects of no class per scene: blocks of other colours, bars and flat panels
    distractors: tuple[int, int] = (0, 0)
    #: exposure, stops: the image times 2 ** stops, clipped
    exposure: tuple[float, float] = (0.0, 0.0)
    #: Gaussian blur sigma, pixels of a 320x240 frame (scaled with the frame)
    blur: tuple[float, float] = (0.0, 0.0)
    #: Gaussian pixel noise sigma, 0..255 levels, per pixel and channel
    noise: tuple[float, float] = (0.0, 0.0)
    #: the share of scenes whose table and floor get a random texture (wood, tiles, noise)
    textures: float = 0.0
    #: the share of scenes that are one of the TASK_STATES (drawn only when not 0)
    scenes: float = 0.0
    #: (state, weight) pairs that replace TASK_STATES' weights (``train.py --states``)
    states: tuple[tuple[str, float], ...] = ()
    #: the share of renders with the arm in a working pose (drawn only when not 0): its tool
    #: pointing down anywhere over the table up to WORK_HEIGHT, as the skills move it; else
    #: the arm is near its home pose, out of most of the view
    working_arm: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


#: the conditions the shipped model was trained and measured for (seeds 1-3 and 11-13)
BASE = Conditions()

#: The hard evaluation set (issue 30, item 1): never trained on, never edited. Against BASE:
#: the light from anywhere 25-85 degrees up, of any strength (dim to harsh) and a mild
#: colour, with shadows in 70% of the renders; the camera shifted twice as far with a 35-65
#: degree field of view; 0-4 more objects and 1-4 distractors per scene; exposure -1 to +0.6
#: stops, blur up to sigma 1.2 px and noise up to sigma 8 levels. HARD_SEEDS render it
#: (300 renders each: models/detector/evaluate.py --set hard).
HARD = Conditions(
    camera_shift=(0.3, 0.45, 0.25),
    target_low=(-0.15, -0.18, -0.04),
    target_high=(0.15, 0.18, 0.08),
    fov=(35.0, 65.0),
    light=True,
    light_elevation=(25.0, 85.0),
    light_ambient=(0.3, 0.75),
    light_diffuse=(0.2, 0.8),
    light_specular=(0.0, 0.3),
    light_tint=0.15,
    shadow=0.7,
    clutter=(0, 4),
    distractors=(1, 4),
    exposure=(-1.0, 0.6),
    blur=(0.0, 1.2),
    noise=(0.0, 8.0),
)
#: Training (issue 30, item 2): every factor of HARD over a wider range, and textures, so the
#: hard set lies inside the training distribution, not at its edge. The ranges hold the base
#: values too (light from above, no shadows in 40%, clean frames at the low ends).
TRAIN = Conditions(
    camera_shift=(0.35, 0.5, 0.3),
    target_low=(-0.18, -0.22, -0.05),
    target_high=(0.18, 0.22, 0.1),
    fov=(32.0, 70.0),
    light=True,
    light_elevation=(15.0, 90.0),
    light_ambient=(0.2, 0.85),
    light_diffuse=(0.1, 0.9),
    light_specular=(0.0, 0.4),
    light_tint=0.2,
    shadow=0.6,
    clutter=(0, 5),
    distractors=(0, 5),
    exposure=(-1.3, 0.9),
    blur=(0.0, 1.6),
    noise=(0.0, 11.0),
    textures=0.5,
    scenes=0.3,
)
#: where a working pose puts the tool, base frame ((x, y) low, (x, y) high), and how high
WORK_AREA = ((0.25, -0.4), (0.7, 0.4))
WORK_HEIGHT = 0.4
HARD_SEEDS = (101, 102, 103, 104)  # never used in training or for the card's base figures
SET_COUNT = 300  # renders per seed of the base (FRESH_SEEDS) and hard (HARD_SEEDS) sets
#: colours of the distractor blocks and panels: far from the four block colours
DISTRACTOR_COLORS = (
    (0.55, 0.2, 0.7),  # purple
    (0.1, 0.7, 0.8),  # cyan
    (0.95, 0.55, 0.7),  # pink
    (0.9, 0.9, 0.9),  # white
    (0.12, 0.12, 0.12),  # black
    (0.5, 0.5, 0.5),  # grey
)
DISTRACTOR_KINDS = ("block", "bar", "panel")

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


@dataclass
class Layout:
    """A scene to render several times: its objects, their classes and how to lay them out."""

    scene: Scene
    classes: dict[str, str]  # object name -> class (objects of no class are left out)
    composition: str  # a key of COMPOSITIONS or one of TASK_STATES


def random_layout(
    rng: np.random.Generator,
    base: Scene,
    conditions: Conditions = BASE,
    composition: str | None = None,
) -> Layout:
    """A scene of one of the COMPOSITIONS (chosen by weight; in ``conditions.scenes`` of the
    scenes one of the TASK_STATES) around ``base``'s camera, with the clutter and distractors
    of ``conditions``. ``composition`` chooses the kind instead (tests)."""
    if composition is None and conditions.scenes and rng.random() < conditions.scenes:
        composition = _weighted(rng, {**TASK_STATES, **dict(conditions.states)})
    if composition is None:
        composition = _weighted(rng, COMPOSITIONS)
    labels = _COMPOSERS[composition](rng)
    if conditions.clutter != (0, 0):
        labels += _small(rng, int(rng.integers(conditions.clutter[0], conditions.clutter[1] + 1)))
    if conditions.distractors != (0, 0):
        low, high = conditions.distractors
        count = int(rng.integers(low, high + 1))
        labels += [f"distractor_{rng.choice(DISTRACTOR_KINDS)}" for _ in range(count)]
    objects, classes = [], {}
    for k, label in enumerate(labels):
        name = f"{label}-{k}"
        objects.append(
            _distractor(rng, name, label)
            if label.startswith("distractor_")
            else _object(rng, name, label, composition)
        )
        if label in CLASSES:
            classes[name] = label
    table_color = np.clip(
        np.array(TABLE_COLORS[rng.integers(len(TABLE_COLORS))]) + rng.normal(0, 0.04, 3), 0, 1
    )
    table = base.table.model_copy(update={"color": (*map(float, table_color), 1.0)})
    scene = base.model_copy(update={"objects": objects, "table": table})
    return Layout(scene, classes, composition)


def _small(rng: np.random.Generator, count: int, pool: Sequence[str] = ()) -> list[str]:
    """``count`` small object classes, the weak ones (SMALL_WEIGHTS) more often."""
    names = list(pool or SMALL_WEIGHTS)
    weights = np.array([SMALL_WEIGHTS[n] for n in names])
    return [str(c) for c in rng.choice(names, size=count, p=weights / weights.sum())]


def _compose_random(rng: np.random.Generator) -> list[str]:
    labels = [big for big in BIG if rng.random() < 0.4]
    labels += _small(rng, int(rng.integers(3, 9)))
    if rng.random() < 0.25:
        labels.append(str(rng.choice(DISTRACTORS)))
    return labels


def _weighted(rng: np.random.Generator, weights: dict[str, float]) -> str:
    names = list(weights)
    p = np.array([weights[n] for n in names])
    return names[int(rng.choice(len(names), p=p / p.sum()))]


def _compose_tower(rng: np.random.Generator) -> list[str]:
    """Task 2: red, yellow and blue blocks to stack into a box, and a few others."""
    return ["red_block", "yellow_block", "blue_block", "box", *_small(rng, int(rng.integers(0, 4)))]


def _compose_stacks(rng: np.random.Generator) -> list[str]:
    """Task 3: blocks stacked in various orders."""
    blocks = _small(rng, int(rng.integers(3, 7)), BLOCKS)
    return blocks + _small(rng, int(rng.integers(0, 3)), FOOD)


def _compose_conveyor(rng: np.random.Generator) -> list[str]:
    """Tasks 4 and 5: blocks and fruit on a belt with an end stop, plates beside it."""
    riders = _small(rng, int(rng.integers(2, 6)), (*BLOCKS, *FOOD))
    plates = ["plate"] * int(rng.integers(0, 3))
    return ["conveyor", "bar", *riders, *plates, *_small(rng, int(rng.integers(0, 3)))]


def _compose_plates(rng: np.random.Generator) -> list[str]:
    """Task 5: two plates, fruit on and around them."""
    return ["plate", "plate", *_small(rng, int(rng.integers(2, 6)), FOOD), *_small(rng, 1)]


def _compose_drawer(rng: np.random.Generator) -> list[str]:
    """Task 6: blocks inside an open or closed drawer, and others on the table."""
    inside = _small(rng, int(rng.integers(1, 3)), BLOCKS)
    return ["drawer", *inside, *_small(rng, int(rng.integers(1, 5)))]


def _compose_toys(rng: np.random.Generator) -> list[str]:
    """Task 7: the duck and the teddy among blocks and fruit."""
    return ["duck", "teddy", *_small(rng, int(rng.integers(2, 6)), (*BLOCKS, *FOOD))]


def _compose_food(rng: np.random.Generator) -> list[str]:
    """Task 1: one food among non-food objects."""
    others = _small(rng, int(rng.integers(3, 7)), (*BLOCKS, "duck", "teddy"))
    return [*_small(rng, 1, FOOD), *others, *[b for b in ("plate", "box") if rng.random() < 0.3]]


def _compose_queue(rng: np.random.Generator) -> list[str]:
    """Task 4's belt_order: red, green and blue blocks queued at a belt's end stop."""
    return ["conveyor", *QUEUE, *_small(rng, int(rng.integers(0, 4)))]


def _compose_facing_tower(rng: np.random.Generator) -> list[str]:
    """A tower squared to the camera, and the box: task 2's (red, yellow, blue) half the time,
    else three blocks of the four colours in any order, as the tidy skill stacks them. The
    tower's blocks come first, bottom up (the Placer takes them in this order)."""
    if rng.random() < 0.5:
        return _compose_tower(rng)
    tower = [str(c) for c in rng.permutation(BLOCKS)[:3]]
    return [*tower, "box", *_small(rng, int(rng.integers(0, 4)))]


def _compose_block_pair(rng: np.random.Generator) -> list[str]:
    """The tidy skill's blocks scene with one block on another: the four blocks in a random
    order (the first is the pair's bottom, the second its top) and a few others."""
    blocks = [str(c) for c in rng.permutation(BLOCKS)]
    return [*blocks, *_small(rng, int(rng.integers(0, 3)), FOOD)]


def _compose_duck_box(rng: np.random.Generator) -> list[str]:
    """Task 7 done: the duck in the box, the teddy and a few others on the table."""
    return ["box", "duck", "teddy", *_small(rng, int(rng.integers(1, 4)), (*BLOCKS, *FOOD))]


def _compose_lookalikes(rng: np.random.Generator) -> list[str]:
    """Objects of one hue side by side: yellow blocks and lemons, red blocks and apples."""
    pairs = int(rng.integers(1, 3))
    return [
        *["yellow_block", "lemon"] * pairs,
        *["red_block", "apple"] * int(rng.integers(0, 3 - pairs)),
        *_small(rng, int(rng.integers(0, 3))),
    ]


def _compose_open_drawer(rng: np.random.Generator) -> list[str]:
    """Task 6 under way: a drawer pulled far open, blocks in it, a lemon and a yellow block
    beside it, and a few others."""
    inside = _small(rng, int(rng.integers(0, 3)), BLOCKS)
    return ["drawer", *inside, "lemon", "yellow_block", *_small(rng, int(rng.integers(0, 3)))]


def _object(rng: np.random.Generator, name: str, label: str, composition: str) -> ObjectSpec:
    kind = "block" if label.endswith("_block") else label
    base = BLOCK_COLORS.get(label) or DEFAULT_COLORS[kind]
    if kind == "bar" and composition == "conveyor":  # an end stop: any dull colour
        base = tuple(float(v) for v in rng.uniform(0.15, 0.6, 3))
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
            float(v) for v in rng.uniform([0.22, 0.24, 0.14], [0.32, 0.34, 0.22])
        )
        spec["opening"] = 0.0
    elif kind == "conveyor" and composition == "queue":  # belt_order's: flush, an end stop
        spec["extent"] = (float(rng.uniform(0.34, 0.46)), float(rng.uniform(0.09, 0.12)), 0.01)
        spec["end_stop"], spec["speed"] = True, 0.05
    elif kind == "block" and composition == "facing_tower":  # the twin's 4 cm, as task 2's
        spec["size"] = float(SIZES["block"] * rng.uniform(0.97, 1.05))
    elif kind == "conveyor":
        width = float(rng.uniform(0.16, 0.24)) if composition == "conveyor" else 0.2
        spec["extent"] = (float(rng.uniform(0.5, 0.8)), width, 0.05)
    elif kind == "bar" and composition == "conveyor":
        spec["size"] = 0.2
        spec["mass"] = 0.0
    else:
        spec["size"] = float(SIZES[kind] * rng.uniform(0.85, 1.2))
    return ObjectSpec.model_validate(spec)


def _distractor(rng: np.random.Generator, name: str, label: str) -> ObjectSpec:
    """An object of no class: a block of another colour, a bar, or a flat panel (a mat)."""
    kind = label.removeprefix("distractor_")
    base = DISTRACTOR_COLORS[int(rng.integers(len(DISTRACTOR_COLORS)))]
    color = np.clip(np.array(base) + rng.uniform(-0.05, 0.05, 3), 0, 1)
    spec: dict[str, object] = {
        "name": name,
        "kind": kind,
        "position": (5.0 + len(name), 5.0),
        "color": (*map(float, color), 1.0),
        "yaw": float(rng.uniform(-180, 180)),
    }
    if kind == "panel":
        spec["extent"] = (*map(float, rng.uniform(0.1, 0.25, 2)), 0.005)
    elif kind == "bar":
        spec["size"] = float(rng.uniform(0.06, 0.2))
    else:
        spec["size"] = float(SIZES["block"] * rng.uniform(0.85, 1.2))
    return ObjectSpec.model_validate(spec)


def _jitter_camera(
    rng: np.random.Generator, camera: CameraSpec, large: bool, conditions: Conditions = BASE
) -> CameraSpec:
    shift = np.array(conditions.camera_shift)
    position = np.array(camera.position) + rng.uniform(-shift, shift)
    target = np.array(camera.target) + rng.uniform(conditions.target_low, conditions.target_high)
    update: dict[str, object] = {
        "position": tuple(map(float, position)),
        "target": tuple(map(float, target)),
        "fov": float(rng.uniform(*conditions.fov)),
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


class Placer:
    """Lays out one scene's objects anew for each render.

    Objects rest on the table, on top of others (found with a ray down through the point),
    on a conveyor's belt or inside a drawer; an object that finds no room goes off the table,
    out of view.
    """

    def __init__(self, twin: Twin, layout: Layout, rng: np.random.Generator) -> None:
        self.twin, self.layout, self.rng = twin, layout, rng
        self.specs = {s.name: s for s in twin.scene.objects}
        self.rest_z = {n: twin.object_pose(n)[0][2] for n in twin.object_names()}
        self.placed: list[tuple[float, float, float]] = []  # x, y, radius on the table
        self.view = twin.scene.camera  # the scene file's viewpoint (before any jitter)
        self.left: list[str] = []

    def __call__(self) -> None:
        self.placed, self.left = [], list(self.specs)
        for k, name in enumerate(self.specs):  # everything off the table first
            self.twin.set_object_pose(name, (5.0 + k, 5.0, 1.0))
        getattr(self, f"_{self.layout.composition}")()
        self._scatter(self.left, stack=0.2)

    def _of(self, *labels: str) -> list[str]:
        return [n for n in self.left if n.rsplit("-", 1)[0] in labels]

    # compositions

    def _random(self) -> None:
        pass  # all scattered, some stacked

    def _tower(self) -> None:
        red, yellow, blue = (self._of(c)[0] for c in ("red_block", "yellow_block", "blue_block"))
        box = self._of("box")[0]
        self._on_table(box)
        tower = [red, yellow, blue][: int(self.rng.integers(0, 4))]
        state = self.rng.random()
        if tower and state < 0.4:  # the tower (or its start) in the box
            self._column(tower, self._near_centre(box, 0.04))
        elif tower:
            spot = self._spot(0.04)
            if spot is not None:
                self._column(tower, spot)
        if state > 0.8:  # others in the box too
            for name in self._of("red_block", "yellow_block", "blue_block", "green_block")[:2]:
                self._drop_on(name, self._near_centre(box, 0.07))

    def _stacks(self) -> None:
        blocks = self._of(*BLOCKS)
        self.rng.shuffle(blocks)
        while len(blocks) >= 2 and self.rng.random() < 0.8:
            height = min(len(blocks), int(self.rng.integers(2, 5)))
            spot = self._spot(0.04)
            if spot is None:
                break
            self._column(blocks[:height], spot)
            blocks = blocks[height:]

    def _conveyor(self) -> None:
        belt, stop = self._of("conveyor")[0], self._of("bar")[0]
        length, width, height = self.specs[belt].extent or (0.8, 0.2, 0.05)
        x, y = float(self.rng.uniform(0.42, 0.62)), float(self.rng.uniform(-0.12, 0.12))
        yaw = math.radians(float(self.rng.choice([90.0, -90.0])) + self.rng.uniform(-12, 12))
        self._put(belt, (x, y, self.rest_z[belt]), yaw, math.hypot(length, width) / 2)
        ax, ay = math.cos(yaw), math.sin(yaw)
        end = length / 2 - 0.02
        self._put(stop, (x + ax * end, y + ay * end, height + self.rest_z[stop]), yaw + math.pi / 2)
        riders = self._of(*BLOCKS, *FOOD)
        self.rng.shuffle(riders)
        along = -length / 2 + 0.05
        for name in riders[: int(self.rng.integers(1, len(riders) + 1))]:
            radius = _footprint(self.specs[name])
            along += radius
            if along + radius > end - 0.03:
                break
            side = float(self.rng.uniform(-1, 1)) * max(width / 2 - radius, 0.0) * 0.8
            px, py = x + ax * along - ay * side, y + ay * along + ax * side
            self._put(name, (px, py, height + self.rest_z[name] + 0.001), self._yaw())
            along += radius + float(self.rng.uniform(0.01, 0.08))
        self._plates()

    def _plates(self) -> None:
        for plate in self._of("plate"):
            if self._on_table(plate) is None:
                continue
            fruit = self._of(*FOOD)
            for name in fruit[: int(self.rng.integers(0, 3))]:
                self._drop_on(name, self._near_centre(plate, 0.05))

    def _drawer(self) -> None:
        drawer = self._of("drawer")[0]
        opening = self._open(drawer, closed=0.45)
        if self._on_table(drawer, yaw=self._yaw()) is None:
            return
        for name in self._of(*BLOCKS)[: int(self.rng.integers(1, 3))]:
            self._into_drawer(name, drawer, opening)

    def _toys(self) -> None:
        pass

    def _towards_camera(self, x: float, y: float) -> float:
        """The yaw of the line from (x, y) to the viewpoint, on the table."""
        return math.atan2(self.view.position[1] - y, self.view.position[0] - x)

    def _queue(self) -> None:
        """belt_order's end state: the red, green and blue blocks (in any order) pressed
        against the end stop of a belt whose downstream end faces the camera, so the queue
        goes away from the camera along its line of sight."""
        belt = self._of("conveyor")[0]
        length, width, height = self.specs[belt].extent or (0.42, 0.1, 0.01)
        x, y = float(self.rng.uniform(0.38, 0.5)), float(self.rng.uniform(-0.15, 0.15))
        yaw = self._towards_camera(x, y) + math.radians(float(self.rng.uniform(-15, 15)))
        top = height / 2 - 0.003  # the top 2 mm above the table, as in belt_order.toml
        self._put(belt, (x, y, top - height / 2), yaw, math.hypot(length, width) / 2)
        ax, ay = math.cos(yaw), math.sin(yaw)
        queue = [self._of(c)[0] for c in QUEUE]
        self.rng.shuffle(queue)
        along = length / 2 - WALL  # the stop's inner face
        for name in queue:  # pressed together by the belt: touching, squared to it
            half = self.rest_z[name]
            along -= half + 0.0005
            side = float(self.rng.uniform(-0.003, 0.003))
            px, py = x + ax * along - ay * side, y + ay * along + ax * side
            turn = math.radians(float(self.rng.uniform(-3, 3)))
            self._put(name, (px, py, top + half + 0.001), yaw + turn)
            along -= half + float(self.rng.uniform(0.0005, 0.0015))

    def _facing_tower(self) -> None:
        """A tower of 2 or 3 blocks (the composition's first three, bottom up) with its faces
        to the camera: every yaw 0 as task 2 leaves it, or squared to the viewpoint."""
        tower = self._of(*BLOCKS)[:3]
        self._on_table(self._of("box")[0])
        spot = self._spot(0.04)
        if spot is None:
            return
        x, y = spot
        yaw = 0.0 if self.rng.random() < 0.5 else self._towards_camera(x, y)
        yaw += math.radians(float(self.rng.uniform(-3, 3)))
        self.placed.append((x, y, _footprint(self.specs[tower[0]])))
        z = 0.0
        height = int(self.rng.integers(2, 4))
        for name in tower[:height]:
            dx, dy = self.rng.uniform(-0.002, 0.002, 2)
            self._put(name, (x + float(dx), y + float(dy), z + self.rest_z[name] + 0.0005), yaw)
            z += 2 * self.rest_z[name] + 0.0005
        self._beside(tower[height:])  # never on the tower (it would be its third)

    def _duck_box(self) -> None:
        """Task 7 done: the duck on the box's floor (sometimes a block beside it)."""
        box = self._of("box")[0]
        if self._on_table(box) is None:
            return
        self._drop_on(self._of("duck")[0], self._near_centre(box, 0.03))
        blocks = self._of(*BLOCKS)
        if blocks and self.rng.random() < 0.3:
            self._drop_on(blocks[0], self._near_centre(box, 0.07))

    def _lookalikes(self) -> None:
        """Each yellow block with a lemon, each red block with an apple, a few centimetres
        apart; a lemon (a capsule along its x) end-on to the camera half the time."""
        pairs = zip(self._of("yellow_block", "red_block"), self._of("lemon", "apple"), strict=False)
        for first, second in list(pairs):
            spot = self._on_table(first)
            if spot is None:
                continue
            radius = _footprint(self.specs[second])
            for _ in range(12):  # a free spot beside it (else the scatter places it)
                turn = self._yaw()
                gap = _footprint(self.specs[first]) + radius + float(self.rng.uniform(0.0, 0.04))
                x, y = spot[0] + gap * math.cos(turn), spot[1] + gap * math.sin(turn)
                if _is_free(x, y, radius, self.placed):
                    break
            else:
                continue
            yaw = self._yaw()
            if self.specs[second].kind == "lemon" and self.rng.random() < 0.5:
                yaw = self._towards_camera(x, y) + math.radians(float(self.rng.uniform(-10, 10)))
            self._put(second, (x, y, self.rest_z[second]), yaw, radius)

    def _open_drawer(self) -> None:
        """A drawer open half its travel or more, at any yaw, blocks on its floor."""
        drawer = self._of("drawer")[0]
        travel = self._travel(drawer)
        opening = float(self.rng.uniform(0.5 * travel, travel))
        self.twin.put_drawer(drawer, opening)
        if self._on_table(drawer) is None:
            return
        for name in self._of(*BLOCKS)[: int(self.rng.integers(0, 3))]:
            self._into_drawer(name, drawer, opening)

    def _block_pair(self) -> None:
        """The tidy skill's stack: the first block on the table, the second on it, at yaw 0 (as
        the scene file's blocks are set), squared to the camera or any yaw, placed as an arm
        places it (a few millimetres and degrees off) half the time; the rest on the table."""
        bottom, top, *others = self._of(*BLOCKS)
        radius = _footprint(self.specs[bottom])
        spot = self._spot(radius)
        if spot is None:
            return
        pick = self.rng.random()
        yaw = math.radians(float(self.rng.uniform(-3, 3)))
        if pick < 1 / 3:
            yaw = self._yaw()
        elif pick < 2 / 3:
            yaw += self._towards_camera(*spot)
        self._put(bottom, (*spot, self.rest_z[bottom]), yaw, radius)
        off = 0.004 if self.rng.random() < 0.5 else 0.0
        dx, dy = (float(d) for d in self.rng.uniform(-off, off, 2))
        turn = math.radians(float(self.rng.uniform(-5, 5))) if off else 0.0
        z = 2 * self.rest_z[bottom] + self.rest_z[top] + 0.0005
        self._put(top, (spot[0] + dx, spot[1] + dy, z), yaw + turn)
        self._beside(others)

    def _beside(self, names: Sequence[str]) -> None:
        """``names`` on the table, never stacked on anything (out of view when there is no room)."""
        for name in names:
            if self._on_table(name) is None:
                self.left.remove(name)

    def _travel(self, drawer: str) -> float:
        """The farthest a render opens ``drawer``: 80% of its depth inside the back wall."""
        extent = self.specs[drawer].extent or (0.3, 0.3, 0.2)
        return 0.8 * (extent[0] - WALL)

    def _open(self, drawer: str, closed: float) -> float:
        """Set the drawer closed (with probability ``closed``) or open some way; returns how far."""
        travel = self._travel(drawer)
        opening = 0.0 if self.rng.random() < closed else float(self.rng.uniform(0.04, travel))
        self.twin.put_drawer(drawer, opening)
        return opening

    def _food(self) -> None:
        pass

    # placing

    def _yaw(self) -> float:
        return float(self.rng.uniform(-math.pi, math.pi))

    def _put(self, name: str, position: Vec3, yaw: float, radius: float = 0.0) -> None:
        self.twin.set_object_pose(name, position, _yaw_quat(yaw))
        self.left.remove(name)
        if radius:
            self.placed.append((position[0], position[1], radius))

    def _spot(self, radius: float) -> tuple[float, float] | None:
        return _free_spot(self.rng, self.placed, radius)

    def _on_table(self, name: str, yaw: float | None = None) -> tuple[float, float] | None:
        radius = _footprint(self.specs[name])
        spot = self._spot(radius)
        if spot is None:
            return None
        self._put(name, (*spot, self.rest_z[name]), self._yaw() if yaw is None else yaw, radius)
        return spot

    def _near_centre(self, name: str, spread: float) -> tuple[float, float]:
        x, y, _ = self.twin.object_pose(name)[0]
        dx, dy = self.rng.uniform(-spread, spread, 2)
        return float(x + dx), float(y + dy)

    def _surface(self, x: float, y: float) -> float:
        """The height of the first thing under (x, y) below the arm's home pose."""
        hit, point = self.twin.ray_test((x, y, 0.4), (x, y, -0.01))
        return max(float(point[2]), 0.0) if isinstance(hit, str) else 0.0

    def _drop_on(self, name: str, spot: tuple[float, float]) -> None:
        z = self._surface(*spot)
        self._put(name, (*spot, z + self.rest_z[name] + 0.001), self._yaw())

    def _column(self, names: Sequence[str], spot: tuple[float, float]) -> None:
        """Blocks stacked at ``spot``, bottom first, each a little off the one below."""
        x, y = spot
        for k, name in enumerate(names):
            if k == 0 and self._surface(x, y) == 0.0:
                self.placed.append((x, y, _footprint(self.specs[name])))
            self._drop_on(name, (x, y))
            x, y = (
                x + float(self.rng.uniform(-0.004, 0.004)),
                y + float(self.rng.uniform(-0.004, 0.004)),
            )

    def _into_drawer(self, name: str, drawer: str, opening: float) -> None:
        """On the drawer's floor, somewhere inside it (bodies._drawer's geometry)."""
        dx, dy, dz = self.specs[drawer].extent or (0.3, 0.3, 0.2)
        ix, iy, iz = dx - WALL - 0.004, dy - 2 * WALL - 0.006, dz - 2 * WALL - 0.006
        half = 0.5 * (self.specs[name].size or 0.04)
        lx = WALL / 2 + 0.002 + opening + float(self.rng.uniform(-1, 1)) * (ix / 2 - WALL - half)
        ly = float(self.rng.uniform(-1, 1)) * (iy / 2 - WALL - half)
        (bx, by, bz), quat = self.twin.object_pose(drawer)
        yaw = 2 * math.atan2(quat[2], quat[3])
        x = bx + math.cos(yaw) * lx - math.sin(yaw) * ly
        y = by + math.sin(yaw) * lx + math.cos(yaw) * ly
        z = bz - iz / 2 + WALL + self.rest_z[name] + 0.001
        self._put(name, (x, y, z), yaw + float(self.rng.uniform(-0.3, 0.3)))

    def _scatter(self, names: Sequence[str], stack: float) -> None:
        """The rest on the table, big things first; some blocks on blocks, fruit on plates."""
        order = sorted(names, key=lambda n: -_footprint(self.specs[n]))
        tops: list[str] = [n for n, s in self.specs.items() if s.kind in ("block", "plate")]
        tops = [n for n in tops if n not in names and self.twin.object_pose(n)[0][0] < 2.0]
        for name in order:
            spec = self.specs[name]
            if name not in self.left:
                continue
            if spec.kind in ("block", "apple", "orange", "lemon") and self.rng.random() < stack:
                under = [t for t in tops if self.specs[t].kind == "plate" or spec.kind == "block"]
                if under:
                    target = under[int(self.rng.integers(len(under)))]
                    self._drop_on(name, self._near_centre(target, 0.004))
                    tops.remove(target)
                    if spec.kind == "block":
                        tops.append(name)
                    continue
            yaw = self._yaw()
            if spec.kind == "conveyor":
                yaw /= 4
            elif spec.kind == "drawer":
                self._open(name, closed=0.3)
                yaw /= 2
            if self._on_table(name, yaw) is not None and spec.kind in ("block", "plate"):
                tops.append(name)


#: where objects are laid on the table (base frame, metres): x from, x to, and |y| up to
SPOT_X, SPOT_Y = (0.22, 0.8), 0.42


def _free_spot(
    rng: np.random.Generator, placed: list[tuple[float, float, float]], radius: float
) -> tuple[float, float] | None:
    for _ in range(40):
        x, y = float(rng.uniform(*SPOT_X)), float(rng.uniform(-SPOT_Y, SPOT_Y))
        if _is_free(x, y, radius, placed):
            return x, y
    return None


def _is_free(x: float, y: float, radius: float, placed: list[tuple[float, float, float]]) -> bool:
    """A circle of ``radius`` at (x, y) is on the spot area, clear of the arm's base, and 1 cm
    clear of every placed one."""
    if not (SPOT_X[0] <= x <= SPOT_X[1] and abs(y) <= SPOT_Y) or math.hypot(x, y) < 0.2 + radius:
        return False
    return all(math.hypot(x - px, y - py) > radius + pr + 0.01 for px, py, pr in placed)


def _yaw_quat(yaw: float) -> tuple[float, float, float, float]:
    return (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))


_COMPOSERS = {
    "random": _compose_random,
    "tower": _compose_tower,
    "stacks": _compose_stacks,
    "conveyor": _compose_conveyor,
    "plates": _compose_plates,
    "drawer": _compose_drawer,
    "toys": _compose_toys,
    "food": _compose_food,
    "queue": _compose_queue,
    "facing_tower": _compose_facing_tower,
    "duck_box": _compose_duck_box,
    "block_pair": _compose_block_pair,
    "lookalikes": _compose_lookalikes,
    "open_drawer": _compose_open_drawer,
}


# -- labels ---------------------------------------------------------------------------------


def label(
    twin: Twin, seg: npt.NDArray[np.int32], classes: dict[str, str], scale: float
) -> tuple[Truth, Truth]:
    """Tight boxes from the mask of each class object; tiny or mostly hidden ones ignored.

    ``seg``: a link-level segmentation (``camera.render(..., links=True)``). A drawer's box
    is its whole body, the handle included (the object as a hand would find it); the handle
    also gets a box of its own. ``scale``: network input pixels per image pixel (for the
    size thresholds).
    """
    truth: Truth = []
    ignored: Truth = []
    bodies, links = camera.split_segmentation(seg)
    height, width = seg.shape
    for name, cls in classes.items():
        body = twin.segmentation_id(name)
        masks = [(cls, bodies == body, _object_corners(twin, name))]
        if cls == "drawer":
            handle = (bodies == body) & (links == HANDLE_LINK)
            masks.append(("handle", handle, _handle_corners(twin, name)))
        for c, mask, corners in masks:
            ys, xs = np.nonzero(mask)
            if xs.size == 0:
                continue
            box = (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))
            area = (box[2] - box[0]) * (box[3] - box[1])
            projected = _projected_area(twin, corners, width, height)
            small = (
                xs.size * scale**2 < MIN_PIXELS
                or min(box[2] - box[0], box[3] - box[1]) * scale < MIN_SIDE
            )
            hidden = projected > 0 and area / projected < MIN_VISIBLE
            (ignored if small or hidden else truth).append((c, box))
    return truth, ignored


def _projected_area(twin: Twin, world: npt.NDArray[np.float64], width: int, height: int) -> float:
    """Area of the image box of 3-D corners (an object's whole self, seen or not)."""
    to_camera = np.linalg.inv(twin.camera_pose())
    cam = world @ to_camera[:3, :3].T + to_camera[:3, 3]
    if (cam[:, 2] <= 0.01).any():
        return 0.0
    k = twin.intrinsics()
    u = k.fx * cam[:, 0] / cam[:, 2] + k.cx + 0.5
    v = k.fy * cam[:, 1] / cam[:, 2] + k.cy + 0.5
    return float((u.max() - u.min()) * (v.max() - v.min()))


def _object_corners(twin: Twin, name: str) -> npt.NDArray[np.float64]:
    spec = next(s for s in twin.scene.objects if s.name == name)
    position, quat = twin.object_pose(name)
    return _box_corners(np.array(position), _half_extent(spec), 2 * math.atan2(quat[2], quat[3]))


def _handle_corners(twin: Twin, drawer: str) -> npt.NDArray[np.float64]:
    """The handle's box (bodies._drawer's geometry: on the drawer's front, moving with it)."""
    spec = next(s for s in twin.scene.objects if s.name == drawer)
    dx, dy, _ = spec.extent or (0.3, 0.3, 0.2)
    ix, iy = dx - WALL - 0.004, dy - 2 * WALL - 0.006
    along = WALL / 2 + 0.002 + twin.drawer_opening(drawer) + ix / 2 + 0.015
    position, quat = twin.object_pose(drawer)
    yaw = 2 * math.atan2(quat[2], quat[3])
    centre = np.array(position) + along * np.array([math.cos(yaw), math.sin(yaw), 0.0])
    return _box_corners(centre, np.array([0.015, min(0.06, iy / 3), 0.008]), yaw)


def _box_corners(
    centre: npt.NDArray[np.float64], half: npt.NDArray[np.float64], yaw: float
) -> npt.NDArray[np.float64]:
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * half
    rot = np.array(
        [[math.cos(yaw), -math.sin(yaw), 0], [math.sin(yaw), math.cos(yaw), 0], [0, 0, 1]]
    )
    return corners @ rot.T + centre


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


def render(
    count: int, seed: int, workers: int = WORKERS, conditions: Conditions = BASE
) -> list[Sample]:
    """``count`` random renders from the seed under ``conditions``: chunks of CHUNK, each
    from its own stream (``[seed, chunk]``), rendered by ``workers`` processes; the same
    seed gives the same renders whatever ``workers`` is."""
    chunks = [
        (min(CHUNK, count - start), seed, k, conditions)
        for k, start in enumerate(range(0, count, CHUNK))
    ]
    if workers <= 1 or len(chunks) == 1:
        return [s for chunk in chunks for s in _render_chunk(*chunk)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = pool.map(_render_chunk, *zip(*chunks, strict=True))
        return [s for chunk in done for s in chunk]


def _render_chunk(count: int, seed: int, chunk: int, conditions: Conditions = BASE) -> list[Sample]:
    rng = np.random.default_rng([seed, chunk])
    views = [load_scene(SCENES / view) for view in VIEWS]
    samples: list[Sample] = []
    while len(samples) < count:
        base = views[int(rng.integers(len(views)))]
        layout = random_layout(rng, base, conditions)
        with Twin(layout.scene) as twin:
            if conditions.textures and rng.random() < conditions.textures:
                _texture(twin, rng)
            placer = Placer(twin, layout, rng)
            home = np.array(layout.scene.arm.home)
            for _ in range(min(RENDERS_PER_SCENE, count - len(samples))):
                twin.reset_joints(tuple(map(float, home)))  # out of the way of the rays
                placer()
                twin.reset_joints(tuple(map(float, home + rng.normal(0, 0.3, 7))))
                if conditions.working_arm and rng.random() < conditions.working_arm:
                    _working_pose(twin, rng, home, layout)
                large = rng.random() < LARGE_FRACTION
                view = _jitter_camera(rng, base.camera, large, conditions)
                twin.scene = twin.scene.model_copy(update={"camera": view})
                light = _light(rng, conditions)
                rgb, _, seg = twin.render(links=True, light=light)  # the handle is a link
                truth, ignored = label(twin, seg, layout.classes, 320 / view.width)
                samples.append(Sample(_degrade(rng, rgb, conditions), truth, ignored))
    return samples


def _working_pose(
    twin: Twin, rng: np.random.Generator, home: npt.NDArray[np.float64], layout: Layout
) -> None:
    """The arm as a skill holds it: the tool over the table (WORK_AREA), pointing down, turned
    about its axis, up to WORK_HEIGHT above the table, and half the time holding one of the
    scene's blocks or fruit between its fingers; kept near home when IK cannot reach."""
    (x0, y0), (x1, y1) = WORK_AREA
    start = tuple(map(float, home))
    tool = twin.forward(start)
    goal = replace(
        tool,
        x=float(rng.uniform(x0, x1)),
        y=float(rng.uniform(y0, y1)),
        z=float(rng.uniform(0.03, WORK_HEIGHT)),
        rz=tool.rz + float(rng.uniform(-math.pi / 2, math.pi / 2)),
    )
    solution = twin.solve_ik(goal, start)
    if solution.residual >= 0.01:
        return
    twin.reset_joints(solution.joints[:7])
    held = [name for name, label in layout.classes.items() if label in (*BLOCKS, *FOOD)]
    if held and rng.random() < 0.5:
        at = twin.ee_pose()
        twin.set_object_pose(held[int(rng.integers(len(held)))], (at.x, at.y, at.z))


def _texture(twin: Twin, rng: np.random.Generator) -> None:
    """A random texture on the table and on the floor under it (bodies.build_table makes the
    floor right after the table: the next body id)."""
    import tempfile

    from PIL import Image

    p = twin._p  # training data only: the twin has no texture interface
    for body in (twin.table, twin.table + 1):
        image = _texture_image(rng)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "texture.png"
            Image.fromarray(image).save(path)
            texture = p.loadTexture(str(path))
        p.changeVisualShape(body, -1, textureUniqueId=texture, rgbaColor=(1, 1, 1, 1))


def _texture_image(rng: np.random.Generator, size: int = 128) -> ImageArray:
    """Wood grain, tiles or blotchy noise, in a random dull colour pair."""
    low = rng.uniform(0.15, 0.75, 3)
    high = np.clip(low + rng.uniform(-0.25, 0.25, 3), 0, 1)
    y, x = np.mgrid[0:size, 0:size] / size
    kind = int(rng.integers(3))
    if kind == 0:  # wood: bent stripes
        freq = rng.uniform(8, 30)
        t = 0.5 + 0.5 * np.sin(
            2 * np.pi * (freq * y + 0.6 * np.sin(2 * np.pi * rng.uniform(1, 3) * x))
        )
    elif kind == 1:  # tiles
        n = int(rng.integers(2, 9))
        t = ((np.floor(x * n) + np.floor(y * n)) % 2).astype(float)
    else:  # blotches: coarse noise upsampled
        coarse = rng.random((8, 8))
        t = np.kron(coarse, np.ones((size // 8, size // 8)))
    t = t + rng.normal(0, 0.08, t.shape)
    rgb = low + (high - low) * np.clip(t, 0, 1)[..., None]
    return (np.clip(rgb, 0, 1) * 255).astype(np.uint8)


def _light(rng: np.random.Generator, conditions: Conditions) -> Light | None:
    """A light from anywhere at the conditions' elevations, or None: the default one."""
    if not conditions.light:
        return None
    azimuth = float(rng.uniform(-math.pi, math.pi))
    elevation = math.radians(float(rng.uniform(*conditions.light_elevation)))
    tint = 1.0 + rng.uniform(-conditions.light_tint, conditions.light_tint, 3)
    color = tint / tint.max()
    return Light(
        direction=(
            math.cos(elevation) * math.cos(azimuth),
            math.cos(elevation) * math.sin(azimuth),
            math.sin(elevation),
        ),
        color=(float(color[0]), float(color[1]), float(color[2])),
        ambient=float(rng.uniform(*conditions.light_ambient)),
        diffuse=float(rng.uniform(*conditions.light_diffuse)),
        specular=float(rng.uniform(*conditions.light_specular)),
        shadow=bool(rng.random() < conditions.shadow),
    )


def _degrade(rng: np.random.Generator, image: ImageArray, conditions: Conditions) -> ImageArray:
    """The camera's share: exposure, then blur, then pixel noise (each only when its range
    is not zero)."""
    if (
        conditions.exposure == (0.0, 0.0)
        and conditions.blur == (0.0, 0.0)
        and (conditions.noise == (0.0, 0.0))
    ):
        return image
    out = image.astype(np.float32)
    if conditions.exposure != (0.0, 0.0):
        out *= np.float32(2.0 ** float(rng.uniform(*conditions.exposure)))
    if conditions.blur != (0.0, 0.0):
        out = gaussian_blur(out, float(rng.uniform(*conditions.blur)) * image.shape[1] / 320)
    if conditions.noise != (0.0, 0.0):
        sigma = float(rng.uniform(*conditions.noise))
        out += rng.normal(0.0, sigma, out.shape).astype(np.float32)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def gaussian_blur(image: npt.NDArray[np.float32], sigma: float) -> npt.NDArray[np.float32]:
    """A separable Gaussian blur of an (H, W, C) image, edges repeated; sigma in pixels."""
    if sigma < 0.3:
        return image
    radius = math.ceil(3 * sigma)
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2).astype(np.float32)
    taps /= taps.sum()
    for axis in (0, 1):
        padded = np.pad(
            image, [(radius, radius) if a == axis else (0, 0) for a in range(3)], mode="edge"
        )
        size = image.shape[axis]
        image = sum(  # type: ignore[assignment]
            w * np.take(padded, np.arange(k, k + size), axis=axis) for k, w in enumerate(taps)
        )
    return image


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


def load(
    size: int = 320, cache: bool = True, scale: float = 1.0, conditions: Conditions = TRAIN
) -> Data:
    """All three splits under ``conditions`` (TRAIN; BASE: the shipped model's data),
    rendered or read from the cache."""
    counts = {name: (max(1, round(n * scale)), seed) for name, (n, seed) in SPLITS.items()}
    key = hashlib.sha256(
        json.dumps([counts, size, CLASSES, conditions.as_dict(), _source_digest()]).encode()
    ).hexdigest()[:16]
    path = CACHE / f"detector-data-{key}.npz"
    if cache and path.exists():
        return _read(path)
    started = time.perf_counter()
    rendered = {name: render(n, seed, conditions=conditions) for name, (n, seed) in counts.items()}
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
