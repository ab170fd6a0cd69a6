"""Where the detector's "unknown" band lies: the scores of real objects and of false boxes
just under the shipped detector's threshold (issue 30, item 4).

    python bench/faint_band.py [--count 150]

Renders ``count`` images per seed of the card's base set (FRESH_SEEDS) and of the hard set
(HARD_SEEDS) with models/detector/dataset.py, detects with the shipped model down to a score
of 0.05, and matches each detection to a labelled object of its class (IoU >= 0.5, best
score first, each object once). Per score bin: how many detections are an object the
threshold (0.25) would miss, and how many are false. The band of
:data:`onboard.perception.unknown.FAINT` is where a detection is more often an object than
below it (still far more often false: a faint box never becomes an object). Prints a table
and writes bench/results/faint_band.json.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from typing import Any

import numpy as np
from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(ROOT / "models" / "detector"))
import dataset

from onboard.perception.detector import Detector, box_iou

EDGES = (0.05, 0.1, 0.15, 0.2, 0.25, 1.01)


def matched(detections: list[Any], truth: list[tuple[str, Any]]) -> list[tuple[float, bool]]:
    """(score, is an object) of each detection, best first, each object matched once."""
    used: set[int] = set()
    out = []
    for d in sorted(detections, key=lambda d: -d.score):
        best, at = 0.0, -1
        for i, (label, box) in enumerate(truth):
            if i in used or label != d.label:
                continue
            iou = float(box_iou(d.box, [box])[0])
            if iou > best:
                best, at = iou, i
        hit = best >= 0.5
        if hit:
            used.add(at)
        out.append((d.score, hit))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=150, help="renders per seed")
    args = parser.parse_args()
    folder = ROOT / "models" / "detector"
    detector = Detector(folder / "model.onnx", folder / "classes.json", conf=EDGES[0])
    sets = {"base": (dataset.BASE, dataset.FRESH_SEEDS), "hard": (dataset.HARD, dataset.HARD_SEEDS)}
    bins: dict[str, list[dict[str, Any]]] = {}
    objects: dict[str, int] = {}
    for name, (conditions, seeds) in sets.items():
        scored: list[tuple[float, bool]] = []
        count = 0
        for seed in seeds:
            for sample in dataset.render(args.count, seed, conditions=conditions):
                scored += matched(detector.detect(sample.image), sample.truth)
                count += len(sample.truth)
        objects[name] = count
        rows = []
        for lo, hi in itertools.pairwise(EDGES):
            inside = [hit for s, hit in scored if lo <= s < hi]
            real = sum(inside)
            rows.append({"low": lo, "high": min(hi, 1.0), "objects": real,
                         "false": len(inside) - real})  # fmt: skip
        bins[name] = rows
    table = Table(title="detections by score: an object, or false (IoU >= 0.5, its class)")
    table.add_column("score")
    for name in sets:
        table.add_column(f"{name}: objects")
        table.add_column(f"{name}: false")
        table.add_column(f"{name}: share real")
    for i, row in enumerate(bins["base"]):
        cells = [f"{row['low']:.2f}-{row['high']:.2f}"]
        for name in sets:
            r = bins[name][i]
            total = r["objects"] + r["false"]
            share = f"{r['objects'] / total:.2f}" if total else "-"
            cells += [str(r["objects"]), str(r["false"]), share]
        table.add_row(*cells)
    Console().print(table)
    for name in sets:
        missed = objects[name] - bins[name][-1]["objects"]
        below = bins[name][:-1]
        caught = [
            (r["low"], sum(b["objects"] for b in below[i:]), sum(b["false"] for b in below[i:]))
            for i, r in enumerate(below)
        ]
        said = "; ".join(f"from {lo:.2f}: {c} ({f} false)" for lo, c, f in caught)
        print(f"{name}: {objects[name]} objects, {missed} under 0.25; the band catches {said}")
    path = write_results("faint_band", {"environment": environment(), "count": args.count,
                                        "objects": objects, "bins": bins})  # fmt: skip
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
