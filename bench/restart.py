"""State that survives a restart (issue 32, item 3): ``onboard up`` killed with SIGKILL at
random points, at least 50 times, then held to its state database.

Each trial runs onboard.testing.crash's mission (engage, a tidy on the twin's arm, a step
that cannot start and is retried, engage) through real ``onboard up --once`` processes on the
virtual clock with the stand-in, kills 1 to 3 of its starts after the N-th JSON log line (N
from a seeded RNG), lets the last start finish, and checks that every attempt a kill left
running came back interrupted (never succeeded), that the mission resumed or aborted as its
``on_interrupt`` says (trials alternate), and that no mission, step or recording was lost or
counted twice. Trials run until ``--kills`` kills were made.

    python bench/restart.py [--kills 50] [--seed 0]

Prints a table and writes bench/results/restart.json.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

from onboard.testing.crash import robot_file, run_trial


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="kill -9s to make (at least)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    onboard = Path(sys.executable).with_name("onboard")
    rng = random.Random(args.seed)
    trials = []
    began = time.perf_counter()
    while sum(t.kills for t in trials) < args.kills:
        folder = Path(tempfile.mkdtemp(prefix="onboard-restart-"))
        try:
            robot = robot_file(ROOT / "robot.toml", folder)
            on_interrupt = ("resume", "abort")[len(trials) % 2]
            trial = run_trial(onboard, robot, folder, rng.randrange(2**32), rng.randint(1, 3),
                              on_interrupt)  # fmt: skip
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        trials.append(trial)
        problems = trial.lost + trial.duplicated + trial.wrong
        mark = "ok" if trial.ok else "FAIL " + "; ".join(problems)
        print(f"trial {len(trials)} ({on_interrupt}): {trial.kills} kills ("
              f"{', '.join(trial.kill_points)}), {trial.interrupted} interrupted, mission "
              f"{trial.mission}: "
              f"{mark}", flush=True)  # fmt: skip
    seconds = time.perf_counter() - began

    table = Table(title="onboard up killed with SIGKILL at random log lines")
    for name in ("on_interrupt", "trials", "starts", "kills", "after a clean stop",
                 "running at a kill", "interrupted", "done", "aborted", "recordings", "lost",
                 "duplicated", "wrong"):  # fmt: skip
        table.add_column(name, justify="right")
    rows = {}
    for mode in ("resume", "abort", "all"):
        some = [t for t in trials if mode in ("all", t.on_interrupt)]
        row = {
            "trials": len(some),
            "starts": sum(t.starts for t in some),
            "kills": sum(t.kills for t in some),
            "after_clean_stop": sum(t.after_clean_stop for t in some),
            "running_at_kill": sum(t.running_at_kill for t in some),
            "interrupted": sum(t.interrupted for t in some),
            "done": sum(t.mission == "done" for t in some),
            "aborted": sum(t.mission == "aborted" for t in some),
            "recordings": sum(t.recordings for t in some),
            "lost": sum(len(t.lost) for t in some),
            "duplicated": sum(len(t.duplicated) for t in some),
            "wrong": sum(len(t.wrong) for t in some),
        }
        rows[mode] = row
        table.add_row(mode, *(str(v) for v in row.values()))
    Console(width=150).print(table)
    path = write_results("restart", {
        "command": ["bench/restart.py", *sys.argv[1:]],
        "seed": args.seed,
        "seconds": round(seconds, 1),
        "totals": rows,
        "trials": [t.summary() for t in trials],
        "machine": environment(),
    })  # fmt: skip
    print(f"wrote {path} ({seconds:.0f} s)")
    return 0 if all(t.ok for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
