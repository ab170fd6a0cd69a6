"""Command round trip through each arm driver against its emulator, beside the direct twin.

Every driver runs on the real link (G-code and the SO-101's servo bus: a pty; JAKA: loopback
TCP) to its emulator, which drives the physics twin's SimArm (the SO-101's: a kinematic arm
whose servos move in wall time, and "so101 (twin)": the twin's SO-101 behind the same bus,
its physics stepping in wall time; the Moveo's, a joint-space G-code arm: Marlin's emulator in
joint space on a kinematic model of that arm; "panda (marlin, joints)": Marlin in joint space
on the twin's Panda, onboard doing its kinematics); the reference column is that SimArm called
directly, so the difference is what the protocol, the link and the driver add.

    .venv/bin/python bench/arm_drivers.py
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from _common import environment, fmt_ms, summary, write_results
from rich.console import Console
from rich.table import Table

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

STATE_CALLS = 300
GRBL_SETTINGS = {22: 1.0, 110: 12000.0, 111: 12000.0, 112: 12000.0}
MOVES = 20


@contextmanager
def rig(kind: str) -> Iterator[Arm]:
    if kind.startswith("so101"):
        yield from so101(twin="twin" in kind)
        return
    if kind.startswith("moveo"):
        yield from moveo()
        return
    with Twin(SCENES / "blocks.toml") as twin:
        backend = SimArm(twin)
        backend.connect()
        try:
            if kind == "sim (direct, reference)":
                yield backend
            elif kind.startswith("panda"):
                with MarlinEmulator(
                    backend, emergency_parser=True, rotary_axes="ABCU", joint_space=True
                ) as pty:
                    config = panda_config(pty.path, timeout=5.0, grip_settle=0.0)
                    with GcodeArm(config) as arm:
                        yield arm
            elif kind.startswith(("marlin", "grbl")):
                dialect = "marlin" if kind.startswith("marlin") else "grbl"
                pty = (
                    MarlinEmulator(backend, emergency_parser=True)
                    if dialect == "marlin"
                    else GrblEmulator(backend, settings=GRBL_SETTINGS, machine_origin=(0, 0, 0))
                )
                with pty:
                    config = GcodeArmConfig(
                        url=pty.path, dialect=dialect, timeout=5.0, grip_settle=0.0
                    )
                    with GcodeArm(config) as arm:
                        if dialect == "grbl":
                            arm.home()  # boots in alarm
                        yield arm
            else:
                with JakaServer(backend, port=0, status_port=0) as server:
                    host, port = server.address
                    stream = server.status_address[1] if kind == "jaka, status stream" else None
                    config = JakaArmConfig(
                        host=host, port=port, status_port=stream, timeout=5.0, grip_settle=0.0
                    )
                    with JakaArm(config) as arm:
                        yield arm
        finally:
            backend.close()


def so101(twin: bool) -> Iterator[Arm]:
    """So101Arm on the Feetech bus emulator's pty: a kinematic arm moving at servo speed in
    wall time, or (``twin``) the twin's SO-101 on the so101_blocks scene, whose physics steps in
    wall time; standing at the driver's home."""
    config = So101ArmConfig(url="unused", timeout=1.0)
    with contextlib.ExitStack() as stack:
        if twin:
            world = stack.enter_context(Twin(SCENES / "so101_blocks.toml"))
            bus = stack.enter_context(So101Emulator(model=TwinServos(world)))
        else:
            start = So101Arm(config).home_joints()
            bus = stack.enter_context(So101Emulator(start_joints=start))
        yield stack.enter_context(So101Arm(config.model_copy(update={"url": bus.path})))


def moveo() -> Iterator[Arm]:
    """GcodeArm in joint space (onboard's IK) on the Marlin emulator driving the Moveo model,
    whose joints move in wall time."""
    _, marlin = serve_moveo()
    with marlin as pty, GcodeArm(moveo_config(pty.path, timeout=5.0, grip_settle=0.0)) as arm:
        yield arm


def timed(call: Callable[[], object], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        samples.append(time.perf_counter() - began)
    return samples


def measure(kind: str) -> dict[str, list[float]]:
    with rig(kind) as arm:
        start = arm.state().pose
        timed(arm.state, 20)  # warm-up
        state = timed(arm.state, STATE_CALLS)
        moves = []
        for i in range(MOVES):
            dy = 0.01 if i % 2 == 0 else 0.0
            target = Pose(start.x, start.y + dy, start.z, start.rx, start.ry, start.rz)
            moves += timed(lambda t=target: arm.move_to(t, speed=0.1), 1)
        return {"state": state, "move_1cm": moves}


def main() -> None:
    kinds = [
        "sim (direct, reference)",
        "marlin over pty",
        "grbl over pty",
        "jaka, status stream",
        "jaka, queries",
        "so101 over pty",
        "so101 (twin) over pty",
        "moveo (marlin, joints) over pty",
        "panda (marlin, joints) over pty",
    ]
    results = {kind: measure(kind) for kind in kinds}
    table = Table(title="Arm command round trip (p50 / p99 / max)")
    table.add_column("metric")
    for kind in kinds:
        table.add_column(kind, justify="right")
    labels = {"state": f"state() x{STATE_CALLS}", "move_1cm": f"1 cm move_to x{MOVES}"}
    for metric, label in labels.items():
        table.add_row(label, *[fmt_ms(summary(results[kind][metric])) for kind in kinds])
    Console().print(table)
    print("moves are almost all simulated physics (the twin steps until the arm settles); the")
    print("SO-101's and the Moveo's are wall time: their joints move at their speed, as real")
    print("ones do; the joint-space rows include onboard's IK of every 5 mm waypoint")
    stats = {k: {m: summary(v) for m, v in r.items()} for k, r in results.items()}
    path = write_results("drivers", {"environment": environment(), "stats": stats})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
