"""Box + aligned depth + intrinsics -> 3-D point; the hand-eye transform; checked on the twin."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest
from pydantic import ValidationError

from onboard.base.errors import CameraError
from onboard.drivers.camera.base import Intrinsics
from onboard.drivers.rotations import matrix_to_quaternion, matrix_to_rpy, rpy_to_matrix
from onboard.drivers.twin import Twin
from onboard.drivers.twin.scene import ObjectSpec, Scene
from onboard.perception.pose import (
    Box,
    HandEye,
    HandEyeConfig,
    box_depth,
    deproject,
    locate,
    project,
)

INTR = Intrinsics(width=64, height=48, fx=50.0, fy=50.0, cx=31.5, cy=23.5)


def test_deproject_and_project_are_inverse() -> None:
    point = deproject(40.0, 10.0, 0.8, INTR)
    assert point[2] == 0.8
    assert project(point, INTR) == pytest.approx((40.0, 10.0))
    assert project((0.0, 0.0, 2.0), INTR) == (INTR.cx, INTR.cy)
    with pytest.raises(ValueError, match="behind"):
        project((0.0, 0.0, -1.0), INTR)


def test_median_depth_ignores_holes_and_the_box_corners() -> None:
    depth = np.full((48, 64), 2.0, np.float32)  # the background
    depth[10:30, 20:40] = 0.6  # the object fills the box ...
    depth[18:22, 28:32] = 0.0  # ... with a hole in its middle
    depth[15, 25] = np.nan
    box: Box = (18.0, 8.0, 42.0, 32.0)  # a loose box: its corners see the background
    assert box_depth(depth, box) == pytest.approx(0.6)
    assert box_depth(depth, box, centre=1.0) == pytest.approx(0.6)  # most pixels still object


def test_no_valid_depth_is_a_camera_error() -> None:
    depth = np.zeros((48, 64), np.float32)
    depth[0:5, 0:5] = 1.0  # valid, but outside the box
    with pytest.raises(
        CameraError, match=r"no valid depth in the centre of box \(20, 10, 40, 30\)"
    ):
        locate((20, 10, 40, 30), depth, INTR)
    far = np.full((48, 64), 12.0, np.float32)
    with pytest.raises(CameraError):
        box_depth(far, (20, 10, 40, 30), max_depth=10.0)


def test_locate_uses_the_box_centre_and_reports_size() -> None:
    depth = np.full((48, 64), 1.0, np.float32)
    seen = locate((30.0, 20.0, 40.0, 30.0), depth, INTR)  # centre pixel (34.5, 24.5)
    np.testing.assert_allclose(seen.point, deproject(34.5, 24.5, 1.0, INTR))
    assert seen.size == pytest.approx((0.2, 0.2))
    assert np.linalg.norm(seen.ray) == pytest.approx(1.0)
    np.testing.assert_allclose(seen.behind(0.1), seen.point + 0.1 * seen.ray)


def test_depth_must_be_aligned_to_color() -> None:
    with pytest.raises(CameraError, match="align depth to color"):
        locate((0, 0, 4, 4), np.ones((24, 32), np.float32), INTR)


# -- hand-eye ------------------------------------------------------------------------------


def test_hand_eye_from_rpy_and_quaternion_agree() -> None:
    rpy = (0.3, -0.5, 2.0)
    by_rpy = HandEye.from_rpy((0.1, 0.2, 0.3), rpy)
    by_quat = HandEye.from_quaternion((0.1, 0.2, 0.3), matrix_to_quaternion(by_rpy.rotation))
    np.testing.assert_allclose(by_rpy.matrix, by_quat.matrix, atol=1e-12)
    assert matrix_to_rpy(rpy_to_matrix(rpy)) == pytest.approx(rpy)
    # a quarter turn about z: x -> y
    quarter = HandEye.from_rpy((0.0, 0.0, 0.0), (0.0, 0.0, math.pi / 2))
    np.testing.assert_allclose(quarter.apply((1.0, 0.0, 0.0)), (0.0, 1.0, 0.0), atol=1e-12)


def test_hand_eye_maps_points_and_inverts() -> None:
    he = HandEye.from_rpy((0.5, -0.2, 0.7), (math.pi, 0.2, -0.4))
    points = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_allclose(he.inverse().apply(he.apply(points)), points, atol=1e-12)
    np.testing.assert_allclose(he(points[0]), he.apply(points)[0])


def test_hand_eye_config_round_trip() -> None:
    he = HandEye.from_rpy((0.5, -0.2, 0.7), (2.5, 0.2, -0.4))
    config = he.to_config(rms=0.0021)
    assert config.rms == 0.0021 and config.rpy is None
    again = HandEye.from_config(HandEyeConfig.model_validate(config.model_dump()))
    np.testing.assert_allclose(again.matrix, he.matrix, atol=1e-5)
    by_rpy = HandEye.from_config(HandEyeConfig(translation=(0, 0, 1), rpy=(0, 0, 0)))
    np.testing.assert_allclose(by_rpy.apply((0, 0, 0)), (0, 0, 1))


@pytest.mark.parametrize(
    "data",
    [
        {"translation": [0, 0, 0]},  # no rotation
        {"translation": [0, 0, 0], "rpy": [0, 0, 0], "quaternion_xyzw": [0, 0, 0, 1]},
        {"translation": [0, 0, 0], "quaternion_xyzw": [0, 0, 0, 0]},
        {"translation": [0, 0], "rpy": [0, 0, 0]},
        {"translation": [0, 0, 0], "rpy": [0, 0, 0], "scale": 1},
    ],
)
def test_hand_eye_config_rejects(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HandEyeConfig.model_validate(data)


def test_hand_eye_rejects_a_non_rigid_matrix() -> None:
    with pytest.raises(ValueError, match="not a rotation"):
        HandEye(np.diag([1.0, 1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="4x4"):
        HandEye(np.eye(3))


# -- on the twin: renders against the twin's truth -----------------------------------------


def block(
    name: str, xy: tuple[float, float], size: float, rgb: tuple[float, ...], yaw: float = 0.0
) -> ObjectSpec:
    color = (rgb[0], rgb[1], rgb[2], 1.0)
    return ObjectSpec(name=name, kind="block", position=xy, size=size, color=color, yaw=yaw)


OBJECTS = [  # the colours of the twin's scene files (and of the detector's training data)
    block("red block", (0.45, 0.08), 0.05, (0.85, 0.1, 0.1)),
    block("blue block", (0.55, -0.12), 0.04, (0.1, 0.25, 0.85), yaw=30),
    block("green block", (0.30, 0.15), 0.05, (0.1, 0.7, 0.2)),
    ObjectSpec(name="apple", kind="apple", position=(0.35, -0.10), size=0.07),
]


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(Scene(objects=OBJECTS)) as world:
        world.settle(0.5)
        yield world


def seg_box(seg: np.ndarray, body: int) -> Box:
    rows, cols = np.nonzero(seg == body)
    assert rows.size > 30, "the object is not in view"
    return (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))


def test_twin_points_lie_on_the_surface_the_camera_sees(twin: Twin) -> None:
    """The located point, in the world, against PyBullet's own ray cast along the same ray
    (the median depth of the box's centre mixes faces where the ray meets an edge: 1 cm)."""
    _, depth, seg = twin.render()
    camera_to_world = HandEye(twin.camera_pose())
    origin = camera_to_world.translation
    for name in twin.object_names():
        seen = locate(seg_box(seg, twin.segmentation_id(name)), depth, twin.intrinsics())
        direction = camera_to_world.rotation @ seen.ray
        hit, where = twin.ray_test(tuple(origin), tuple(origin + 3.0 * direction))
        assert hit == name
        assert np.linalg.norm(camera_to_world.apply(seen.point) - where) < 0.01, name


def test_twin_object_centres_within_1cm(twin: Twin) -> None:
    """Surface point pushed back by half the object's width: its centre, as the twin has it."""
    _, depth, seg = twin.render()
    camera_to_world = HandEye(twin.camera_pose())
    for name in twin.object_names():
        seen = locate(seg_box(seg, twin.segmentation_id(name)), depth, twin.intrinsics())
        estimate = camera_to_world.apply(seen.behind(seen.size[0] / 2))
        truth = np.array(twin.object_pose(name)[0])
        assert np.linalg.norm(estimate - truth) < 0.01, (name, estimate, truth)


def test_twin_object_centres_from_the_detector(twin: Twin) -> None:
    """The same, with the shipped detector's boxes instead of the segmentation's.

    The detector's own accuracy is tests/test_detector.py's business: here only its boxes that
    match an object (IoU 0.5 with the object's mask box) are located, and at least one must.
    """
    from onboard import bundled
    from onboard.perception.detector import Detector, box_iou

    folder = bundled.detector_dir()  # the shipped one, or a candidate (models/detector/gate.py)
    detector = Detector(folder / "model.onnx", folder / "classes.json")
    color, depth, seg = twin.render()
    camera_to_world = HandEye(twin.camera_pose())
    checked = []
    for found in detector.detect(color):
        name = found.label.replace("_", " ")
        if name not in twin.object_names():
            continue
        if box_iou(found.box, [seg_box(seg, twin.segmentation_id(name))])[0] < 0.5:
            continue
        seen = locate(found.box, depth, twin.intrinsics())
        estimate = camera_to_world.apply(seen.behind(seen.size[0] / 2))
        truth = np.array(twin.object_pose(name)[0])
        assert np.linalg.norm(estimate - truth) < 0.01, (name, estimate, truth)
        checked.append(name)
    if not checked:
        pytest.skip("the detector found none of the objects (see tests/test_detector.py)")
