"""The detector's speed, and its decode + NMS checked against two independent references.

    python bench/detector.py [--frames 300]

1. Frames per second of the shipped model (models/detector) through onboard.perception.detector, on
   renders of the twin's tabletop scene at 320x240 and 640x480: end to end (letterbox,
   model, decode, NMS, boxes mapped back) and model only (``Detector.infer``), with 1 and 2
   onnxruntime threads.
2. decode + NMS time on the shipped model's own outputs and on outputs of yolov8n's shape
   ([1, 84, 8400] at 640 px), synthesized with a few hundred candidates above the threshold
   (clusters of overlapping boxes around 25 objects, scattered false positives, background).
3. The same outputs through two references written apart from onboard.perception.detector: a plain
   per-anchor, per-box Python loop, and opencv's ``cv2.dnn.NMSBoxesBatched`` (from
   ``opencv-python``, in the dev extra; skipped without it). The
   kept boxes must agree.

Prints a table and writes bench/results/detector.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from _common import ROOT, environment, fmt_ms, summary, verdict, write_results
from rich.console import Console
from rich.table import Table

from onboard.perception.detector import Detector, decode, nms

MODEL = ROOT / "models" / "detector" / "model.onnx"
CLASSES = ROOT / "models" / "detector" / "classes.json"
CONF, IOU, MAX_DET = 0.25, 0.45, 300
GOAL_FPS = 60.0  # issue 30: >= 60 fps end to end at 320x240 on one thread
FloatArray = npt.NDArray[np.float32]


# -- inputs ---------------------------------------------------------------------------------


def twin_frames(count: int, large: bool) -> list[npt.NDArray[np.uint8]]:
    """Renders of the tabletop scene with the objects nudged about (random images without
    the twin)."""
    rng = np.random.default_rng(1)
    try:
        from onboard.drivers.twin import Twin
    except ImportError:
        shape = (480, 640, 3) if large else (240, 320, 3)
        return [rng.integers(0, 255, shape, dtype=np.uint8) for _ in range(min(count, 20))]
    frames = []
    with Twin() as twin:
        if large:
            camera = twin.scene.camera.model_copy(update={"width": 640, "height": 480})
            twin.scene = twin.scene.model_copy(update={"camera": camera})
        homes = {n: twin.object_pose(n)[0] for n in twin.object_names()}
        for _ in range(min(count, 20)):
            for name, (x, y, z) in homes.items():
                dx, dy = rng.uniform(-0.03, 0.03, 2)
                twin.set_object_pose(name, (x + float(dx), y + float(dy), z))
            frames.append(twin.render()[0])
    return frames


def yolov8n_like(rng: np.random.Generator, objects: int = 25) -> FloatArray:
    """An output [1, 84, 8400] (640 px, strides 8/16/32) shaped like a real yolov8n one."""
    cells = []
    for stride in (8, 16, 32):
        n = 640 // stride
        ys, xs = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        cells.append(
            np.stack(
                [(xs.ravel() + 0.5) * stride, (ys.ravel() + 0.5) * stride, np.full(n * n, stride)],
                1,
            )
        )
    grid = np.concatenate(cells).astype(np.float32)  # (8400, 3): x, y, stride
    out = np.zeros((84, len(grid)), np.float32)
    out[4:] = rng.beta(0.5, 30.0, (80, len(grid))) * 0.3  # background: all under 0.25
    out[0:2] = grid[:, :2].T
    out[2:4] = grid[:, 2] * 2
    for _ in range(objects):
        w, h = rng.uniform(20, 250, 2)
        cx, cy = rng.uniform(w / 2, 640 - w / 2), rng.uniform(h / 2, 640 - h / 2)
        cls = int(rng.integers(80))
        level = 8 if max(w, h) < 64 else 16 if max(w, h) < 160 else 32
        near = np.flatnonzero(
            (grid[:, 2] >= level / 2)
            & (grid[:, 2] <= level * 2)
            & (np.abs(grid[:, 0] - cx) < w / 2)
            & (np.abs(grid[:, 1] - cy) < h / 2)
        )
        dist = np.hypot((grid[near, 0] - cx) / w, (grid[near, 1] - cy) / h)
        falloff = np.where(grid[near, 2] == level, 12.0, 30.0)  # other levels: weaker
        peak = rng.uniform(0.5, 0.95)
        score = peak * np.exp(-falloff * dist**2)
        out[4 + cls, near] = np.maximum(out[4 + cls, near], score)
        jitter = rng.normal(0, 0.06, (4, near.size))
        out[0, near] = cx + jitter[0] * w
        out[1, near] = cy + jitter[1] * h
        out[2, near] = w * (1 + jitter[2])
        out[3, near] = h * (1 + jitter[3])
    stray = rng.choice(len(grid), 40, replace=False)  # false positives just above threshold
    out[4 + rng.integers(80, size=40), stray] = rng.uniform(0.25, 0.45, 40)
    return out[None]


# -- the references -------------------------------------------------------------------------


def loop_reference(output: FloatArray, conf: float, iou: float, max_det: int) -> list[Any]:
    """decode + class-aware greedy NMS, one anchor and one box pair at a time, in Python."""
    pred = output[0]
    rows = pred.shape[0]
    found = []
    for anchor in range(pred.shape[1]):
        best_class, best_score = 0, float(pred[4, anchor])
        for c in range(1, rows - 4):
            if float(pred[4 + c, anchor]) > best_score:
                best_class, best_score = c, float(pred[4 + c, anchor])
        if best_score > conf:
            cx, cy, w, h = (float(v) for v in pred[:4, anchor])
            box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
            found.append((best_score, anchor, best_class, box))
    found.sort(key=lambda f: (-f[0], f[1]))
    kept: list[Any] = []
    for candidate in found:
        if len(kept) == max_det:
            break
        if all(k[2] != candidate[2] or _iou(k[3], candidate[3]) <= iou for k in kept):
            kept.append(candidate)
    return [(c, s, b) for s, _, c, b in kept]


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    inter = w * h if w > 0 and h > 0 else 0.0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def opencv_reference(output: FloatArray, conf: float, iou: float, max_det: int) -> list[Any]:
    """opencv's batched NMS on candidates found with numpy (argmax over the class rows)."""
    import cv2

    pred = output[0]
    scores = pred[4:].max(0)
    classes = pred[4:].argmax(0)
    mask = scores > conf
    cx, cy, w, h = pred[:4, mask]
    rects = np.stack([cx - w / 2, cy - h / 2, w, h], 1).astype(np.float64)
    kept = cv2.dnn.NMSBoxesBatched(
        rects.tolist(), scores[mask].tolist(), classes[mask].tolist(), conf, iou
    )  # top_k would cut the candidates *before* NMS: cut the kept boxes after it instead
    order = np.asarray(kept, dtype=np.int64).reshape(-1)[:max_det]
    return [
        (
            int(classes[mask][k]),
            float(scores[mask][k]),
            (rects[k, 0], rects[k, 1], rects[k, 0] + rects[k, 2], rects[k, 1] + rects[k, 3]),
        )
        for k in order
    ]


def ours(output: FloatArray, conf: float, iou: float, max_det: int) -> list[Any]:
    boxes, scores, classes = decode(output, conf)
    kept = nms(boxes, scores, classes, iou, max_det)
    return [(int(classes[k]), float(scores[k]), tuple(map(float, boxes[k]))) for k in kept]


def agree(a: list[Any], b: list[Any]) -> bool:
    """Same kept boxes (as a set: opencv's order among equal scores may differ)."""
    if len(a) != len(b):
        return False
    key = lambda r: (-round(r[1], 5), r[0], round(r[2][0], 2), round(r[2][1], 2))  # noqa: E731
    return all(
        x[0] == y[0] and abs(x[1] - y[1]) < 1e-5 and np.allclose(x[2], y[2], atol=1e-2)
        for x, y in zip(sorted(a, key=key), sorted(b, key=key), strict=True)
    )


# -- timing ---------------------------------------------------------------------------------


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def fps(stats: dict[str, Any]) -> float:
    return 1000.0 / stats["p50_ms"] if stats.get("n") else 0.0


def measure(
    detector: Detector, frames: list[npt.NDArray[np.uint8]], repeats: int
) -> dict[str, Any]:
    tensor, _ = detector.preprocess(frames[0])
    counter = iter(range(10**9))
    e2e = timed(lambda: detector.detect(frames[next(counter) % len(frames)]), repeats)
    model = timed(lambda: detector.infer(tensor), repeats)
    pre = timed(lambda: detector.preprocess(frames[0]), repeats)
    return {"end_to_end": summary(e2e), "model": summary(model), "preprocess": summary(pre)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=300, help="timed frames per setting")
    args = parser.parse_args()
    console = Console(width=150)
    results: dict[str, Any] = {"environment": environment(), "model": str(MODEL.relative_to(ROOT))}

    speed: dict[str, Any] = {}
    outputs: dict[str, FloatArray] = {}
    for size, large in (("320x240", False), ("640x480", True)):
        frames = twin_frames(20, large)
        for threads in (1, 2):
            detector = Detector(MODEL, CLASSES, conf=CONF, iou=IOU, threads=threads)
            speed[f"{size} {threads}t"] = measure(detector, frames, args.frames)
            tensor, _ = detector.preprocess(frames[0])
            outputs[size] = detector.infer(tensor)
    results["speed"] = speed

    rng = np.random.default_rng(0)
    cases = {
        "shipped model, 320x240 frame": outputs["320x240"],
        "shipped model, conf 0.001": outputs["320x240"],
        "yolov8n shape [1, 84, 8400]": yolov8n_like(rng),
    }
    refs: dict[str, Callable[..., list[Any]]] = {"loop": loop_reference}
    try:
        import cv2  # noqa: F401

        refs["opencv"] = opencv_reference
    except ImportError:
        console.print("[yellow]opencv-python not installed: its column is n/a[/yellow]")
    checks: dict[str, Any] = {}
    for name, output in cases.items():
        conf = 0.001 if "0.001" in name else CONF
        mine = ours(output, conf, IOU, MAX_DET)
        row: dict[str, Any] = {
            "candidates": int((output[0, 4:].max(0) > conf).sum()),
            "kept": len(mine),
            "ours": summary(timed(lambda o=output, c=conf: ours(o, c, IOU, MAX_DET), 50)),
        }
        for ref, fn in refs.items():
            theirs = fn(output, conf, IOU, MAX_DET)
            reps = 3 if ref == "loop" else 50
            row[ref] = summary(timed(lambda o=output, c=conf, f=fn: f(o, c, IOU, MAX_DET), reps))
            row[f"{ref}_agrees"] = agree(mine, theirs)
        checks[name] = row
    results["decode_nms"] = checks
    show(console, speed, checks, list(refs))
    path = write_results("detector", results)
    console.print(f"wrote {path.relative_to(ROOT)}")
    if not all(row[f"{r}_agrees"] for row in checks.values() for r in refs):
        sys.exit(1)


def show(console: Console, speed: dict[str, Any], checks: dict[str, Any], refs: list[str]) -> None:
    table = Table(title=f"Shipped detector ({MODEL.parent.name}), onnxruntime CPU, p50 / p99 / max")
    for col in (
        "frame, threads",
        "end to end",
        "fps",
        "model only",
        "model fps",
        "letterbox",
        f">= {GOAL_FPS:.0f} fps",
    ):
        table.add_column(col, justify="right" if col != "frame, threads" else "left")
    for key, row in speed.items():
        e2e = fps(row["end_to_end"])
        table.add_row(
            key,
            fmt_ms(row["end_to_end"]),
            f"{e2e:.0f}",
            fmt_ms(row["model"]),
            f"{fps(row['model']):.0f}",
            fmt_ms(row["preprocess"], ("p50_ms",)),
            verdict(e2e >= GOAL_FPS),
        )
    console.print(table)
    table = Table(title="decode + NMS (conf 0.25 unless said, IoU 0.45), p50 ms, same outputs")
    table.add_column("outputs")
    table.add_column("candidates", justify="right")
    table.add_column("kept", justify="right")
    table.add_column("onboard.perception.detector", justify="right")
    for ref in refs:
        table.add_column(f"{ref} reference", justify="right")
        table.add_column("agrees", justify="center")
    for name, row in checks.items():
        cells = [name, str(row["candidates"]), str(row["kept"]), f"{row['ours']['p50_ms']:.3f}"]
        for ref in refs:
            cells += [
                f"{row[ref]['p50_ms']:.3f}",
                verdict(row[f"{ref}_agrees"]).replace("met", "yes").replace("missed", "NO"),
            ]
        table.add_row(*cells)
    console.print(table)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
