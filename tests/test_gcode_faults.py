"""The five firmware faults of issue 31, each reproduced on the emulators before it was fixed.

1. GRBL acceleration: ``$120``-``$122`` are EEPROM; the cap is written only where it is lower
   than the board's value, per axis, and the board's values are written back on close.
2. GRBL homing and limit alarms: ``!`` is ignored during ``$H`` (a stop sends ctrl-x), ``?`` is
   not answered while homing (``state()`` gives the last known position), a hard or soft limit
   alarm waits for a reset (the driver sends it), and a successful home clears the alarm.
3. Position lost: Marlin's ``M410`` mid-motion and a reconnect that reboots the board refuse
   moves until ``home()``.
4. Marlin resend: ``Resend: N`` with no ``ok`` after it (older 2.0.x) is resent at once; line
   numbers and checksums are on by default.
5. Moves are checked against where the firmware says the arm got to; a GRBL reset opens the
   gripper in ``state()``; control characters in configured commands are refused at load;
   ``motion_timeout`` bounds a motion that keepalives keep alive.

Motions that must still be under way while a test acts are held by the twin's gate
(``Twin.hold_at``): every wait is for an event, bounded by ``BOUND``.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import serial
from arm_harness import (
    BOUND,
    HOLD_AFTER,
    Behind,
    Mover,
    interrupt,
    require,
    twin_arm,
    wait_until,
)

from onboard.base.errors import ArmError, ArmTimeout, ConfigError
from onboard.config import load_robot
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import GcodeArmConfig
from onboard.drivers.arm.gcode import GcodeArm
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.grbl_pty import GrblEmulator
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.emulators.panda_joints import panda_config

#: homing on (GRBL boots in alarm), max rates of an arm rather than GRBL's 500 mm/min
GRBL = {22: 1.0, 110: 12000.0, 111: 12000.0, 112: 12000.0}


@pytest.fixture
def backend() -> Iterator[SimArm]:
    with twin_arm() as arm:
        yield arm


def grbl(backend: SimArm, settings: dict[int, float] | None = None) -> GrblEmulator:
    """GRBL with homing on; its machine zero is the twin's base frame."""
    merged = {**GRBL, **(settings or {})}
    return GrblEmulator(backend, settings=merged, machine_origin=(0.0, 0.0, 0.0))


@contextlib.contextmanager
def driven(emulator: Any, dialect: str, **config: Any) -> Iterator[GcodeArm]:
    options = {"timeout": BOUND, "grip_settle": 0.0, **config}
    with emulator as emu, GcodeArm(GcodeArmConfig(url=emu.path, dialect=dialect, **options)) as arm:
        yield arm


def down(arm: GcodeArm, mm: float = 20.0) -> Pose:
    """Move the tool ``mm`` down, in the frame the firmware reports."""
    here = arm.state().pose
    target = replace(here, z=here.z - mm / 1000.0)
    arm.move_to(target, 0.2)
    return target


def sent(emulator: Any) -> list[str]:
    return [line.strip() for line in emulator.received if line.strip()]


# -- 1. GRBL acceleration -----------------------------------------------------------------------


def test_grbl_acceleration_is_capped_per_axis_never_raised_and_restored_on_close(
    backend: SimArm,
) -> None:
    emulator = grbl(backend, {120: 100.0, 121: 5000.0, 122: 3000.0})
    with driven(emulator, "grbl") as arm:
        arm.home()
        arm.set_acceleration(1.0, 1.0)  # 1000 mm/s²: lower than Y's and Z's, not X's
        assert emulator.settings[120] == 100.0, "X's lower stored value was raised"
        assert (emulator.settings[121], emulator.settings[122]) == (1000.0, 1000.0)
        arm.set_acceleration(1.0, 1.0)  # unchanged: the EEPROM is not written again
        accelerations = [x for x in sent(emulator) if x.startswith("$12")]
        assert accelerations == ["$121=1000.000", "$122=1000.000"]
    assert (emulator.settings[120], emulator.settings[121], emulator.settings[122]) == (
        100.0,
        5000.0,
        3000.0,
    ), "close() writes the board's own values back"


# -- 2. GRBL homing and limit alarms ------------------------------------------------------------


def _away(arm: GcodeArm) -> None:
    """Home, then move 5 cm down, so that the next $H has a way to go."""
    arm.home()
    down(arm, 50.0)


def test_grbl_state_while_homing_is_the_last_known_position(backend: SimArm) -> None:
    emulator = grbl(backend)
    with driven(emulator, "grbl") as arm:
        _away(arm)
        known = arm.state().pose
        twin = backend.twin
        with twin.hold_at(twin.snapshot.step + 2) as gate:
            mover = Mover(arm.home)
            mover.start()
            wait_until(lambda: gate.reached and emulator.state_name == "Home", "homing runs")
            state = arm.state()  # GRBL answers no '?' while homing: never asked
            assert state.moving and state.extra["stale"] == 1.0
            assert math.dist(state.pose.position(), known.position()) < 1e-6
            assert state.error is None
            gate.release()
        mover.join(BOUND)
        require(mover.done.is_set(), "homing ended")
        assert mover.raised is None, mover.raised
        assert arm.state().error is None and not arm.state().moving
        down(arm)  # the link is in step: nothing was broken


def test_grbl_stop_during_homing_sends_ctrl_x(backend: SimArm) -> None:
    emulator = grbl(backend)
    with driven(emulator, "grbl") as arm:
        _away(arm)
        twin = backend.twin
        with twin.hold_at(twin.snapshot.step + 2) as gate:
            mover = Mover(arm.home)
            mover.start()
            wait_until(lambda: gate.reached and emulator.state_name == "Home", "homing runs")
            arm.stop()  # GRBL ignores '!' while homing: only a reset stops it
            stopped = backend.wait_stopped(BOUND)
            gate.release()
        assert stopped, "the homing went on after stop()"
        mover.join(BOUND)
        require(mover.done.is_set(), "home() ended")
        assert isinstance(mover.raised, ArmError) and "stop" in str(mover.raised)
        wait_until(lambda: emulator.alarm == 6, "GRBL reported ALARM:6 (homing reset)")
        arm.resume()
        with pytest.raises(ArmError, match=r"home\(\)"):
            down(arm)
        arm.home()
        assert arm.state().error is None
        down(arm)


def test_grbl_soft_limit_alarm_is_reset_reported_and_cleared_by_home(backend: SimArm) -> None:
    # soft limits: machine space is [-$13x, 0]; homed, the tool is at -1 mm ($27 pull-off)
    emulator = GrblEmulator(backend, settings={**GRBL, 20: 1.0})
    with driven(emulator, "grbl") as arm:
        arm.home()
        here = arm.state().pose
        boots = arm.link.boots
        with pytest.raises(ArmError, match=r"ALARM:2 \(soft limit"):
            arm.move_to(replace(here, x=here.x + 0.02), 0.2)  # past machine zero
        # GRBL waits for a reset after a limit alarm, answering no '?' until then
        wait_until(lambda: arm.link.boots > boots, "GRBL came back from the driver's reset")
        assert emulator.state_name == "Alarm" and emulator.boots == 1  # a reset, not a reboot
        state = arm.state()
        assert state.error is not None and "ALARM:2" in state.error, state.error
        assert "is it GRBL" not in state.error
        with pytest.raises(ArmError, match=r"home\(\)"):
            arm.move_to(here, 0.2)
        arm.home()
        assert arm.state().error is None, "the old alarm outlived a successful home()"
        down(arm)


def test_grbl_hard_limit_alarm_is_reset_and_cleared_by_home(backend: SimArm) -> None:
    # a move the twin cannot do is the machine running into its end: ALARM:1
    with driven(grbl(backend), "grbl") as arm:
        arm.home()
        with pytest.raises(ArmError, match=r"ALARM:1 \(hard limit"):
            arm.move_to(Pose(3.0, 0.0, 0.3), 0.5)
        wait_until(lambda: "ALARM:1" in (arm.state().error or ""), "the alarm is reported")
        arm.home()
        assert arm.state().error is None
        down(arm)


# -- 3. position lost ---------------------------------------------------------------------------


def test_marlin_m410_mid_motion_requires_homing(backend: SimArm) -> None:
    emulator = MarlinEmulator(backend, emergency_parser=True)
    with driven(emulator, "marlin") as arm:
        arm.home()
        here = arm.state().pose
        far = replace(here, y=here.y + 0.15)
        behind = Behind(backend.twin, backend, emulator.worker)
        interrupt(arm, lambda: arm.move_to(far, 0.01), arm.stop, behind)
        arm.resume()
        with pytest.raises(ArmError, match=r"home\(\).*M410"):
            arm.move_to(here, 0.1)
        assert "home()" in (arm.state().error or "")
        arm.home()
        assert arm.state().error is None
        down(arm)


def test_marlin_stop_while_the_planner_is_full_leaves_no_move_to_run(backend: SimArm) -> None:
    """A joint-space stream fills Marlin's planner (its motion held at a physics step) and
    the next waypoint waits for room when M410 comes: Marlin plans that G1 once the stop's
    second is over. The driver's second M410, sent the moment its ok is read, drops it before
    it moves; nothing runs after the stop, the host's later lines included."""
    twin = backend.twin
    emulator = MarlinEmulator(
        backend, emergency_parser=True, rotary_axes="ABCU", joint_space=True, quickstop_clean=0.05
    )
    with emulator, GcodeArm(panda_config(emulator.path, timeout=BOUND, grip_settle=0.0)) as arm:
        arm.home()
        here = arm.state().pose
        far = replace(here, y=here.y + 0.15)  # 30 waypoints of 5 mm
        worker = emulator.worker
        with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
            mover = Mover(lambda: arm.move_to(far, 0.01))
            mover.start()
            wait_until(
                lambda: (
                    gate.reached
                    and worker.waiting == worker.capacity
                    and any("G1" in q for q in emulator.queued)
                ),
                f"the twin at step {gate.at} and a waypoint waiting for room in the full planner",
            )
            arm.stop()
            require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
            gate.release()
        mover.join(BOUND)
        assert isinstance(mover.raised, ArmError) and "stop()" in str(mover.raised)
        began, step = worker.started, twin.snapshot.step
        assert step == gate.at
        arm.state()  # M114: the host's next line
        require(worker.wait_idle(BOUND), "the emulator's motions ended")
        assert worker.started == began and twin.snapshot.step == step, "a move ran after the stop"
        assert sent(emulator).count("M410") == 2


def test_marlin_m410_at_rest_keeps_the_position(backend: SimArm) -> None:
    with driven(MarlinEmulator(backend, emergency_parser=True), "marlin") as arm:
        down(arm)
        arm.stop()
        arm.resume()
        down(arm)  # nothing moved when M410 came: nothing lost


@pytest.mark.parametrize("emergency_parser", [False, True], ids=["stock", "emergency-parser"])
def test_marlin_connect_stops_the_move_a_killed_host_left_inside_m400(
    backend: SimArm, emergency_parser: bool
) -> None:
    """A board that does not reset when its port opens (native USB) is still inside the
    ``M400`` a killed host sent after its move: its command queue waits for the move's end.
    connect() stops it first (``M410``, which Marlin acts on as it reads it, with or without
    the emergency parser), drops what the board still owed the dead host, and is in step."""
    twin = backend.twin
    emulator = MarlinEmulator(
        backend, auto_reset=False, emergency_parser=emergency_parser, quickstop_clean=0.05
    )
    with emulator, twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        host = os.open(emulator.path, os.O_RDWR | os.O_NOCTTY)
        os.write(host, b"G91\nG1 Y150 F600\nM400\n")  # a move, then the driver's sync
        require(emulator.worker.wait_started(1, BOUND), "the board began the move")
        wait_until(
            lambda: gate.reached and emulator.queued == ("M400",),
            f"the twin at step {gate.at} and the board inside M400",
        )
        os.close(host)  # the host is killed: the board goes on with the move
        arm = GcodeArm(GcodeArmConfig(url=emulator.path, boot_timeout=0.0, grip_settle=0.0))
        connecting = Mover(arm.connect)
        connecting.start()
        require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
        gate.release()
        connecting.join(BOUND)
        require(connecting.done.is_set(), "connect() returned")
        try:
            assert connecting.raised is None, connecting.raised
            require(emulator.worker.wait_idle(BOUND), "the board's planner is empty")
            assert twin.snapshot.step == gate.at, "the move stepped on after the stop"
            assert "M410" in sent(emulator)
            state = arm.state()  # M114: the answers are in step
            assert "home()" in (state.error or "")  # stopped mid-move: the position is in doubt
            assert state.extra["stray_answers"] == 0
            assert not backend.state().moving
        finally:
            arm.close()


def test_grbl_reconnect_that_reboots_the_board_requires_homing(backend: SimArm) -> None:
    emulator = grbl(backend)
    with driven(emulator, "grbl", unlock_on_connect=True) as arm:
        down(arm)  # $X at the first connect: the machine's zero is where it booted
        arm.reconnect()  # the port reopens: the board (an Arduino) resets, its position zero
        require(emulator.boots == 2, "the reopen rebooted the board")
        with pytest.raises(ArmError, match=r"home\(\).*restarted"):
            down(arm)
        arm.home()
        down(arm)


# -- 4. Marlin resend ---------------------------------------------------------------------------


class NoisyPort(serial.Serial):
    """A cable that flips one bit of the first line written that holds ``corrupt``."""

    def __init__(self, url: str, corrupt: str) -> None:
        super().__init__()
        self.port = url
        self.baudrate = 250000
        self.corrupt = corrupt.encode()
        self.corrupted = 0

    def write(self, data: bytes) -> int | None:  # type: ignore[override]
        if self.corrupted == 0 and self.corrupt in data:
            self.corrupted += 1
            at = data.index(b" ") + 1
            data = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
        return super().write(data)


def test_marlin_numbers_lines_by_default(backend: SimArm) -> None:
    emulator = MarlinEmulator(backend)
    with driven(emulator, "marlin") as arm:
        down(arm)
        moves = [line for line in sent(emulator) if " G1 " in line]
        assert moves and all(line.startswith("N") and "*" in line for line in moves), moves


@pytest.mark.parametrize("ok_after_resend", [False, True], ids=["2.0.x", "2.1"])
def test_marlin_resend_with_or_without_ok_after_it(backend: SimArm, ok_after_resend: bool) -> None:
    with MarlinEmulator(backend, resend_ok=ok_after_resend) as emulator:
        here = backend.state().pose
        target = replace(here, z=here.z - 0.02)
        port = NoisyPort(emulator.path, corrupt=f"Z{target.z * 1000:.3f}")
        config = GcodeArmConfig(url=emulator.path, line_numbers=True, grip_settle=0.0)
        with GcodeArm(config, port=port) as arm:
            arm.move_to(target, 0.2)
            assert port.corrupted == 1
            numbers = [line.split()[0] for line in emulator.received if line.startswith("N")]
            assert len(numbers) > len(set(numbers)), "a line was sent again"
            assert abs(backend.state().pose.z - target.z) < 0.005
            assert arm.state().extra["stray_answers"] == 0
            down(arm)  # the answers are still in step


# -- 5. reach, gripper, configured commands, motion_timeout -------------------------------------


def test_marlin_move_clamped_by_soft_endstops_raises(backend: SimArm) -> None:
    home_z = backend.state().pose.z * 1000.0
    emulator = MarlinEmulator(backend, soft_endstops={"Z": (home_z - 10.0, home_z + 100.0)})
    with driven(emulator, "marlin") as arm:
        arm.home()
        with pytest.raises(ArmError, match=r"did not reach.*Z"):
            down(arm, 30.0)  # Marlin clamps it to 10 mm down and says nothing
        down(arm, 5.0)


def test_marlin_move_refused_before_homing_raises(backend: SimArm) -> None:
    emulator = MarlinEmulator(backend, motion_before_homing=False)
    with driven(emulator, "marlin") as arm:
        with pytest.raises(ArmError, match=r"did not reach.*Home XYZ first"):
            down(arm)
        arm.home()
        down(arm)


def test_reach_tolerance_is_configurable(backend: SimArm) -> None:
    home_z = backend.state().pose.z * 1000.0
    emulator = MarlinEmulator(backend, soft_endstops={"Z": (home_z - 10.0, home_z + 100.0)})
    with driven(emulator, "marlin", reach_tolerance=0.03) as arm:
        arm.home()
        down(arm, 30.0)  # 20 mm short, within 30 mm


def test_grbl_reset_opens_the_gripper_in_state(backend: SimArm) -> None:
    emulator = grbl(backend)
    with driven(emulator, "grbl") as arm:
        arm.home()
        arm.grip(True)
        assert arm.state().gripper_closed
        boots = arm.link.boots
        arm.emergency_stop()  # ctrl-x: GRBL's reset switches the spindle output off
        wait_until(lambda: arm.link.boots > boots, "GRBL came back from its reset")
        assert not arm.state().gripper_closed
        emulator.wait_idle()
        wait_until(lambda: not backend.twin.gripper_closed(), "the twin's gripper opened")


@pytest.mark.parametrize("key", ["grip_on", "grip_off", "home_command", "startup"])
def test_control_characters_in_configured_commands_are_refused_at_load(
    tmp_path: Path, key: str
) -> None:
    value = '["G21", "G90\\nG1 X0"]' if key == "startup" else '"M106 S255\\nM107"'
    robot = tmp_path / "robot.toml"
    robot.write_text(
        f'name = "t"\n\n[drivers.arm]\nkind = "gcode"\nurl = "loop://"\n{key} = {value}\n'
    )
    with pytest.raises(ConfigError) as raised:
        load_robot(robot)
    message = str(raised.value)
    assert f".{key}]" in message and "control character" in message, message
    assert "\n" not in message.strip(), message


def test_motion_timeout_bounds_a_motion_that_keepalives_keep_alive(backend: SimArm) -> None:
    emulator = MarlinEmulator(backend, emergency_parser=True, keepalive=0.05)
    with driven(emulator, "marlin", motion_timeout=1.0) as arm:
        twin = backend.twin
        here = backend.state().pose
        with twin.hold_at(twin.snapshot.step + 5) as gate:
            mover = Mover(lambda: arm.move_to(replace(here, z=here.z - 0.02), 0.2))
            mover.start()
            wait_until(lambda: gate.reached, "the move is under way")
            ended = mover.done.wait(BOUND)
            gate.release()
        assert ended, "keepalives held the motion open past motion_timeout"
        assert isinstance(mover.raised, ArmTimeout), mover.raised
        assert "motion_timeout" in str(mover.raised)
        assert arm.link.keepalives > 0
