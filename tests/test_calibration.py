"""Hand-eye calibration: the solver, a ray-cast sphere marker, and the twin's hand marker."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from onboard.base.errors import CameraError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.twin_arm import SimArm, SimArmConfig
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.camera.twin_camera import SimCamera
from onboard.drivers.twin import SCENES, Twin
from onboard.drivers.twin.scene import Scene
from onboard.perception.calibration import (
    calibrate,
    color_marker,
    grid_poses,
    marker_in_base,
    solve_rigid,
)
from onboard.perception.pose import Box, HandEye

INTR = Intrinsics(width=320, height=240, fx=280.0, fy=280.0, cx=159.5, cy=119.5)
#: a camera 1 m in front of the base, 0.6 m up, looking back at it and 35 degrees down
TRUTH = HandEye.from_rpy((1.0, 0.05, 0.6), (-math.pi / 2 - math.radians(35), 0.0, math.pi / 2))
MAGENTA = (255, 0, 255)
RADIUS = 0.02
OFFSET = (0.0, 0.0, 0.05)  # the marker centre, 5 cm out along the tool's z


def rotation_error_deg(a: HandEye, b: HandEye) -> float:
    cos = (np.trace(a.rotation.T @ b.rotation) - 1) / 2
    return math.degrees(math.acos(min(1.0, max(-1.0, cos))))


def poses() -> list[Pose]:
    """Tool pointing down, turned a little, at the corners of a box in front of the base."""
    return grid_poses((0.35, -0.15, 0.15), (0.5, 0.15, 0.3), 2, (math.pi, 0.0, 0.3))


# -- the solver ----------------------------------------------------------------------------


def test_solve_rigid_recovers_a_transform() -> None:
    points = np.random.default_rng(1).uniform(-0.3, 0.3, size=(8, 3))
    found, residuals = solve_rigid(points, TRUTH.apply(points))
    np.testing.assert_allclose(found.matrix, TRUTH.matrix, atol=1e-9)
    assert residuals.max() < 1e-9


def test_solve_rigid_is_least_squares_under_noise() -> None:
    rng = np.random.default_rng(2)
    points = rng.uniform(-0.3, 0.3, size=(20, 3))
    noisy = TRUTH.apply(points) + rng.normal(0, 0.002, size=points.shape)
    found, residuals = solve_rigid(points, noisy)
    assert np.linalg.norm(found.translation - TRUTH.translation) < 0.003
    assert rotation_error_deg(found, TRUTH) < 0.5
    assert 0.001 < float(np.sqrt(np.mean(residuals**2))) < 0.004


def test_solve_rigid_never_returns_a_reflection() -> None:
    points = np.random.default_rng(3).uniform(-0.3, 0.3, size=(6, 3))
    mirrored = points * np.array([1.0, 1.0, -1.0])
    found, _ = solve_rigid(points, mirrored)
    assert np.linalg.det(found.rotation) == pytest.approx(1.0)


def test_degenerate_poses_are_refused() -> None:
    line = np.outer(np.linspace(0, 0.3, 5), [1.0, 0.5, 0.2])
    with pytest.raises(CameraError, match="on one line"):
        solve_rigid(line, line)
    with pytest.raises(CameraError, match="3 or more"):
        solve_rigid(line[:2], line[:2])


def test_marker_offset_turns_with_the_tool() -> None:
    down = Pose(0.4, 0.0, 0.2, math.pi, 0.0, 0.0)  # tool z points down
    np.testing.assert_allclose(marker_in_base(down, OFFSET), (0.4, 0.0, 0.15), atol=1e-12)
    level = Pose(0.4, 0.0, 0.2, 0.0, math.pi / 2, 0.0)  # tool z along base +x
    np.testing.assert_allclose(marker_in_base(level, OFFSET), (0.45, 0.0, 0.2), atol=1e-12)


# -- end to end on a ray-cast sphere -------------------------------------------------------


class PointArm:
    """An arm that goes exactly where it is told and reports it (the Arm protocol)."""

    def __init__(self) -> None:
        self.pose = Pose(0.4, 0.0, 0.3, math.pi)

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def home(self) -> None: ...

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        self.pose = pose

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None: ...

    def grip(self, close: bool) -> None: ...

    def stop(self) -> None: ...

    def resume(self) -> None: ...

    def state(self) -> ArmState:
        return ArmState(self.pose)


class SphereCamera:
    """Renders the marker sphere carried by ``arm``, seen from ``TRUTH``, by ray casting."""

    def __init__(self, arm: PointArm, hide: Sequence[int] = ()) -> None:
        self.arm, self.hide, self.shots = arm, set(hide), 0
        u, v = np.meshgrid(np.arange(INTR.width), np.arange(INTR.height))
        rays = np.stack([(u - INTR.cx) / INTR.fx, (v - INTR.cy) / INTR.fy, np.ones(u.shape)], -1)
        self.rays = rays / np.linalg.norm(rays, axis=-1, keepdims=True)

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def read(self) -> Frame:
        centre = TRUTH.inverse().apply(marker_in_base(self.arm.pose, OFFSET))
        b = self.rays @ centre
        disc = b**2 - (centre @ centre - RADIUS**2)
        hit = (disc > 0) & (self.shots not in self.hide)
        t = b - np.sqrt(np.where(hit, disc, 0.0))
        depth = np.where(hit, t * self.rays[..., 2], 2.5).astype(np.float32)
        color = np.full((INTR.height, INTR.width, 3), 90, np.uint8)
        color[hit] = MAGENTA
        self.shots += 1
        return Frame(color, depth, INTR, timestamp=time.monotonic(), index=self.shots)

    def read_timeout(self, timeout: float) -> Frame:
        return self.read()

    def latest(self, max_age: float) -> Frame:
        return self.read()


def test_calibrate_on_a_ray_cast_sphere() -> None:
    arm = PointArm()
    transform, rms = calibrate(
        arm, SphereCamera(arm), poses(), color_marker(MAGENTA), OFFSET, RADIUS, settle=0.0
    )
    assert np.linalg.norm(transform.translation - TRUTH.translation) < 0.005
    assert rotation_error_deg(transform, TRUTH) < 0.5
    assert rms < 0.003


def test_poses_without_the_marker_are_skipped_until_too_few() -> None:
    arm = PointArm()
    camera = SphereCamera(arm, hide=[0, 3])
    _, rms = calibrate(arm, camera, poses(), color_marker(MAGENTA), OFFSET, RADIUS, 0.0)
    assert rms < 0.003  # 6 of 8 poses are enough
    camera = SphereCamera(arm, hide=range(6))
    with pytest.raises(CameraError, match="seen at 2 of 8 poses"):
        calibrate(arm, camera, poses(), color_marker(MAGENTA), OFFSET, RADIUS, 0.0)


def test_color_marker_ignores_shading_and_stray_pixels() -> None:
    color = np.full((240, 320, 3), 128, np.uint8)
    color[100:120, 200:220] = MAGENTA
    color[110:120, 200:220] = (120, 10, 115)  # the shaded half
    color[5, 5] = MAGENTA  # one stray pixel far away
    frame = Frame(color, np.ones((240, 320), np.float32), INTR, timestamp=0.0)
    box = color_marker(MAGENTA)(frame)
    assert box is not None
    assert box == pytest.approx((200, 100, 220, 120), abs=1.0)
    assert color_marker((0, 255, 0))(frame) is None


# -- on the physics twin: the Panda carries its own marker sphere ([arm.marker]) ----------


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(SCENES / "calibration.toml") as world:
        yield world


@pytest.fixture
def sim_arm(twin: Twin) -> Iterator[SimArm]:
    arm = SimArm(twin, SimArmConfig(speed=0.5))
    arm.connect()
    yield arm
    arm.close()


def test_the_scene_marker_matches_the_constants(twin: Twin) -> None:
    marker = twin.scene.arm.marker
    assert marker is not None
    assert (marker.radius, marker.offset) == (RADIUS, OFFSET)
    assert tuple(round(c * 255) for c in marker.color[:3]) == MAGENTA


def test_the_marker_follows_the_hand_through_physics(twin: Twin, sim_arm: SimArm) -> None:
    """Its true centre is the tool point plus the offset in the tool frame, within 0.1 mm,
    after moves that turn the tool too (the twin's base frame is its world frame)."""
    for pose in [
        Pose(0.35, -0.15, 0.15, math.pi, 0.0, 0.0),
        Pose(0.55, 0.15, 0.35, math.pi, 0.0, 0.3),
        Pose(0.45, 0.0, 0.25, math.pi - 0.4, 0.3, -0.5),
    ]:
        sim_arm.move_to(pose)
        expected = marker_in_base(sim_arm.state().pose, OFFSET)
        assert math.dist(twin.marker_position(), expected) < 1e-4
    twin.reset_joints(twin.scene.arm.home)  # a teleport takes the marker along
    expected = marker_in_base(twin.ee_pose(), OFFSET)
    assert math.dist(twin.marker_position(), expected) < 1e-6


def test_the_marker_collides_with_nothing(twin: Twin, sim_arm: SimArm) -> None:
    """Lowered into the table, the sphere neither stops the arm nor comes off the hand."""
    sim_arm.move_to(Pose(0.45, 0.05, 0.04, math.pi, 0.0, 0.0))  # sphere from -3 to +1 cm
    expected = marker_in_base(sim_arm.state().pose, OFFSET)
    assert expected[2] < 0.0  # its centre is inside the table
    assert math.dist(twin.marker_position(), expected) < 1e-4
    twin.step(0.5)
    expected = marker_in_base(sim_arm.state().pose, OFFSET)
    assert math.dist(twin.marker_position(), expected) < 1e-4
    sim_arm.move_to(Pose(0.45, 0.05, 0.25, math.pi, 0.0, 0.0))


def test_the_marker_is_rendered_and_segmented(twin: Twin, sim_arm: SimArm) -> None:
    sim_arm.move_to(Pose(0.45, 0.0, 0.25, math.pi, 0.0, 0.0))
    rgb, depth, seg = twin.render()
    mask = seg == twin.marker_body()
    assert mask.sum() > 50
    assert (rgb[mask][:, 1] < 40).all() and (rgb[mask][:, [0, 2]] > 100).all()  # magenta
    # the visible surface is one radius nearer than the centre, or less
    centre = HandEye(twin.camera_pose()).inverse().apply(twin.marker_position())
    assert float(centre[2]) - RADIUS - 0.002 < float(depth[mask].min()) < float(centre[2])


def test_a_twin_without_a_marker_says_how_to_add_one() -> None:
    with Twin(Scene()) as world, pytest.raises(ValueError, match=r"\[arm.marker\]"):
        world.marker_position()
    assert not world.has_marker()


@pytest.mark.parametrize("finder", ["segmentation", "colour"])
def test_calibrate_on_the_twin(twin: Twin, sim_arm: SimArm, finder: str) -> None:
    """Against the twin's truth (its base frame is its world frame): 1 cm and 1 degree."""
    camera = SimCamera(twin)
    body = twin.marker_body()

    def by_segmentation(frame: Frame) -> Box | None:
        assert camera.segmentation is not None  # of the frame just read
        rows, cols = np.nonzero(camera.segmentation == body)
        if rows.size < 12:
            return None
        return (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))

    find = by_segmentation if finder == "segmentation" else color_marker(MAGENTA)
    camera.connect()
    transform, rms = calibrate(sim_arm, camera, poses(), find, OFFSET, RADIUS, settle=0.0)
    truth = HandEye(twin.camera_pose())
    assert np.linalg.norm(transform.translation - truth.translation) < 0.01
    assert rotation_error_deg(transform, truth) < 1.0
    assert rms < 0.005
