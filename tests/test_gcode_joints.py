"""Joint-space arms on G-code (``kinematics = "joints"``): the DH chain, its IK, and the driver
on the Marlin emulator in joint space driving a kinematic model of the BCN3D Moveo whose tool
pose is computed link by link, apart from the driver's DH code (so the truth is not the
driver's own)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from pydantic import ValidationError

from onboard.base.errors import ArmError, SafetyError
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import DhJoint, GcodeArmConfig
from onboard.drivers.arm.dh import Chain, Link
from onboard.drivers.arm.gcode import GcodeArm
from onboard.drivers.arm.gcode_joints import chain_of
from onboard.drivers.arm.safety import SafeArm, SafetyLimits
from onboard.drivers.emulators.moveo import (
    MOVEO_HOME,
    MOVEO_LIMITS,
    JointModelArm,
    moveo_config,
    moveo_pose,
    serve_moveo,
)
from onboard.drivers.rotations import rpy_to_matrix

CHAIN = chain_of(moveo_config("unused"))


def _inner_joints(rng: random.Random) -> list[float]:
    """Joints drawn from the inner 80 % of each range (radians)."""
    return [
        math.radians(rng.uniform(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo)))
        for lo, hi in MOVEO_LIMITS
    ]


def _axis_angle(a: Pose, b: Pose) -> float:
    """Radians between the two poses' tool axes (z)."""
    za = rpy_to_matrix((a.rx, a.ry, a.rz))[:, 2]
    zb = rpy_to_matrix((b.rx, b.ry, b.rz))[:, 2]
    return math.acos(max(-1.0, min(1.0, float(za @ zb))))


def test_the_dh_table_describes_the_moveo_model() -> None:
    rng = random.Random(3)
    for _ in range(100):
        q = _inner_joints(rng)
        dh, model = CHAIN.forward(q), moveo_pose(q)
        assert math.dist(dh.position(), model.position()) < 1e-9
        r_dh = rpy_to_matrix((dh.rx, dh.ry, dh.rz))
        assert np.allclose(r_dh, rpy_to_matrix((model.rx, model.ry, model.rz)), atol=1e-9)


def test_ik_reaches_poses_of_the_model_within_the_limits() -> None:
    """30 poses the model reaches (position and tool axis: five joints leave the roll about
    the tool free) are solved from the home seed, within the limits."""
    rng = random.Random(7)
    home = [math.radians(v) for v in MOVEO_HOME]
    for _ in range(30):
        target = moveo_pose(_inner_joints(rng))
        joints = CHAIN.solve(target, home)
        assert CHAIN.within(joints) is None
        reached = moveo_pose(joints)
        assert math.dist(reached.position(), target.position()) < 0.001
        assert _axis_angle(reached, target) < math.radians(0.5)


def test_ik_of_a_six_joint_chain_matches_the_whole_orientation() -> None:
    """With six joints nothing is left free: the solved pose matches the roll too (a
    spherical-wrist arm, PUMA-like proportions; one prismatic joint checks that kind)."""
    links = (
        Link(d=0.3, alpha=math.pi / 2),
        Link(a=0.25),
        Link(alpha=math.pi / 2, theta=math.pi / 2),
        Link(d=0.25, alpha=-math.pi / 2),
        Link(alpha=math.pi / 2),
        Link(d=0.0, prismatic=True),
    )
    chain = Chain(links, (-3.0,) * 5 + (0.0,), (3.0,) * 5 + (0.08,), tool=(0.0, 0.0, 0.05))
    rng = np.random.default_rng(5)
    for _ in range(20):
        q = rng.uniform(-1.2, 1.2, 6)
        q[5] = rng.uniform(0.01, 0.07)
        target = chain.forward(q)
        reached = chain.forward(chain.solve(target, [0.0] * 5 + [0.04]))
        assert math.dist(reached.position(), target.position()) < 0.001
        r_a = rpy_to_matrix((reached.rx, reached.ry, reached.rz))
        r_b = rpy_to_matrix((target.rx, target.ry, target.rz))
        assert np.allclose(r_a, r_b, atol=0.01)


def test_config_refuses_joint_space_without_joints_or_with_an_axis_twice() -> None:
    with pytest.raises(ValidationError, match=r"needs the arm's joints"):
        GcodeArmConfig(url="loop://", kinematics="joints")
    joint = DhJoint(axis="X", min=-90, max=90)
    with pytest.raises(ValidationError, match=r"name an axis twice"):
        GcodeArmConfig(url="loop://", kinematics="joints", joints=(joint, joint))
    with pytest.raises(ValidationError, match=r"grbl has no axis U"):
        GcodeArmConfig(
            url="loop://",
            dialect="grbl",
            kinematics="joints",
            joints=(joint.model_copy(update={"axis": "U"}),),
        )
    with pytest.raises(ValidationError, match=r"min 90.0 must be below max"):
        DhJoint(axis="X", min=90, max=-90)


@pytest.fixture(scope="module")
def moveo() -> Iterator[tuple[JointModelArm, GcodeArm]]:
    model, marlin = serve_moveo(boot_time=0.05)
    with marlin as pty, GcodeArm(moveo_config(pty.path, timeout=10.0, grip_settle=0.0)) as arm:
        yield model, arm


def test_move_to_puts_the_models_tool_on_the_target(moveo: tuple[JointModelArm, GcodeArm]) -> None:
    model, arm = moveo
    arm.home()
    start = arm.state().pose
    target = replace(start, x=start.x - 0.04, y=start.y + 0.06, z=start.z - 0.05)
    arm.move_to(target, 0.2)
    truth = model.state().pose  # the model's own kinematics, not the driver's
    assert math.dist(truth.position(), target.position()) < 0.002
    assert _axis_angle(truth, target) < math.radians(1.0)  # still pointing down
    assert math.dist(arm.state().pose.position(), truth.position()) < 0.001


def test_out_of_reach_and_out_of_limits_are_refused_before_anything_is_sent(
    moveo: tuple[JointModelArm, GcodeArm],
) -> None:
    model, arm = moveo
    here = arm.state()
    before = (arm.state().last_command, model.moves)
    with pytest.raises(ArmError, match=r"\(0\.900, .*beyond the stretched-out arm"):
        arm.move_to(replace(here.pose, x=0.9), 0.1)
    tucked = replace(here.pose, x=0.05, y=0.0, z=0.05)  # inside its sphere, behind its limits
    with pytest.raises(ArmError, match=r"out of reach within the joint limits") as info:
        arm.move_to(tucked, 0.1)
    assert "\n" not in str(info.value) and "nothing was sent" in str(info.value)
    too_far = (math.radians(150), *here.joints[1:])
    with pytest.raises(ArmError, match=r"joint X = .* outside its limits \[-121.5, 121.5\] deg"):
        arm.move_joints(too_far, 0.5)
    assert (arm.state().last_command, model.moves) == before  # no line, no motion


def test_safe_arm_checks_a_joint_move_against_the_workspace(
    moveo: tuple[JointModelArm, GcodeArm],
) -> None:
    """The factory gives SafeArm the chain's forward kinematics: a joint move that would
    put the tool into the table is refused before the driver sees it."""
    model, arm = moveo
    safe = SafeArm(arm, SafetyLimits(), forward_kinematics=arm.forward)
    down = tuple(math.radians(v) for v in (0, 75, 90, 0, 90))  # bent forward into the table
    assert CHAIN.within(down) is None and arm.forward(down).z < 0.0
    moves = model.moves
    with pytest.raises(SafetyError, match=r"SafeArm: z=-[\d.]+ m is outside the workspace"):
        safe.move_joints(down, 0.5)
    assert model.moves == moves
