"""SimArm over the physics twin: motions, errors, stop from another thread, pick and place."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace

import pytest
from arm_harness import Behind, interrupt

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import Arm, ArmState, Pose
from onboard.drivers.arm.twin_arm import SimArm, SimArmConfig
from onboard.drivers.twin import DT, Snapshot, Twin
from onboard.drivers.twin.tasks import pick_and_place

DOWN = (math.pi, 0.0, 0.0)  # tool pointing down, fingers closing along the base's y axis


@pytest.fixture
def twin() -> Iterator[Twin]:
    with Twin() as world:
        world.settle(0.2)
        yield world


@pytest.fixture
def arm(twin: Twin) -> Iterator[SimArm]:
    with SimArm(twin, SimArmConfig(speed=0.3)) as sim:
        yield sim


def test_sim_arm_is_an_arm(arm: SimArm) -> None:
    assert isinstance(arm, Arm)
    assert isinstance(arm.state(), ArmState)


def test_motions_need_connect(twin: Twin) -> None:
    with pytest.raises(ArmError, match="connect"):
        SimArm(twin).move_to(Pose(0.4, 0.0, 0.3, *DOWN))


def test_move_to_reaches_the_pose(arm: SimArm, twin: Twin) -> None:
    goal = Pose(0.5, -0.1, 0.25, math.pi, 0.0, 0.5)
    started = twin.time
    arm.move_to(goal, speed=0.2)
    reached = twin.ee_pose()
    assert math.dist(reached.position(), goal.position()) < 0.005
    assert reached.rz == pytest.approx(0.5, abs=0.01)
    distance = math.dist((0.307, 0.0, 0.485), goal.position())
    assert twin.time - started >= distance / 0.2, "no faster than the asked speed"
    state = arm.state()
    assert not state.moving and state.error is None
    assert state.last_command is not None and state.last_command.startswith("move_to(")
    assert len(state.joints) == 7


def test_the_path_is_a_straight_line(arm: SimArm, twin: Twin) -> None:
    start = twin.ee_pose()
    goal = replace(start, x=start.x + 0.2, z=start.z - 0.2)
    samples: list[Snapshot] = []
    with twin.on_step(samples.append):  # the tool after every physics step of the move
        arm.move_to(goal, speed=0.1)
    assert len(samples) >= 2.8 / DT  # 0.28 m at 0.1 m/s
    assert [s.step for s in samples] == list(range(samples[0].step, samples[-1].step + 1))
    for pose in (s.ee_pose for s in samples):  # distance of each from the line start-goal
        t = ((pose.x - start.x) * 0.2 - (pose.z - start.z) * 0.2) / 0.08
        offset = math.dist(pose.position(), (start.x + 0.2 * t, start.y, start.z - 0.2 * t))
        assert offset < 0.01


def test_an_unreachable_pose_is_refused_before_moving(arm: SimArm, twin: Twin) -> None:
    before = twin.joints()
    with pytest.raises(ArmError, match="out of reach"):
        arm.move_to(Pose(1.4, 0.0, 0.3, *DOWN))
    assert twin.joints() == pytest.approx(before, abs=1e-3)
    assert "out of reach" in (arm.state().error or "")


def test_joint_moves_check_limits(arm: SimArm, twin: Twin) -> None:
    with pytest.raises(ArmError, match="joint 4"):
        arm.move_joints((0.0, 0.0, 0.0, 0.5, 0.0, 1.5, 0.8))
    assert "joint 4" in (arm.state().error or "")
    target = (0.3, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8)
    arm.move_joints(target, speed=1.5)
    assert twin.joints() == pytest.approx(target, abs=0.005)
    arm.home()
    assert twin.joints() == pytest.approx(twin.scene.arm.home, abs=0.005)


def test_stop_from_another_thread_aborts_a_long_move(arm: SimArm, twin: Twin) -> None:
    goal = Pose(0.5, 0.3, 0.2, *DOWN)
    done = interrupt(arm, lambda: arm.move_to(goal, speed=0.01), arm.stop, Behind(twin, arm))
    assert isinstance(done.raised, ArmError) and "stopped by stop()" in str(done.raised)
    assert math.dist(done.stopped_at.position(), goal.position()) > 0.2
    further = replace(done.stopped_at, z=done.stopped_at.z + 0.05)
    step = twin.snapshot.step
    with pytest.raises(ArmError, match=r"resume\(\)"):  # latched until resume()
        arm.move_to(further)
    assert twin.snapshot.step == step, "a refused move does not step the physics"
    arm.resume()
    assert not arm.state().stopped
    arm.move_to(further)
    assert math.dist(twin.ee_pose().position(), further.position()) < 0.005


def test_a_stop_just_before_a_motion_is_not_lost(arm: SimArm, twin: Twin) -> None:
    """The stop latches, so the next motion call raises before it steps the physics."""
    step = twin.snapshot.step
    arm.stop()
    for call in (arm.home, lambda: arm.grip(True), lambda: arm.move_joints(twin.joints())):
        with pytest.raises(ArmError, match=r"stopped by stop\(\): call resume\(\)"):
            call()
    assert twin.snapshot.step == step
    assert arm.state().stopped and not arm.state().moving
    arm.resume()
    arm.grip(True)
    assert arm.state().gripper_closed


def test_a_blocked_move_reports_it(arm: SimArm) -> None:
    with pytest.raises(ArmError, match="blocked"):
        arm.move_to(Pose(0.3, 0.25, -0.05, *DOWN))  # below the table top


def test_pick_and_place_puts_the_red_block_in_the_box(twin: Twin) -> None:
    block, _ = twin.object_pose("red block")
    box, _ = twin.object_pose("box")
    target = (box[0], box[1], 0.03)  # the box floor is 1 cm thick; the block 4 cm
    pick = Pose(*twin.to_base(block), *DOWN)
    place = Pose(*twin.to_base(target), *DOWN)
    spy = _Heights(SimArm(twin), twin)
    spy.connect()
    pick_and_place(spy, pick, place, approach_height=0.10, speed=0.3)
    twin.step(0.3)
    final, _ = twin.object_pose("red block")
    assert math.dist(final, target) < 0.02
    lifted = spy.heights[4]  # after grip, grip, approach, pick, lift
    assert lifted > block[2] + 0.08, "the block rose with the gripper"


class _Heights:
    """An Arm that records the red block's height after every call it passes on."""

    def __init__(self, arm: SimArm, twin: Twin) -> None:
        self.arm, self.twin, self.heights = arm, twin, list[float]()

    def _log(self) -> None:
        self.heights.append(self.twin.object_pose("red block")[0][2])

    def connect(self) -> None:
        self.arm.connect()

    def close(self) -> None:
        self.arm.close()

    def home(self) -> None:
        self.arm.home()
        self._log()

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        self.arm.move_to(pose, speed)
        self._log()

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        self.arm.move_joints(joints, speed)
        self._log()

    def grip(self, close: bool) -> None:
        self.arm.grip(close)
        self._log()

    def stop(self) -> None:
        self.arm.stop()

    def resume(self) -> None:
        self.arm.resume()

    def state(self) -> ArmState:
        return self.arm.state()


def test_grip_opens_and_closes_the_fingers(arm: SimArm, twin: Twin) -> None:
    arm.grip(True)
    assert twin.gripper_width() < 0.005 and arm.state().gripper_closed
    assert twin.held_object() is None
    arm.grip(False)
    assert twin.gripper_width() > 0.075 and not arm.state().gripper_closed
