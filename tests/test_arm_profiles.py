"""``onboard init --arm KIND``: each arm kind's robot.toml, accepted by ``onboard check`` (in
process), its settings to check marked; the Moveo's profile is the arm the joint-space tests
drive, and the SO-101's drives the servo-bus emulator through the factory."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from onboard.cli.arm_profiles import PROFILES
from onboard.cli.main import main
from onboard.config import load_robot
from onboard.drivers.arm.so101 import So101Arm
from onboard.drivers.emulators.feetech_pty import So101Emulator
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.emulators.moveo import MOVEO_HOME, JointModelArm, moveo_config
from onboard.drivers.factory import hardware

KINDS = {
    "dexarm": "gcode",
    "so101": "so101",
    "grbl-gantry": "gcode",
    "marlin-scara": "gcode",
    "jaka": "jaka",
    "moveo": "gcode",
}


def test_every_profile_passes_onboard_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sorted(PROFILES) == sorted(KINDS)
    for kind, driver in KINDS.items():
        folder = tmp_path / kind
        assert main(["init", str(folder), "--arm", kind]) == 0
        said = capsys.readouterr().out
        assert f"arm {kind}: check the " in said and f"docs/arms.md#{kind}" in said
        robot_toml = folder / "robot.toml"
        assert main(["--robot", str(robot_toml), "check"]) == 0, capsys.readouterr().err
        report = capsys.readouterr().out.splitlines()
        assert report[-1] == "ok"
        arm = load_robot(robot_toml).drivers.arm
        assert arm is not None and arm.kind == driver
        # the first line names each part's driver: the person skills' sim is not the arm's
        where = f"{arm.host}:{arm.port}" if arm.kind == "jaka" else arm.url
        name = f"gcode {arm.dialect}" if arm.kind == "gcode" else arm.kind
        assert report[0].endswith(f"; person skills: sim; arm: {name} at {where}; camera: none")
        text = robot_toml.read_text(encoding="utf-8")
        assert "check this" in text and text.startswith("# A robot for onboard")


def test_an_unknown_arm_kind_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["init", str(tmp_path / "r"), "--arm", "ur5"])
    assert exit_.value.code == 2
    assert "--arm: invalid choice: 'ur5'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_moveo_profile_is_the_arm_the_joint_space_tests_drive(tmp_path: Path) -> None:
    assert main(["init", str(tmp_path / "m"), "--arm", "moveo"]) == 0
    arm = load_robot(tmp_path / "m" / "robot.toml").drivers.arm
    tested = moveo_config("unused")
    assert arm is not None and arm.kind == "gcode"
    assert (arm.kinematics, arm.joints, arm.tool) == ("joints", tested.joints, tested.tool)


def test_the_so101_profile_drives_the_servo_bus_through_the_factory(tmp_path: Path) -> None:
    assert main(["init", str(tmp_path / "s"), "--arm", "so101"]) == 0
    robot = load_robot(tmp_path / "s" / "robot.toml")
    config = robot.drivers.arm
    assert config is not None and config.kind == "so101"
    assert robot.hand_zone.grasp + robot.hand_zone.length < 0.15  # its small hand, not a Panda's
    home = So101Arm(config).home_joints()
    with So101Emulator(start_joints=home) as bus:
        arm_config = config.model_copy(update={"url": bus.path})
        with hardware(arm_config, None, robot.safety, robot.root) as hw:
            assert hw.arm is not None
            start = hw.arm.state().pose
            target = replace(start, y=start.y + 0.02)
            hw.arm.move_to(target, 0.1)
            assert math.dist(bus.tool_pose().position(), target.position()) < 0.005


def test_the_moveo_profile_homes_and_moves_the_arm_through_the_factory(tmp_path: Path) -> None:
    """Its home command (G92: the arm stood straight up by hand) and a move behind SafeArm,
    on Marlin's emulator in joint space; the model's own kinematics is the truth."""
    assert main(["init", str(tmp_path / "m"), "--arm", "moveo"]) == 0
    robot = load_robot(tmp_path / "m" / "robot.toml")
    config = robot.drivers.arm
    assert config is not None and config.kind == "gcode"
    model = JointModelArm([0.0] * 5)  # standing straight up, as the profile's homing asks
    grip = {"servos": 1, "grip_on": config.grip_codes[0], "grip_off": config.grip_codes[1]}
    marlin = MarlinEmulator(
        model, rotary_axes="AB", joint_space=True, emergency_parser=True, boot_time=0.05, **grip
    )
    with marlin as pty:
        arm_config = config.model_copy(
            update={"url": pty.path, "grip_settle": 0.0, "joint_feed_max": 12000.0}
        )
        fast = robot.safety.model_copy(update={"max_joint_speed": 3.0})  # the test's time
        with hardware(arm_config, None, fast, robot.root) as hw:
            assert hw.arm is not None
            hw.arm.home()
            hw.arm.move_joints(tuple(math.radians(v) for v in MOVEO_HOME), 3.0)
            start = hw.arm.state().pose
            target = replace(start, x=start.x - 0.03, z=start.z - 0.03)
            hw.arm.move_to(target, 0.1)
            assert math.dist(model.state().pose.position(), target.position()) < 0.002
            hw.arm.grip(True)
            assert marlin.gripper_closed and model.state().gripper_closed
