"""A scene's every arm behind its own JAKA controller on TCP, on one physics twin: the world a
fleet's controllers drive, each its own arm over its own link (``onboard fleet world``).

``serve_arms(scene, ready=...)`` builds the twin, puts a :class:`JakaServer` in front of
each arm of the scene (a SimArm of that arm), and the truth port (judges and the person
laying out the table, never a controller), calls ``ready(Arms)`` once all listen, and runs
until SIGTERM/SIGINT or ``stop``. Every port is picked free on ``host``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from onboard.base.signals import on_stop_signals
from onboard.drivers.arm.twin_arm import SimArm, SimArmConfig
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.drivers.emulators.truth_server import TruthServer
from onboard.drivers.twin import Scene, Twin

__all__ = ["Arms", "serve_arms"]


@dataclass(frozen=True)
class Arms:
    """Where each arm's controller listens: name -> (host, command port, status port); the
    truth port."""

    arms: dict[str, tuple[str, int, int]]
    truth: tuple[str, int]

    def to_json(self) -> dict[str, object]:
        return {"arms": {a: list(v) for a, v in self.arms.items()}, "truth": list(self.truth)}


def serve_arms(
    scene: Scene | Path | str,
    *,
    host: str = "127.0.0.1",
    speed: float = 0.4,
    stop: threading.Event | None = None,
    ready: Callable[[Arms], None] | None = None,
) -> None:
    """Serve every arm of ``scene`` (see the module docstring); ``speed``: the arms' top tool
    speed (m/s)."""
    stop = stop or threading.Event()
    with contextlib.ExitStack() as stack:
        twin = stack.enter_context(Twin(scene))
        served: dict[str, tuple[str, int, int]] = {}
        for name in twin.arm_names():
            arm = SimArm(twin, SimArmConfig(max_speed=speed, speed=speed), arm=name)
            arm.connect()
            stack.callback(arm.close)
            jaka = stack.enter_context(JakaServer(arm, host=host, port=0, status_port=0))
            served[name] = (host, jaka.address[1], jaka.status_address[1])
        truth = stack.enter_context(TruthServer(twin, host, 0))
        if ready is not None:
            ready(Arms(served, truth.address))
        with on_stop_signals(lambda _name: stop.set()):
            while not stop.wait(0.5):
                pass
