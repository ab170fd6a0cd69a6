"""The robot's own arm taken for an object: what the detector reports with the arm over the
table, as the skills hold it (issue 30: the conditions a robot meets).

    python bench/arm_phantoms.py [--model PATH ...]

For each model (the shipped one, the reference, and any ``--model``), renders the twin's
scene files with the Panda's tool pointing down over a grid of points above the table
(POINTS: 27 of them, 10 to 30 cm up) and at home, and detects at the detector's threshold
(0.25). A *phantom* is a detection that overlaps no object of its class in the scene (IoU
under 0.1 with each object's visible box, from the link-level segmentation as
models/detector/dataset.py labels training renders, mostly hidden objects included): something
seen where there is nothing of the kind, not a real object boxed badly; *found* is the share
of the visible objects detected (IoU >= 0.5). Each model is measured twice: as it detects,
and after the scene observer's hand check (runtime/perception/self_filter.py, robot.toml's
default ``[hand_zone]``): a box whose depth puts it on the hand is unknown, not an object, so
it is neither a phantom nor a found object. Then, as the observer goes on, after its rule of
one place, one object (runtime/perception/readings.py): a weaker box the depth puts at a
stronger one's place is dropped when it is a second reading of it. Prints a table and writes
bench/results/arm_phantoms.json.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(ROOT / "models" / "detector"))
import dataset

from onboard.base.digest import file_sha256
from onboard.drivers.twin import SCENES, Twin, load_scene
from onboard.perception.detector import Detection, Detector, box_iou
from onboard.perception.pose import locate
from onboard.perception.readings import Reading, second_readings
from onboard.perception.scene_observer import CONTAINERS
from onboard.perception.self_filter import Hand, HandZone

SCENE_FILES = ("blocks", "tower", "tabletop", "fruit", "toys")
#: where the tool points down from, base frame, metres
POINTS = tuple(itertools.product((0.35, 0.5, 0.6), (-0.15, 0.0, 0.15), (0.1, 0.2, 0.3)))
SHIPPED = ROOT / "models" / "detector" / "model.onnx"


def classes_of(scene: Any) -> dict[str, str]:
    """Each object's class: a block by its nearest colour, another kind by its name."""
    out = {}
    for spec in scene.objects:
        if spec.kind == "block" and spec.color is not None:
            rgb = np.array(spec.color[:3])
            out[spec.name] = min(
                dataset.BLOCK_COLORS,
                key=lambda n: float(np.sum((np.array(dataset.BLOCK_COLORS[n][:3]) - rgb) ** 2)),
            )
        elif spec.kind in dataset.CLASSES:
            out[spec.name] = spec.kind
    return out


#: IoU under which a detection overlaps no object of its class
APART = 0.1
#: as the detector gives them, after the hand check, after the second readings too
WAYS = ("raw", "checked", "observed")
AFTER = {"raw": "no", "checked": "hand", "observed": "hand, readings"}
UP = np.array([0.0, 0.0, 1.0])


def score(
    found: list[Detection], truth: list[tuple[str, Any]], hidden: list[tuple[str, Any]]
) -> tuple[list[Detection], int]:
    """(the phantoms, how many of the objects were found)."""
    phantoms = [
        d
        for d in found
        if not any(d.label == c and box_iou(d.box, [b])[0] >= APART for c, b in truth + hidden)
    ]
    hit = sum(any(d.label == c and box_iou(d.box, [b])[0] >= 0.5 for d in found) for c, b in truth)
    return phantoms, hit


@dataclass(frozen=True)
class Shot:
    scene: str
    pose: str  # "home", or the tool's point
    image: Any
    truth: list[tuple[str, Any]]  # (class, box) of the visible objects
    hidden: list[tuple[str, Any]]  # of the mostly hidden ones
    on_hand: Callable[[Detection], bool]  # whether the depth puts a box on the hand
    reading: Callable[[Detection], Reading]  # the box as the observer locates it (base frame)


def on_hand_of(twin: Twin, depth: Any) -> Callable[[Detection], bool]:
    """The hand check of one render: the box's surface point (its depth) in the arm's base
    frame, in the default hand zone of the tool's pose."""
    intrinsics, camera, zone = twin.intrinsics(), twin.camera_pose(), HandZone()
    hand = Hand.from_pose(twin.ee_pose())

    def check(detection: Detection) -> bool:
        point = locate(detection.box, depth, intrinsics).point
        world = camera[:3, :3] @ point + camera[:3, 3]
        return zone.holds(hand, np.array(twin.to_base(tuple(float(v) for v in world))))

    return check


def reading_of(twin: Twin, depth: Any) -> Callable[[Detection], Reading]:
    """The box located as the scene observer locates it: its surface point pushed back by
    half its width, in the arm's base frame."""
    intrinsics, camera = twin.intrinsics(), twin.camera_pose()

    def read(detection: Detection) -> Reading:
        seen = locate(detection.box, depth, intrinsics)
        world = camera[:3, :3] @ seen.behind(seen.size[0] / 2) + camera[:3, 3]
        base = np.array(twin.to_base(tuple(float(v) for v in world)))
        words = detection.label.replace("_", " ")
        return Reading(words, detection.score, base, seen.size[0])

    return read


def renders() -> list[Shot]:
    """Every scene at every arm pose."""
    out = []
    for name in SCENE_FILES:
        scene = load_scene(SCENES / f"{name}.toml")
        with Twin(scene) as twin:
            twin.settle()
            home = tuple(map(float, scene.arm.home))
            down = twin.forward(home)
            classes = classes_of(scene)
            poses: list[tuple[str, tuple[float, ...]]] = [("home", home)]
            for x, y, z in POINTS:
                solution = twin.solve_ik(replace(down, x=x, y=y, z=z), home)
                if solution.residual < 0.01:
                    poses.append((f"{x:.2f},{y:+.2f},{z:.1f}", solution.joints[:7]))
            for pose, joints in poses:
                twin.reset_joints(joints)
                rgb, depth, seg = twin.render(links=True)
                truth, hidden = dataset.label(twin, seg, classes, 320 / scene.camera.width)
                checks = on_hand_of(twin, depth), reading_of(twin, depth)
                out.append(Shot(name, pose, rgb, truth, hidden, *checks))
    return out


def measure(model: Path, shots: list[Shot]) -> dict[str, Any]:
    """The model's tallies as it detects (``raw``), after the hand check (``checked``) and
    after the observer's second readings too (``observed``)."""
    detector = Detector(model, ROOT / "models" / "detector" / "classes.json")
    tallies: dict[str, dict[str, Counter[str]]] = {
        way: {"home": Counter(), "over the table": Counter()} for way in WAYS
    }
    kinds: dict[str, Counter[str]] = {way: Counter() for way in WAYS}
    for shot in shots:
        found = detector.detect(shot.image)
        kept = [d for d in found if not shot.on_hand(d)]
        twice = second_readings([shot.reading(d) for d in kept], UP, CONTAINERS)
        observed = [d for i, d in enumerate(kept) if i not in twice]
        for way, boxes in zip(WAYS, (found, kept, observed), strict=True):
            phantoms, hit = score(boxes, shot.truth, shot.hidden)
            tally = tallies[way]["home" if shot.pose == "home" else "over the table"]
            tally["renders"] += 1
            tally["objects"] += len(shot.truth)
            tally["found"] += hit
            tally["phantoms"] += len(phantoms)
            tally["with a phantom"] += bool(phantoms)
            tally["confident phantoms"] += sum(d.score >= 0.5 for d in phantoms)
            tally["on the hand"] += len(found) - len(kept) if way != "raw" else 0
            tally["second readings"] += len(kept) - len(boxes) if way == "observed" else 0
            if shot.pose != "home":
                kinds[way].update(d.label for d in phantoms)
    return {
        "model": str(model),
        "sha256": file_sha256(model)[:12],
        **{way: {arm: dict(t) for arm, t in by_arm.items()} for way, by_arm in tallies.items()},
        "phantom classes": {way: dict(k.most_common()) for way, k in kinds.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", default=[], help="a candidate")
    args = parser.parse_args()
    shots = renders()
    rows = [measure(m, shots) for m in [SHIPPED, *args.model]]
    table = Table(title="the arm over the table: detections that are no object (threshold 0.25)")
    for column in ("model", "checks", "arm", "renders", "phantoms", "renders with one",
                   "of them >= 0.5", "objects found", "unknown: on the hand",
                   "second readings"):  # fmt: skip
        table.add_column(column)
    for row in rows:
        name = "shipped" if Path(row["model"]) == SHIPPED else Path(row["model"]).name
        for way, arm in itertools.product(WAYS, ("home", "over the table")):
            t = row[way][arm]
            table.add_row(f"{name} ({row['sha256'][:8]})", AFTER[way], arm,
                          str(t["renders"]), str(t["phantoms"]), str(t["with a phantom"]),
                          str(t["confident phantoms"]),
                          f"{t['found'] / max(t['objects'], 1):.1%} of {t['objects']}",
                          str(t["on the hand"]), str(t["second readings"]))  # fmt: skip
    Console(width=140).print(table)
    for row in rows:
        for way in WAYS:
            kinds = ", ".join(f"{k} {n}" for k, n in row["phantom classes"][way].items()) or "none"
            print(f"{row['sha256'][:8]} ({way}): phantoms with the arm over the table: {kinds}")
    path = write_results("arm_phantoms", {"environment": environment(), "points": POINTS,
                                          "scenes": SCENE_FILES, "models": rows})  # fmt: skip
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
