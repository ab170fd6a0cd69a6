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
of the visible objects detected (IoU >= 0.5). Prints a table and writes
bench/results/arm_phantoms.json.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections import Counter
from dataclasses import replace
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


Shot = tuple[str, str, Any, list[tuple[str, Any]], list[tuple[str, Any]]]


def renders() -> list[Shot]:
    """(scene, pose, image, visible objects, mostly hidden ones) for every scene and arm
    pose."""
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
                rgb, _, seg = twin.render(links=True)
                truth, hidden = dataset.label(twin, seg, classes, 320 / scene.camera.width)
                out.append((name, pose, rgb, truth, hidden))
    return out


def measure(model: Path, shots: list[Shot]) -> dict[str, Any]:
    detector = Detector(model, ROOT / "models" / "detector" / "classes.json")
    at_home: Counter[str] = Counter()
    over: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    for _, pose, image, truth, hidden in shots:
        found = detector.detect(image)
        phantoms, hit = score(found, truth, hidden)
        tally = at_home if pose == "home" else over
        tally["renders"] += 1
        tally["objects"] += len(truth)
        tally["found"] += hit
        tally["phantoms"] += len(phantoms)
        tally["with a phantom"] += bool(phantoms)
        tally["confident phantoms"] += sum(d.score >= 0.5 for d in phantoms)
        if pose != "home":
            kinds.update(d.label for d in phantoms)
    return {
        "model": str(model),
        "sha256": file_sha256(model)[:12],
        "home": dict(at_home),
        "over the table": dict(over),
        "phantom classes": dict(kinds.most_common()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append", default=[], help="a candidate")
    args = parser.parse_args()
    shots = renders()
    rows = [measure(m, shots) for m in [SHIPPED, *args.model]]
    table = Table(title="the arm over the table: detections that are no object (threshold 0.25)")
    for column in ("model", "arm", "renders", "phantoms", "renders with one", "of them >= 0.5",
                   "objects found"):  # fmt: skip
        table.add_column(column)
    for row in rows:
        name = "shipped" if Path(row["model"]) == SHIPPED else Path(row["model"]).name
        for arm in ("home", "over the table"):
            t = row[arm]
            table.add_row(f"{name} ({row['sha256'][:8]})", arm, str(t["renders"]),
                          str(t["phantoms"]), str(t["with a phantom"]),
                          str(t["confident phantoms"]),
                          f"{t['found'] / max(t['objects'], 1):.1%} of {t['objects']}")  # fmt: skip
    Console(width=120).print(table)
    for row in rows:
        kinds = ", ".join(f"{k} {n}" for k, n in row["phantom classes"].items()) or "none"
        print(f"{row['sha256'][:8]}: phantoms with the arm over the table: {kinds}")
    path = write_results("arm_phantoms", {"environment": environment(), "points": POINTS,
                                          "scenes": SCENE_FILES, "models": rows})  # fmt: skip
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
