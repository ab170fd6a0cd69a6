"""Replay against recording: an Engage evaluation's recordings replayed, every one, and the
time both took (issue 28, item 4: replaying a 40-trial Engage eval takes less than the eval).

The evaluation is `onboard eval engage --trials N --record DIR` on the shipped scenarios (the
stand-in, on the virtual clock, with the critic), timed from outside; each recording is then
replayed in this process with `onboard.cli.replay.replay_recording` (what `onboard replay`
runs), and the replayed action sequence compared with the recorded one.

    python bench/replay_speed.py [--trials 10] [--held-out]

Prints a table and writes bench/results/replay_speed.json.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

from onboard.cli.replay import replay_recording


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--held-out", action="store_true", help="the held-out scenarios too")
    args = parser.parse_args()
    onboard = Path(sys.executable).with_name("onboard")
    folder = Path(tempfile.mkdtemp(prefix="onboard-replay-speed-"))
    try:
        command = [str(onboard), "eval", "engage", "--trials", str(args.trials), "--record",
                   str(folder / "rec"), "--json"]  # fmt: skip
        if not args.held_out:
            command += [a for s in ("person-robot", "person-object", "person-environment",
                                    "person-person") for a in ("--scenario", s)]  # fmt: skip
        began = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
        eval_seconds = time.perf_counter() - began
        if done.returncode != 0:
            raise SystemExit(f"onboard eval: exit {done.returncode}\n{done.stderr[-2000:]}")
        recordings = sorted((folder / "rec").glob("*.jsonl"))
        began = time.perf_counter()
        same = 0
        for path in recordings:
            recorded, replayed = replay_recording(path)
            same += recorded == replayed
        replay_seconds = time.perf_counter() - began
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    table = Table(title="An Engage evaluation and the replay of its recordings")
    for name in ("recordings", "replay the recorded actions", "eval (s, a process)",
                 "replay all (s, in process)", "replay / eval"):  # fmt: skip
        table.add_column(name, justify="right")
    ratio = replay_seconds / eval_seconds
    table.add_row(str(len(recordings)), f"{same}/{len(recordings)}", f"{eval_seconds:.1f}",
                  f"{replay_seconds:.1f}", f"{ratio:.2f}")  # fmt: skip
    Console().print(table)
    path = write_results("replay_speed", {
        "command": ["bench/replay_speed.py", *sys.argv[1:]],
        "trials": args.trials,
        "recordings": len(recordings),
        "replays_reproducing": same,
        "eval_seconds": round(eval_seconds, 2),
        "replay_seconds": round(replay_seconds, 2),
        "replay_over_eval": round(ratio, 3),
        "machine": environment(),
    })  # fmt: skip
    print(f"wrote {path}")
    return 0 if same == len(recordings) else 1


if __name__ == "__main__":
    sys.exit(main())
