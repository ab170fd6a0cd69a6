"""The observer on hand-built detections over a hand-built depth image.

The camera sits 0.2 m above the base origin looking along the base's +x, level: base
(x forward, y left, z up) = (z, -x, -y) of the camera frame, so base +y is image left.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.twin import Twin
from onboard.drivers.twin.scene import ObjectSpec, Scene
from onboard.perception.detector import Detection
from onboard.perception.pose import Box, HandEye, project
from onboard.perception.scene_observer import SceneObserver, SceneState

INTR = Intrinsics(width=320, height=240, fx=300.0, fy=300.0, cx=159.5, cy=119.5)
CAMERA_TO_BASE = HandEye.from_parts([[0, 0, 1], [-1, 0, 0], [0, -1, 0]], [0.0, 0.0, 0.2])
BLOCK = 0.05

# name: centre in the base frame (blocks of 5 cm resting on the table z = 0, or on each other)
SCENE = {
    "red block": (0.60, 0.10, 0.025),
    "yellow block": (0.60, 0.10, 0.075),  # on the red block
    "blue block": (0.60, -0.10, 0.025),  # 15 cm right of the red one: not near
    "green block": (0.60, -0.17, 0.025),  # 2 cm right of the blue one: near
}


def paint(depth: np.ndarray, centre: tuple[float, float, float], size: float) -> Box:
    """Draw a block's front face into ``depth``; its detection box."""
    c = CAMERA_TO_BASE.inverse().apply(centre)
    z = c[2] - size / 2
    u1, v1 = project((c[0] - size / 2, c[1] - size / 2, z), INTR)
    u2, v2 = project((c[0] + size / 2, c[1] + size / 2, z), INTR)
    box = (u1 + 0.5, v1 + 0.5, u2 + 0.5, v2 + 0.5)  # pixel centres -> the detector's edges
    depth[round(box[1]) : round(box[3]), round(box[0]) : round(box[2])] = z
    return box


def scene(
    objects: dict[str, tuple[float, float, float]], holes: bool = True
) -> tuple[list[Detection], Frame]:
    depth = np.full((240, 320), 3.0, np.float32)  # a far wall
    detections = []
    for name, centre in sorted(objects.items(), key=lambda kv: -kv[1][0]):  # far to near
        label = name.rsplit(" #", 1)[0]
        detections.append(Detection(label, 0.9, paint(depth, centre, BLOCK)))
    if holes:
        depth[np.random.default_rng(0).random(depth.shape) < 0.05] = 0.0
    # a lit grey frame: the observer reads only depth here, but a black one is too dark to
    # trust (runtime/perception/view.py)
    frame = Frame(np.full((240, 320, 3), 128, np.uint8), depth, INTR, timestamp=0.0)
    return detections, frame


@pytest.fixture
def state() -> SceneState:
    detections, frame = scene(SCENE)
    return SceneObserver(CAMERA_TO_BASE).observe(detections, frame)


def test_positions_in_the_base_frame(state: SceneState) -> None:
    assert state.frame == "base"
    for name, truth in SCENE.items():
        obj = state.get(name)
        assert np.linalg.norm(obj.position - truth) < 0.015, name
        assert obj.size == pytest.approx(BLOCK, abs=0.005)


def test_stacking(state: SceneState) -> None:
    assert state.get("yellow block").related("on") == ["red block"]
    assert state.get("red block").related("under") == ["yellow block"]
    assert state.holds("yellow block", "on", "red block")
    assert not state.holds("red block", "on", "yellow block")
    assert not state.holds("blue block", "on", "green block")


def test_sides_and_nearness(state: SceneState) -> None:
    assert state.holds("red block", "left of", "blue block")
    assert state.holds("blue block", "right of", "red block")
    assert state.holds("green block", "right of", "blue block")
    assert state.holds("green block", "near", "blue block")
    assert state.holds("blue block", "near", "green block")
    assert not state.holds("red block", "near", "blue block")
    assert not state.holds("yellow block", "left of", "red block")  # stacked, not beside


def test_text_for_the_prompt(state: SceneState) -> None:
    lines = dict(line.split(" at ", 1) for line in state.text().splitlines())
    red = state.get("red block").position
    assert lines["a red block"] == (
        f"({red[0]:.2f}, {red[1]:.2f}, {red[2]:.2f}) m, under a yellow block"
    )
    assert lines["a yellow block"].endswith(" m, on a red block")
    assert lines["a blue block"].endswith(" m, left of a green block")
    assert lines["a green block"].endswith(" m, right of a blue block")


def test_repeated_labels_get_numbered_names() -> None:
    objects = {"red block #1": (0.60, 0.10, 0.025), "red block #2": (0.60, -0.10, 0.025)}
    state = SceneObserver(CAMERA_TO_BASE).observe(*scene(objects))
    assert [o.name for o in state.objects] == ["red block 1", "red block 2"]
    assert [o.label for o in state.objects] == ["red block", "red block"]
    assert state.text().splitlines()[0].startswith("red block 1 at (")
    assert len(state.named("red block")) == 2


def test_a_stacked_blocks_box_read_also_as_the_block_on_it_is_one_object() -> None:
    """The wider detectors' second reading (runtime/perception/readings.py): the red block's
    box scored also as yellow, weaker; the yellow block is seen on it, so it is one red block."""
    detections, frame = scene(SCENE)
    red = next(d for d in detections if d.label == "red block")
    detections.append(Detection("yellow block", 0.4, red.box))
    state = SceneObserver(CAMERA_TO_BASE).observe(detections, frame)
    assert sorted(o.name for o in state.objects) == sorted(SCENE)
    assert state.named("yellow block")[0].related("on") == ["red block"]
    assert not [u for u in state.unknown if u.kind == "stack"]


def test_no_depth_and_low_scores() -> None:
    detections, frame = scene({"red block": (0.60, 0.10, 0.025)})
    frame.depth[:, :] = np.where(frame.depth < 1.0, 0.0, frame.depth)  # the block has no depth
    detections += [Detection("ghost", 0.1, (10.0, 10.0, 20.0, 20.0))]
    state = SceneObserver(CAMERA_TO_BASE, min_score=0.5).observe(detections, frame)
    assert state.objects == () and state.unlocated == ("red block",)
    assert state.text() == "a red block (position unknown: no depth)"
    empty = SceneObserver(CAMERA_TO_BASE).observe([], frame)
    assert empty.text() == "No objects are seen."


def test_without_hand_eye_the_camera_frame_is_used() -> None:
    state = SceneObserver().observe(*scene(SCENE))
    assert state.frame == "camera"
    assert state.holds("yellow block", "on", "red block")  # camera -y taken as up
    assert state.holds("red block", "left of", "blue block")
    assert state.get("red block").position[2] == pytest.approx(0.6, abs=0.01)  # camera z


def test_structured_state_is_json(state: SceneState) -> None:
    record = json.loads(json.dumps(state.to_record()))
    red = next(o for o in record["objects"] if o["name"] == "red block")
    assert red["relations"] == [
        ["under", "yellow block"],
        ["left of", "blue block"],
        ["left of", "green block"],
    ]
    assert red["label"] == "red block" and len(red["position"]) == 3


def test_sides_as_the_robot_sees_them() -> None:
    state = SceneObserver(CAMERA_TO_BASE, sides="base").observe(*scene(SCENE))
    # this camera looks along the base's +x, so its left is the robot's left too
    assert state.holds("red block", "left of", "blue block")
    with pytest.raises(ValueError, match="hand-eye"):
        SceneObserver(sides="base")


def test_labels_read_as_words_with_their_article() -> None:
    detections, frame = scene({"apple": (0.60, 0.10, 0.025), "red_block": (0.6, -0.1, 0.025)})
    lines = SceneObserver(CAMERA_TO_BASE).observe(detections, frame).text().splitlines()
    assert lines[0].startswith("an apple at (")
    assert lines[1].startswith("a red block at (")


# -- on the physics twin: real renders, boxes from the segmentation -------------------------

TWIN_OBJECTS = [
    ObjectSpec(name="red block", kind="block", position=(0.45, 0.06), size=0.04,
               color=(0.85, 0.1, 0.1, 1)),
    ObjectSpec(name="yellow block", kind="block", position=(0.45, 0.06, 0.06), size=0.04,
               color=(0.95, 0.85, 0.1, 1)),
    ObjectSpec(name="blue block", kind="block", position=(0.45, -0.10), size=0.04,
               color=(0.1, 0.25, 0.85, 1)),
    ObjectSpec(name="green block", kind="block", position=(0.45, -0.16), size=0.04,
               color=(0.1, 0.7, 0.2, 1)),
    ObjectSpec(name="apple", kind="apple", position=(0.60, 0.15), size=0.07),
]  # fmt: skip


def test_observer_on_the_twin() -> None:
    """The twin's camera looks back at the robot from +x: its left is the robot's right."""
    with Twin(Scene(objects=TWIN_OBJECTS)) as twin:
        twin.settle(0.5)
        color, depth, seg = twin.render()
        detections = []
        for name in twin.object_names():
            rows, cols = np.nonzero(seg == twin.segmentation_id(name))
            box = (
                float(cols.min()),
                float(rows.min()),
                float(cols.max() + 1),
                float(rows.max() + 1),
            )
            detections.append(Detection(name, 0.9, box))
        frame = Frame(color, depth, twin.intrinsics(), timestamp=0.0)
        camera_to_base = HandEye(twin.camera_pose())  # the arm's base is the world origin
        state = SceneObserver(camera_to_base).observe(detections, frame)
        robot = SceneObserver(camera_to_base, sides="base").observe(detections, frame)
        truth = {name: np.array(twin.object_pose(name)[0]) for name in twin.object_names()}
    assert state.holds("yellow block", "on", "red block")
    assert state.holds("red block", "under", "yellow block")
    assert state.holds("green block", "near", "blue block")
    assert not state.holds("apple", "near", "red block")
    assert state.holds("green block", "left of", "blue block")  # as the camera sees it
    assert robot.holds("green block", "right of", "blue block")  # as the robot sees it
    for name in ("yellow block", "blue block", "green block", "apple"):  # in full view
        assert np.linalg.norm(state.get(name).position - truth[name]) < 0.01, name
    assert np.linalg.norm(state.get("red block").position - truth["red block"]) < 0.025
    assert "a yellow block at (0.45, 0.06, 0.06) m, on a red block" in state.text().splitlines()
