"""Train models/detector: a small anchor-free detector of the YOLOv8 output layout, in torch.

    pip install -e '.[train]' && python models/detector/train.py

Renders the data set from the twin (models/detector/dataset.py; cached between runs), trains
the network below on the train split, picks the epoch with the best validation mAP@0.5,
exports it to ONNX (``model.onnx``, output [1, 4 + C, 3549] for the 416 input: boxes in
input pixels, class probabilities after a sigmoid), writes ``classes.json``, and measures
the shipped file through ``onboard.perception.detector.Detector`` on the held-out test
renders: mAP@0.5 (VOC all-point) and frames per second with one onnxruntime thread.
``--eval-only`` measures a model on the base or the hard set instead, without torch
(``evaluate.py``: ``train.py --eval-only --set hard``). Those are the figures in CARD.md.

The network: a plain conv backbone (stride 2 convs + small residual blocks), a top-down
feature pyramid, and per level (strides 8, 16, 32) a head with box distances (left, top,
right, bottom from the cell centre, softplus times the stride) and class logits, as YOLOv8's
anchor-free heads without the DFL bins. Each ground-truth box is assigned the cells whose
centre lies inside it and within 2.5 strides of its centre, on the levels that suit its
size; class targets are the IoU of the predicted box (a quality-aware score), the box loss is
GIoU. torch is used for training and export only; nothing here runs on the robot.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if __name__ == "__main__" and "--eval-only" in sys.argv[1:]:
    # a measurement needs no torch: evaluate.py takes this process's place (its rendering
    # processes import the main script again, which must then not be this one)
    os.execv(sys.executable, [sys.executable, str(HERE / "evaluate.py"), *sys.argv[1:]])
sys.path.insert(0, str(HERE))

import argparse  # noqa: E402
import copy  # noqa: E402
import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import dataset  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import Tensor, nn  # noqa: E402

from onboard.base.digest import file_sha256  # noqa: E402
from onboard.perception.detector import (  # noqa: E402
    Detection,
    Detector,
    decode,
    mean_average_precision,
    nms,
)

STRIDES = (8, 16, 32)
WIDTHS = (12, 24, 40, 64, 96)
CROP = (0.6, 0.8)  # training crops (h, w) as fractions of the input side, to a multiple of 32
OPSET = 17
CENTER_RADIUS = 2.5
# the box sizes (longest side, input pixels) each level is assigned
SIZE_RANGES = ((0.0, 80.0), (40.0, 160.0), (96.0, 1e9))


# -- the network ----------------------------------------------------------------------------


class Conv(nn.Sequential):
    def __init__(self, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.SiLU(inplace=True),
        )


class Block(nn.Module):
    """A residual bottleneck: half the channels through a 3x3 conv, concatenated back."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.reduce = Conv(c, c // 2, 1)
        self.conv = Conv(c // 2, c // 2, 3)
        self.out = Conv(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = self.reduce(x)
        return x + self.out(torch.cat([y, self.conv(y)], 1))


class PooledContext(nn.Module):
    """YOLOv5's SPPF: three chained 5x5 max pools of the reduced map, concatenated, so that a
    cell at stride 32 sees the whole frame (the convs alone reach 239 px)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.reduce = Conv(c, c // 2, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.out = Conv(2 * c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        maps = [self.reduce(x)]
        for _ in range(3):
            maps.append(self.pool(maps[-1]))
        return self.out(torch.cat(maps, 1))


class Head(nn.Module):
    """Box distances and class logits for one level: one shared 3x3 conv, then a 1x1 each."""

    def __init__(self, c: int, num_classes: int) -> None:
        super().__init__()
        self.conv = Conv(c, c, 3)
        self.box = nn.Conv2d(c, 4, 1)
        self.cls = nn.Conv2d(c, num_classes, 1)
        nn.init.constant_(self.cls.bias, -math.log(99.0))  # start at p = 0.01
        nn.init.constant_(self.box.bias, 0.5)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        return torch.cat([self.box(y), self.cls(y)], 1)


class TinyDet(nn.Module):
    """Returns raw per-anchor rows [B, 4 + C, A] in training, the exported layout in export."""

    def __init__(
        self,
        num_classes: int,
        size: tuple[int, int],
        w: tuple[int, ...] = WIDTHS,
        *,
        pooled: bool = False,
    ):
        super().__init__()
        self.num_classes = num_classes
        self.stem = nn.Sequential(Conv(3, w[0], 3, 2), Conv(w[0], w[1], 3, 2))
        self.down3 = nn.Sequential(Conv(w[1], w[2], 3, 2), Block(w[2]))
        self.down4 = nn.Sequential(Conv(w[2], w[3], 3, 2), Block(w[3]))
        self.down5 = nn.Sequential(Conv(w[3], w[4], 3, 2), Block(w[4]))
        self.context = PooledContext(w[4]) if pooled else None
        self.lat5 = Conv(w[4], w[3], 1)
        self.fuse4 = nn.Sequential(Conv(2 * w[3], w[3], 1), Block(w[3]))
        self.lat4 = Conv(w[3], w[2], 1)
        self.fuse3 = nn.Sequential(Conv(2 * w[2], w[2], 1), Block(w[2]))
        self.heads = nn.ModuleList(Head(c, num_classes) for c in (w[2], w[3], w[4]))
        points, strides = anchor_points(size)
        self.register_buffer("points", points, persistent=False)  # (2, A)
        self.register_buffer("strides", strides, persistent=False)  # (1, A)
        self.export = False

    def forward(self, x: Tensor) -> Tensor:
        p3 = self.down3(self.stem(x))
        p4 = self.down4(p3)
        p5 = self.down5(p4)
        if self.context is not None:
            p5 = self.context(p5)
        n4 = self.fuse4(torch.cat([F.interpolate(self.lat5(p5), scale_factor=2.0), p4], 1))
        n3 = self.fuse3(torch.cat([F.interpolate(self.lat4(n4), scale_factor=2.0), p3], 1))
        raw = torch.cat([h(f).flatten(2) for h, f in zip(self.heads, (n3, n4, p5), strict=True)], 2)
        if not self.export:
            return raw
        ltrb = F.softplus(raw[:, :4]) * self.strides
        xy1 = self.points - ltrb[:, :2]
        xy2 = self.points + ltrb[:, 2:]
        return torch.cat([(xy1 + xy2) / 2, xy2 - xy1, raw[:, 4:].sigmoid()], 1)


@functools.cache
def anchor_points(size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Cell centres (2, A) in input pixels and their strides (1, A), level by level."""
    points, strides = [], []
    for s in STRIDES:
        ys, xs = torch.meshgrid(
            torch.arange(size[0] // s, dtype=torch.float32),
            torch.arange(size[1] // s, dtype=torch.float32),
            indexing="ij",
        )
        points.append(torch.stack([xs.flatten(), ys.flatten()]) * s + s / 2)
        strides.append(torch.full((1, xs.numel()), float(s)))
    return torch.cat(points, 1), torch.cat(strides, 1)


# -- assignment and loss --------------------------------------------------------------------


def decode_boxes(raw: Tensor, points: Tensor, strides: Tensor) -> Tensor:
    """(B, A, 4) xyxy in input pixels from raw rows [B, 4 + C, A]."""
    ltrb = F.softplus(raw[:, :4]) * strides
    return torch.cat([points - ltrb[:, :2], points + ltrb[:, 2:]], 1).transpose(1, 2)


def assign(
    gt_boxes: Tensor, gt_valid: Tensor, points: Tensor, strides: Tensor
) -> tuple[Tensor, Tensor]:
    """For each anchor, the index of its ground truth box (B, A) and whether it has one.

    gt_boxes (B, M, 4) xyxy, gt_valid (B, M). A cell is positive for a box when its centre is
    inside the box, within CENTER_RADIUS strides of the box centre, and its level's size
    range holds the box; the cell holding the box centre on each such level always is. A
    cell claimed by several boxes takes the smallest.
    """
    px, py = points[0][None, None], points[1][None, None]  # (1, 1, A)
    s = strides[0][None, None]
    x1, y1, x2, y2 = (gt_boxes[..., i, None] for i in range(4))  # (B, M, 1)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    inside = (px > x1) & (px < x2) & (py > y1) & (py < y2)
    near = ((px - cx).abs() < CENTER_RADIUS * s) & ((py - cy).abs() < CENTER_RADIUS * s)
    longest = torch.maximum(x2 - x1, y2 - y1)
    level_ok = torch.zeros_like(inside)
    centre_cell = torch.zeros_like(inside)
    for stride, (lo, hi) in zip(STRIDES, SIZE_RANGES, strict=True):
        on_level = s == stride
        level_ok |= on_level & (longest >= lo) & (longest <= hi)
        centre_cell |= on_level & ((px - cx).abs() <= stride / 2) & ((py - cy).abs() <= stride / 2)
    positive = ((inside & near) | centre_cell) & level_ok & gt_valid[..., None]
    area = ((x2 - x1) * (y2 - y1)).expand_as(positive)
    cost = torch.where(positive, area, torch.full_like(area, float("inf")))
    best_cost, best = cost.min(1)  # over boxes: (B, A)
    return best, torch.isfinite(best_cost)


def giou(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """IoU and GIoU of matching rows of xyxy boxes (n, 4)."""
    iw = (torch.minimum(a[:, 2], b[:, 2]) - torch.maximum(a[:, 0], b[:, 0])).clamp(min=0)
    ih = (torch.minimum(a[:, 3], b[:, 3]) - torch.maximum(a[:, 1], b[:, 1])).clamp(min=0)
    inter = iw * ih
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a + area_b - inter + 1e-7
    iou = inter / union
    cw = torch.maximum(a[:, 2], b[:, 2]) - torch.minimum(a[:, 0], b[:, 0])
    ch = torch.maximum(a[:, 3], b[:, 3]) - torch.minimum(a[:, 1], b[:, 1])
    hull = cw * ch + 1e-7
    return iou, iou - (hull - union) / hull


@dataclass
class Losses:
    total: Tensor
    box: float
    cls: float
    positives: int


def ignored_cells(gt_boxes: Tensor, ignore: Tensor, points: Tensor) -> Tensor:
    """(B, A): cells whose centre lies in an ignored box (tiny or mostly hidden objects)."""
    px, py = points[0][None, None], points[1][None, None]
    x1, y1, x2, y2 = (gt_boxes[..., i, None] for i in range(4))
    inside = (px >= x1 - 2) & (px <= x2 + 2) & (py >= y1 - 2) & (py <= y2 + 2)
    return (inside & ignore[..., None]).any(1)


def detection_loss(
    raw: Tensor,
    gt_boxes: Tensor,
    gt_labels: Tensor,
    gt_valid: Tensor,
    size: tuple[int, int],
    class_weights: Tensor | None = None,
) -> Losses:
    """gt_labels < 0 mark ignored boxes: no positives on them, no class loss on their cells.

    ``class_weights`` (C,) scales the loss of each positive cell, its box and all its class
    logits, by the weight of the class it is assigned (``--weigh``); negatives keep weight 1.
    """
    points, strides = anchor_points(size)
    pred = decode_boxes(raw, points, strides)  # (B, A, 4)
    logits = raw[:, 4:].transpose(1, 2)  # (B, A, C)
    real = gt_valid & (gt_labels >= 0)
    best, positive = assign(gt_boxes, real, points, strides)
    target_box = torch.gather(gt_boxes, 1, best[..., None].expand(-1, -1, 4))[positive]
    target_cls = torch.gather(gt_labels, 1, best)[positive]
    iou, g = giou(pred[positive], target_box)
    n = max(int(positive.sum()), 1)
    quality = torch.zeros_like(logits)
    quality[(*positive.nonzero(as_tuple=True), target_cls)] = iou.detach().clamp(min=0.2)
    weight = (~(ignored_cells(gt_boxes, gt_valid & (gt_labels < 0), points) & ~positive)).float()
    box_weight = torch.ones_like(iou)
    if class_weights is not None:
        box_weight = class_weights[target_cls]
        weight[positive] = box_weight
    cls_loss = (
        F.binary_cross_entropy_with_logits(logits, quality, reduction="none") * weight[..., None]
    ).sum() / n
    box_loss = ((1.0 - g) * box_weight).sum() / n
    return Losses(cls_loss + 5.0 * box_loss, float(box_loss.detach()), float(cls_loss.detach()), n)


# -- training -------------------------------------------------------------------------------


def batches(
    data: dataset.Split,
    batch: int,
    rng: np.random.Generator,
    augment: bool,
    pool: np.ndarray | None = None,
) -> Iterator[tuple[Tensor, Tensor, Tensor, Tensor]]:
    """Batches of ``pool`` (image indices, repeats allowed; default: each image once),
    shuffled, cropped and augmented when ``augment``."""
    if pool is None:
        pool = np.arange(len(data.images))
    order = rng.permutation(pool) if augment else pool
    for start in range(0, len(order), batch):
        idx = order[start : start + batch]
        images = data.images[idx]  # (b, h, w, 3) uint8
        labels = [data.labels[i] for i in idx]
        boxes = [data.boxes[i].copy() for i in idx]
        if augment:
            images, boxes, labels = _crop(images, boxes, labels, rng)
        images = images.astype(np.float32) * np.float32(1 / 255)
        if augment:
            images, boxes = _augment(images, boxes, rng)
        m = max(1, max(len(b) for b in boxes))
        gt = np.zeros((len(idx), m, 4), np.float32)
        cls = np.zeros((len(idx), m), np.int64)
        valid = np.zeros((len(idx), m), bool)
        for k, (b, lab) in enumerate(zip(boxes, labels, strict=True)):
            gt[k, : len(b)], cls[k, : len(b)], valid[k, : len(b)] = b, lab, True
        x = torch.from_numpy(np.ascontiguousarray(images.transpose(0, 3, 1, 2)))
        yield x, torch.from_numpy(gt), torch.from_numpy(cls), torch.from_numpy(valid)


def _crop(
    images: np.ndarray, boxes: list[np.ndarray], labels: list[np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
    """Random CROP windows; a box cut to less than 60% of its area becomes an ignored box."""
    h, w = (32 * round(images.shape[1] * f / 32) for f in CROP)
    out = np.empty((len(images), h, w, 3), np.uint8)
    new_boxes, new_labels = [], []
    for k in range(len(images)):
        y0 = int(rng.integers(0, images.shape[1] - h + 1))
        x0 = int(rng.integers(0, images.shape[2] - w + 1))
        out[k] = images[k, y0 : y0 + h, x0 : x0 + w]
        b = boxes[k] - np.array([x0, y0, x0, y0], np.float32)
        clipped = np.clip(b, 0, [w, h, w, h]).astype(np.float32)
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        cw, ch = clipped[:, 2] - clipped[:, 0], clipped[:, 3] - clipped[:, 1]
        seen = (cw > 0) & (ch > 0)
        lab = labels[k].copy()
        cut = seen & ((cw * ch < 0.6 * area) | (np.minimum(cw, ch) < 4)) & (lab >= 0)
        lab[cut] = -1 - lab[cut]
        new_boxes.append(clipped[seen])
        new_labels.append(lab[seen])
    return out, new_boxes, new_labels


def _augment(
    images: np.ndarray, boxes: list[np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Horizontal flips and brightness/contrast jitter (never hue: colour names classes)."""
    w = images.shape[2]
    for k in range(len(images)):
        if rng.random() < 0.5:
            images[k] = images[k, :, ::-1]
            b = boxes[k]
            boxes[k] = np.stack([w - b[:, 2], b[:, 1], w - b[:, 0], b[:, 3]], 1) if len(b) else b
    gain = rng.uniform(0.75, 1.25, (len(images), 1, 1, 1)).astype(np.float32)
    bias = rng.uniform(-0.08, 0.08, (len(images), 1, 1, 1)).astype(np.float32)
    images *= gain
    images += bias
    return np.clip(images, 0.0, 1.0, out=images), boxes


def evaluate_torch(model: TinyDet, data: dataset.Split, classes: list[str]) -> float:
    """mAP@0.5 of the torch model on a letterboxed split (boxes in input pixels)."""
    model.eval()
    model.export = True
    found: list[list[Detection]] = []
    with torch.no_grad():
        for x, *_ in batches(data, 64, np.random.default_rng(0), augment=False):
            for out in model(x).numpy():
                boxes, scores, ids = decode(out, 0.001)
                kept = nms(boxes, scores, ids, 0.45, 100)
                found.append(
                    [
                        Detection(classes[int(ids[k])], float(scores[k]), tuple(boxes[k].tolist()))
                        for k in kept
                    ]
                )
    model.export = False
    return mean_average_precision(found, data.truths(), ignored=data.ignored())[0]


def _named_numbers(
    pairs: list[str], flag: str, names: Sequence[str], kind: str
) -> dict[str, float]:
    """``NAME=NUMBER`` pairs of ``flag``, each NAME one of ``names`` (a ``kind``)."""
    out: dict[str, float] = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name not in names:
            raise SystemExit(f"train.py: error: {flag} {pair}: no {kind} {name!r}")
        try:
            out[name] = float(value)
        except ValueError:
            raise SystemExit(f"train.py: error: {flag} {pair}: not NAME=NUMBER") from None
    return out


def class_options(pairs: list[str], flag: str) -> dict[int, float]:
    """``NAME=VALUE`` pairs of --weigh/--repeat as {class index: value}."""
    named = _named_numbers(pairs, flag, dataset.CLASSES, "class")
    return {dataset.CLASSES.index(name): value for name, value in named.items()}


def state_weights(pairs: list[str]) -> tuple[tuple[str, float], ...]:
    """``STATE=WEIGHT`` pairs of --states, checked against dataset.TASK_STATES and
    dataset.OPT_IN_STATES."""
    states = [*dataset.TASK_STATES, *dataset.OPT_IN_STATES]
    named = _named_numbers(pairs, "--states", states, "task state")
    for name, weight in named.items():
        if weight < 0:
            raise SystemExit(f"train.py: error: --states {name}={weight:g}: a weight is 0 or more")
    return tuple(sorted(named.items()))


def epoch_pool(data: dataset.Split, repeats: dict[int, float]) -> np.ndarray:
    """Each train image once, and an image with a box of a --repeat class that many times in
    all (the largest repeat of its classes; ignored boxes do not count)."""
    times = np.ones(len(data.images), np.int64)
    for k, labels in enumerate(data.labels):
        for c, n in repeats.items():
            if (labels == c).any():
                times[k] = max(times[k], round(n))
    return np.repeat(np.arange(len(data.images)), times)


def train(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    conditions = dataset.TRAIN if args.conditions == "train" else dataset.BASE
    if args.scenes is not None:  # with --conditions base: the base look, with task states
        conditions = dataclasses.replace(conditions, scenes=args.scenes)
    if args.states:
        conditions = dataclasses.replace(conditions, states=state_weights(args.states))
    if args.working_arm:
        conditions = dataclasses.replace(conditions, working_arm=args.working_arm)
    data = dataset.load(args.size, cache=not args.no_cache, scale=args.data, conditions=conditions)
    print(
        f"data: rendered in {data.seconds:.0f} s (0: cached);"
        f" {len(data.train.images)} train, {len(data.val.images)} val,"
        f" {len(data.test_images)} test images under {args.conditions.upper()}"
        f" (task-state scenes {conditions.scenes:.0%})"
    )
    if args.mix_base:
        base = dataset.load(
            args.size,
            cache=not args.no_cache,
            scale=args.data * args.mix_base,
            conditions=dataclasses.replace(dataset.BASE, working_arm=args.working_arm),
        )
        data.train, data.val = concat(data.train, base.train), concat(data.val, base.val)
        print(
            f"  and BASE: rendered in {base.seconds:.0f} s; {len(base.train.images)} train and"
            f" {len(base.val.images)} val images mixed in"
        )
    classes = list(dataset.CLASSES)
    model = network(args, len(classes))
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params:,} parameters; {len(classes)} classes")
    if args.init:
        load_exported(model, args.init, args.size)
        print(f"init: {args.init} (sha256 {file_sha256(args.init)[:12]}), batch norms frozen")
    weights = class_options(args.weigh, "--weigh")
    class_weights = None
    if weights:
        class_weights = torch.ones(len(classes))
        for c, w in weights.items():
            class_weights[c] = w
        print("weighted: " + ", ".join(f"{classes[c]} x{w:g}" for c, w in weights.items()))
    pool = epoch_pool(data.train, class_options(args.repeat, "--repeat"))
    if args.repeat:
        print(f"repeats: {len(pool)} train images an epoch ({len(data.train.images)} renders)")
    steps_per_epoch = math.ceil(len(pool) / args.batch)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, args.lr, total_steps=args.epochs * steps_per_epoch, pct_start=0.15
    )
    best_map, best_state = -1.0, None
    started = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        if args.init:  # the exported graph folded them into the convs: they stay identities
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.eval()
        sums = np.zeros(2)
        compute = 0.0
        for x, gt, cls, valid in batches(data.train, args.batch, rng, augment=True, pool=pool):
            step_start = time.perf_counter()
            losses = detection_loss(
                model(x), gt, cls, valid, (x.shape[2], x.shape[3]), class_weights
            )
            opt.zero_grad(set_to_none=True)
            losses.total.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
            opt.step()
            sched.step()
            sums += (losses.box, losses.cls)
            compute += time.perf_counter() - step_start
        val_map = evaluate_torch(model, data.val, classes)
        if val_map >= best_map:
            best_map = val_map
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        box, cls_ = sums / steps_per_epoch
        print(
            f"epoch {epoch + 1}/{args.epochs}: box {box:.3f} cls {cls_:.3f}"
            f" val mAP@0.5 {val_map:.3f}  ({time.perf_counter() - started:.0f} s,"
            f" {compute:.0f} s in steps)"
        )
    assert best_state is not None
    model.load_state_dict(best_state)
    print(f"training: {time.perf_counter() - started:.0f} s; best val mAP@0.5 {best_map:.3f}")
    export(model, classes, args.size, args.out)
    report(args.out, classes, data)


def concat(a: dataset.Split, b: dataset.Split) -> dataset.Split:
    return dataset.Split(
        np.concatenate([a.images, b.images]), a.boxes + b.boxes, a.labels + b.labels
    )


def network(args: argparse.Namespace, num_classes: int) -> TinyDet:
    size = (args.size, args.size)
    return TinyDet(num_classes, size, args.widths, pooled=args.pooled)


def load_exported(model: TinyDet, path: Path, size: int) -> None:
    """Start from a model this script exported: the export folded each batch norm into its
    conv, so a conv takes the folded weights and its norm becomes an identity (mean 0,
    variance 1 - eps, scale 1, the folded bias as shift) that training keeps frozen. Checked:
    the torch model must then give the exported file's output."""
    import onnx
    import onnxruntime
    from onnx import numpy_helper

    proto = onnx.load(str(path))
    weights = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    for node in proto.graph.node:  # the exporter shares equal tensors (an untrained model's)
        if node.op_type == "Identity" and node.input[0] in weights:
            weights[node.output[0]] = weights[node.input[0]]
    nodes = [n for n in proto.graph.node if n.op_type == "Conv"]
    order: list[nn.Conv2d] = []  # the convs as the forward pass runs them: the graph's order
    hooks = [
        m.register_forward_hook(lambda m, *_: order.append(m))
        for m in model.modules()
        if isinstance(m, nn.Conv2d)
    ]
    model.eval()
    with torch.no_grad():
        model(torch.zeros(1, 3, size, size))
    for hook in hooks:
        hook.remove()
    norms = {id(m[0]): m[1] for m in model.modules() if isinstance(m, Conv)}
    if len(order) != len(nodes):
        raise SystemExit(
            f"train.py: error: --init {path}: {len(nodes)} convs, not {len(order)}"
            " (--widths and --pooled must be the file's)"
        )
    with torch.no_grad():
        for conv, node in zip(order, nodes, strict=True):
            w = torch.from_numpy(weights[node.input[1]].copy())
            b = torch.from_numpy(weights[node.input[2]].copy())
            if w.shape != conv.weight.shape:
                raise SystemExit(f"train.py: error: --init {path}: not this network ({node.name})")
            conv.weight.copy_(w)
            if conv.bias is not None:
                conv.bias.copy_(b)
                continue
            norm = norms[id(conv)]
            assert isinstance(norm, nn.BatchNorm2d)
            norm.weight.fill_(1.0)
            norm.bias.copy_(b)
            norm.running_mean.zero_()
            norm.running_var.fill_(1.0 - norm.eps)
        # the check runs at the file's own input size, which --size may change (the
        # network is convolutional: only its anchor points depend on the size)
        dims = proto.graph.input[0].type.tensor_type.shape.dim
        theirs_size = (int(dims[2].dim_value), int(dims[3].dim_value))
        checked = copy.deepcopy(model)
        checked.points, checked.strides = anchor_points(theirs_size)
        x = torch.rand(1, 3, *theirs_size, generator=torch.Generator().manual_seed(0))
        checked.export = True
        mine = checked(x).numpy()
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    if not np.allclose(mine, theirs, atol=1e-3, rtol=1e-3):
        raise SystemExit(f"train.py: error: --init {path}: its weights do not reproduce it")


def export(model: TinyDet, classes: list[str], size: int, path: Path) -> None:
    import onnx

    model.eval()
    model.export = True
    dummy = torch.zeros(1, 3, size, size)
    torch.onnx.export(
        model,
        (dummy,),
        str(path),
        input_names=["images"],
        output_names=["output0"],
        opset_version=OPSET,
        dynamo=False,
    )
    proto = onnx.load(str(path))
    names = {i: name for i, name in enumerate(classes)}
    meta = {"names": repr(names), "stride": "32", "task": "detect", "imgsz": f"[{size}, {size}]"}
    for key, value in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    proto.producer_name = "onboard models/detector/train.py"
    onnx.save(proto, str(path))
    (HERE / "classes.json").write_text(json.dumps(classes, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size:,} bytes) and classes.json")


def report(path: Path, classes: list[str], data: dataset.Data) -> None:
    """The card's figures, measured through onboard.perception.detector on raw test renders."""
    detector = Detector(path, HERE / "classes.json", conf=0.001, iou=0.45, threads=1)
    found = [detector.detect(image) for image in data.test_images]
    test_map, per_class = mean_average_precision(found, data.test_truths, ignored=data.test_ignored)
    print(f"test mAP@0.5 {test_map:.3f} on {len(data.test_images)} renders")
    for name in classes:
        count = sum(lab == name for truth in data.test_truths for lab, _ in truth)
        print(f"  {name:14s} AP {per_class.get(name, float('nan')):.3f}  ({count} boxes)")
    fast = Detector(path, HERE / "classes.json", threads=1)
    image = data.test_images[0]
    for _ in range(10):
        fast.detect(image)
    times = []
    for image in data.test_images[:200]:
        t = time.perf_counter()
        fast.detect(image)
        times.append(time.perf_counter() - t)
    ms = 1000 * float(np.median(times))
    print(f"end to end, 1 thread: {ms:.1f} ms median, {1000 / ms:.0f} fps ({image.shape[:2]})")


def _share(text: str) -> float:
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share from 0 to 1")
    return share


def _widths(text: str) -> tuple[int, ...]:
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        widths = ()
    if len(widths) != 5 or any(w < 2 or w % 2 for w in widths):
        raise argparse.ArgumentTypeError(f"{text} is not five even channel counts (12,24,40,64,96)")
    return widths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--size", type=int, default=416)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--widths",
        type=_widths,
        default=WIDTHS,
        metavar="W1,...,W5",
        help="the channels at strides 2, 4, 8, 16 and 32 (default %(default)s; the speed goal,"
        " 60 fps end to end at 320x240 on one thread, bounds them); --init's must match",
    )
    parser.add_argument(
        "--pooled",
        action="store_true",
        help="a pooled context block (SPPF) at stride 32; --init's must have it too",
    )
    parser.add_argument("--data", type=float, default=1.0, help="scale the data set sizes")
    parser.add_argument("--no-cache", action="store_true", help="render the data set again")
    parser.add_argument(
        "--mix-base",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="mix BASE renders into the train and val splits, SHARE times as many as --data's"
        " (the first of the shipped model's own renders), so the base look is not forgotten",
    )
    parser.add_argument(
        "--init",
        type=Path,
        help="start from this ONNX model exported by train.py (fine-tuning; batch norms frozen;"
        " its input size may differ from --size)",
    )
    parser.add_argument(
        "--weigh",
        action="append",
        default=[],
        metavar="CLASS=W",
        help="scale the loss of the cells assigned to CLASS's boxes by W (repeatable;"
        " e.g. handle=3: the class open_drawer grasps, and the fewest boxes)",
    )
    parser.add_argument(
        "--repeat",
        action="append",
        default=[],
        metavar="CLASS=N",
        help="show each train image with a box of CLASS N times an epoch (repeatable)",
    )
    parser.add_argument(
        "--conditions",
        choices=("train", "base"),
        default="train",
        help="the data's render conditions: dataset.TRAIN (randomized) or BASE (the 0.973 model's)",
    )
    parser.add_argument(
        "--scenes",
        type=_share,
        metavar="SHARE",
        help="the share of the scenes that are task states (dataset.TASK_STATES: belt_order's"
        " queue, the face-on tower, the duck in the box, the tidy skill's pair); default: TRAIN's"
        f" {dataset.TRAIN.scenes}, BASE's 0 (--mix-base's renders are always BASE's)",
    )
    parser.add_argument(
        "--states",
        action="append",
        default=[],
        metavar="STATE=W",
        help="draw the task state STATE with weight W instead of its dataset.TASK_STATES weight"
        " (repeatable; e.g. queue=3 for more of belt_order's queues); dataset.OPT_IN_STATES"
        " (lookalikes, open_drawer) are drawn only when named here",
    )
    parser.add_argument(
        "--working-arm",
        type=_share,
        default=0.0,
        metavar="SHARE",
        help="the share of renders (--mix-base's too) with the arm in a working pose over the"
        " table, as the skills move it (dataset.Conditions.working_arm; default 0: near home)",
    )
    parser.add_argument(
        "--out", type=Path, default=HERE / "model.onnx", help="where to write the ONNX model"
    )
    parser.add_argument(
        "--eval-only",
        action="store_true",
        help="no training, no torch: measure a model on the base or hard set (evaluate.py's"
        " options: --set base|hard, --seeds, --count, --model, --no-write)",
    )
    parser.add_argument(
        "--export-only",
        action="store_true",
        help="no data, no training: write --init's weights at --size to --out (the network"
        " at a larger input that mirror.py --view takes)",
    )
    args = parser.parse_args()
    if not args.export_only:
        train(args)
        return
    if args.init is None:
        parser.error("--export-only needs --init")
    model = network(args, len(dataset.CLASSES))
    load_exported(model, args.init, args.size)
    export(model, list(dataset.CLASSES), args.size, args.out)


if __name__ == "__main__":
    main()
