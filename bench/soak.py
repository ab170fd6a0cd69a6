"""A long run (issue 32, item 6): ``onboard up`` through a mission that loops, then a stop
during a twin motion, both measured from outside the process.

The soak runs ``--episodes`` engage episodes (virtual clock, the stand-in LLM) in one
``onboard up --once`` process under a recordings quota of ``--quota-mb``, reading the
process's resident memory, open file descriptors and threads from /proc every ``--every``
episodes. The stop runs a looping tidy mission on Marlin's emulator in front of the twin's
arm (moving in real time), the LLM served by the local SmolLM2 server the service starts
(``--llm local``; ``standin`` to try it without the local-llm extra), and sends SIGTERM once
a step moves the arm.

    python bench/soak.py [--episodes 1000] [--every 50] [--warmup 100] [--quota-mb 2]
                         [--llm local]

Prints the figures beside the issue's limits and writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

from onboard.testing.soak import run_soak, soak_robot, stop_during_motion


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--every", type=int, default=50, help="sample every N episodes")
    parser.add_argument("--warmup", type=int, default=100, help="episodes before the fit")
    parser.add_argument("--quota-mb", type=float, default=2.0)
    parser.add_argument("--llm", choices=("local", "standin"), default="local")
    args = parser.parse_args()
    onboard = Path(sys.executable).with_name("onboard")
    folder = Path(tempfile.mkdtemp(prefix="onboard-soak-"))
    try:
        robot = soak_robot(ROOT / "robot.toml", folder, args.quota_mb)
        soak = run_soak(onboard, robot, folder, args.episodes, args.every)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix="onboard-stop-"))
    try:
        stop = stop_during_motion(onboard, ROOT / "robot.toml", folder, args.llm)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    warm = [s for s in soak.samples if s.episode >= args.warmup]
    first, last = (warm[0], warm[-1]) if warm else (None, None)
    growth = soak.rss_growth_per_100(args.warmup)
    fds, threads = soak.spread("fds", args.warmup), soak.spread("threads", args.warmup)
    fd_growth, thread_growth = soak.growth("fds", args.warmup), soak.growth("threads", args.warmup)
    most = max((s.folder_bytes for s in soak.samples), default=0)
    bound = soak.quota_bytes + soak.largest_episode
    rows = [
        ("episodes judged (success)", f"{soak.judged} ({soak.verdicts.get('success', 0)})",
         f"{args.episodes}", soak.judged == args.episodes),
        ("episodes per second", f"{soak.judged / soak.seconds:.2f}", "-", True),
        ("RSS after warm-up -> end (MB)",
         f"{first.rss_kb / 1024:.0f} -> {last.rss_kb / 1024:.0f}" if first and last else "-",
         "-", True),
        ("RSS growth per 100 episodes (MB, fit)", f"{growth:.2f}", "< 1", growth < 1.0),
        ("open fds after warm-up: min-max, growth", f"{fds[0]}-{fds[1]}, {fd_growth:+d}",
         "growth 0", fd_growth == 0),
        ("threads after warm-up: min-max, growth",
         f"{threads[0]}-{threads[1]}, {thread_growth:+d}", "growth 0", thread_growth == 0),
        ("recordings folder, largest sample (MB)", f"{most / 1e6:.2f}",
         f"<= quota {soak.quota_bytes / 1e6:.2f} + one episode", most <= bound),
        ("recordings indexed / rotated out / on disk",
         f"{soak.indexed} / {soak.deleted} / {soak.files}", "indexed = rotated + on disk",
         soak.indexed == soak.deleted + soak.files),
        ("SIGTERM during a motion -> exit (s)", f"{stop.seconds_to_exit:.2f}", "< 2",
         stop.seconds_to_exit < 2.0),
        ("  of which: -> the step's end (s)", f"{stop.seconds_to('step_end'):.2f}", "-", True),
        ("exit code", str(stop.exit_code), "143", stop.exit_code == 143),
        ("board's lines after the last motion", " ".join(stop.after_last_motion) or "-",
         "a stop (M410)", "M410" in stop.after_last_motion),
        ("arm moving after", str(stop.arm_moving_after), "False", stop.arm_moving_after is False),
        (f"LLM server ({stop.llm}) gone", str(stop.llm_gone), "True (local)",
         stop.llm_gone is not False),
    ]  # fmt: skip
    table = Table(title=f"onboard up: {args.episodes} looping episodes, then SIGTERM mid-motion")
    for name in ("figure", "measured", "limit", "ok"):
        table.add_column(name, justify="left" if name == "figure" else "right")
    for name, measured, limit, ok in rows:
        table.add_row(name, measured, limit, "yes" if ok else "NO")
    Console(width=150).print(table)
    path = write_results("soak", {
        "command": ["bench/soak.py", *sys.argv[1:]],
        "episodes": args.episodes,
        "warmup": args.warmup,
        "seconds": round(soak.seconds, 1),
        "rss_growth_mb_per_100": None if math.isnan(growth) else round(growth, 3),
        "figures": {name: {"measured": m, "limit": lim, "ok": ok} for name, m, lim, ok in rows},
        "samples": [s.__dict__ for s in soak.samples],
        "verdicts": soak.verdicts,
        "stop": {**{k: v for k, v in stop.__dict__.items() if k != "log_after"},
                 "seconds_to_step_end": stop.seconds_to("step_end")},
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": environment(),
    })  # fmt: skip
    print(f"wrote {path}")
    return 0 if all(ok for *_, ok in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
