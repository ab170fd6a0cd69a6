"""The G-code driver against firmware emulators written from Marlin's and GRBL's source.

Each of the failures a real controller would have caused the old driver is shown gone:

1. GRBL rejects M400/M114/M112/M204 (error:20): the grbl dialect never sends them, and
   moves, homes, grips, reads its position (with a work offset) and sets accelerations.
2. Marlin's M112 halts the board until it is reset: a timeout sends M410, never M112; only
   ``emergency_stop()`` sends M112, and the board is recovered by a reset (a reopen).
3. Marlin answers an unknown gripper code with an echo and ``ok``: that is an error at
   connect (the check sends ``grip_off``) and at ``grip()``, never success.
4. Marlin's ``Error:`` comes before its ``ok``, ``Resend:`` asks for a line again, and the
   board prints ``start`` on boot: the answers stay in step through all three.
(5., JAKA, is in tests/test_jaka_protocol.py.)

The fault tests (garbage, errors, a lost link, a silent controller, the window of lines in
flight) run on both dialects.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import pytest
import serial
from arm_harness import (
    BOUND,
    Behind,
    Mover,
    interrupt,
    require,
    twin_arm,
    unnumbered,
    wait_until,
)

from onboard.base.errors import ArmError, ArmTimeout, LinkLost
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import GcodeArmConfig
from onboard.drivers.arm.gcode import GcodeArm, parse_position
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.grbl_pty import GrblEmulator
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.emulators.pty_controller import PtyController

DIALECTS = ["marlin", "grbl"]
#: homing on, so GRBL boots in alarm; max rates of an arm, not GRBL's default 500 mm/min
GRBL_SETTINGS = {22: 1.0, 110: 12000.0, 111: 12000.0, 112: 12000.0}
SILENT = 2.0  # seconds: the reply timeout of the tests where the controller is muted
NOT_GRBL = ("M400", "M114", "M112", "M204", "M410")


@pytest.fixture
def backend() -> Iterator[SimArm]:
    with twin_arm() as arm:
        yield arm


@dataclass
class Rig:
    emulator: Any  # MarlinEmulator | GrblEmulator
    arm: GcodeArm
    behind: Behind


def make_emulator(dialect: str, backend: SimArm, **options: Any) -> PtyController:
    if dialect == "marlin":
        return MarlinEmulator(backend, **{"emergency_parser": True, **options})
    settings = {**GRBL_SETTINGS, **options.pop("settings", {})}
    return GrblEmulator(backend, settings=settings, machine_origin=(0.0, 0.0, 0.0), **options)


@contextlib.contextmanager
def rig(
    dialect: str, backend: SimArm, emulator: dict[str, Any] | None = None, **config: Any
) -> Iterator[Rig]:
    with make_emulator(dialect, backend, **(emulator or {})) as emu:
        options = {"timeout": BOUND, "grip_settle": 0.0, **config}
        with GcodeArm(GcodeArmConfig(url=emu.path, dialect=dialect, **options)) as arm:
            if dialect == "grbl":
                arm.home()  # it boots in alarm: no G-code until homed
            yield Rig(emu, arm, Behind(backend.twin, backend, emu.worker))


@pytest.fixture(params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def still(behind: Behind) -> bool:
    behind.wait_idle()
    return not behind.arm.state().moving


def nudge(arm: GcodeArm, backend: SimArm, dz: float = -0.02) -> Pose:
    here = backend.state().pose
    target = replace(here, z=here.z + dz)
    arm.move_to(target, 0.2)
    return target


def heads(emulator: PtyController) -> list[str]:
    return [unnumbered(x).split()[0].upper() for x in emulator.received if x.strip()]


# -- both dialects ------------------------------------------------------------------------------


def test_garbled_line_is_skipped_and_the_command_succeeds(dialect: str, backend: SimArm) -> None:
    with rig(dialect, backend) as r:
        r.emulator.inject_garbage()
        r.emulator.inject_garbage(b"oK?\x00\x7f\n")  # looks a little like an answer; is not
        target = nudge(r.arm, backend)
        assert abs(backend.state().pose.z - target.z) < 0.005
        assert r.arm.state().extra["garbage_lines"] >= 2
        assert still(r.behind)


def test_an_error_answer_raises_and_the_answers_stay_in_step(dialect: str, backend: SimArm) -> None:
    with rig(dialect, backend) as r:
        # Marlin: "Error:<text>" then "ok"; GRBL: "error:22" alone
        r.emulator.fail_next("simulated fault" if dialect == "marlin" else "22")
        with pytest.raises(ArmError, match=r"simulated fault|error:22 \(undefined feed rate"):
            nudge(r.arm, backend)
        assert still(r.behind)
        target = nudge(r.arm, backend)  # the next answer is this line's, not a leftover
        assert abs(backend.state().pose.z - target.z) < 0.005
        assert r.arm.state().extra["stray_answers"] == 0


def test_a_closed_link_raises_link_lost_and_the_arm_stops(dialect: str, backend: SimArm) -> None:
    with rig(dialect, backend) as r:
        here = backend.state().pose
        far = replace(here, y=here.y + 0.15)
        raised = interrupt(
            r.arm, lambda: r.arm.move_to(far, 0.01), r.emulator.close_link, r.behind
        ).raised
        assert isinstance(raised, LinkLost)
        state = r.arm.state()
        assert not state.moving and state.error
        with pytest.raises(LinkLost, match="reconnect"):
            r.arm.home()


def test_a_timeout_stops_recoverably_never_with_m112(dialect: str, backend: SimArm) -> None:
    with rig(dialect, backend, timeout=SILENT) as r:
        before = backend.state().pose
        r.emulator.mute()
        started = time.monotonic()
        with pytest.raises(ArmTimeout, match="reconnect"):
            nudge(r.arm, backend)
        assert SILENT <= time.monotonic() - started < BOUND
        if dialect == "marlin":  # the recoverable stop, seen by the mute board
            wait_until(lambda: "M410" in heads(r.emulator), "the board received M410")
        assert "M112" not in heads(r.emulator)
        assert still(r.behind)
        assert math.dist(backend.state().pose.position(), before.position()) < 0.002
        r.emulator.mute(False)
        r.arm.reconnect()  # reopening the port reboots the board: answers in step again
        r.arm.home()  # the reboot lost the position (and Marlin's M410 mid-move had)
        nudge(r.arm, backend)
        if dialect == "marlin":
            assert not r.emulator.halted


def test_at_most_in_flight_lines_and_rx_buffer_bytes_are_unanswered(
    dialect: str, backend: SimArm
) -> None:
    # unnumbered: numbered lines go one at a time (a resend repeats only the line in flight)
    with rig(dialect, backend, in_flight=3, line_numbers=False) as r:
        here = backend.state().pose
        x, y, z = (round(v * 1000, 1) for v in here.position())
        sync = "M400" if dialect == "marlin" else "G4 P0"
        program = [f"G1 X{x} Y{y + i} Z{z} F6000" for i in range(8)] + [sync]
        if dialect == "marlin":
            # one move awaiting its ok (its motion_window: a stop then leaves at most one
            # move to plan), other lines up to the window: seen with the board busy, when
            # nothing is answered and the host sends all it may
            program = [*program[:1], "G90", "G21", *program[1:]]
            emulator, before = r.emulator, r.emulator.lines_received
            with ThreadPoolExecutor(1) as pool:
                with emulator.busy():
                    streaming = pool.submit(r.arm.stream, program, BOUND)
                    wait_until(lambda: emulator.lines_received == before + 3, "three lines")
                    assert list(emulator.received)[-3:] == program[:3]
                streaming.result()  # the rest, answered once the board reads again
            assert emulator.lines_received == before + len(program)
            assert emulator.max_unanswered == 3  # pipelined to the window
        else:
            r.arm.stream(program, timeout=BOUND)
        assert r.emulator.max_unanswered <= 3  # never past the window
        assert abs(backend.state().pose.y * 1000 - (y + 7)) < 1.0
        if dialect == "grbl":
            assert r.emulator.rx_dropped == 0  # never more than its 128-byte buffer


def test_stop_during_a_move_is_recoverable(dialect: str, backend: SimArm) -> None:
    with rig(dialect, backend) as r:
        r.arm.grip(True)
        r.behind.wait_idle()  # the output is set at once; the fingers close on the twin
        here = backend.state().pose
        far = replace(here, y=here.y + 0.15)
        done = interrupt(r.arm, lambda: r.arm.move_to(far, 0.01), r.arm.stop, r.behind)
        assert "stop" in str(done.raised)
        assert "M112" not in heads(r.emulator)
        r.arm.resume()
        if dialect == "marlin":  # M410 mid-move: the position is lost until home()
            with pytest.raises(ArmError, match=r"home\(\)"):
                nudge(r.arm, backend)
            r.arm.home()
        target = nudge(r.arm, backend)  # the board takes commands again, in step
        assert abs(backend.state().pose.z - target.z) < 0.005
        r.behind.wait_idle()
        assert backend.twin.gripper_closed(), "the gripper stayed closed through the stop"


# -- 1. GRBL ------------------------------------------------------------------------------------


def test_grbl_is_never_sent_what_it_rejects(backend: SimArm) -> None:
    tuned = {120: 2000.0, 121: 2000.0, 122: 2000.0}  # higher than the cap: it is lowered
    with rig("grbl", backend, emulator={"settings": tuned}) as r:
        here = r.arm.state().pose
        r.arm.move_to(replace(here, z=here.z - 0.03), 0.2)
        r.arm.grip(True)
        r.arm.grip(False)
        r.arm.set_acceleration(0.5, 1.0)
        r.arm.set_acceleration(0.5, 1.0)  # unchanged: the EEPROM is not written again
        assert not set(heads(r.emulator)) & set(NOT_GRBL)
        assert [h for h in heads(r.emulator) if h.startswith("$12")] == [
            "$120=500.000",
            "$121=500.000",
            "$122=500.000",
        ]
        assert r.emulator.settings[120] == 500.0


def test_grbl_position_is_in_work_coordinates(backend: SimArm) -> None:
    with rig("grbl", backend) as r:
        before = backend.state().pose
        r.arm.command("G10 L20 P1 X0 Y0 Z0")  # here is the work origin
        wait_until(lambda: r.emulator.work_offset != (0.0, 0.0, 0.0), "the offset was set")
        origin = r.arm.state().pose
        assert math.dist(origin.position(), (0.0, 0.0, 0.0)) < 0.001
        r.arm.move_to(Pose(0.02, -0.01, -0.03), 0.2)
        after = backend.state().pose
        moved = (after.x - before.x, after.y - before.y, after.z - before.z)
        assert math.dist(moved, (0.02, -0.01, -0.03)) < 0.003
        assert math.dist(r.arm.state().pose.position(), (0.02, -0.01, -0.03)) < 0.003


def test_grbl_booted_in_alarm_takes_no_gcode_until_homed(backend: SimArm) -> None:
    with make_emulator("grbl", backend) as emu:
        config = GcodeArmConfig(url=emu.path, dialect="grbl", timeout=BOUND, grip_settle=0.0)
        with GcodeArm(config) as arm:
            assert emu.state_name == "Alarm"
            assert "G21" not in heads(emu)  # nothing it would refuse with error:9
            with pytest.raises(ArmError, match=r"error:9 \(G-code lock"):
                arm.grip(True)
            arm.home()
            assert emu.state_name == "Idle"
            assert {"G21", "G90", "M5"} <= set(heads(emu))  # sent once homed
            arm.grip(True)


def test_grbl_without_homing_says_which_setting(backend: SimArm) -> None:
    with make_emulator("grbl", backend, settings={22: 0.0}) as emu:
        config = GcodeArmConfig(url=emu.path, dialect="grbl", timeout=BOUND)
        with GcodeArm(config) as arm, pytest.raises(ArmError, match=r"\$22=1"):
            arm.home()


# -- 2. Marlin's M112 ---------------------------------------------------------------------------


def test_marlin_emergency_stop_halts_the_board_until_it_is_reset(backend: SimArm) -> None:
    with rig("marlin", backend) as r:
        r.arm.emergency_stop()
        wait_until(lambda: r.emulator.halted, "the board halted")
        r.arm.resume()
        with pytest.raises(ArmError, match="halted"):
            nudge(r.arm, backend)
        r.arm.reconnect()  # reopening the port resets a board with DTR auto-reset
        assert not r.emulator.halted
        r.arm.home()
        nudge(r.arm, backend)


def test_marlin_without_emergency_parser_warns_at_connect(
    backend: SimArm, caplog: pytest.LogCaptureFixture
) -> None:
    with rig("marlin", backend, emulator={"emergency_parser": False}) as r:
        assert r.arm.dialect.emergency_parser is False  # type: ignore[attr-defined]
    assert "EMERGENCY_PARSER" in caplog.text


# -- 3. Marlin's unknown gripper codes ----------------------------------------------------------


def test_marlin_unknown_gripper_code_fails_connect(backend: SimArm) -> None:
    with make_emulator("marlin", backend) as emu:  # a stock build: no spindle, M3/M5 unknown
        config = GcodeArmConfig(url=emu.path, grip_on="M3", grip_off="M5", timeout=BOUND)
        with pytest.raises(ArmError, match=r"refused the gripper's 'M5'.*Unknown command"):
            GcodeArm(config).connect()


def test_marlin_unknown_gripper_code_fails_grip_never_succeeds(backend: SimArm) -> None:
    with rig("marlin", backend, grip_on="M3", grip_off="M5", check_gripper=False) as r:
        with pytest.raises(ArmError, match="Unknown command"):
            r.arm.grip(True)
        assert not r.arm.state().gripper_closed
        nudge(r.arm, backend)  # and the answers are still in step


def test_marlin_spindle_build_takes_m3(backend: SimArm) -> None:
    with rig(
        "marlin", backend, emulator={"spindle": True, "grip_on": "M3", "grip_off": "M5"},
        grip_on="M3", grip_off="M5",
    ) as r:  # fmt: skip
        r.arm.grip(True)
        r.behind.wait_idle()
        assert backend.twin.gripper_closed()


# -- 4. Marlin's answers ------------------------------------------------------------------------


class NoisyPort(serial.Serial):
    """A cable that flips one bit of the ``n``-th line written (after the connect)."""

    def __init__(self, url: str, corrupt: str) -> None:
        super().__init__()
        self.port = url
        self.baudrate = 250000
        self.corrupt = corrupt
        self.corrupted = 0

    def write(self, data: bytes) -> int | None:  # type: ignore[override]
        if self.corrupted == 0 and self.corrupt.encode() in data:
            self.corrupted += 1
            at = data.index(b" ") + 1
            data = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
        return super().write(data)


def test_marlin_resend_after_a_garbled_line_keeps_the_answers_in_step(backend: SimArm) -> None:
    with make_emulator("marlin", backend) as emu:
        here = backend.state().pose
        target = replace(here, z=here.z - 0.02)
        port = NoisyPort(emu.path, corrupt=f"Z{target.z * 1000:.3f}")
        config = GcodeArmConfig(url=emu.path, line_numbers=True, timeout=BOUND, grip_settle=0.0)
        with GcodeArm(config, port=port) as arm:
            arm.move_to(target, 0.2)
            assert port.corrupted == 1
            assert abs(backend.state().pose.z - target.z) < 0.005
            assert arm.state().extra["stray_answers"] == 0
            nudge(arm, backend)


def test_marlin_keepalive_holds_a_long_wait_open(backend: SimArm) -> None:
    """``echo:busy: processing`` restarts the wait: a motion far longer than ``timeout`` ends
    in success (the test holds the physics until many keepalives have come)."""
    with rig("marlin", backend, emulator={"keepalive": 0.05}, timeout=1.0) as r:
        twin = backend.twin
        here = backend.state().pose
        target = replace(here, z=here.z - 0.02)
        with twin.hold_at(twin.snapshot.step + 5) as gate:
            mover = Mover(lambda: r.arm.move_to(target, 0.2))
            mover.start()
            wait_until(lambda: gate.reached, "the move is under way")
            kept = r.arm.state().extra["keepalives"]
            # 40 keepalives take 2 s: twice the timeout they keep open
            wait_until(lambda: r.arm.link.keepalives >= kept + 40, "40 keepalives came")
            gate.release()
        mover.join(BOUND)
        require(mover.done.is_set(), "the move ended")
        assert mover.raised is None, mover.raised
        assert abs(backend.state().pose.z - target.z) < 0.005


def test_marlin_connect_waits_for_the_boot(backend: SimArm) -> None:
    with make_emulator("marlin", backend) as emu:
        config = GcodeArmConfig(url=emu.path, timeout=BOUND, grip_settle=0.0)
        with GcodeArm(config) as arm:
            assert emu.boots == 1
            assert heads(emu)[:2] == ["M110", "M115"]  # the first lines were not lost
            arm.reconnect()
            require(emu.boots == 2, "a reopen rebooted the board")


def test_marlin_connect_survives_a_banner_later_than_boot_timeout(backend: SimArm) -> None:
    # the driver stops waiting for the banner at once and sends M110 into the bootloader,
    # where it is lost; the banner then fails it, and the handshake starts again
    with make_emulator("marlin", backend, boot_time=1.0) as emu:
        config = GcodeArmConfig(url=emu.path, timeout=BOUND, boot_timeout=0.0, grip_settle=0.0)
        with GcodeArm(config) as arm:
            assert emu.boots == 1
            assert "X" in arm.dialect.position()


def test_marlin_position_report_parsing() -> None:
    report = "X:10.00 Y:-2.5 Z:300.125 A:90.0 E:0.00 Count X:800 Y:0 Z:24000"
    assert parse_position(report) == {"X": 10.0, "Y": -2.5, "Z": 300.125, "A": 90.0, "E": 0.0}


def test_gcode_driver_opens_any_serial_url() -> None:
    # loop:// echoes each line back: nothing answers "ok", every echo is skipped as noise
    config = GcodeArmConfig(url="loop://", timeout=1.0, boot_timeout=0.0, startup=())
    arm = GcodeArm(config)
    with pytest.raises(ArmTimeout):
        arm.connect()  # M110 is echoed, never answered
    assert arm.link.garbage_lines >= 1  # the echo was read and skipped
