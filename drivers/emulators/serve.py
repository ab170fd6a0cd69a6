"""Serve the twin's arm over the real protocols: JAKA JSON on TCP, Marlin and GRBL on ptys.

``serve(scene, ...)`` builds one physics twin, puts the JAKA emulator and the two G-code
emulators in front of the same simulated arm, prints where they listen and runs until SIGTERM
or SIGINT (or until ``stop`` is set). ``onboard sim serve`` runs it. Connect a driver::

    GcodeArmConfig(url="/dev/pts/N")                     # the printed Marlin pty
    GcodeArmConfig(url="/dev/pts/M", dialect="grbl")     # the printed GRBL pty
    JakaArmConfig(host="127.0.0.1", port=10001, status_port=10000)

The Marlin emulator is a build with ``EMERGENCY_PARSER`` (what the README asks of the firmware)
and a fan output for the gripper; the GRBL one is set up as :data:`GRBL_ARM` says.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

from onboard.base.listen import check_port, listen_error
from onboard.base.signals import on_stop_signals
from onboard.drivers.arm.twin_arm import SimArm, SimArmConfig
from onboard.drivers.emulators.grbl_pty import GrblEmulator
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.twin import Scene, Twin

__all__ = ["GRBL_ARM", "serve"]

#: the served GRBL machine: homing on ($22, so it boots in alarm until home()), the max rates
#: of an arm ($110-$112, mm/min; GRBL's default is 500); its machine zero is the twin's base
GRBL_ARM = {22: 1.0, 110: 12000.0, 111: 12000.0, 112: 12000.0}


def serve(
    scene: Scene | Path | str | None = None,
    jaka_host: str = "127.0.0.1",
    jaka_port: int = 10001,
    status_port: int = 10000,
    gcode: bool = True,
    *,
    stop: threading.Event | None = None,
    say: Callable[[str], None] | None = None,
) -> None:
    """Run both emulators on one twin until SIGTERM/SIGINT (or ``stop`` is set)."""
    stop = stop or threading.Event()
    say = say or _say
    with contextlib.ExitStack() as stack:
        twin = stack.enter_context(Twin(scene))
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
        if gcode:
            marlin = stack.enter_context(MarlinEmulator(arm, emergency_parser=True))
            say(f"gcode (marlin): {marlin.path}")
            grbl = stack.enter_context(
                GrblEmulator(arm, settings=GRBL_ARM, machine_origin=(0.0, 0.0, 0.0))
            )
            say(f"gcode (grbl): {grbl.path}")
        say("serving the twin's arm; stop with SIGTERM or Ctrl-C")
        with on_stop_signals(lambda _name: stop.set()):
            while not stop.wait(0.5):
                pass
        say("stopping")


def _say(line: str) -> None:
    print(line, flush=True)
