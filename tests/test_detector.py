"""onboard.perception.detector: decode + NMS on hand-built outputs, letterbox geometry, class cards,
layout errors, the VOC mAP, and the shipped model on a fresh render of the twin."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from onboard import bundled
from onboard.base.errors import ModelError
from onboard.perception.detector import (
    Box,
    Detection,
    Detector,
    average_precision,
    box_iou,
    decode,
    letterbox,
    load_classes,
    mean_average_precision,
    nms,
)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "models" / "detector"

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # the `train` extra brings onnx; without it the built-model tests skip
    onnx = None

needs_onnx = pytest.mark.skipif(onnx is None, reason="needs the onnx package (train extra)")


def raw_output(num_classes: int, anchors: int, objects: Sequence[tuple[Box, int, float]]) -> Any:
    """An output [1, 4 + C, anchors]: background anchors score 0.01, then one anchor per
    object ((cx, cy, w, h), class id, score), in order, from anchor 0."""
    out = np.zeros((1, 4 + num_classes, anchors), dtype=np.float32)
    out[0, 4:] = 0.01
    out[0, :4] = np.array([[50.0], [50.0], [10.0], [10.0]])
    for k, (cxcywh, class_id, score) in enumerate(objects):
        out[0, :4, k] = cxcywh
        out[0, 4 + class_id, k] = score
    return out


# -- decode and NMS ---------------------------------------------------------------------------


def test_decode_returns_known_boxes_best_first() -> None:
    out = raw_output(3, 50, [((100, 80, 40, 20), 2, 0.6), ((30, 40, 10, 30), 0, 0.9)])
    boxes, scores, class_ids = decode(out, conf=0.25)
    np.testing.assert_allclose(boxes, [[25, 25, 35, 55], [80, 70, 120, 90]])
    np.testing.assert_allclose(scores, [0.9, 0.6])
    assert class_ids.tolist() == [0, 2]
    assert class_ids.dtype == np.int64


def test_decode_takes_the_best_class_and_a_strict_threshold() -> None:
    out = raw_output(3, 10, [((50, 50, 10, 10), 1, 0.7), ((20, 20, 4, 4), 2, 0.25)])
    out[0, 4 + 2, 0] = 0.5  # anchor 0 also scores class 2, lower than class 1
    _, scores, class_ids = decode(out, conf=0.25)
    assert class_ids.tolist() == [1]  # the anchor exactly at conf is dropped (score > conf)
    assert scores.tolist() == pytest.approx([0.7])
    assert decode(out[0], conf=0.25)[0].shape == (1, 4)  # [4 + C, anchors] works too
    empty = decode(out, conf=0.99)
    assert [a.shape for a in empty] == [(0, 4), (0,), (0,)]


def test_decode_rejects_other_layouts() -> None:
    with pytest.raises(ValueError, match="4 \\+ C"):
        decode(np.zeros((1, 4, 100), dtype=np.float32))
    with pytest.raises(ValueError):
        decode(np.zeros((2, 6, 100), dtype=np.float32))


def test_decode_caps_candidates_keeping_the_best() -> None:
    out = raw_output(1, 100, [((10 + k, 10, 5, 5), 0, 0.3 + k / 100) for k in range(60)])
    _, scores, _ = decode(out, conf=0.25, max_candidates=10)
    np.testing.assert_allclose(scores, [0.3 + k / 100 for k in range(59, 49, -1)], rtol=1e-6)


def test_nms_suppresses_overlapping_duplicates_of_a_class() -> None:
    boxes = np.array(
        [[10, 10, 50, 50], [12, 12, 52, 52], [100, 100, 140, 140], [11, 9, 49, 51]], np.float32
    )
    scores = np.array([0.8, 0.9, 0.7, 0.6], np.float32)
    kept = nms(boxes, scores, np.zeros(4, np.int64), iou=0.45)
    assert kept.tolist() == [1, 2]  # 0 and 3 overlap the better box 1


def test_nms_is_class_aware() -> None:
    boxes = np.array([[10, 10, 50, 50], [12, 12, 52, 52], [10, 10, 50, 50]], np.float32)
    scores = np.array([0.9, 0.8, 0.7], np.float32)
    kept = nms(boxes, scores, np.array([0, 1, 0]), iou=0.45)
    assert kept.tolist() == [0, 1]  # box 1 is another class; box 2 duplicates box 0


def test_nms_threshold_and_max_det() -> None:
    a, b = [0, 0, 10, 10], [5, 0, 15, 10]  # IoU = 50 / 150 = 1/3
    boxes = np.array([a, b], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    assert nms(boxes, scores, [0, 0], iou=0.3).tolist() == [0]
    assert nms(boxes, scores, [0, 0], iou=0.34).tolist() == [0, 1]
    assert nms(boxes, scores, [0, 0], iou=0.34, max_det=1).tolist() == [0]
    assert nms(np.zeros((0, 4)), np.zeros(0), np.zeros(0)).tolist() == []


def test_box_iou() -> None:
    np.testing.assert_allclose(
        box_iou([0, 0, 10, 10], [[0, 0, 10, 10], [5, 0, 15, 10], [20, 20, 30, 30], [0, 0, 0, 0]]),
        [1.0, 1 / 3, 0.0, 0.0],
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    ("count", "classes"),
    [(300, 3), (1500, 3), (1100, 1)],
    ids=["one-matrix", "matrix-per-class", "one-long-class"],
)
def test_nms_matches_a_per_box_loop(count: int, classes: int) -> None:
    rng = np.random.default_rng(count)
    xy = rng.uniform(0, 200, (count, 2))
    wh = rng.uniform(5, 60, (count, 2))
    boxes = np.hstack([xy, xy + wh]).astype(np.float32)
    scores = rng.uniform(0.3, 1.0, count).astype(np.float32)
    labels = rng.integers(0, classes, count)
    expected: list[int] = []
    for i in np.argsort(-scores, kind="stable"):
        box = [float(v) for v in boxes[i]]
        if all(
            labels[j] != labels[i] or _iou(box, [float(v) for v in boxes[j]]) <= 0.45
            for j in expected
        ):
            expected.append(int(i))
    assert nms(boxes, scores, labels, iou=0.45, max_det=10_000).tolist() == expected
    assert nms(boxes, scores, labels, iou=0.45, max_det=7).tolist() == expected[:7]


def _iou(a: list[float], b: list[float]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


# -- letterbox --------------------------------------------------------------------------------


def test_letterbox_keeps_aspect_and_pads_grey() -> None:
    image = np.zeros((480, 640, 3), np.uint8)
    padded, box = letterbox(image, (320, 320))
    assert padded.shape == (320, 320, 3)
    assert box.scale == (0.5, 0.5) and box.pad == (0, 40)
    assert (padded[:40] == 114).all() and (padded[280:] == 114).all()
    assert (padded[40:280] == 0).all()


def test_letterbox_auto_pads_to_the_stride_only() -> None:
    padded, box = letterbox(np.zeros((480, 640, 3), np.uint8), (640, 640), stride=32, auto=True)
    assert padded.shape == (480, 640, 3) and box.pad == (0, 0)
    padded, box = letterbox(np.zeros((300, 500, 3), np.uint8), (640, 640), stride=32, auto=True)
    assert padded.shape[0] % 32 == 0 and padded.shape[1] == 640
    assert box.pad[1] == (padded.shape[0] - 384) // 2


@pytest.mark.parametrize("source", [(480, 640), (720, 1280), (100, 60), (333, 333)])
def test_letterbox_round_trip_of_coordinates(source: tuple[int, int]) -> None:
    h, w = source
    rng = np.random.default_rng(h * w)
    xy = rng.uniform(0, [w / 2, h / 2], (20, 2))
    boxes = np.hstack([xy, xy + rng.uniform(1, [w / 2, h / 2], (20, 2))]).astype(np.float32)
    _, box = letterbox(np.zeros((h, w, 3), np.uint8), (320, 320))
    np.testing.assert_allclose(box.to_source(box.to_input(boxes)), boxes, atol=1e-3)


def test_letterbox_moves_image_content_where_to_input_says() -> None:
    image = np.zeros((480, 640, 3), np.uint8)
    image[100:200, 300:460] = 255  # x1, y1, x2, y2 = 300, 100, 460, 200
    padded, box = letterbox(image, (256, 256))
    ys, xs = np.nonzero(padded[..., 0] > 127)
    found = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    np.testing.assert_allclose(box.to_input([300, 100, 460, 200])[0], found, atol=1.0)
    np.testing.assert_allclose(box.to_source([found])[0], [300, 100, 460, 200], atol=2.5)


def _bilinear(image: npt.NDArray[np.uint8], h: int, w: int) -> npt.NDArray[np.uint8]:
    """Half-pixel-centre bilinear, rows then columns, in float32: the resize models were
    trained with, written plainly (per pixel triplet)."""

    def taps(src: int, dst: int) -> tuple[Any, Any, Any]:
        pos = np.clip((np.arange(dst, dtype=np.float64) + 0.5) * (src / dst) - 0.5, 0, src - 1)
        lo = np.floor(pos).astype(np.int64)
        return lo, np.minimum(lo + 1, src - 1), (pos - lo).astype(np.float32)

    y0, y1, wy = taps(image.shape[0], h)
    x0, x1, wx = taps(image.shape[1], w)
    top, bottom = image[y0].astype(np.float32), image[y1].astype(np.float32)
    rows = top + (bottom - top) * wy[:, None, None]
    out = rows[:, x0] + (rows[:, x1] - rows[:, x0]) * wx[None, :, None]
    return np.rint(out).astype(np.uint8)


@pytest.mark.parametrize(
    ("source", "shape"),
    [
        ((240, 320), (416, 416)),
        ((240, 320), (448, 448)),
        ((480, 640), (416, 416)),
        ((37, 91), (32, 64)),
    ],
)
def test_letterbox_resizes_to_the_same_bytes_as_plain_bilinear(
    source: tuple[int, int], shape: tuple[int, int]
) -> None:
    """The fast resize must not change a pixel: a model sees what it was trained on."""
    image = np.random.default_rng(7).integers(0, 256, (*source, 3), dtype=np.uint8)
    padded, box = letterbox(image, shape)
    ratio = min(shape[0] / source[0], shape[1] / source[1])
    new_h, new_w = round(source[0] * ratio), round(source[1] * ratio)
    left, top = box.pad
    assert np.array_equal(
        padded[top : top + new_h, left : left + new_w], _bilinear(image, new_h, new_w)
    )


def test_letterbox_rejects_non_rgb() -> None:
    with pytest.raises(ValueError, match="uint8"):
        letterbox(np.zeros((10, 10), np.uint8), (32, 32))
    with pytest.raises(ValueError, match="uint8"):
        letterbox(np.zeros((10, 10, 3), np.float32), (32, 32))  # type: ignore[arg-type]


# -- class cards ------------------------------------------------------------------------------


def test_classes_from_json_list_object_and_names(tmp_path: Path) -> None:
    for data in (["a", "b"], {"1": "b", "0": "a"}, {"names": ["a", "b"], "task": "detect"}):
        card = tmp_path / "classes.json"
        card.write_text(json.dumps(data))
        assert load_classes(card) == ["a", "b"]
    assert load_classes(["x", "y"]) == ["x", "y"]


def test_classes_from_a_markdown_card(tmp_path: Path) -> None:
    card = tmp_path / "CARD.md"
    card.write_text(
        "# model\n\n| | |\n| --- | --- |\n| Input | 320 |\n\n"
        "## Classes\n\n| id | name | AP |\n| ---: | --- | --- |\n"
        "| 1 | `apple` | 0.9 |\n| 0 | `red_block` | 0.95 |\n\nAfter the table.\n"
    )
    assert load_classes(card) == ["red_block", "apple"]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("classes.json", '["a", "a"]'),
        ("classes.json", '{"0": "a", "2": "b"}'),
        ("classes.json", "not json"),
        ("classes.json", "[]"),
        ("CARD.md", "# no table here\n"),
        ("missing.json", None),
    ],
)
def test_bad_class_cards_name_the_file(tmp_path: Path, name: str, text: str | None) -> None:
    card = tmp_path / name
    if text is not None:
        card.write_text(text)
    with pytest.raises(ModelError) as info:
        load_classes(card)
    assert str(card) in str(info.value) and "\n" not in str(info.value)


# -- models built here (onnx.helper) ----------------------------------------------------------


def constant_model(
    path: Path, output: npt.NDArray[np.float32], size: int = 64, names: str | None = None
) -> Path:
    """An ONNX model whose output is ``output`` whatever the image (input [1, 3, size, size])."""
    assert onnx is not None
    image = helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])
    result = helper.make_tensor_value_info("output0", TensorProto.FLOAT, list(output.shape))
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
        helper.make_node("Add", ["table", "nothing"], ["output0"]),
    ]
    init = [
        numpy_helper.from_array(np.zeros((), np.float32), "zero"),
        numpy_helper.from_array(output.astype(np.float32), "table"),
    ]
    graph = helper.make_graph(nodes, "constant", [image], [result], init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if names is not None:
        helper.set_model_props(model, {"names": names})
    onnx.save(model, str(path))
    return path


@needs_onnx
def test_detector_maps_boxes_back_to_the_image(tmp_path: Path) -> None:
    # input 64x64; a 128x96 image is scaled by 0.5 and padded 8 px top and bottom
    out = raw_output(2, 40, [((32, 24, 16, 8), 1, 0.9), ((33, 24, 16, 8), 1, 0.8)])
    model = constant_model(tmp_path / "m.onnx", out)
    detector = Detector(model, ["cup", "ball"])
    assert detector.input_shape == (64, 64)
    found = detector.detect(np.zeros((96, 128, 3), np.uint8))
    assert len(found) == 1  # the second box is a duplicate
    assert found[0].label == "ball" and found[0].score == pytest.approx(0.9)
    np.testing.assert_allclose(found[0].box, (48, 24, 80, 40))
    assert found[0].center == (64.0, 32.0)


@needs_onnx
def test_detector_reads_ultralytics_names_metadata(tmp_path: Path) -> None:
    out = raw_output(2, 40, [((32, 32, 16, 8), 0, 0.9)])
    model = constant_model(tmp_path / "m.onnx", out, names="{0: 'person', 1: 'bicycle'}")
    detector = Detector(model)
    assert detector.classes == ["person", "bicycle"]
    assert [d.label for d in detector(np.zeros((64, 64, 3), np.uint8))] == ["person"]


def _one_line_model_error(model: Path, classes: Sequence[str] | None = ("a", "b")) -> str:
    with pytest.raises(ModelError) as info:
        Detector(model, classes)
    message = str(info.value)
    assert "\n" not in message and str(model) in message
    return message


@needs_onnx
@pytest.mark.parametrize(
    "shape",
    [[1, 40, 6], [1, 7, 40], [6, 40], [1, 6, 40, 1]],
    ids=["transposed", "wrong-classes", "rank-2", "rank-4"],
)
def test_wrong_layout_is_a_model_error(tmp_path: Path, shape: list[int]) -> None:
    model = constant_model(tmp_path / "wrong.onnx", np.zeros(shape, np.float32))
    message = _one_line_model_error(model)
    assert "[1, 4 + C, anchors]" in message and "[1, 6, anchors]" in message


@needs_onnx
def test_no_class_names_is_a_model_error(tmp_path: Path) -> None:
    model = constant_model(tmp_path / "m.onnx", np.zeros((1, 6, 40), np.float32))
    assert "classes" in _one_line_model_error(model, None)


def test_missing_or_broken_model_is_a_model_error(tmp_path: Path) -> None:
    assert "missing" in _one_line_model_error(tmp_path / "absent.onnx")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"this is not an onnx model\n" * 10)
    message = _one_line_model_error(broken)
    assert "unreadable" in message and "[1, 4 + C, anchors]" in message


# -- mAP --------------------------------------------------------------------------------------


def det(label: str, score: float, box: Box) -> Detection:
    return Detection(label, score, box)


def test_ap_of_known_curves() -> None:
    assert average_precision([1.0], [1.0]) == 1.0
    assert average_precision([], []) == 0.0
    # TP, FP, TP over 2 ground truths: recall .5 .5 1, precision 1 .5 .667
    assert average_precision([0.5, 0.5, 1.0], [1.0, 0.5, 2 / 3]) == pytest.approx(0.5 + 0.5 * 2 / 3)
    # the envelope: a later higher precision lifts the earlier points
    assert average_precision([0.25, 0.5], [0.5, 1.0]) == pytest.approx(0.5)


def test_map_perfect_and_empty() -> None:
    truths = [[("a", (0, 0, 10, 10)), ("b", (20, 20, 40, 40))], [("a", (5, 5, 15, 15))]]
    dets = [[det(lab, 0.9, b) for lab, b in image] for image in truths]
    assert mean_average_precision(dets, truths) == (1.0, {"a": 1.0, "b": 1.0})
    assert mean_average_precision([[], []], truths) == (0.0, {"a": 0.0, "b": 0.0})
    assert np.isnan(mean_average_precision([[]], [[]])[0])


def test_map_counts_fp_duplicates_wrong_labels_and_misses() -> None:
    truths = [[("a", (0, 0, 10, 10)), ("a", (50, 50, 60, 60))]]
    dets = [
        [
            det("a", 0.9, (0, 0, 10, 10)),  # TP
            det("a", 0.8, (1, 0, 10, 10)),  # duplicate of the first: FP
            det("a", 0.7, (50, 50, 60, 60)),  # TP
            det("b", 0.95, (50, 50, 60, 60)),  # a class without ground truth: left out
        ]
    ]
    mean, per_class = mean_average_precision(dets, truths)
    assert per_class == {"a": pytest.approx(0.5 + 0.5 * 2 / 3)}
    assert mean == per_class["a"]
    # one ground truth never found: recall stops at 0.5
    assert mean_average_precision([dets[0][:1]], truths)[0] == pytest.approx(0.5)


def test_map_iou_threshold() -> None:
    truths = [[("a", (0, 0, 10, 10))]]
    shifted = [[det("a", 0.9, (5, 0, 15, 10))]]  # IoU 1/3
    assert mean_average_precision(shifted, truths, iou=0.5)[0] == 0.0
    assert mean_average_precision(shifted, truths, iou=0.3)[0] == 1.0


# -- the shipped model on the twin ------------------------------------------------------------

BLOCK_COLORS = {
    "red_block": (0.85, 0.1, 0.1),
    "green_block": (0.1, 0.7, 0.2),
    "blue_block": (0.1, 0.25, 0.85),
    "yellow_block": (0.95, 0.85, 0.1),
}
MIN_PIXELS = 60  # objects with fewer visible pixels are not asked for
#: scenes built here, shaped as the seed's tasks: name -> objects
TASK_SCENES: dict[str, list[dict[str, Any]]] = {
    # task 2's goal: red under yellow under blue, in front of the box
    "tower": [
        {"name": "red", "kind": "block", "color": [0.85, 0.1, 0.1, 1], "position": [0.45, 0.05]},
        {
            "name": "yellow",
            "kind": "block",
            "color": [0.95, 0.85, 0.1, 1],
            "position": [0.45, 0.05, 0.0615],
        },
        {
            "name": "blue",
            "kind": "block",
            "color": [0.1, 0.25, 0.85, 1],
            "position": [0.451, 0.049, 0.1025],
        },
        {"name": "box", "kind": "box", "position": [0.45, 0.3], "size": 0.26},
        {"name": "apple", "kind": "apple", "position": [0.6, -0.15]},
    ],
    # task 6's start: a closed drawer facing the camera, a block on the table
    "closed-drawer": [
        {
            "name": "drawer",
            "kind": "drawer",
            "position": [0.55, 0.2],
            "yaw": 20,
            "extent": [0.28, 0.32, 0.16],
        },
        {"name": "red", "kind": "block", "color": [0.85, 0.1, 0.1, 1], "position": [0.5, -0.15]},
        {"name": "lemon", "kind": "lemon", "position": [0.65, -0.05]},
    ],
}


def _class_of(kind: str, color: Sequence[float] | None, classes: Sequence[str]) -> str | None:
    if kind == "block" and color is not None:
        rgb = np.array(color[:3])
        return min(
            BLOCK_COLORS, key=lambda n: float(np.sum((np.array(BLOCK_COLORS[n]) - rgb) ** 2))
        )
    return kind if kind in classes else None


def _tight(mask: npt.NDArray[np.bool_]) -> Box:
    ys, xs = np.nonzero(mask)
    return (float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1))


@pytest.fixture(scope="module")
def shipped() -> Detector:
    folder = bundled.detector_dir()  # the shipped one, or a candidate (models/detector/gate.py)
    return Detector(folder / "model.onnx", folder / "classes.json")


def test_shipped_card_matches_the_model(shipped: Detector) -> None:
    assert load_classes(SHIPPED / "CARD.md") == shipped.classes
    assert Detector(shipped.path).classes == shipped.classes  # metadata names
    assert shipped.classes[-1] == "handle"  # appended: the ids of the older classes stay
    assert shipped.input_shape == (416, 416)


@pytest.mark.parametrize(
    "scene",
    [
        "tabletop",
        "fruit",
        "toys",
        "blocks",
        "drawer",
        "conveyor",
        "tower",
        "closed-drawer",
    ],
)
@pytest.mark.parametrize("size", [(320, 240), (640, 480)], ids=["320x240", "640x480"])
def test_shipped_model_finds_the_objects_of_a_twin_scene(
    shipped: Detector, scene: str, size: tuple[int, int]
) -> None:
    twin_module = pytest.importorskip(
        "onboard.drivers.twin", reason="the twin (pybullet) is not installed"
    )
    from onboard.drivers.twin import camera as twin_camera
    from onboard.drivers.twin.bodies import HANDLE_LINK
    from onboard.drivers.twin.scene import ObjectSpec

    if scene in TASK_SCENES:
        spec = twin_module.load_scene(twin_module.SCENES / "tabletop.toml").model_copy(
            update={"objects": [ObjectSpec(**o) for o in TASK_SCENES[scene]]}
        )
    else:
        spec = twin_module.load_scene(twin_module.SCENES / f"{scene}.toml")
    view = spec.camera.model_copy(update={"width": size[0], "height": size[1]})
    with twin_module.Twin(spec.model_copy(update={"camera": view})) as twin:
        twin.settle()
        rgb, _, seg = twin.render(links=True)  # a drawer's handle is a link of it
        bodies, links = twin_camera.split_segmentation(seg)
        expected = []
        for obj in spec.objects:
            label = _class_of(obj.kind, obj.color, shipped.classes)
            mask = bodies == twin.segmentation_id(obj.name)
            parts = [(label, mask)]
            if obj.kind == "drawer":
                parts.append(("handle", mask & (links == HANDLE_LINK)))
            for name, part in parts:
                if name is not None and part.sum() * (320 / size[0]) ** 2 >= MIN_PIXELS:
                    expected.append((name, _tight(part)))
    found = shipped.detect(rgb)
    assert expected, "the scene shows no object of the model's classes"
    if scene in ("drawer", "closed-drawer"):
        assert "handle" in [label for label, _ in expected], "the handle is not in view"
    for label, box in expected:
        same = [d for d in found if d.label == label]
        best = max((float(box_iou(d.box, [box])[0]) for d in same), default=0.0)
        assert best >= 0.5, f"{label} at {box} not found; found {found}"
    confident = [d for d in found if d.score >= 0.5]
    for d in confident:
        assert any(
            d.label == label and box_iou(d.box, [box])[0] >= 0.5 for label, box in expected
        ), f"{d} matches no object of the scene"
