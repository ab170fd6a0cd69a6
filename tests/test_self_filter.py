"""The robot's own hand is no object (runtime/perception/self_filter.py), on the twin: a box
drawn where the Panda's hand is, over the table, is reported as unknown, not as an object at
the hand; a box on a block on the table beside it, and on the block between the fingers, are
objects; and the code skill's look, with such a box, sends the arm home before it looks
again. The boxes are drawn from the twin's geometry, not by a detector (the last test adds one
to the shipped model's through a stand-in), so what is tested is the runtime's rule, whatever
model draws boxes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from standin_detectors import AlteredDetector, Found

from onboard.config import RobotConfig
from onboard.drivers.arm.base import Pose
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.twin import SCENES, Twin, load_scene
from onboard.evaluation.code_trials import code_world
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.perception.detector import Detection
from onboard.perception.pose import HandEye, project
from onboard.perception.scene_observer import SceneObserver, SceneState
from onboard.perception.self_filter import Hand, HandZone
from onboard.perception.unknown import why_unknown
from onboard.replan.episode import RobotWorld
from onboard.replan.perceive import perceive
from onboard.replan.robot import code_limits

#: pixels: half the side of a box drawn around a projected point
HALF = 10


@pytest.fixture(scope="module")
def twin() -> Iterator[Twin]:
    with Twin(load_scene(SCENES / "blocks.toml")) as twin:
        twin.settle()
        yield twin


@pytest.fixture(scope="module")
def hand_eye(robot: RobotConfig) -> HandEye:
    """The example robot's calibration: the shipped scenes' camera in the arm's base frame."""
    assert robot.hand_eye is not None
    return HandEye.from_config(robot.hand_eye)


def tool_at(twin: Twin, x: float, y: float, z: float) -> Pose:
    """The Panda's tool pointing down at (x, y, z), base frame; its pose."""
    home = tuple(map(float, twin.scene.arm.home))
    solution = twin.solve_ik(replace(twin.forward(home), x=x, y=y, z=z), home)
    assert solution.residual < 0.01
    twin.reset_joints(solution.joints[:7])
    return twin.ee_pose()


def look(twin: Twin) -> Frame:
    rgb, depth, _ = twin.render()
    return Frame(rgb, depth, twin.intrinsics(), 0.0)


def box_at(
    point: tuple[float, ...], hand_eye: HandEye, intrinsics: Intrinsics, label: str
) -> Detection:
    """A box of ``label`` around where the base-frame ``point`` shows in the image."""
    u, v = project(hand_eye.inverse().apply(point), intrinsics)
    return Detection(label, 0.9, np.array([u - HALF, v - HALF, u + HALF, v + HALF]))


def test_a_box_on_the_hand_is_unknown_and_a_block_beside_it_an_object(
    twin: Twin, hand_eye: HandEye
) -> None:
    block = twin.to_base(twin.object_pose("red block")[0])
    pose = tool_at(twin, block[0] + 0.05, block[1] + 0.1, 0.15)  # over the table, beside it
    frame = look(twin)
    hand = Hand.from_pose(pose)
    on_hand = tuple(hand.tip + 0.15 * hand.back)  # the hand's palm, above the fingers
    boxes = [
        box_at(on_hand, hand_eye, frame.intrinsics, "plate"),
        box_at(block, hand_eye, frame.intrinsics, "red_block"),
    ]
    observer = SceneObserver(hand_eye, sides="base")

    state = observer.observe(boxes, frame, hand=hand)
    assert [o.label for o in state.objects] == ["red block"]
    assert [(u.kind, u.names) for u in state.unknown] == [("hand", ("plate",))]
    assert SceneState.from_record(state.to_record()).unknown == state.unknown  # replays as seen
    # a goal that needs the plate cannot tell: what the hand hides may be there
    why = why_unknown(None, state.unknown, ["red block", "plate"], ["red block"], "on")
    assert why is not None and "behind the robot's hand" in why

    # without the hand's pose the same box is a plate in mid-air, where the hand is
    blind = observer.observe(boxes, frame)
    plate = next(o for o in blind.objects if o.label == "plate")
    assert np.linalg.norm(plate.position - hand.tip) < 0.3 and not blind.unknown
    # and a zone of length 0 is no check
    off = SceneObserver(hand_eye, sides="base", zone=HandZone(length=0.0))
    assert len(off.observe(boxes, frame, hand=hand).objects) == 2


def test_the_block_between_the_fingers_is_an_object(twin: Twin, hand_eye: HandEye) -> None:
    """The grasp (the first ``grasp`` metres behind the fingertips) is left out: the object
    being grasped, or held, is seen as itself."""
    block = twin.to_base(twin.object_pose("red block")[0])
    pose = tool_at(twin, *block)
    frame = look(twin)
    state = SceneObserver(hand_eye, sides="base").observe(
        [box_at(block, hand_eye, frame.intrinsics, "red_block")], frame, hand=Hand.from_pose(pose)
    )
    assert [o.label for o in state.objects] == ["red block"] and not state.unknown


def test_the_robot_toml_section_sets_the_zone(robot: RobotConfig) -> None:
    assert robot.hand_zone == HandZone()
    data = robot.model_dump(exclude={"root"}) | {"hand_zone": {"radius": 0.05}}
    assert RobotConfig.model_validate(data).hand_zone.radius == 0.05


class HandAsPlate(AlteredDetector):
    """A stand-in for a model that takes the hand for a plate when the arm is out over the
    table (as the shipped models did: bench/arm_phantoms.py): the shipped model's boxes, and
    a plate box on the palm unless the tool is at its home position ``home``."""

    def __init__(self, twin: Twin, hand_eye: HandEye, home: Pose) -> None:
        shipped = detector()
        super().__init__(shipped.path, shipped.classes)
        self.twin, self.hand_eye, self.home = twin, hand_eye, home

    def alter(self, found: Found, dim: Found) -> tuple[Found, Found]:
        pose = self.twin.ee_pose()
        if math.dist(pose.position(), self.home.position()) < 0.05:
            return found, dim
        hand = Hand.from_pose(pose)
        palm = tuple(hand.tip + 0.15 * hand.back)
        box = box_at(palm, self.hand_eye, self.twin.intrinsics(), "plate")
        return [*found, box], dim


def test_a_box_on_the_hand_sends_the_arm_home_before_the_second_look(
    robot: RobotConfig, embedder: Embedder, hand_eye: HandEye
) -> None:
    """The code skill's look (RobotWorld): a box on the hand is unknown, so the look is taken
    again, and the arm, its gripper empty, goes home first: the hand may be taken for an
    object or hide one. From home the second look sees no box on the hand."""
    with code_world(robot, "tabletop", embedder, detector()) as (twin, api):
        api.home()
        home = twin.ee_pose()
        api.eyes.detector = HandAsPlate(twin, hand_eye, home)
        api.move_to(0.5, 0.0, 0.15)
        world = RobotWorld(api, code_limits(robot.code), "tabletop", lambda: twin.time)
        assert any(u.kind == "hand" for u in perceive(api).unknown), "the premise"
        before = api.eyes.last
        assert before is not None and before.frame is not None
        _, state = world.look()
        assert math.dist(twin.ee_pose().position(), home.position()) < 0.01
        assert not any(u.kind == "hand" for u in state.unknown)
        last = api.eyes.last
        assert last is not None and last.frame is not None
        assert last.frame.index == before.frame.index + 2
