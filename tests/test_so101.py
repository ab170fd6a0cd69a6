"""The SO-101 on its Feetech bus: the protocol's packets, the kinematics, LeRobot's calibration
files, and what the driver does on the real pty of the bus emulator when a servo answers
garbage, goes missing, or the arm is stopped."""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from arm_harness import BOUND, wait_until
from pydantic import TypeAdapter

from onboard.base.errors import ArmError, ConfigError, SafetyError
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import ArmConfig, So101ArmConfig
from onboard.drivers.arm.feetech import BusError, checksum, packet, parse_packets
from onboard.drivers.arm.safety import SafetyLimits
from onboard.drivers.arm.so101 import So101Arm
from onboard.drivers.arm.so101_kinematics import (
    DEFAULT_CALIBRATION,
    JOINTS,
    MotorCalibration,
    describe,
    forward,
    load_calibration,
    solve,
)
from onboard.drivers.emulators.feetech_pty import So101Emulator
from onboard.drivers.factory import hardware

#: a calibration as lerobot-calibrate writes it for an SO-101 follower (values of a real file's
#: shape: offsets written to the servos, ranges seen while calibrating)
LEROBOT = {
    "shoulder_pan": {"id": 1, "drive_mode": 0, "homing_offset": -1470, "range_min": 758,
                     "range_max": 3292},
    "shoulder_lift": {"id": 2, "drive_mode": 0, "homing_offset": 157, "range_min": 612,
                      "range_max": 3401},
    "elbow_flex": {"id": 3, "drive_mode": 0, "homing_offset": -1166, "range_min": 904,
                   "range_max": 3150},
    "wrist_flex": {"id": 4, "drive_mode": 0, "homing_offset": -1290, "range_min": 862,
                   "range_max": 3276},
    "wrist_roll": {"id": 5, "drive_mode": 0, "homing_offset": 1714, "range_min": 110,
                   "range_max": 3990},
    "gripper": {"id": 6, "drive_mode": 0, "homing_offset": 1419, "range_min": 2038,
                "range_max": 3525},
}  # fmt: skip


def test_packets_follow_the_published_format() -> None:
    # the manual's example: read 2 bytes at 56 (present position) of servo 1
    assert packet(1, 0x02, (56, 2)) == bytes([0xFF, 0xFF, 1, 4, 2, 56, 2, 0xBE])
    assert checksum([1, 4, 2, 56, 2]) == 0xBE
    noisy = bytearray(b"\x00\x13" + packet(3, 0, (0x34, 0x12)) + b"\xff\xff\x02\x02\x00\x00")
    first, second = parse_packets(noisy)
    assert first == (3, 0, b"\x34\x12")
    assert isinstance(second, str) and "checksum" in second and "servo 2" in second
    assert not noisy


def test_inverse_kinematics_inverts_forward_within_limits() -> None:
    rng = random.Random(31)
    lower = [-1.8] * 5
    upper = [1.8] * 5
    for _ in range(200):
        joints = [rng.uniform(-1.5, 1.5) for _ in range(5)]
        pose = forward(joints)
        found = solve(pose, lower=lower, upper=upper)
        assert math.dist(forward(found.joints).position(), pose.position()) < 1e-6
        assert found.angle < 1e-6
    down = Pose(0.2, 0.05, 0.05, math.pi, 0.0, 0.0)  # tool pointing down, yaw follows the pan
    assert solve(down).angle < 1e-9
    with pytest.raises(ArmError, match=r"out of reach"):
        solve(Pose(0.5, 0.0, 0.1, math.pi, 0.0, 0.0))
    with pytest.raises(ArmError, match=r"out of reach \(\w+ would leave its limits\)"):
        solve(Pose(0.2, 0.0, 0.05, math.pi, 0.0, 2.5), lower=lower, upper=upper)


def test_lerobot_calibration_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "my_so101.json"
    path.write_text(json.dumps(LEROBOT))
    calibration = load_calibration(path)
    assert describe(calibration) == LEROBOT
    pan = calibration["shoulder_pan"]
    assert pan.to_radians(pan.middle) == 0.0
    assert pan.to_steps(pan.to_radians(1000)) == 1000
    reversed_pan = MotorCalibration(id=1, drive_mode=1, range_min=758, range_max=3292)
    assert reversed_pan.to_radians(1000) == -pan.to_radians(1000)
    path.write_text(json.dumps({k: v for k, v in LEROBOT.items() if k != "gripper"}))
    with pytest.raises(ConfigError, match=r"my_so101.json: no motor 'gripper'"):
        load_calibration(path)


@pytest.fixture
def bus() -> Iterator[So101Emulator]:
    calibration = {
        name: MotorCalibration(**values)  # type: ignore[arg-type]
        for name, values in LEROBOT.items()
    }
    config = So101ArmConfig(url="unused")
    lower = [calibration[n].limits()[0] for n in JOINTS]
    upper = [calibration[n].limits()[1] for n in JOINTS]
    home = solve(Pose(*config.home_pose), lower=lower, upper=upper).joints
    with So101Emulator(calibration, start_joints=home) as emulator:
        yield emulator


def connected(bus: So101Emulator, tmp_path: Path, **settings: object) -> So101Arm:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(LEROBOT))
    settings.setdefault("timeout", BOUND / 10)
    config = So101ArmConfig(url=bus.path, calibration=path, **settings)  # type: ignore[arg-type]
    arm = So101Arm(config)
    arm.connect()
    return arm


def test_calibration_offsets_reach_the_servos_and_the_pose_matches(
    bus: So101Emulator, tmp_path: Path
) -> None:
    bus.servo("elbow_flex").put("homing_offset", 0)  # a servo that lost its offset
    arm = connected(bus, tmp_path)
    try:
        assert bus.servo("elbow_flex").offset() == LEROBOT["elbow_flex"]["homing_offset"]
        wait_until(lambda: all(bus.torque().values()), "every servo's torque is on")
        state = arm.state()
        assert math.dist(state.pose.position(), bus.tool_pose().position()) < 0.002
        assert not state.gripper_closed and state.extra["gripper_opening"] == 1.0
    finally:
        arm.close()


def test_garbled_answer_names_port_and_servo_and_leaves_the_arm_held(
    bus: So101Emulator, tmp_path: Path
) -> None:
    arm = connected(bus, tmp_path, joint_speed=2.0)
    try:
        # the six answers to the motion's first SYNC_READ, and the first after its retry
        target = tuple(q + 0.2 for q in arm.state().joints)
        bus.garble_next(7)
        with pytest.raises(BusError) as raised:
            arm.move_joints(target, 1.0)
        message = str(raised.value)
        assert bus.path in message and "servo 1" in message and "checksum" in message
        assert "\n" not in message
        arm.state()  # answered after the hold's broadcast (a bus keeps its order)
        assert all(bus.torque().values()), "a garbled answer leaves the torque on (held)"
        assert arm.state().error == message
    finally:
        arm.close()


def test_missing_servo_fails_connect_in_one_line_with_torque_off(
    bus: So101Emulator, tmp_path: Path
) -> None:
    bus.unplug("wrist_flex")
    with pytest.raises(BusError, match=rf"^feetech bus {bus.path}, servo 4: no answer"):
        connected(bus, tmp_path, timeout=0.2)  # the wait for an answer that never comes
    assert not any(bus.torque().values()), "nothing switched on with a servo missing"


def test_stop_switches_torque_off_and_hold_keeps_it(bus: So101Emulator, tmp_path: Path) -> None:
    arm = connected(bus, tmp_path)
    try:
        arm.stop()
        wait_until(lambda: not any(bus.torque().values()), "every servo's torque is off")
        with pytest.raises(ArmError, match=r"stopped by stop\(\): call resume\(\)"):
            arm.grip(True)
        arm.resume()
        arm.grip(True)  # the next motion switches the torque back on first
        assert arm.state().gripper_closed and all(bus.torque().values())
    finally:
        arm.close()
    arm = connected(bus, tmp_path, stop_mode="hold")
    try:
        arm.stop()
        arm.resume()
        arm.state()  # answered after the stop's broadcast
        assert all(bus.torque().values())
        arm.grip(False)
        assert not arm.state().gripper_closed
    finally:
        arm.close()


def test_default_calibration_covers_every_motor() -> None:
    assert sorted(DEFAULT_CALIBRATION) == sorted([*JOINTS, "gripper"])


def test_robot_toml_kind_so101_builds_it_behind_safety(bus: So101Emulator, tmp_path: Path) -> None:
    """``[drivers.arm] kind = "so101"`` with a calibration path relative to robot.toml's folder;
    SafeArm checks a joint move's tool position with the arm's own kinematics."""
    (tmp_path / "so101.json").write_text(json.dumps(LEROBOT))
    config = TypeAdapter(ArmConfig).validate_python(
        {"kind": "so101", "url": bus.path, "calibration": "so101.json", "timeout": BOUND / 10}
    )
    with hardware(config, None, SafetyLimits(), tmp_path) as robot:
        assert robot.arm is not None
        joints = robot.arm.state().joints
        assert len(joints) == 5
        assert math.dist(robot.arm.state().pose.position(), bus.tool_pose().position()) < 0.002
        into_table = (joints[0], 1.3, 1.2, 0.6, joints[4])  # the tool 6 cm below the table
        assert forward(into_table).z < -0.05
        with pytest.raises(SafetyError, match=r"z=-0.06\d+ m is outside the workspace"):
            robot.arm.move_joints(into_table, 0.5)


def test_hold_stop_mid_motion_leaves_every_goal_where_the_arm_is(
    bus: So101Emulator, tmp_path: Path
) -> None:
    arm = connected(bus, tmp_path, stop_mode="hold")
    try:
        start = arm.state().joints
        far = (start[0] + 1.0, *start[1:])  # 10 s at 0.1 rad/s
        mover = threading.Thread(target=lambda: _raises(lambda: arm.move_joints(far, 0.1)))
        mover.start()
        wait_until(lambda: bus.servo("shoulder_pan").get("moving") == 1, "the pan moves")
        arm.stop()
        mover.join(BOUND)
        assert not mover.is_alive() and RAISED and "stopped by stop()" in RAISED[0]
        arm.state()  # answered after the hold's goals (a bus keeps its order)
        assert all(bus.torque().values()), "hold keeps the torque on"
        pan = bus.servo("shoulder_pan")
        assert abs(pan.get("goal_position") - pan.present()) < 20, "the goal is where it is"
        assert bus.joints()[0] < far[0] - 0.5
    finally:
        arm.close()


RAISED: list[str] = []


def _raises(call: Callable[[], object]) -> None:
    try:
        call()
    except ArmError as exc:
        RAISED.append(str(exc))


def test_a_line_that_leaves_the_reach_is_refused_before_anything_moves(
    bus: So101Emulator, tmp_path: Path
) -> None:
    """Both ends reachable, the straight line between them passing too close to the base for
    the elbow's limits: the whole line is solved first, so no servo is sent a goal."""
    arm = connected(bus, tmp_path)
    try:
        left, right = (Pose(0.1, y, 0.1, math.pi, 0.0, 0.0) for y in (0.12, -0.12))
        arm.move_to(left, 0.1)
        goals = {name: bus.servo(name).goal() for name in JOINTS}
        solve(right, lower=arm.lower, upper=arm.upper)  # the end alone is within reach
        with pytest.raises(
            ArmError, match=r"straight line to .* leaves the arm's reach on the way"
        ):
            arm.move_to(right, 0.1)
        assert {name: bus.servo(name).goal() for name in JOINTS} == goals
    finally:
        arm.close()


def test_gripper_state_is_read_from_the_jaw(bus: So101Emulator, tmp_path: Path) -> None:
    """Closing on an object stops short of closed: still closed (holding), at the object's
    width; after an open the jaw is back at its open end."""
    arm = connected(bus, tmp_path)
    try:
        bus.hold_object(0.4)
        arm.grip(True)  # ends when the jaw stalls on the object
        state = arm.state()
        assert state.gripper_closed and 0.35 < state.extra["gripper_opening"] < 0.45
        bus.hold_object(None)
        arm.grip(False)
        state = arm.state()  # open within the jaw's settling (a few steps, as on a real servo)
        assert not state.gripper_closed
        assert state.extra["gripper_opening"] == pytest.approx(1.0, abs=0.01)
    finally:
        arm.close()


def test_on_the_twin_the_bus_moves_the_twins_arm_and_torque_off_lets_it_fall() -> None:
    """The bus emulator backed by the twin's SO-101: the goals written move the twin's arm,
    the positions read back are the twin's (also when something else moves it), and a stop
    (torque off) lets it fall under gravity; the next motion holds it again."""
    from onboard.drivers.emulators.so101_twin import STILL, TwinServos
    from onboard.drivers.twin import Scene, Twin

    with Twin() as panda_twin, pytest.raises(ValueError, match=r'model = "so101"'):
        TwinServos(panda_twin)
    scene = Scene.model_validate({"arm": {"model": "so101"}})
    with Twin(scene) as twin, So101Emulator(model=TwinServos(twin)) as bus:
        arm = So101Arm(So101ArmConfig(url=bus.path, timeout=BOUND / 10))
        arm.connect()
        try:
            start = arm.state().pose
            # the driver's kinematics and the twin's (PyBullet's over the generated URDF) agree
            assert math.dist(start.position(), twin.ee_pose().position()) < 0.002
            target = replace(start, x=start.x - 0.03, y=start.y + 0.04, z=start.z + 0.03)
            arm.move_to(target, 0.1)
            assert math.dist(twin.ee_pose().position(), target.position()) < 0.005
            pushed = (0.3, *twin.joints()[1:])  # a hand turns the pan: the bus reads it
            twin.reset_joints(pushed)
            read = arm.state().joints
            assert max(abs(a - b) for a, b in zip(read, pushed, strict=True)) < 0.005
            height = twin.ee_pose().z
            arm.stop()
            wait_until(lambda: twin.ee_pose().z < height - 0.03, "the limp arm sags")
            assert not any(bus.torque().values())
            # the bus and the twin are read one after the other: compare them once it lies still
            wait_until(
                lambda: max(map(abs, twin.joint_velocities())) < STILL, "the limp arm comes to rest"
            )
            fallen = arm.state().joints
            assert max(abs(a - b) for a, b in zip(fallen, twin.joints(), strict=True)) < 0.01
            arm.resume()
            arm.move_to(target, 0.1)  # torque on where it lies, then up again
            assert math.dist(twin.ee_pose().position(), target.position()) < 0.005
        finally:
            arm.close()
