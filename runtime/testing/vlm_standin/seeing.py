"""What the stand-in VLM sees: the objects of a camera image (the shipped detector on the
request's pixels, and the blocks' colours read from the pixels for what is stacked), or of
a scene's text (``SceneState.text()``, the text-only rows).

Stacks are read from the image as a person reads them: blocks whose boxes stand in one
column and touch are scanned row by row, bottom up, and each run of rows of one block colour
is one block. The same scan reads a goal picture's order. A queue of blocks on a conveyor
can look like a stack from the camera; the tasks that need stacks (2 and 3) have none.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from PIL import Image

from onboard import bundled
from onboard.perception.detector import Box, Detection, Detector

__all__ = ["BLOCK_COLOURS", "Thing", "View", "detector", "from_image", "from_text", "stacks_in"]

#: labels of parts of other objects: never named as objects (as the robot's own eyes do)
PARTS = frozenset({"handle"})
BLOCK_COLOURS = ("red", "green", "blue", "yellow")
#: Pillow's HSV hue (0..255) ranges of the blocks' colours; saturated pixels only
_HUES: dict[str, tuple[tuple[int, int], ...]] = {
    "red": ((0, 10), (245, 256)),
    "yellow": ((28, 50),),
    "green": ((70, 115),),
    "blue": ((140, 180),),
}
_SATURATED, _BRIGHT = 180, 60
#: pixels of one colour a row needs to count, rows a run needs to be a block
_ROW_PIXELS, _RUN_ROWS = 3, 3
#: pixels apart two block boxes may be and still touch; the share of the narrower one's width
#: two boxes must overlap across to stand in one column
_TOUCH, _ACROSS = 3, 0.5


@dataclass(frozen=True)
class Thing:
    """One object seen: its name (``detect()``'s form: "red block", "plate 2"), its label
    ("red block", "plate"), where it rests (``on`` another's name, ``inside`` a container)
    and, from text, its position."""

    name: str
    label: str
    on: str | None = None
    inside: str | None = None
    position: tuple[float, float, float] | None = None
    box: Box | None = None


@dataclass(frozen=True)
class View:
    things: tuple[Thing, ...] = ()
    held: str | None = None
    source: str = "image"  # "image" or "text"
    extra: dict[str, object] = field(default_factory=dict)

    def names(self) -> list[str]:
        return [t.name for t in self.things]

    def named(self, name: str) -> Thing | None:
        return next((t for t in self.things if t.name == name), None)

    def with_label(self, *labels: str) -> list[Thing]:
        return [t for t in self.things if t.label in labels]

    def on_top_of(self, name: str) -> list[str]:
        """What is stacked on ``name``, bottom to top."""
        stack: list[str] = []
        below = name
        while True:
            above = [t.name for t in self.things if t.on == below and t.name not in stack]
            if not above:
                return stack
            below = above[0]
            stack.append(below)

    def listing(self) -> str:
        """The objects in words: "the red block, the apple and the box"."""
        words = [f"the {n}" for n in self.names()]
        if not words:
            return "nothing"
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


@lru_cache(maxsize=1)
def detector() -> Detector:
    folder = bundled.detector_dir()
    return Detector(folder / "model.onnx", folder / "classes.json")


def _label(cls: str) -> str:
    return cls.replace("_", " ")


def _name_all(labels: Sequence[str]) -> list[str]:
    """Names as ``detect()`` gives them: the label, then "label 2", "label 3", ..."""
    count: dict[str, int] = {}
    names = []
    for label in labels:
        count[label] = count.get(label, 0) + 1
        names.append(label if count[label] == 1 else f"{label} {count[label]}")
    return names


def from_image(rgb: npt.NDArray[np.uint8]) -> View:
    """The objects the detector finds in ``rgb``, named left to right in the image (ties:
    top first); block stacks read from the pixels; a block whose box lies within a drawer's
    is in the drawer."""
    found = [d for d in detector().detect(rgb) if d.label not in PARTS]
    found.sort(key=lambda d: (d.center[0], d.center[1]))
    stacked = stacks_in(rgb, found)
    labels = [_label(d.label) for d in found]
    # a block the scan saw in a stack that the detector missed is seen all the same
    for stack in stacked:
        labels += [f"{c} block" for c in stack if f"{c} block" not in labels]
    names = _name_all(labels)
    on: dict[str, str] = {}
    for stack in stacked:
        blocks = [f"{c} block" for c in stack]
        on.update({upper: lower for lower, upper in itertools.pairwise(blocks)})
    drawers = [d for d in found if d.label == "drawer"]
    things = []
    for i, (name, label) in enumerate(zip(names, labels, strict=True)):
        box = found[i].box if i < len(found) else None
        inside = None
        if (
            box is not None
            and label.endswith("block")
            and any(_within(box, d.box) for d in drawers)
        ):
            inside = "drawer"
        things.append(Thing(name, label, on=on.get(name), inside=inside, box=box))
    return View(tuple(things), source="image")


def _within(inner: Box, outer: Box) -> bool:
    cx, cy = (inner[0] + inner[2]) / 2, (inner[1] + inner[3]) / 2
    return outer[0] <= cx <= outer[2] and outer[1] <= cy <= outer[3]


def _touch(a: Box, b: Box) -> bool:
    across = min(a[2], b[2]) - max(a[0], b[0])
    narrower = min(a[2] - a[0], b[2] - b[0])
    gap = max(a[1], b[1]) - min(a[3], b[3])
    return narrower > 0 and across >= _ACROSS * narrower and gap <= _TOUCH


def _columns(blocks: Sequence[Detection]) -> list[list[Detection]]:
    """Blocks grouped into columns of touching boxes (two or more)."""
    groups: list[list[Detection]] = []
    for block in blocks:
        joined = [g for g in groups if any(_touch(block.box, o.box) for o in g)]
        merged = [block] + [o for g in joined for o in g]
        groups = [g for g in groups if g not in joined] + [merged]
    return [g for g in groups if len(g) > 1]


def _colour_rows(rgb: npt.NDArray[np.uint8], box: Box) -> list[str | None]:
    """Per row of ``box`` (top to bottom), the block colour most of its saturated pixels
    have, or None."""
    x1, y1, x2, y2 = (round(v) for v in box)
    patch = rgb[max(y1, 0) : max(y2, 0), max(x1, 0) : max(x2, 0)]
    if patch.size == 0:
        return []
    hsv = np.asarray(Image.fromarray(patch).convert("HSV"), dtype=np.int32)
    hue, sat, val = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    vivid = (sat >= _SATURATED) & (val >= _BRIGHT)
    counts = {
        colour: (vivid & np.logical_or.reduce([(hue >= lo) & (hue < hi) for lo, hi in spans]))
        .sum(axis=1)
        .astype(np.int64)
        for colour, spans in _HUES.items()
    }
    rows: list[str | None] = []
    for r in range(patch.shape[0]):
        best = max(counts, key=lambda c: int(counts[c][r]))
        rows.append(best if counts[best][r] >= _ROW_PIXELS else None)
    return rows


def _runs(rows: Sequence[str | None]) -> list[str]:
    """The colours of the runs of rows, bottom to top, short runs and repeats dropped."""
    order: list[str] = []
    run: list[str | None] = []
    for colour in [*reversed(rows), None]:
        if run and colour != run[-1]:
            if (
                run[-1] is not None
                and len(run) >= _RUN_ROWS
                and (not order or order[-1] != run[-1])
            ):
                order.append(run[-1])
            run = []
        run.append(colour)
    return order


def stacks_in(rgb: npt.NDArray[np.uint8], found: Sequence[Detection]) -> list[list[str]]:
    """The block stacks in the image, each its colours bottom to top (two or more)."""
    blocks = [d for d in found if d.label.endswith("_block")]
    stacks = []
    for column in _columns(blocks):
        box = (
            min(d.box[0] for d in column),
            min(d.box[1] for d in column),
            max(d.box[2] for d in column),
            max(d.box[3] for d in column),
        )
        order = _runs(_colour_rows(rgb, box))
        if len(order) > 1 and len(set(order)) == len(order):
            stacks.append(order)
    return stacks


_LINE = re.compile(
    r"^- (?P<name>.+?) at \((?P<x>-?[\d.]+), (?P<y>-?[\d.]+), (?P<z>-?[\d.]+)\)"
    r"(?:, (?:(?P<on_table>on the table)|in the (?P<inside>.+?)|on the (?P<on>.+?)))?$"
)
_HELD = re.compile(r"^The gripper holds: (?P<held>.+?)\.$")
_NUMBERED = re.compile(r"^(?P<label>.+?) \d+$")


def from_text(text: str) -> View:
    """The objects of a scene's text (the form of ``SceneState.text()``); lines of other
    forms are skipped."""
    things = []
    held = None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _LINE.match(line):
            name = m.group("name")
            numbered = _NUMBERED.match(name)
            label = numbered.group("label") if numbered else name
            on = "table" if m.group("on_table") else m.group("on")
            position = (float(m.group("x")), float(m.group("y")), float(m.group("z")))
            things.append(Thing(name, label, on=on, inside=m.group("inside"), position=position))
        elif m := _HELD.match(line):
            held = None if m.group("held") == "nothing" else m.group("held")
    return View(tuple(things), held=held, source="text")


def goal_order(rgb: npt.NDArray[np.uint8]) -> list[str]:
    """The blocks of a goal picture's tallest stack, bottom to top ("green block", ...)."""
    stacks = stacks_in(rgb, detector().detect(rgb))
    best = max(stacks, key=len, default=[])
    return [f"{c} block" for c in best]
