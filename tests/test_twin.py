"""The physics twin: scenes, IK, camera geometry and the SimCamera's freshness rules."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from arm_harness import BOUND

from onboard.base.errors import CameraError, ConfigError, StaleFrame
from onboard.drivers.arm.base import Pose
from onboard.drivers.camera.twin_camera import SimCamera
from onboard.drivers.twin import DT, SCENES, Snapshot, Twin, load_scene


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin() as world:
        world.settle(0.3)
        yield world


@pytest.mark.parametrize("path", sorted(SCENES.glob("*.toml")), ids=lambda p: p.stem)
def test_every_scene_loads_and_rests_on_the_table(path: Path) -> None:
    scene = load_scene(path)
    assert path.read_text().startswith("#"), "each scene starts with a comment header"
    with Twin(path) as world:
        world.settle(0.3)
        assert world.object_names() == [o.name for o in scene.objects]
        for name in world.object_names():
            z = world.object_pose(name)[0][2]
            assert -0.01 < z < 0.3, f"{name} fell or flew: z = {z:.3f}"
            assert world.segmentation_id(name) == world.body_of(name)


BROKEN = """\
# a scene with two mistakes
[[objects]]
name = "red block"
kind = "block"
position = [0.4, 0.1]

[[objects]]
name = "belt"
kind = "conveyor"
position = [0.5, 0.0]
spede = 0.1
"""


def test_a_broken_scene_names_file_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN.replace('kind = "block"', 'kind = "blok"'))
    with pytest.raises(ConfigError) as caught:
        load_scene(path)
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{path}:4: [objects[0].kind]")
    assert "'block'" in lines[0], "the message lists the valid kinds"
    assert lines[1] == f"{path}:11: [objects[1].spede] unknown key (check its spelling)"


def test_a_key_of_another_kind_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "wrong.toml"
    path.write_text(BROKEN.replace("spede", "size"))
    with pytest.raises(ConfigError) as caught:
        Twin(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:11: [objects[1].size]")
    assert "use 'extent'" in message


def test_ik_reaches_poses_within_5mm(twin: Twin) -> None:
    rng = np.random.default_rng(1)
    for _ in range(12):
        x, y, z = rng.uniform(0.3, 0.65), rng.uniform(-0.3, 0.3), rng.uniform(0.03, 0.45)
        pose = Pose(x, y, z, math.pi, 0.0, rng.uniform(-1.5, 1.5))
        solution = twin.solve_ik(pose)
        reached = twin.forward(solution.joints)
        assert solution.residual < 0.005
        assert math.dist(reached.position(), pose.position()) < 0.005
        assert solution.angle < 0.01
        lower, upper = twin.joint_limits()
        assert all(lo <= q <= hi for q, lo, hi in zip(solution.joints, lower, upper, strict=True))


def test_ik_reports_an_unreachable_pose(twin: Twin) -> None:
    assert twin.solve_ik(Pose(1.5, 0.0, 0.3, math.pi, 0.0, 0.0)).residual > 0.3


def test_render_shapes_and_dtypes(twin: Twin) -> None:
    rgb, depth, seg = twin.render()
    spec = twin.scene.camera
    assert rgb.shape == (spec.height, spec.width, 3) and rgb.dtype == np.uint8
    assert depth.shape == (spec.height, spec.width) and depth.dtype == np.float32
    assert seg.shape == (spec.height, spec.width) and seg.dtype == np.int32
    assert spec.near <= float(depth[depth > 0].min()) and float(depth.max()) <= spec.far
    k = twin.intrinsics()
    assert k.fy == pytest.approx(spec.height / 2 / math.tan(math.radians(spec.fov) / 2))
    assert (k.cx, k.cy) == (spec.width / 2 - 0.5, spec.height / 2 - 0.5)


def test_a_light_changes_the_shading_not_the_geometry(twin: Twin) -> None:
    """camera.Light: a low light with shadows changes the shading; depth and segmentation
    stay as they were; the next render without a Light is the default one again (TinyRenderer
    keeps the last light it was given: render passes DEFAULT_LIGHT)."""
    from onboard.drivers.twin.camera import Light

    rgb, depth, seg = twin.render()
    low = Light(direction=(-1.0, 0.3, 0.4), ambient=0.3, diffuse=0.6, shadow=True)
    lit, lit_depth, lit_seg = twin.render(light=low)
    np.testing.assert_array_equal(lit_seg, seg)
    np.testing.assert_array_equal(lit_depth, depth)
    assert np.abs(lit.astype(int) - rgb).mean() > 5
    np.testing.assert_array_equal(twin.render()[0], rgb)


def test_depth_at_the_block_matches_the_true_distance(twin: Twin) -> None:
    _, depth, seg = twin.render()
    pixels = np.argwhere(seg == twin.segmentation_id("red block"))
    assert len(pixels) > 50
    v, u = pixels[np.argmin(np.linalg.norm(pixels - pixels.mean(axis=0), axis=1))]
    k, pose = twin.intrinsics(), twin.camera_pose()
    ray = pose[:3, :3] @ np.array([(u - k.cx) / k.fx, (v - k.cy) / k.fy, 1.0])
    eye = pose[:3, 3]
    hit, point = twin.ray_test(tuple(eye), tuple(eye + 3.0 * ray))
    assert hit == "red block"
    true_depth = float((np.array(point) - eye) @ pose[:3, 2])
    assert float(depth[v, u]) == pytest.approx(true_depth, abs=0.01)
    # and the pixel deprojected with intrinsics and pose lands on the block's surface
    seen = eye + float(depth[v, u]) * ray
    assert math.dist(tuple(seen), point) < 0.01


def test_the_block_centre_projects_into_its_mask(twin: Twin) -> None:
    _, _, seg = twin.render()
    centre, _ = twin.object_pose("red block")
    world_to_camera = np.linalg.inv(twin.camera_pose())
    x, y, z = (world_to_camera @ np.array([*centre, 1.0]))[:3]
    k = twin.intrinsics()
    u, v = round(k.fx * x / z + k.cx), round(k.fy * y / z + k.cy)
    assert seg[v, u] == twin.segmentation_id("red block")


def test_the_conveyor_carries_its_block() -> None:
    with Twin(SCENES / "conveyor.toml") as world:
        (_, y0, _), _ = world.object_pose("red block")
        world.step(2.0)
        (_, y1, z1), _ = world.object_pose("red block")
    assert y1 - y0 == pytest.approx(0.05 * 2.0, abs=0.015)
    assert z1 > 0.05, "still on the belt"


def test_the_drawer_opens_and_closes() -> None:
    with Twin(SCENES / "drawer.toml") as world:
        (spec,) = (o for o in world.scene.objects if o.kind == "drawer")
        assert world.drawer_opening("drawer") == pytest.approx(spec.opening, abs=0.005)
        world.set_drawer("drawer", 0.0)
        world.step(1.5)
        assert world.drawer_opening("drawer") == pytest.approx(0.0, abs=0.005)
        world.set_drawer("drawer", 0.1)
        world.step(1.5)
        assert world.drawer_opening("drawer") == pytest.approx(0.1, abs=0.005)


def test_twins_are_independent(twin: Twin) -> None:
    with Twin(SCENES / "tabletop.toml") as other:
        other.set_object_pose("red block", (0.3, 0.3, 0.02))
        other.step(0.1)
        assert twin.object_pose("red block")[0][:2] == pytest.approx((0.45, 0.0), abs=0.002)
    assert twin.object_names(), "closing one twin leaves the other usable"


def test_each_step_publishes_a_snapshot_and_runs_the_hooks(twin: Twin) -> None:
    first = twin.snapshot.step
    seen: list[Snapshot] = []
    with twin.on_step(seen.append):
        twin.step(3 * DT)
    twin.step()  # the hook is gone
    assert [s.step for s in seen] == [first + 1, first + 2, first + 3]
    assert seen[-1].time == pytest.approx((first + 3) * DT)
    assert twin.snapshot.step == first + 4 and twin.time == pytest.approx(twin.snapshot.time)
    assert twin.ee_pose() == twin.snapshot.ee_pose and twin.joints() == twin.snapshot.joints
    twin.reset_joints(twin.scene.arm.home)  # a teleport publishes too, without a step
    assert twin.snapshot.step == first + 4
    assert twin.joints() == pytest.approx(twin.scene.arm.home, abs=1e-6)


def test_a_gate_holds_the_physics_and_readers_need_not_wait(twin: Twin) -> None:
    first = twin.snapshot.step
    with twin.hold_at(first + 5) as gate:
        stepper = threading.Thread(target=twin.step, args=(20 * DT,))
        stepper.start()
        assert gate.wait_reached(BOUND)
        assert twin.snapshot.step == first + 5
        assert not twin.wait_for_step(first + 6, 0.2), "held: no step past the gate"
        assert twin.render()[0].shape[2] == 3  # the lock is free while the physics is held
        gate.release()
        assert twin.wait_for_step(first + 20, BOUND)
    stepper.join(BOUND)
    assert not stepper.is_alive() and twin.snapshot.step == first + 20


def test_unknown_object_names_the_known_ones(twin: Twin) -> None:
    with pytest.raises(KeyError, match="'red block'"):
        twin.object_pose("purple block")


# SimCamera


def test_sim_camera_reads_new_frames_and_reuses_young_ones(twin: Twin) -> None:
    with SimCamera(twin) as camera:
        with pytest.raises(StaleFrame):
            camera.latest(1.0)
        first = camera.read()
        assert first.color.shape == (240, 320, 3) and first.depth.dtype == np.float32
        assert first.intrinsics == twin.intrinsics()
        assert camera.segmentation is not None and camera.segmentation.shape == (240, 320)
        assert camera.latest(5.0) is first
        second = camera.read_timeout(1.0)
        assert second.index == first.index + 1 and second.timestamp >= first.timestamp
        time.sleep(0.03)
        with pytest.raises(StaleFrame, match="old"):
            camera.latest(0.01)


def test_a_frozen_sim_camera_raises_stale_frame(twin: Twin) -> None:
    camera = SimCamera(twin, timeout=0.05)
    with pytest.raises(CameraError, match="connect"):
        camera.read()
    camera.connect()
    camera.freeze()
    started = time.monotonic()
    with pytest.raises(StaleFrame):
        camera.read()
    with pytest.raises(StaleFrame):
        camera.read_timeout(0.05)
    assert time.monotonic() - started < 1.0
    camera.unfreeze()
    assert camera.read().index == 1
