"""Faults injected on the real links (a pty, loopback TCP) between the drivers and the twin.

After every fault the twin's arm must be still: a driver that lost its controller, or a
controller that lost its driver, leaves the robot stopped. Replies may take up to BOUND
seconds (a loaded machine), so only the injected fault ends a move; the silent-controller
tests alone use a short timeout, which a muted controller always runs into.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest
from arm_harness import BOUND, Behind, interrupt, require, wait_until

from onboard.base.errors import ArmError, ArmTimeout, LinkLost
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.gcode import GcodeArm, GcodeArmConfig, parse_position
from onboard.drivers.arm.jaka import JakaArm, JakaArmConfig, JsonStream
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.gcode_pty import GcodePtyEmulator
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.drivers.twin import SCENES, Twin

SCENE = SCENES / "blocks.toml"
SILENT = 2.0  # seconds: the reply timeout of the tests where the controller is muted


@pytest.fixture
def backend() -> Iterator[SimArm]:
    with Twin(SCENE) as twin:
        arm = SimArm(twin)
        arm.connect()
        yield arm
        arm.close()


@dataclass
class Gcode:
    emulator: GcodePtyEmulator
    arm: GcodeArm
    behind: Behind


@dataclass
class Jaka:
    server: JakaServer
    arm: JakaArm
    behind: Behind


def gcode_rig(backend: SimArm, timeout: float = BOUND) -> Iterator[Gcode]:
    with GcodePtyEmulator(backend) as emulator:
        config = GcodeArmConfig(url=emulator.path, timeout=timeout, grip_settle=0.0)
        with GcodeArm(config) as arm:
            yield Gcode(emulator, arm, Behind(backend.twin, backend, emulator.worker))


def jaka_rig(backend: SimArm, timeout: float = BOUND) -> Iterator[Jaka]:
    with JakaServer(backend, port=0, status_port=0) as server:
        host, port = server.address
        config = JakaArmConfig(
            host=host, port=port, status_port=server.status_address[1], timeout=timeout
        )
        with JakaArm(config) as arm:
            yield Jaka(server, arm, Behind(backend.twin, backend, server.worker))


@pytest.fixture
def gcode(backend: SimArm) -> Iterator[Gcode]:
    yield from gcode_rig(backend)


@pytest.fixture
def jaka(backend: SimArm) -> Iterator[Jaka]:
    yield from jaka_rig(backend)


@pytest.fixture
def silent_gcode(backend: SimArm) -> Iterator[Gcode]:
    yield from gcode_rig(backend, SILENT)


@pytest.fixture
def silent_jaka(backend: SimArm) -> Iterator[Jaka]:
    yield from jaka_rig(backend, SILENT)


def still(behind: Behind) -> bool:
    """The emulator has no motion left and the twin's arm is not moving."""
    behind.wait_idle()
    return not behind.arm.state().moving


def nudge(arm: Arm, backend: SimArm, dz: float = -0.02) -> Pose:
    """A small move from where the twin's tool is; returns the target."""
    here = backend.state().pose
    target = replace(here, z=here.z + dz)
    arm.move_to(target, 0.2)
    return target


def fault_during_slow_move(arm: Arm, behind: Behind, fault: Callable[[], object]) -> Exception:
    """A 15 s move interrupted by ``fault`` (see arm_harness); what the move raised."""
    here = behind.arm.state().pose
    far = replace(here, y=here.y + 0.15)
    return interrupt(arm, lambda: arm.move_to(far, 0.01), fault, behind).raised


# -- G-code on a pty ----------------------------------------------------------------------------


def test_gcode_garbled_line_is_skipped_and_the_command_succeeds(
    gcode: Gcode, backend: SimArm
) -> None:
    gcode.emulator.inject_garbage()
    gcode.emulator.inject_garbage(b"oK?\x00\x7f\n")  # looks a little like an answer; is not
    target = nudge(gcode.arm, backend)
    assert abs(backend.state().pose.z - target.z) < 0.005
    assert gcode.arm.state().extra["garbage_lines"] >= 2
    assert still(gcode.behind)


def test_gcode_error_reply_raises_arm_error_with_the_message(gcode: Gcode, backend: SimArm) -> None:
    gcode.emulator.fail_next("Printer halted. kill() called!")
    with pytest.raises(ArmError, match=re.escape("Printer halted. kill() called!")):
        nudge(gcode.arm, backend)
    assert still(gcode.behind)
    nudge(gcode.arm, backend)  # the answers are still in step


def test_gcode_marlin_style_error_then_ok_keeps_the_answers_in_step(backend: SimArm) -> None:
    with GcodePtyEmulator(backend, error_then_ok=True) as emulator:
        config = GcodeArmConfig(
            url=emulator.path, timeout=BOUND, error_then_ok=True, grip_settle=0.0
        )
        with GcodeArm(config) as arm:
            emulator.fail_next("Unknown command")
            with pytest.raises(ArmError, match="Unknown command"):
                arm.command("M115")
            nudge(arm, backend)
            assert arm.stray_answers == 0
            assert still(Behind(backend.twin, backend, emulator.worker))


def test_gcode_closed_pty_raises_link_lost_and_the_arm_stops(gcode: Gcode) -> None:
    raised = fault_during_slow_move(gcode.arm, gcode.behind, gcode.emulator.close_link)
    assert isinstance(raised, LinkLost)
    state = gcode.arm.state()
    assert not state.moving and state.error
    with pytest.raises(LinkLost, match="reconnect"):
        gcode.arm.home()


def test_gcode_silent_controller_raises_timeout_and_the_arm_stays_still(
    silent_gcode: Gcode, backend: SimArm
) -> None:
    gcode = silent_gcode
    before = backend.state().pose
    gcode.emulator.mute()
    started = time.monotonic()
    with pytest.raises(ArmTimeout, match="reconnect"):
        nudge(gcode.arm, backend)
    assert SILENT <= time.monotonic() - started < BOUND
    assert still(gcode.behind)
    assert backend.state().pose == before
    gcode.emulator.mute(False)
    gcode.arm.reconnect()
    here = gcode.arm.state().pose  # the answers are in step again
    assert abs(here.z - before.z) < 0.001


def test_gcode_keeps_at_most_in_flight_lines_unanswered(backend: SimArm) -> None:
    with GcodePtyEmulator(backend, planner_size=1) as emulator:
        config = GcodeArmConfig(url=emulator.path, timeout=BOUND, in_flight=3, grip_settle=0.0)
        with GcodeArm(config) as arm:
            here = backend.state().pose
            x, y, z = (round(v * 1000, 1) for v in here.position())
            program = [f"G1 X{x} Y{y + i} Z{z} F6000" for i in range(8)] + ["M400"]
            arm.stream(program, timeout=BOUND)
    assert 2 <= emulator.max_unanswered <= 3  # pipelined, never past the window
    assert abs(backend.state().pose.y * 1000 - (y + 7)) < 1.0


def test_gcode_driver_opens_any_serial_url() -> None:
    # loop:// echoes each line back: nothing answers "ok", every echo is skipped as noise
    config = GcodeArmConfig(url="loop://", timeout=0.2, startup=())
    with GcodeArm(config) as arm:
        with pytest.raises(ArmTimeout):
            arm.command("M114")
        wait_until(lambda: arm.garbage_lines >= 1, "the echo was read and skipped")


def test_gcode_position_report_parsing() -> None:
    report = "X:10.00 Y:-2.5 Z:300.125 A:90.0 E:0.00 Count X:800 Y:0 Z:24000"
    assert parse_position(report) == {"X": 10.0, "Y": -2.5, "Z": 300.125, "A": 90.0, "E": 0.0}


# -- JAKA on TCP --------------------------------------------------------------------------------


def test_jaka_error_code_raises_arm_error_naming_command_and_message(
    jaka: Jaka, backend: SimArm
) -> None:
    jaka.server.fail_next("moveL", "target beyond the soft limit", code="2")
    with pytest.raises(ArmError, match=r"moveL.*errorCode 2.*target beyond the soft limit"):
        nudge(jaka.arm, backend)
    assert still(jaka.behind)
    nudge(jaka.arm, backend)


def test_jaka_unknown_command_gets_a_nonzero_error_code(jaka: Jaka) -> None:
    with socket.create_connection(jaka.server.address, timeout=BOUND) as raw:
        raw.sendall(json.dumps({"cmdName": "make_coffee"}).encode())
        stream: JsonStream = JsonStream()
        replies: list[dict[str, object]] = []
        while not replies:
            data = raw.recv(4096)  # at most BOUND s each
            require(bool(data), "the emulator answered before closing the connection")
            replies = stream.feed(data)
    assert replies[0]["cmdName"] == "make_coffee"
    assert replies[0]["errorCode"] != "0"
    with pytest.raises(ArmError, match="make_coffee failed with errorCode 1"):
        jaka.arm.call("make_coffee")


def test_jaka_dropped_socket_raises_link_lost_and_the_arm_stops(
    jaka: Jaka, backend: SimArm
) -> None:
    raised = fault_during_slow_move(jaka.arm, jaka.behind, jaka.server.drop_clients)
    assert isinstance(raised, LinkLost)
    with pytest.raises(LinkLost, match="reconnect"):
        jaka.arm.state()
    jaka.arm.reconnect()
    nudge(jaka.arm, backend)


def test_jaka_silent_controller_raises_timeout_and_the_arm_stays_still(
    silent_jaka: Jaka, backend: SimArm
) -> None:
    before = backend.state().pose
    silent_jaka.server.mute()
    with pytest.raises(ArmTimeout, match="moveL"):
        nudge(silent_jaka.arm, backend)
    assert still(silent_jaka.behind)
    assert backend.state().pose == before


def test_jaka_garbage_between_replies_is_skipped(jaka: Jaka, backend: SimArm) -> None:
    jaka.server.inject_garbage()
    nudge(jaka.arm, backend)
    assert jaka.arm.stream.skipped >= 1
    assert still(jaka.behind)


def test_json_stream_splits_joined_and_partial_objects() -> None:
    stream = JsonStream()
    assert stream.feed(b'{"a": 1}{"b": "}{"}\n{"c"') == [{"a": 1}, {"b": "}{"}]
    assert stream.feed(b": [1, 2]}noise{bad json}") == [{"c": [1, 2]}]
    assert stream.skipped >= 2
