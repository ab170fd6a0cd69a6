"""Serve the twin over the real protocols: JAKA JSON on TCP, Marlin and GRBL on ptys, its
camera and its ground truth on TCP.

``serve(scene, ...)`` builds one physics twin, puts the JAKA emulator and the two G-code
emulators in front of the same simulated arm, serves frames of that twin's camera
(:mod:`~onboard.drivers.emulators.camera_server`) and its ground truth for judges
(:mod:`~onboard.drivers.emulators.truth_server`), prints where each listens and runs until
SIGTERM or SIGINT (or until ``stop`` is set). ``onboard sim serve`` runs it. Connect a driver::

    GcodeArmConfig(url="/dev/pts/N")                     # the printed Marlin pty
    GcodeArmConfig(url="/dev/pts/M", dialect="grbl")     # the printed GRBL pty
    panda_config("/dev/pts/J")                           # Marlin in joint space (the Panda)
    So101ArmConfig(url="/dev/pts/K")                     # the SO-101's servo bus
    JakaArmConfig(host="127.0.0.1", port=10001, status_port=10000)
    SimServeCameraConfig(host="127.0.0.1", port=10002)   # what the served arm's camera sees

and a judge: ``TruthClient("127.0.0.1", 10003)``. Every TCP port listens on ``jaka_host``.

The Marlin emulator is a build with ``EMERGENCY_PARSER`` (what docs/drivers.md asks of the firmware)
and a fan output for the gripper; the GRBL one is set up as :data:`GRBL_ARM` says. A second
Marlin runs in joint space: its axes X Y Z A B C U are the Panda's seven joints, the driver
doing the kinematics (``kinematics = "joints"``, :func:`~onboard.drivers.emulators.
panda_joints.panda_config`). On a Panda scene the SO-101's servo bus
(:mod:`~onboard.drivers.emulators.feetech_pty`) moves a kinematic model of its own, not the
twin's arm: the camera and the truth port do not see it.

On a scene whose arm is an SO-101 (``[arm] model = "so101"``: ``--scene so101_blocks``) the
servo bus drives the twin's SO-101 (:mod:`~onboard.drivers.emulators.so101_twin`: the twin
steps in wall time, as servos move), the camera and the truth port see it, and neither the
JAKA nor the G-code emulators run (they drive a Panda): ``Served.jaka`` and ``status`` are
None.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from onboard.base.listen import check_port, listen_error
from onboard.base.signals import on_stop_signals
from onboard.drivers.arm.twin_arm import SimArm, SimArmConfig
from onboard.drivers.emulators.camera_server import CameraServer
from onboard.drivers.emulators.grbl_pty import GrblEmulator
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.emulators.tcp_service import TcpService
from onboard.drivers.emulators.truth_server import TruthServer
from onboard.drivers.twin import Scene, Twin

__all__ = ["GRBL_ARM", "Served", "serve"]

#: the served GRBL machine: homing on ($22, so it boots in alarm until home()), the max rates
#: of an arm ($110-$112, mm/min; GRBL's default is 500); its machine zero is the twin's base
GRBL_ARM = {22: 1.0, 110: 12000.0, 111: 12000.0, 112: 12000.0}


@dataclass(frozen=True)
class Served:
    """Where each service of one ``serve`` listens (handed to its ``ready`` callback)."""

    jaka: tuple[str, int] | None  # None on an SO-101 scene
    status: tuple[str, int] | None
    camera: tuple[str, int]
    truth: tuple[str, int]
    marlin: str | None  # pty paths; None with gcode=False
    grbl: str | None
    so101: str | None = None  # the SO-101's servo bus (pty); None with so101=False
    marlin_joints: str | None = None  # Marlin in joint space (pty); None with gcode=False


def serve(
    scene: Scene | Path | str | None = None,
    jaka_host: str = "127.0.0.1",
    jaka_port: int = 10001,
    status_port: int = 10000,
    gcode: bool = True,
    *,
    so101: bool = True,
    camera_port: int = 10002,
    truth_port: int = 10003,
    stop: threading.Event | None = None,
    say: Callable[[str], None] | None = None,
    ready: Callable[[Served], None] | None = None,
) -> None:
    """Run the emulators, the camera and the truth port on one twin until SIGTERM/SIGINT (or
    ``stop`` is set). Port 0 picks a free port; ``ready`` is called once all listen."""
    stop = stop or threading.Event()
    say = say or _say
    with contextlib.ExitStack() as stack:
        twin = stack.enter_context(Twin(scene))
        check_port("--camera-port", camera_port)
        check_port("--truth-port", truth_port)
        if twin.arm_model() == "so101":
            _serve_so101(stack, twin, jaka_host, camera_port, truth_port, stop, say, ready)
            return
        arm = SimArm(twin, SimArmConfig())
        arm.connect()
        stack.callback(arm.close)
        check_port("--jaka-port", jaka_port)
        check_port("--status-port", status_port)
        try:
            jaka = stack.enter_context(
                JakaServer(arm, host=jaka_host, port=jaka_port, status_port=status_port)
            )
        except OSError as exc:
            ports = f"{jaka_port} (status {status_port})"
            raise listen_error("sim serve", jaka_host, ports, exc) from exc
        host, port = jaka.address
        say(f"jaka: {host}:{port} (status stream {host}:{jaka.status_address[1]})")
        ptys: list[str | None] = [None, None]
        joint_space: str | None = None
        if gcode:
            marlin = stack.enter_context(MarlinEmulator(arm, emergency_parser=True))
            say(f"gcode (marlin): {marlin.path}")
            grbl = stack.enter_context(
                GrblEmulator(arm, settings=GRBL_ARM, machine_origin=(0.0, 0.0, 0.0))
            )
            say(f"gcode (grbl): {grbl.path}")
            ptys = [marlin.path, grbl.path]
            joints = stack.enter_context(
                MarlinEmulator(arm, emergency_parser=True, rotary_axes="ABCU", joint_space=True)
            )
            joint_space = joints.path
            say(f"gcode (marlin, joint space: X Y Z A B C U are the Panda's joints): {joint_space}")
        bus = None
        if so101:
            from onboard.drivers.emulators.feetech_pty import So101Emulator

            bus = stack.enter_context(So101Emulator())
            say(f"so101 (feetech bus, its own kinematic arm, not the twin's): {bus.path}")
        camera, truth = _camera_and_truth(stack, twin, jaka_host, camera_port, truth_port, say)
        if ready is not None:
            served = Served(jaka.address, jaka.status_address, camera, truth, *ptys)
            ready(replace(served, so101=bus.path if bus else None, marlin_joints=joint_space))
        _run(stop, say)


def _serve_so101(
    stack: contextlib.ExitStack,
    twin: Twin,
    host: str,
    camera_port: int,
    truth_port: int,
    stop: threading.Event,
    say: Callable[[str], None],
    ready: Callable[[Served], None] | None,
) -> None:
    """An SO-101 scene: the servo bus on the twin's arm, the camera and the truth port."""
    from onboard.drivers.emulators.feetech_pty import So101Emulator
    from onboard.drivers.emulators.so101_twin import TwinServos

    say("jaka and gcode: not served (the scene's arm is an SO-101)")
    bus = stack.enter_context(So101Emulator(model=TwinServos(twin)))
    say(f"so101 (feetech bus, the twin's SO-101): {bus.path}")
    camera, truth = _camera_and_truth(stack, twin, host, camera_port, truth_port, say)
    if ready is not None:
        ready(Served(None, None, camera, truth, None, None, so101=bus.path))
    _run(stop, say)


def _camera_and_truth(
    stack: contextlib.ExitStack,
    twin: Twin,
    host: str,
    camera_port: int,
    truth_port: int,
    say: Callable[[str], None],
) -> tuple[tuple[str, int], tuple[str, int]]:
    camera = _listen(stack, CameraServer(twin, host, camera_port), "--camera-port")
    kind = '[drivers.camera] kind = "sim-serve"'
    say(f"camera: {_where(camera)} (frames of this twin, rendered on request: {kind})")
    truth = _listen(stack, TruthServer(twin, host, truth_port), "--truth-port")
    say(f"truth: {_where(truth)} (ground truth for judges, JSON lines; not for the robot)")
    return camera, truth


def _run(stop: threading.Event, say: Callable[[str], None]) -> None:
    say("serving the twin's arm and camera; stop with SIGTERM or Ctrl-C")
    with on_stop_signals(lambda _name: stop.set()):
        while not stop.wait(0.5):
            pass
    say("stopping")


def _listen(stack: contextlib.ExitStack, service: TcpService, flag: str) -> tuple[str, int]:
    """Start ``service`` (closed with the stack); where it listens, or one UsageError line."""
    try:
        stack.enter_context(service)
    except OSError as exc:
        raise listen_error("sim serve", service.host, f"{service.port} ({flag})", exc) from exc
    return service.address


def _where(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def _say(line: str) -> None:
    print(line, flush=True)
