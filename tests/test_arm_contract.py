"""One contract for every arm driver, run through the real link against the physics twin.

- ``marlin``, ``grbl``: GcodeArm in that dialect on the pty of the emulator of that firmware
  (written from the firmware's behaviour), which drives the twin's SimArm;
- ``jaka``: JakaArm on loopback TCP to the JAKA emulator, which drives the twin's SimArm;
- ``sim``: the twin's SimArm itself;
- ``so101``: So101Arm on the pty of the Feetech servo-bus emulator, whose servos move a
  kinematic model of the SO-101, so the checks that need the twin are skipped for it as on
  hardware;
- ``so101-twin``: the same on the emulator backed by the twin's SO-101 (the so101_blocks
  scene), so the twin's checks run; ``stop_mode = "hold"``, as torque off would drop the arm
  onto the table and the suite's next straight line would start from there;
- ``moveo``: GcodeArm with ``kinematics = "joints"`` on the Marlin emulator's pty in joint space
  (axes X Y Z A B are the BCN3D Moveo's joints), whose backend is a kinematic model of that arm
  computing the tool's pose link by link, apart from the driver's DH chain and IK (no twin);
- ``panda-joints``: the same driver on a Marlin emulator in joint space whose axes X Y Z A B C
  U are the twin's Panda joints (Franka's published DH table; PyBullet's pose is the truth).

With ``ONBOARD_GCODE_PORT`` (a serial url, e.g. /dev/ttyUSB0, with ``ONBOARD_GCODE_DIALECT``
marlin or grbl) or ``ONBOARD_JAKA_HOST`` or ``ONBOARD_SO101_PORT`` (the bus adapter) set, the
same tests drive that real arm instead of the emulator (``ONBOARD_JAKA_HOME_JOINTS``, radians
comma-separated, enables the JAKA home test); they then make only small moves around where the
arm stands, and the checks that need the twin (the block) are skipped. Keep the workspace clear.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import pytest
from arm_harness import BOUND, Behind, interrupt, require, wait_until

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.gcode import GcodeArm, GcodeArmConfig
from onboard.drivers.arm.jaka import JakaArm, JakaArmConfig
from onboard.drivers.arm.so101 import So101Arm, So101ArmConfig
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.feetech_pty import So101Emulator
from onboard.drivers.emulators.grbl_pty import GrblEmulator
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.emulators.moveo import moveo_config, serve_moveo
from onboard.drivers.emulators.panda_joints import panda_config
from onboard.drivers.emulators.so101_twin import TwinServos
from onboard.drivers.twin import SCENES, Twin
from onboard.drivers.twin.tasks import pick_and_place

GCODE_PORT = os.environ.get("ONBOARD_GCODE_PORT")
GCODE_DIALECT = os.environ.get("ONBOARD_GCODE_DIALECT", "marlin")
JAKA_HOST = os.environ.get("ONBOARD_JAKA_HOST")
SCENE = SCENES / "blocks.toml"
ROOT = Path(__file__).resolve().parent.parent
DRIVERS = ["marlin", "grbl", "jaka", "sim", "so101", "so101-twin", "moveo", "panda-joints"]
SO101_PORT = os.environ.get("ONBOARD_SO101_PORT")
#: a GRBL machine set up for the arm: homing on ($22), max rates 12 m/min ($110-$112; GRBL's
#: default is 500 mm/min)
GRBL_SETTINGS = {22: 1.0, 110: 12000.0, 111: 12000.0, 112: 12000.0}


@dataclass
class Rig:
    """The driver under test and, when emulated, the twin, SimArm and emulator behind it."""

    kind: str
    arm: Arm
    behind: Behind | None = None
    #: the emulator holds the stop (GRBL's feed hold is the controller's own state: it
    #: stops nothing in the backend when nothing moves); None: the backend arm latched it
    controller_stopped: Callable[[], bool] | None = None
    #: the twin whose arm the emulator moves with no SimArm between (the SO-101's servos)
    world: Twin | None = None

    @property
    def twin(self) -> Twin | None:
        return self.behind.twin if self.behind is not None else self.world

    def settle(self) -> None:
        """Wait until the emulator behind the arm has no motion left (nothing on hardware)."""
        if self.behind is not None:
            self.behind.wait_idle()


def emulated(kind: str, twin: Twin) -> Iterator[Rig]:
    """The driver ``kind`` on the real link to its emulator, backed by ``twin``'s SimArm."""
    backend = SimArm(twin)
    backend.connect()
    if kind == "sim":
        yield Rig(kind, backend, Behind(twin, backend))
    elif kind == "panda-joints":
        joint_space = MarlinEmulator(
            backend, emergency_parser=True, rotary_axes="ABCU", joint_space=True
        )
        with (
            joint_space as pty,
            GcodeArm(panda_config(pty.path, timeout=BOUND, grip_settle=0.0)) as arm,
        ):
            yield Rig(kind, arm, Behind(twin, backend, pty.worker))
    elif kind in ("marlin", "grbl"):
        # the Marlin build docs/drivers.md asks for: EMERGENCY_PARSER on, so M410 stops at once
        # GRBL: homing enabled, so it boots in alarm; its machine zero is the twin's base
        # frame (as a machine whose work offsets were set to the robot's base)
        emulator = (
            MarlinEmulator(backend, emergency_parser=True)
            if kind == "marlin"
            else GrblEmulator(backend, settings=GRBL_SETTINGS, machine_origin=(0.0, 0.0, 0.0))
        )
        with emulator as pty:
            gcode = GcodeArmConfig(url=pty.path, dialect=kind, timeout=BOUND, grip_settle=0.0)
            with GcodeArm(gcode) as arm:
                held = None
                if isinstance(pty, GrblEmulator):
                    grbl = pty
                    held = lambda: grbl.state_name.startswith("Hold")  # noqa: E731
                yield Rig(kind, arm, Behind(twin, backend, pty.worker), held)
    else:
        with JakaServer(backend, port=0, status_port=0) as server:
            host, port = server.address
            config = JakaArmConfig(
                host=host,
                port=port,
                status_port=server.status_address[1],
                timeout=BOUND,
                home_joints=twin.scene.arm.home,
                grip_settle=0.0,
            )
            with JakaArm(config) as arm:
                yield Rig(kind, arm, Behind(twin, backend, server.worker))
    backend.close()


def so101() -> Iterator[Rig]:
    """So101Arm on the servo-bus emulator, the model standing at the driver's home."""
    config = So101ArmConfig(url="unused", joint_speed=2.0, timeout=BOUND / 10)
    home = So101Arm(config).home_joints()
    with (
        So101Emulator(start_joints=home) as bus,
        So101Arm(config.model_copy(update={"url": bus.path})) as arm,
    ):
        yield Rig("so101", arm)


def so101_twin() -> Iterator[Rig]:
    """So101Arm on the servo-bus emulator backed by the twin's SO-101, standing at its home."""
    config = So101ArmConfig(url="unused", joint_speed=2.0, timeout=BOUND / 10, stop_mode="hold")
    with (
        Twin(SCENES / "so101_blocks.toml") as twin,
        So101Emulator(model=TwinServos(twin)) as bus,
        So101Arm(config.model_copy(update={"url": bus.path})) as arm,
    ):
        yield Rig("so101-twin", arm, world=twin)


def moveo() -> Iterator[Rig]:
    """The joint-space G-code driver on Marlin's emulator, driving the Moveo model."""
    _, marlin = serve_moveo(boot_time=0.05)
    with marlin as pty, GcodeArm(moveo_config(pty.path, timeout=BOUND, grip_settle=0.0)) as arm:
        yield Rig("moveo", arm)


def hardware(kind: str) -> Iterator[Rig] | None:
    if kind == "so101" and SO101_PORT:
        return _connected(Rig(kind, So101Arm(So101ArmConfig(url=SO101_PORT))))
    if kind in ("marlin", "grbl") and GCODE_PORT:
        if kind != GCODE_DIALECT:
            pytest.skip(f"ONBOARD_GCODE_PORT is a {GCODE_DIALECT} board")
        config = GcodeArmConfig(url=GCODE_PORT, dialect=kind)
        return _connected(Rig(kind, GcodeArm(config)))
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
    if request.param == "so101":
        yield from so101()
        return
    if request.param == "so101-twin":
        yield from so101_twin()
        return
    if request.param == "moveo":
        yield from moveo()
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
        if state.joints:  # a G-code arm with no rotational axes reports none
            assert len(state.joints) == len(rig.twin.joints())


def test_home(rig: Rig) -> None:
    if isinstance(rig.arm, JakaArm) and rig.arm.config.home_joints is None:
        pytest.skip("set ONBOARD_JAKA_HOME_JOINTS (radians, comma-separated) to test home()")
    rig.arm.home()
    state = rig.arm.state()
    assert not state.moving
    if rig.twin is not None:
        home = rig.twin.scene.arm.home
        joints = state.joints or rig.twin.joints()  # a G-code arm may report no joints
        assert max(abs(a - b) for a, b in zip(joints, home, strict=True)) < 0.02


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
    if rig.twin is not None:
        rig.arm.home()  # GRBL with homing enabled takes no G-code until it is homed
    rig.arm.grip(True)
    assert rig.arm.state().gripper_closed
    if rig.twin is not None:
        rig.settle()  # a G-code output is switched at once; the fingers take a moment
        assert rig.twin.gripper_closed()
    rig.arm.grip(False)
    assert not rig.arm.state().gripper_closed
    if rig.twin is not None:
        rig.settle()
        assert not rig.twin.gripper_closed()


def test_stop_from_another_thread(rig: Rig) -> None:
    if rig.twin is not None:
        rig.arm.home()
    start = rig.arm.state().pose
    far = replace(start, y=start.y + 0.15)  # 15 s at 0.01 m/s
    done = interrupt(rig.arm, lambda: rig.arm.move_to(far, 0.01), rig.arm.stop, rig.behind)
    assert isinstance(done.raised, ArmError) and "stop" in str(done.raised)
    assert not close_to(done.stopped_at, far, 0.01)
    # a status push sampled before the stop can reach the driver after the stop's reply (JAKA
    # sends them on another socket), as a real arm decelerates after it: wait for not moving
    wait_until(lambda: not rig.arm.state().moving, "the arm reports not moving after the stop")
    assert rig.arm.state().stopped
    with pytest.raises(ArmError, match=r"resume\(\)"):  # latched until resume()
        rig.arm.move_to(start, 0.1)
    rig.arm.resume()
    if "home()" in (rig.arm.state().error or ""):  # a stop that lost the position (M410)
        rig.arm.home()
    rig.arm.move_to(start, 0.1)  # the arm takes commands again
    assert close_to(rig.arm.state().pose, start, 0.005)


def test_stop_latches_until_resume(rig: Rig) -> None:
    """A stop that lands before a motion is not lost: every motion call raises (and nothing
    moves) until resume()."""
    if rig.twin is not None:
        rig.arm.home()
    start = rig.arm.state().pose
    near = replace(start, z=start.z - 0.03)
    rig.arm.stop()
    for call in (lambda: rig.arm.move_to(near, 0.1), lambda: rig.arm.grip(True)):
        with pytest.raises(ArmError, match=r"stopped by stop\(\): call resume\(\)"):
            call()
    if rig.behind is not None:
        if rig.controller_stopped is not None:
            wait_until(rig.controller_stopped, "the controller holds the stop")
        else:
            require(rig.behind.arm.wait_stopped(BOUND), "the controller latched the stop too")
        assert close_to(rig.behind.twin.ee_pose(), start, 0.002), "nothing moved"
    state = rig.arm.state()
    assert state.stopped and not state.moving and not state.gripper_closed
    rig.arm.resume()
    assert not rig.arm.state().stopped
    rig.arm.move_to(near, 0.1)
    assert close_to(rig.arm.state().pose, near, 0.005)
    rig.arm.stop()  # a second stop latches again, and a second resume clears it
    rig.arm.resume()
    rig.arm.move_to(start, 0.1)
    assert close_to(rig.arm.state().pose, start, 0.005)


def test_pick_and_place_moves_the_block(rig: Rig) -> None:
    twin = needs_twin(rig)
    rig.arm.home()
    tool = rig.arm.state().pose
    x, y, z = twin.to_base(twin.object_pose("red block")[0])
    pick = replace(tool, x=x, y=y, z=z)
    place = replace(tool, x=0.32, y=-0.12, z=z)
    if rig.kind == "so101-twin":  # in its reach, clear of the blue block
        place = replace(tool, x=0.145, y=0.0, z=z)
    pick_and_place(rig.arm, pick, place, speed=0.3)
    rig.settle()
    twin.settle(0.5)
    bx, by, bz = twin.to_base(twin.object_pose("red block")[0])
    assert math.dist((bx, by), (place.x, place.y)) < 0.02
    assert abs(bz - z) < 0.02


# -- the emulators as a service ---------------------------------------------------------------


def test_serve_exposes_every_protocol_and_stops_on_sigterm() -> None:
    onboard = Path(sys.executable).parent / "onboard"
    command = [str(onboard), "sim", "serve", "--jaka-port", "0", "--status-port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) as server:
        try:
            assert server.stdout is not None
            said = _read_banner(server.stdout)
            jaka = re.search(r"jaka: ([\d.]+):(\d+) \(status stream [\d.]+:(\d+)\)", said)
            marlin = re.search(r"gcode \(marlin\): (/dev/pts/\d+)", said)
            grbl = re.search(r"gcode \(grbl\): (/dev/pts/\d+)", said)
            so101 = re.search(r"so101 \(feetech bus[^)]*\): (/dev/pts/\d+)", said)
            joints = re.search(r"gcode \(marlin, joint space[^)]*\): (/dev/pts/\d+)", said)
            assert jaka and marlin and grbl and so101 and joints, said
            host, port, status_port = jaka.group(1), int(jaka.group(2)), int(jaka.group(3))
            config = JakaArmConfig(host=host, port=port, status_port=status_port, grip_settle=0.0)
            with JakaArm(config) as arm:
                assert arm.robot_state() == (True, True)
                by_tcp = arm.state().pose
            for dialect, pty in (("marlin", marlin), ("grbl", grbl)):
                config = GcodeArmConfig(url=pty.group(1), dialect=dialect, grip_settle=0.0)
                with GcodeArm(config) as arm:
                    assert close_to(arm.state().pose, by_tcp, 0.001)  # one twin behind all
            with GcodeArm(panda_config(joints.group(1), grip_settle=0.0)) as arm:
                assert close_to(arm.state().pose, by_tcp, 0.001)  # its joints, our kinematics
            with So101Arm(So101ArmConfig(url=so101.group(1))) as bus_arm:
                assert not bus_arm.state().moving  # its own kinematic arm, not the twin's
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=BOUND) == 0
        finally:
            if server.poll() is None:  # a failed check must not leave it (and the pipe) open
                server.kill()


def _read_banner(stdout: IO[str]) -> str:
    """The server's lines up to the one after where it listens (pybullet prints "argv" too),
    each awaited at most BOUND seconds."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        with contextlib.suppress(ValueError, OSError):  # closed when the test ends
            for line in stdout:
                lines.put(line)
        lines.put("")  # the server ended

    threading.Thread(target=pump, daemon=True).start()
    said: list[str] = []
    while not said or said[-1].startswith(("argv", "jaka", "gcode")):
        try:
            said.append(lines.get(timeout=BOUND))
        except queue.Empty:
            require(False, f"the server printed where it listens (so far: {said!r})")
    return "".join(said)
