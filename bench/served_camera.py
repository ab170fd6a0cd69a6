"""Frame round trip of the camera ``onboard sim serve`` serves, beside the twin's camera in process.

For each image size, one ``onboard sim serve`` process runs the blocks scene and the bench
reads its camera port through :class:`~onboard.drivers.camera.served_camera.ServedCamera`
(``kind = "sim-serve"``: request, render, header, RGB and depth bytes over loopback TCP,
decode). **The reference** is :class:`~onboard.drivers.camera.twin_camera.SimCamera` on a twin
of the same scene in the bench's own process (render only). Reads alternate between the two,
so both see the same machine load; the difference is what the protocol, the socket and the
second process add.

    .venv/bin/python bench/served_camera.py [--frames 200]   # about 45 s on 2 cores
"""

from __future__ import annotations

import argparse
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import ROOT, environment, fmt_ms, summary, write_results
from rich.console import Console
from rich.table import Table

from onboard.drivers.camera.config import SimServeCameraConfig
from onboard.drivers.camera.served_camera import ServedCamera
from onboard.drivers.camera.twin_camera import SimCamera
from onboard.drivers.twin import SCENES, Twin

SIZES = ((320, 240), (640, 480))
WARMUP = 10
BOUND = 60.0  # seconds sim serve may take to print where it listens


def scene_file(folder: Path, width: int, height: int) -> Path:
    """The blocks scene with the camera at ``width`` x ``height``."""
    path = folder / f"blocks-{width}x{height}.toml"
    text = (SCENES / "blocks.toml").read_text(encoding="utf-8")
    path.write_text(f"{text}\n[camera]\nwidth = {width}\nheight = {height}\n", encoding="utf-8")
    return path


@contextmanager
def sim_serve(scene: Path) -> Iterator[int]:
    """``onboard sim serve`` on ``scene`` in its own process; yields its camera port."""
    onboard = Path(sys.executable).parent / "onboard"
    command = [str(onboard), "sim", "serve", "--scene", str(scene), "--no-gcode"]
    for flag in ("--jaka-port", "--status-port", "--camera-port", "--truth-port"):
        command += [flag, "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) as server:
        try:
            assert server.stdout is not None
            yield _camera_port(server.stdout)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=BOUND)
            except subprocess.TimeoutExpired:
                server.kill()


def _camera_port(stdout: object) -> int:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stdout:  # type: ignore[attr-defined]
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    while True:
        line = lines.get(timeout=BOUND)
        if not line:
            raise SystemExit("sim serve ended before it listened")
        found = re.match(r"camera: [\d.]+:(\d+)", line)
        if found:
            return int(found.group(1))


def timed(read: Callable[[], object]) -> float:
    began = time.perf_counter()
    read()
    return time.perf_counter() - began


def measure(width: int, height: int, frames: int, folder: Path) -> dict[str, list[float]]:
    scene = scene_file(folder, width, height)
    samples: dict[str, list[float]] = {"served": [], "in-process": []}
    with sim_serve(scene) as port, Twin(scene) as twin:
        local = SimCamera(twin)
        local.connect()
        with ServedCamera(SimServeCameraConfig(port=port, timeout=10.0)) as served:
            frame = served.read()
            assert frame.color.shape == (height, width, 3), frame.color.shape
            for _ in range(WARMUP):
                served.read()
                local.read()
            for i in range(frames):
                pair = [("served", served.read), ("in-process", local.read)]
                for name, read in pair if i % 2 == 0 else reversed(pair):
                    samples[name].append(timed(read))
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--frames", type=int, default=200, help="frames per camera and size")
    args = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for width, height in SIZES:
            results[f"{width}x{height}"] = measure(width, height, args.frames, Path(folder))
    table = Table(title=f"Frame round trip, p50 / p99 / max ({args.frames} frames each)")
    table.add_column("size")
    for column in ("bytes/frame", "served (TCP)", "in process", "served - in process (p50)"):
        table.add_column(column, justify="right")
    stats = {}
    for size, samples in results.items():
        width, height = (int(v) for v in size.split("x"))
        served, local = summary(samples["served"]), summary(samples["in-process"])
        stats[size] = {"served": served, "in-process": local, "bytes": width * height * 7}
        table.add_row(
            size,
            f"{width * height * 7 / 1e6:.2f} MB",
            fmt_ms(served),
            fmt_ms(local),
            f"{served['p50_ms'] - local['p50_ms']:+.2f} ms",
        )
    Console(width=110).print(table)
    print("served: request, render in sim serve's process, RGB8 + float32 depth over loopback")
    raw = {size: samples for size, samples in results.items()}
    path = write_results(
        "served_camera", {"environment": environment(), "stats": stats, "samples": raw}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
