"""Faults injected on the JAKA link (loopback TCP) between the driver and the twin (the G-code
dialects' faults are in tests/test_gcode_dialects.py).

After every fault the twin's arm must be still: a driver that lost its controller, or a
controller that lost its driver, leaves the robot stopped. Replies may take up to BOUND
seconds (a loaded machine), so only the injected fault ends a move; the silent-controller
tests alone use a short timeout, which a muted controller always runs into.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest
from arm_harness import BOUND, Behind, interrupt, require, twin_arm

from onboard.base.errors import ArmError, ArmTimeout, LinkLost
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.jaka import JakaArm, JakaArmConfig, JsonStream
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.drivers.twin import SCENES

SCENE = SCENES / "blocks.toml"
SILENT = 2.0  # seconds: the reply timeout of the tests where the controller is muted


@pytest.fixture
def backend() -> Iterator[SimArm]:
    with twin_arm() as arm:
        yield arm


@dataclass
class Jaka:
    server: JakaServer
    arm: JakaArm
    behind: Behind


def jaka_rig(backend: SimArm, timeout: float = BOUND) -> Iterator[Jaka]:
    with JakaServer(backend, port=0, status_port=0) as server:
        host, port = server.address
        config = JakaArmConfig(
            host=host, port=port, status_port=server.status_address[1], timeout=timeout
        )
        with JakaArm(config) as arm:
            yield Jaka(server, arm, Behind(backend.twin, backend, server.worker))


@pytest.fixture
def jaka(backend: SimArm) -> Iterator[Jaka]:
    yield from jaka_rig(backend)


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
