"""E-stop latency with the service's loop blocked: from the input to ``stop()`` on the arm.

``onboard up``'s service runs on this (the main) thread with its loop deliberately blocked
by a callback for the whole run; its operator side runs as in ``onboard up`` (the e-stop's
file, GPIO-style and serial inputs, the control API on loopback). The arm is the physics
twin's (SimArm) behind SafeArm, connected as a step's arm is; a thin wrapper stamps the
moment ``stop()`` reaches the driver. Each trial: the e-stop reset and the arm resumed,
then the clock starts and the input fires:

- ``http``: ``POST /api/estop`` sent on a new connection (the standard library's
  http.client, as light as curl: httpx builds an SSL context per client, some 50 ms here,
  before anything is sent);
- ``file``: the file created (``open(path, "w")``);
- ``gpio``: "0" written to the GPIO-style value file;
- ``serial``: ``STOP\\n`` written to the master side of a real pty whose slave the service
  reads.

    .venv/bin/python bench/estop_latency.py [--trials 200]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from pathlib import Path

from _common import environment, fmt_ms, summary, write_results
from rich.console import Console
from rich.table import Table

from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.safety import SafeArm, SafetyLimits
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.twin import Twin
from onboard.service.estop import POLL
from onboard.service.log import JsonLog
from onboard.service.notify import Notifier
from onboard.service.operator import operator
from onboard.service.service import Options, Service
from onboard.service.settings import ServiceConfig

INPUTS = ("http", "file", "gpio", "serial")
#: the issue's bound on the p99
BOUND_MS = 50.0


class Stamped:
    """The twin's arm; ``stop()`` stamps when it arrives (perf_counter) before stopping."""

    def __init__(self, arm: SimArm) -> None:
        self.arm = arm
        self.stopped_at = 0.0
        self.stopped = threading.Event()

    def connect(self) -> None:
        self.arm.connect()

    def close(self) -> None:
        self.arm.close()

    def home(self) -> None:
        self.arm.home()

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        self.arm.move_to(pose, speed)

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        self.arm.move_joints(joints, speed)

    def grip(self, close: bool) -> None:
        self.arm.grip(close)

    def stop(self) -> None:
        self.stopped_at = time.perf_counter()
        self.arm.stop()
        self.stopped.set()

    def resume(self) -> None:
        self.arm.resume()

    def state(self) -> ArmState:
        return self.arm.state()


def _post(url: str, path: str) -> None:
    """POST ``path`` on a new connection; the answer is read after the stop (another
    thread), so it is not waited for here."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = HTTPConnection(host, int(port), timeout=5.0)
    connection.request("POST", path, headers={"X-Onboard": "1", "Content-Length": "0"})
    threading.Thread(target=lambda: (connection.getresponse().read(), connection.close())).start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    trials = parser.parse_args().trials
    folder = Path(tempfile.mkdtemp(prefix="estop-bench-"))
    flag, gpio = folder / "estop", folder / "gpio"
    gpio.write_text("1\n")
    master, slave = os.openpty()
    estop = {"file": flag, "gpio": gpio, "serial": os.ttyname(slave)}
    from onboard.config import RobotConfig

    robot = RobotConfig(name="bench", root=folder, recordings=folder / "rec",
                        service=ServiceConfig(port=0, estop=estop))  # fmt: skip
    service = Service(robot, [], Options(once=True), JsonLog(io.StringIO()), Notifier(""))
    latencies: dict[str, list[float]] = {name: [] for name in INPUTS}
    blocked, done = threading.Event(), threading.Event()
    loop_blocked: list[float] = []

    def block() -> None:  # the service's loop, held for the whole run
        began = time.monotonic()
        blocked.set()
        done.wait()
        loop_blocked.append(time.monotonic() - began)

    def measure(url: str) -> None:
        try:
            blocked.wait()
            with Twin() as twin:
                stamped = Stamped(SimArm(twin))
                arm = SafeArm(stamped, SafetyLimits(), twin.forward)
                arm.connect()
                fire: dict[str, Callable[[], None]] = {
                    "http": lambda: _post(url, "/api/estop"),
                    "file": lambda: open(flag, "w").close(),
                    "gpio": lambda: gpio.write_text("0\n"),
                    "serial": lambda: os.write(master, b"STOP\n"),
                }
                for trial in range(trials):
                    for name in INPUTS:
                        service.estop.reset("bench")
                        arm.resume()
                        stamped.stopped.clear()
                        time.sleep(3 * POLL)  # the pollers see the input released
                        began = time.perf_counter()
                        fire[name]()
                        if not stamped.stopped.wait(5.0):
                            raise RuntimeError(f"{name}: no stop in 5 s (trial {trial})")
                        latencies[name].append(stamped.stopped_at - began)
                        flag.unlink(missing_ok=True)
                        gpio.write_text("1\n")
                service.estop.reset("bench")
                arm.close()
        finally:
            done.set()

    with operator(service, None, token=None) as url:
        assert url is not None
        thread = threading.Thread(target=measure, args=(url,))
        thread.start()
        service.run(ready=block)
        thread.join()
    os.close(master)
    os.close(slave)
    stats = {name: summary(values) for name, values in latencies.items()}
    table = Table(
        title=f"E-stop: input to Arm.stop(), the service's loop blocked ({trials} trials)"
    )
    for column in ("input", "p50 / p99 / max", f"p99 < {BOUND_MS:.0f} ms"):
        table.add_column(column, justify="right" if column != "input" else "left")
    for name in INPUTS:
        met = stats[name]["p99_ms"] < BOUND_MS
        table.add_row(
            name, fmt_ms(stats[name]), "[green]met[/green]" if met else "[red]missed[/red]"
        )
    Console().print(table)
    load = os.getloadavg()[0]
    print(
        f"the loop was blocked {loop_blocked[0]:.1f} s, the whole run; file and GPIO poll "
        f"every {POLL * 1000:.0f} ms; load average {load:.1f} on {os.cpu_count()} CPUs"
    )
    path = write_results(
        "estop_latency",
        {
            "environment": environment(),
            "trials": trials,
            "bound_ms": BOUND_MS,
            "poll_ms": POLL * 1000,
            "loop_blocked_s": loop_blocked[0],
            "load_average": os.getloadavg()[0],
            "stats": stats,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
