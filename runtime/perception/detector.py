"""Object detection with any ONNX model of the YOLOv8 output layout (no torch, no opencv).

The model contract, the one ``yolo export format=onnx`` (``nms=False``, the default) writes and
``models/detector/`` ships:

- one input ``[1, 3, H, W]`` float32, RGB scaled to 0..1, letterboxed (aspect kept, grey 114
  padding, H and W multiples of the stride);
- one output ``[1, 4 + C, anchors]``: rows 0..3 are cx, cy, w, h in input pixels, rows 4.. are
  the C class scores (probabilities; no objectness row, no NMS in the graph).

Class names come from a card (see :func:`load_classes`): a JSON list, a JSON object, a markdown
table, or, when none is given, the ``names`` metadata that ultralytics writes into its exports.

Everything after the model is numpy: :func:`letterbox`, :func:`decode` (vectorised over the
anchors) and :func:`nms` (class-aware, vectorised IoU), all public and pure, so the benchmark
and the tests can run them on any output. :func:`mean_average_precision` is the VOC-style
evaluation used by the model card.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from onboard.base.errors import ModelError

__all__ = [
    "LAYOUT",
    "Box",
    "Detection",
    "Detector",
    "Letterbox",
    "average_precision",
    "box_iou",
    "decode",
    "letterbox",
    "load_classes",
    "mean_average_precision",
    "nms",
]

LAYOUT = "[1, 4 + C, anchors] (cx, cy, w, h in input pixels, then C class scores; YOLOv8, no NMS)"
DEFAULT_SIZE = 640  # for models whose input size is dynamic
PAD_VALUE = 114
MAX_CANDIDATES = 30_000  # boxes handed to NMS at most, best first (as ultralytics' max_nms)
MATRIX_LIMIT = 1024  # NMS builds a full IoU matrix for up to this many boxes

Box = tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels
FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
ImageArray = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Detection:
    """One object: its class name, score (0..1) and box (x1, y1, x2, y2) in image pixels."""

    label: str
    score: float
    box: Box

    @property
    def center(self) -> tuple[float, float]:
        x1, y1, x2, y2 = self.box
        return (x1 + x2) / 2.0, (y1 + y2) / 2.0


# -- preprocessing --------------------------------------------------------------------------


@dataclass(frozen=True)
class Letterbox:
    """How an image was fitted into the network input; maps boxes both ways."""

    source: tuple[int, int]  # (h, w) of the original image
    shape: tuple[int, int]  # (h, w) of the network input
    scale: tuple[float, float]  # (sx, sy): resized size / original size
    pad: tuple[int, int]  # (left, top) padding in input pixels

    def to_source(self, boxes: npt.ArrayLike) -> FloatArray:
        """Boxes (n, 4) xyxy in input pixels -> original image pixels, clipped to the image."""
        out = np.array(boxes, dtype=np.float32).reshape(-1, 4)
        out[:, 0::2] = (out[:, 0::2] - self.pad[0]) / self.scale[0]
        out[:, 1::2] = (out[:, 1::2] - self.pad[1]) / self.scale[1]
        np.clip(out[:, 0::2], 0.0, self.source[1], out=out[:, 0::2])
        np.clip(out[:, 1::2], 0.0, self.source[0], out=out[:, 1::2])
        return out

    def to_input(self, boxes: npt.ArrayLike) -> FloatArray:
        """Boxes (n, 4) xyxy in original image pixels -> input pixels."""
        out = np.array(boxes, dtype=np.float32).reshape(-1, 4)
        out[:, 0::2] = out[:, 0::2] * self.scale[0] + self.pad[0]
        out[:, 1::2] = out[:, 1::2] * self.scale[1] + self.pad[1]
        return out


def letterbox(
    image: ImageArray, shape: tuple[int, int], stride: int = 32, auto: bool = False
) -> tuple[ImageArray, Letterbox]:
    """Resize ``image`` (H, W, 3 uint8) into ``shape`` (h, w) keeping its aspect; pad with 114.

    With ``auto`` the padding is only what makes each side a multiple of ``stride`` (for
    models with a dynamic input size), else the result is exactly ``shape``. Bilinear
    resampling with half-pixel centres, as cv2.INTER_LINEAR.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"expected an (H, W, 3) uint8 RGB image, got {image.shape} {image.dtype}")
    src_h, src_w = int(image.shape[0]), int(image.shape[1])
    ratio = min(shape[0] / src_h, shape[1] / src_w)
    new_h, new_w = max(1, round(src_h * ratio)), max(1, round(src_w * ratio))
    out_h, out_w = shape
    if auto:
        out_h = new_h + (shape[0] - new_h) % stride
        out_w = new_w + (shape[1] - new_w) % stride
    top, left = (out_h - new_h) // 2, (out_w - new_w) // 2
    canvas = np.full((out_h, out_w, 3), PAD_VALUE, dtype=np.uint8)
    canvas[top : top + new_h, left : left + new_w] = _resize(image, new_h, new_w)
    box = Letterbox(
        source=(src_h, src_w),
        shape=(out_h, out_w),
        scale=(new_w / src_w, new_h / src_h),
        pad=(left, top),
    )
    return canvas, box


def _resize(image: ImageArray, out_h: int, out_w: int) -> ImageArray:
    """Rows first, then columns, each ``a + (b - a) * w`` in float32, rounded to uint8.

    The pixels are gathered from a (h, w * 3) view, whole rows and then single bytes along
    each row, and the arithmetic runs in place: 2-3 times faster than gathering (h, w, 3)
    triplets into new arrays, and the same bytes (the same float32 operations in the same
    order), so a model sees what it was trained on.
    """
    src_h, src_w, channels = (int(n) for n in image.shape)
    if (src_h, src_w) == (out_h, out_w):
        return image
    y0, y1, wy = _taps(src_h, out_h)
    x0, x1, wx = _channel_taps(src_w, out_w, channels)
    flat = image.reshape(src_h, src_w * channels)
    rows = flat[y0].astype(np.float32)
    step = flat[y1].astype(np.float32)
    step -= rows
    step *= wy[:, None]
    rows += step
    out = rows[:, x0]
    step = rows[:, x1]
    step -= out
    step *= wx
    out += step
    np.rint(out, out=out)
    return out.astype(np.uint8).reshape(out_h, out_w, channels)


@lru_cache(maxsize=16)
def _channel_taps(src: int, dst: int, channels: int) -> tuple[IntArray, IntArray, FloatArray]:
    """``_taps`` along a row of ``channels``-byte pixels: an index and a weight per byte."""
    lo, hi, weight = _taps(src, dst)
    within = np.arange(channels)
    return (
        (lo[:, None] * channels + within).ravel(),
        (hi[:, None] * channels + within).ravel(),
        np.repeat(weight, channels),
    )


@lru_cache(maxsize=16)
def _taps(src: int, dst: int) -> tuple[IntArray, IntArray, FloatArray]:
    """Source indices and weights of a bilinear resize along one axis (half-pixel centres)."""
    pos = (np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5
    pos = np.clip(pos, 0.0, src - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, src - 1)
    return lo, hi, (pos - lo).astype(np.float32)


# -- postprocessing -------------------------------------------------------------------------


def decode(
    output: npt.ArrayLike, conf: float = 0.25, max_candidates: int = MAX_CANDIDATES
) -> tuple[FloatArray, FloatArray, IntArray]:
    """Candidates from one raw output ``[1, 4 + C, anchors]`` (or ``[4 + C, anchors]``).

    Each anchor's best class is its label; anchors whose best score is above ``conf`` are
    kept, at most ``max_candidates`` of them, best first. Returns ``boxes`` (n, 4) xyxy in
    input pixels, ``scores`` (n,) and ``class_ids`` (n,).
    """
    pred = np.asarray(output, dtype=np.float32)
    if pred.ndim == 3 and pred.shape[0] == 1:
        pred = pred[0]
    if pred.ndim != 2 or pred.shape[0] < 5:
        raise ValueError(f"expected an output of layout {LAYOUT}, got shape {list(pred.shape)}")
    class_scores = pred[4:]
    best = class_scores.max(axis=0)
    keep = np.flatnonzero(best > conf)
    if keep.size > max_candidates:
        keep = keep[np.argsort(-best[keep], kind="stable")[:max_candidates]]
    scores = best[keep]
    class_ids = class_scores[:, keep].argmax(axis=0).astype(np.int64)
    cx, cy, w, h = pred[0, keep], pred[1, keep], pred[2, keep], pred[3, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    order = np.argsort(-scores, kind="stable")
    return boxes[order].astype(np.float32), scores[order], class_ids[order]


def box_iou(box: npt.ArrayLike, boxes: npt.ArrayLike) -> FloatArray:
    """IoU of one xyxy box with each of ``boxes`` (n, 4)."""
    a = np.asarray(box, dtype=np.float32)
    b = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    iw = np.clip(np.minimum(a[2], b[:, 2]) - np.maximum(a[0], b[:, 0]), 0.0, None)
    ih = np.clip(np.minimum(a[3], b[:, 3]) - np.maximum(a[1], b[:, 1]), 0.0, None)
    inter = iw * ih
    area_a = max(float(a[2] - a[0]), 0.0) * max(float(a[3] - a[1]), 0.0)
    area_b = np.clip(b[:, 2] - b[:, 0], 0.0, None) * np.clip(b[:, 3] - b[:, 1], 0.0, None)
    union = area_a + area_b - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0).astype(np.float32)


def nms(
    boxes: npt.ArrayLike,
    scores: npt.ArrayLike,
    class_ids: npt.ArrayLike,
    iou: float = 0.45,
    max_det: int = 300,
) -> IntArray:
    """Greedy class-aware non-maximum suppression; indices of the kept boxes, best first.

    A box is dropped when a better-scored box *of the same class* overlaps it with IoU above
    ``iou`` (torchvision's ``batched_nms`` rule; equal scores keep the earlier box). Classes
    never suppress each other: up to MATRIX_LIMIT candidates share one IoU matrix masked to
    same-class pairs; past that each class is suppressed apart, then merged by score.
    """
    xyxy = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    score = np.asarray(scores, dtype=np.float32).reshape(-1)
    cls = np.asarray(class_ids, dtype=np.int64).reshape(-1)
    if not xyxy.shape[0] == score.shape[0] == cls.shape[0]:
        raise ValueError("boxes, scores and class_ids must have the same length")
    order = np.argsort(-score, kind="stable")
    if order.size <= MATRIX_LIMIT:  # one IoU matrix, masked to pairs of the same class
        over = _overlaps(xyxy[order], iou)
        over &= cls[order][:, None] == cls[order][None, :]
        return order[_greedy_matrix(over, max_det)]
    grouped = order[np.argsort(cls[order], kind="stable")]  # by class, best first in each
    starts = np.flatnonzero(np.diff(cls[grouped])) + 1
    kept = [group[_greedy(xyxy[group], iou, max_det)] for group in np.split(grouped, starts)]
    merged = np.concatenate(kept)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return merged[np.argsort(rank[merged])][:max_det].astype(np.int64)


def _greedy(boxes: FloatArray, iou: float, limit: int) -> IntArray:
    """Greedy NMS of boxes already sorted best first (one class); kept positions."""
    if boxes.shape[0] <= MATRIX_LIMIT:
        return _greedy_matrix(_overlaps(boxes, iou), limit)
    kept: list[int] = []
    remaining = np.arange(boxes.shape[0])
    while remaining.size and len(kept) < limit:
        best, rest = int(remaining[0]), remaining[1:]
        kept.append(best)
        remaining = rest[box_iou(boxes[best], boxes[rest]) <= iou]
    return np.asarray(kept, dtype=np.int64)


def _greedy_matrix(over: npt.NDArray[np.bool_], limit: int) -> IntArray:
    """Greedy pass over a suppression matrix of boxes sorted best first; kept positions."""
    suppressed = np.zeros(over.shape[0], dtype=bool)
    kept: list[int] = []
    for i in range(over.shape[0]):
        if suppressed[i]:
            continue
        kept.append(i)
        if len(kept) == limit:
            break
        suppressed |= over[i]
    return np.asarray(kept, dtype=np.int64)


def _overlaps(boxes: FloatArray, iou: float) -> npt.NDArray[np.bool_]:
    """(n, n): whether each pair of boxes has IoU above ``iou`` (inter > iou * union)."""
    x1, y1, x2, y2 = (np.ascontiguousarray(boxes[:, i]) for i in range(4))
    inter = np.minimum(x2[:, None], x2)
    inter -= np.maximum(x1[:, None], x1)
    np.maximum(inter, 0.0, out=inter)
    height = np.minimum(y2[:, None], y2)
    height -= np.maximum(y1[:, None], y1)
    np.maximum(height, 0.0, out=height)
    inter *= height
    area = np.maximum(x2 - x1, 0.0) * np.maximum(y2 - y1, 0.0)
    union = area[:, None] + area
    union -= inter
    union *= np.float32(iou)
    over: npt.NDArray[np.bool_] = inter > union
    return over


# -- class names ----------------------------------------------------------------------------

_ID_COLUMNS = {"id", "#", "index", "class id", "class_id"}
_NAME_COLUMNS = {"name", "class", "label", "class name", "names"}


def load_classes(source: str | Path | Sequence[str]) -> list[str]:
    """Class names in class-index order, from a sequence of names or a card file.

    A card file is one of:

    - ``*.json``: a list of names (``["red_block", "apple"]``), an object mapping ids to
      names (``{"0": "red_block", "1": "apple"}``), or either of those under a ``"names"``
      key (``{"names": [...], ...}``);
    - any other text (a ``CARD.md``): the first markdown table whose header has an id column
      (``id``, ``#``, ``index``) and a name column (``name``, ``class``, ``label``); backticks
      around the cells are ignored.

    Ids must be 0..C-1, each once. A bad card raises :class:`ModelError` naming the file.
    """
    if not isinstance(source, (str, Path)):
        return _checked([str(name) for name in source], "the classes given")
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = "missing" if not path.exists() else f"unreadable ({type(exc).__name__})"
        raise ModelError(f"class card {path} is {reason}") from exc
    try:
        if path.suffix.lower() == ".json":
            return _checked(_names_from_json(json.loads(text)), str(path))
        return _checked(_names_from_table(text), str(path))
    except (ValueError, TypeError) as exc:
        raise ModelError(f"class card {path}: {exc}") from exc


def _names_from_json(data: Any) -> list[str]:
    if isinstance(data, Mapping) and "names" in data:
        data = data["names"]
    if isinstance(data, list):
        return [str(name) for name in data]
    if isinstance(data, Mapping):
        return _by_id({int(k): str(v) for k, v in data.items()})
    raise ValueError("expected a JSON list of names or an object of id -> name")


def _names_from_table(text: str) -> list[str]:
    rows = [line.strip() for line in text.splitlines()]
    for start, line in enumerate(rows):
        if not line.startswith("|"):
            continue
        header = [_cell(c).lower() for c in _cells(line)]
        id_col = next((i for i, c in enumerate(header) if c in _ID_COLUMNS), None)
        name_col = next((i for i, c in enumerate(header) if c in _NAME_COLUMNS), None)
        if id_col is None or name_col is None or (start > 0 and rows[start - 1].startswith("|")):
            continue
        table: dict[int, str] = {}
        for row in rows[start + 1 :]:
            if not row.startswith("|"):
                break
            cells = [_cell(c) for c in _cells(row)]
            if set("".join(cells)) <= set("-: "):
                continue  # the separator row
            table[int(cells[id_col])] = cells[name_col]
        return _by_id(table)
    raise ValueError("no markdown table with an id and a name column")


def _cells(row: str) -> list[str]:
    return row.strip().strip("|").split("|")


def _cell(text: str) -> str:
    return text.strip().strip("`").strip()


def _by_id(table: Mapping[int, str]) -> list[str]:
    if sorted(table) != list(range(len(table))):
        raise ValueError(f"class ids must be 0..C-1, got {sorted(table)}")
    return [table[i] for i in range(len(table))]


def _checked(names: list[str], where: str) -> list[str]:
    if not names:
        raise ValueError(f"{where}: no class names")
    if any(not name.strip() for name in names):
        raise ValueError(f"{where}: empty class name")
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: duplicate class names")
    return names


def _names_from_metadata(session: ort.InferenceSession) -> list[str] | None:
    """The ``names`` entry ultralytics writes into an export's metadata ("{0: 'person', ...}")."""
    raw = session.get_modelmeta().custom_metadata_map.get("names")
    if not raw:
        return None
    try:
        data = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        try:
            data = json.loads(raw)
        except ValueError:
            return None
    try:
        return _names_from_json(data)
    except (ValueError, TypeError):
        return None


# -- the detector ---------------------------------------------------------------------------


class Detector:
    """Labelled boxes from RGB images with an ONNX model of the YOLOv8 output layout.

    ``classes``: the class names (a sequence, or a card file, see :func:`load_classes`); None
    reads the ``names`` metadata of an ultralytics export. ``input_size``: int or (h, w);
    None takes the model's own input size (640 when it is dynamic). ``conf``: the score a
    box needs; ``iou``: the NMS overlap above which the weaker box of a class is dropped.
    """

    def __init__(
        self,
        model_path: str | Path,
        classes: str | Path | Sequence[str] | None = None,
        input_size: int | tuple[int, int] | None = None,
        conf: float = 0.25,
        iou: float = 0.45,
        threads: int = 1,
        max_det: int = 300,
        stride: int = 32,
    ) -> None:
        self.path = Path(model_path)
        self.conf, self.iou, self.max_det, self.stride = conf, iou, max_det, stride
        self._session = _open_session(self.path, threads)
        if classes is None:
            names = _names_from_metadata(self._session)
            if names is None:
                raise ModelError(
                    f"{self.path}: no class names given and none in the model's metadata;"
                    " pass classes= a list or a card file (classes.json)"
                )
            self.classes = names
        else:
            self.classes = load_classes(classes)
        self._input = self._session.get_inputs()[0].name
        self.input_shape, self._dynamic = self._check_layout(input_size)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def _layout_error(self, found: str) -> ModelError:
        c = self.num_classes
        return ModelError(
            f"{self.path}: {found}; expected one output {LAYOUT}"
            f" = [1, {4 + c}, anchors] for {c} classes"
        )

    def _check_layout(self, size: int | tuple[int, int] | None) -> tuple[tuple[int, int], bool]:
        inputs, outputs = self._session.get_inputs(), self._session.get_outputs()
        if len(outputs) != 1:
            raise self._layout_error(f"the model has {len(outputs)} outputs")
        shape = list(outputs[0].shape)
        rows = shape[1] if len(shape) == 3 else None
        if len(shape) != 3 or (isinstance(rows, int) and rows != 4 + self.num_classes):
            raise self._layout_error(f"output {outputs[0].name!r} has shape {_fmt(shape)}")
        in_shape = list(inputs[0].shape)
        channels = in_shape[1] if len(in_shape) == 4 else None
        if len(inputs) != 1 or len(in_shape) != 4 or (isinstance(channels, int) and channels != 3):
            raise ModelError(
                f"{self.path}: input {_fmt(in_shape)}; expected one input [1, 3, H, W]"
                f" (RGB 0..1) and one output {LAYOUT}"
            )
        model_hw = in_shape[2:]
        dynamic = not all(isinstance(d, int) for d in model_hw)
        if size is None:
            hw = (DEFAULT_SIZE, DEFAULT_SIZE) if dynamic else (int(model_hw[0]), int(model_hw[1]))
        else:
            hw = (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))
        if not dynamic and list(hw) != model_hw:
            raise ModelError(f"{self.path}: input_size {hw} but the model takes {_fmt(model_hw)}")
        if hw[0] % self.stride or hw[1] % self.stride:
            raise ValueError(f"input_size {hw} is not a multiple of the stride {self.stride}")
        return hw, dynamic

    def preprocess(self, image: ImageArray) -> tuple[FloatArray, Letterbox]:
        """The network input (1, 3, h, w) float32 RGB 0..1 for an (H, W, 3) uint8 RGB image."""
        padded, box = letterbox(image, self.input_shape, self.stride, auto=self._dynamic)
        tensor = padded.transpose(2, 0, 1)[None].astype(np.float32)
        tensor *= np.float32(1.0 / 255.0)
        return tensor, box

    def infer(self, tensor: FloatArray) -> FloatArray:
        """The raw model output ``[1, 4 + C, anchors]`` for one preprocessed input."""
        try:
            (output,) = self._session.run(None, {self._input: tensor})
        except Exception as exc:
            message = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
            raise ModelError(f"{self.path}: inference failed: {message}") from exc
        out = np.asarray(output, dtype=np.float32)
        if out.ndim != 3 or out.shape[0] != 1 or out.shape[1] != 4 + self.num_classes:
            raise self._layout_error(f"the output has shape {list(out.shape)}")
        return out

    def postprocess(
        self, output: FloatArray, box: Letterbox, conf: float | None = None
    ) -> list[Detection]:
        """Decode (down to ``conf``, else the detector's threshold), NMS and map the boxes
        back to the original image."""
        boxes, scores, class_ids = decode(output, self.conf if conf is None else conf)
        kept = nms(boxes, scores, class_ids, self.iou, self.max_det)
        mapped = box.to_source(boxes[kept])
        return [
            Detection(self.classes[int(c)], float(s), _as_box(b))
            for b, s, c in zip(mapped, scores[kept], class_ids[kept], strict=True)
        ]

    def detect(self, image: ImageArray) -> list[Detection]:
        """Objects in one (H, W, 3) uint8 RGB image, best score first."""
        tensor, box = self.preprocess(image)
        return self.postprocess(self.infer(tensor), box)

    def detect_faint(
        self, image: ImageArray, floor: float
    ) -> tuple[list[Detection], list[Detection]]:
        """The objects (as :meth:`detect` finds them) and the boxes scored from ``floor`` up
        to the threshold that no better box of their class overlaps (NMS over both)."""
        tensor, box = self.preprocess(image)
        found = self.postprocess(self.infer(tensor), box, min(floor, self.conf))
        return [d for d in found if d.score >= self.conf], [d for d in found if d.score < self.conf]

    __call__ = detect


def _open_session(path: Path, threads: int) -> ort.InferenceSession:
    if not path.is_file():
        raise ModelError(
            f"model file {path} is missing; expected an ONNX detector, output {LAYOUT}"
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        raise ModelError(
            f"model file {path} is unreadable ({type(exc).__name__});"
            f" expected an ONNX detector, output {LAYOUT}"
        ) from exc


def _fmt(shape: Sequence[object]) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else str(d or "?") for d in shape) + "]"


def _as_box(row: FloatArray) -> Box:
    return (float(row[0]), float(row[1]), float(row[2]), float(row[3]))


# -- evaluation -----------------------------------------------------------------------------


def average_precision(recall: npt.ArrayLike, precision: npt.ArrayLike) -> float:
    """VOC (2010+) all-point AP: the area under the precision envelope of a PR curve."""
    rec = np.concatenate([[0.0], np.asarray(recall, dtype=np.float64), [1.0]])
    pre = np.concatenate([[0.0], np.asarray(precision, dtype=np.float64), [0.0]])
    pre = np.maximum.accumulate(pre[::-1])[::-1]
    steps = np.flatnonzero(rec[1:] != rec[:-1])
    return float(np.sum((rec[steps + 1] - rec[steps]) * pre[steps + 1]))


def mean_average_precision(
    detections: Sequence[Sequence[Detection]],
    truths: Sequence[Sequence[tuple[str, Box]]],
    iou: float = 0.5,
    ignored: Sequence[Sequence[tuple[str, Box]]] | None = None,
) -> tuple[float, dict[str, float]]:
    """VOC-style mAP@``iou`` over images: ``detections[i]`` and ``truths[i]`` (label, box).

    Per class, detections over all images are taken best score first. Each is matched to the
    ground-truth box of its class in its image that it overlaps most: a true positive when
    that IoU is at least ``iou`` and the box is not matched yet, else a false positive.
    ``ignored[i]`` holds boxes that count neither way (VOC's "difficult": tiny or mostly
    hidden objects): a detection whose best match is one of them is left out. AP is
    :func:`average_precision` of the resulting curve; mAP is the mean over the classes that
    have ground truth (classes without any are left out; no ground truth at all: nan).
    """
    if len(detections) != len(truths) or (ignored is not None and len(ignored) != len(truths)):
        raise ValueError("detections, truths and ignored must cover the same images")
    hidden = ignored if ignored is not None else [[] for _ in truths]
    labels = sorted({label for image in truths for label, _ in image})
    per_class = {label: _class_ap(label, detections, truths, hidden, iou) for label in labels}
    mean = float(np.mean(list(per_class.values()))) if per_class else math.nan
    return mean, per_class


def _class_ap(
    label: str,
    detections: Sequence[Sequence[Detection]],
    truths: Sequence[Sequence[tuple[str, Box]]],
    ignored: Sequence[Sequence[tuple[str, Box]]],
    iou: float,
) -> float:
    boxes, difficult = [], []
    for truth, hidden in zip(truths, ignored, strict=True):
        mine = [b for lab, b in truth if lab == label]
        extra = [b for lab, b in hidden if lab == label]
        boxes.append(np.array(mine + extra, dtype=np.float32).reshape(-1, 4))
        difficult.append(np.arange(len(mine) + len(extra)) >= len(mine))
    matched = [np.zeros(len(b), dtype=bool) for b in boxes]
    npos = sum(int((~d).sum()) for d in difficult)
    found = [
        (d.score, i, d.box) for i, image in enumerate(detections) for d in image if d.label == label
    ]
    found.sort(key=lambda f: -f[0])
    outcome = np.zeros(len(found))  # 1 true positive, 0 false positive, -1 left out
    for k, (_, image, box) in enumerate(found):
        if not len(boxes[image]):
            continue
        overlaps = box_iou(box, boxes[image])
        best = int(np.argmax(overlaps))
        if overlaps[best] < iou:
            continue
        if difficult[image][best]:
            outcome[k] = -1
        elif not matched[image][best]:
            matched[image][best] = True
            outcome[k] = 1
    outcome = outcome[outcome >= 0]
    ctp = np.cumsum(outcome)
    cfp = np.cumsum(1.0 - outcome)
    return average_precision(ctp / npos, ctp / np.maximum(ctp + cfp, 1e-12))
