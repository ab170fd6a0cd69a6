"""One contract for every arm driver, run through the real link against the physics twin.

- ``gcode``: GcodeArm on the pty of the G-code emulator, which drives the twin's SimArm;
- ``jaka``: JakaArm on loopback TCP to the JAKA emulator, which drives the twin's SimArm;
- ``sim``: the twin's SimArm itself.

With ``ONBOARD_GCODE_PORT`` (a serial url, e.g. /dev/ttyUSB0) or ``ONBOARD_JAKA_HOST`` set, the
same tests drive that real arm instead of the emulator (``ONBOARD_JAKA_HOME_JOINTS``, radians
comma-separated, enables the JAKA home test); they then make only small moves around where the
arm stands, and the checks that need the twin (the block) are skipped. Keep the workspace clear.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from drivers.arm.base import Arm, Pose
from drivers.arm.gcode import GcodeArm, GcodeArmConfig
from drivers.arm.jaka import JakaArm, JakaArmConfig
from drivers.arm.sim import SimArm
from drivers.emulators.gcode_pty import GcodePtyEmulator
from drivers.emulators.jaka_server import JakaServer
from drivers.twin import SCENES, Twin
from drivers.twin.tasks import pick_and_place
from runtime.errors import ArmError

GCODE_PORT = os.environ.get("ONBOARD_GCODE_PORT")
JAKA_HOST = os.environ.get("ONBOARD_JAKA_HOST")
SCENE = SCENES / "blocks.toml"
ROOT = Path(__file__).resolve().parent.parent
DRIVERS = ["gcode", "jaka", "sim"]


@dataclass
class Rig:
    """The driver under test and, when emulated, the twin and the SimArm behind it."""

    kind: str
    arm: Arm
    twin: Twin | None = None
    backend: SimArm | None = None

    def settled(self, timeout: float = 3.0) -> bool:
        """True once the twin's arm is not moving (always True on hardware)."""
        deadline = time.monotonic() + timeout
        while self.backend is not None and self.backend.state().moving:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True


def emulated(kind: str, twin: Twin) -> Iterator[Rig]:
    """The driver ``kind`` on the real link to its emulator, backed by ``twin``'s SimArm."""
    backend = SimArm(twin)
    backend.connect()
    if kind == "sim":
        yield Rig(kind, backend, twin, backend)
    elif kind == "gcode":
        with GcodePtyEmulator(backend) as pty:
            gcode = GcodeArmConfig(url=pty.path, timeout=5.0, grip_settle=0.0)
            with GcodeArm(gcode) as arm:
                yield Rig(kind, arm, twin, backend)
    else:
        with JakaServer(backend, port=0, status_port=0) as server:
            host, port = server.address
            config = JakaArmConfig(
                host=host,
                port=port,
                status_port=server.status_address[1],
                timeout=5.0,
                home_joints=twin.scene.arm.home,
                grip_settle=0.0,
            )
            with JakaArm(config) as arm:
                yield Rig(kind, arm, twin, backend)
    backend.close()


def hardware(kind: str) -> Iterator[Rig] | None:
    if kind == "gcode" and GCODE_PORT:
        return _connected(Rig(kind, GcodeArm(GcodeArmConfig(url=GCODE_PORT))))
    if kind == "jaka" and JAKA_HOST:
        home = os.environ.get("ONBOARD_JAKA_HOME_JOINTS")
        joints = tuple(float(q) for q in home.split(",")) if home else None
        return _connected(Rig(kind, JakaArm(JakaArmConfig(host=JAKA_HOST, home_joints=joints))))
    return None


def _connected(rig: Rig) -> Iterator[Rig]:
    rig.arm.connect()
    try:
        yield rig
    finally:
        rig.arm.close()


@pytest.fixture(params=DRIVERS)
def rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    real = hardware(request.param)
    if real is not None:
        yield from real
        return
    with Twin(SCENE) as twin:
        yield from emulated(request.param, twin)


def needs_twin(rig: Rig) -> Twin:
    if rig.twin is None:
        pytest.skip("needs the twin: the block and the home pose are known only there")
    return rig.twin


def close_to(a: Pose, b: Pose, tolerance: float) -> bool:
    return math.dist(a.position(), b.position()) <= tolerance


# -- the contract -----------------------------------------------------------------------------


def test_state_after_connect(rig: Rig) -> None:
    state = rig.arm.state()
    assert all(math.isfinite(v) for v in state.pose.position())
    assert not state.moving
    if rig.twin is not None:
        assert close_to(state.pose, rig.twin.ee_pose(), 0.005)
        assert len(state.joints) == len(rig.twin.joints())


def test_home(rig: Rig) -> None:
    if isinstance(rig.arm, JakaArm) and rig.arm.config.home_joints is None:
        pytest.skip("set ONBOARD_JAKA_HOME_JOINTS (radians, comma-separated) to test home()")
    rig.arm.home()
    state = rig.arm.state()
    assert not state.moving
    if rig.twin is not None:
        home = rig.twin.scene.arm.home
        assert max(abs(a - b) for a, b in zip(state.joints, home, strict=True)) < 0.02


def test_move_to_within_5_mm(rig: Rig) -> None:
    if rig.twin is not None:
        rig.arm.home()
    start = rig.arm.state().pose
    target = replace(start, x=start.x + 0.05, y=start.y - 0.03, z=start.z - 0.04)
    rig.arm.move_to(target, 0.1)
    assert close_to(rig.arm.state().pose, target, 0.005)
    if rig.twin is not None:
        assert close_to(rig.twin.ee_pose(), target, 0.005)
    rig.arm.move_to(start, 0.1)
    assert close_to(rig.arm.state().pose, start, 0.005)


def test_move_joints(rig: Rig) -> None:
    if rig.twin is not None:
        rig.arm.home()
    start = rig.arm.state().joints
    if not start:
        pytest.skip("this arm reports no joint positions")
    target = tuple(q + (0.15 if i in (0, 5) else 0.0) for i, q in enumerate(start))
    rig.arm.move_joints(target, 0.5)
    reached = rig.arm.state().joints
    assert max(abs(a - b) for a, b in zip(reached, target, strict=True)) < 0.01
    if rig.twin is not None:
        assert max(abs(a - b) for a, b in zip(rig.twin.joints(), target, strict=True)) < 0.01
    rig.arm.move_joints(start, 0.5)


def test_grip(rig: Rig) -> None:
    rig.arm.grip(True)
    assert rig.arm.state().gripper_closed
    if rig.twin is not None:
        assert rig.twin.gripper_closed()
    rig.arm.grip(False)
    assert not rig.arm.state().gripper_closed
    if rig.twin is not None:
        assert not rig.twin.gripper_closed()


def test_stop_from_another_thread(rig: Rig) -> None:
    if rig.twin is not None:
        rig.arm.home()
    start = rig.arm.state().pose
    far = replace(start, y=start.y + 0.15)
    failure: list[BaseException] = []

    def move() -> None:
        try:
            rig.arm.move_to(far, 0.01)  # 15 s at this speed: stop() comes long before
        except ArmError as exc:
            failure.append(exc)

    mover = threading.Thread(target=move)
    mover.start()
    deadline = time.monotonic() + 5.0
    while not rig.arm.state().moving and time.monotonic() < deadline:
        time.sleep(0.01)
    rig.arm.stop()
    mover.join(timeout=5.0)
    assert not mover.is_alive()
    assert failure and "stop" in str(failure[0])
    assert rig.settled()
    stopped_at = rig.arm.state().pose
    assert not close_to(stopped_at, far, 0.01)
    rig.arm.move_to(start, 0.1)  # the arm takes commands again
    assert close_to(rig.arm.state().pose, start, 0.005)


def test_pick_and_place_moves_the_block(rig: Rig) -> None:
    twin = needs_twin(rig)
    rig.arm.home()
    tool = rig.arm.state().pose
    x, y, z = twin.to_base(twin.object_pose("red block")[0])
    pick = replace(tool, x=x, y=y, z=z)
    place = replace(tool, x=0.32, y=-0.12, z=z)
    pick_and_place(rig.arm, pick, place, speed=0.3)
    assert rig.settled()
    twin.settle(0.5)
    bx, by, bz = twin.to_base(twin.object_pose("red block")[0])
    assert math.dist((bx, by), (place.x, place.y)) < 0.02
    assert abs(bz - z) < 0.02


# -- the emulators as a service ---------------------------------------------------------------


def test_serve_exposes_both_protocols_and_stops_on_sigterm() -> None:
    onboard = Path(sys.executable).parent / "onboard"
    command = [str(onboard), "sim", "serve", "--jaka-port", "0", "--status-port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) as server:
        assert server.stdout is not None
        lines: list[str] = []
        while not lines or lines[-1].startswith(("argv", "jaka", "gcode")):  # pybullet's too
            lines.append(server.stdout.readline())
        said = "".join(lines)
        jaka = re.search(r"jaka: ([\d.]+):(\d+) \(status stream [\d.]+:(\d+)\)", said)
        pty = re.search(r"gcode: (/dev/pts/\d+)", said)
        assert jaka and pty, said
        host, port, status_port = jaka.group(1), int(jaka.group(2)), int(jaka.group(3))
        config = JakaArmConfig(host=host, port=port, status_port=status_port, grip_settle=0.0)
        with JakaArm(config) as arm:
            assert arm.robot_state() == (True, True)
            by_tcp = arm.state().pose
        with GcodeArm(GcodeArmConfig(url=pty.group(1), grip_settle=0.0)) as arm:
            assert close_to(arm.state().pose, by_tcp, 0.001)  # one twin behind both
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=10) == 0
