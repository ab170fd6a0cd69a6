"""Each code task's hand-written solution on N seeded variations: through the sandbox and the
robot API on the in-process twin, judged from the twin's truth (runtime/evaluation/code_judges.py).

Passes per task (the goal: 9 of 10 or better), and per run the robot's (twin's) and the wall
time; the failures with the judge's and the sandbox's reasons.

    .venv/bin/python bench/code_solutions.py [--trials 10] [--seed 0] [--task 4 ...]
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import asdict

from _common import ROOT, environment, write_results
from rich.console import Console
from rich.table import Table

from onboard.config import load_robot
from onboard.evaluation.code_tasks import load_code_tasks
from onboard.evaluation.code_trials import CodeTrial, run_trial
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task", type=int, action="append", help="only these task numbers")
    args = parser.parse_args()
    robot = load_robot(ROOT / "robot.toml")
    embedder, found_detector = Embedder(robot.embedder_dir), detector()
    console = Console()
    trials: list[CodeTrial] = []
    for task in load_code_tasks():
        if args.task and task.number not in args.task:
            continue
        for trial in range(args.trials):
            done = run_trial(robot, task, trial, args.seed, embedder, found_detector)
            trials.append(done)
            mark = "pass" if done.passed else f"FAIL {done.reason} | {done.ended} {done.message}"
            console.print(f"task {task.number} trial {trial}: {mark}", highlight=False)
    table = Table(
        title=f"hand-written solutions, {args.trials} seeded variations (seed {args.seed})"
    )
    for column in ("task", "passed", "robot s (median)", "wall s (median)", "failures"):
        table.add_column(column)
    rows = []
    for number in sorted({t.task for t in trials}):
        mine = [t for t in trials if t.task == number]
        passed = sum(t.passed for t in mine)
        failures = sorted(
            {f"{t.ended}: {t.message or t.reason}"[:90] for t in mine if not t.passed}
        )
        row = {
            "task": number,
            "name": mine[0].name,
            "passed": passed,
            "trials": len(mine),
            "robot_seconds_median": statistics.median(t.robot_seconds for t in mine),
            "wall_seconds_median": statistics.median(t.wall_seconds for t in mine),
        }
        rows.append(row)
        table.add_row(
            f"{number} {mine[0].name}",
            f"{passed}/{len(mine)}",
            f"{row['robot_seconds_median']:.1f}",
            f"{row['wall_seconds_median']:.1f}",
            "\n".join(failures),
        )
    console.print(table)
    path = write_results(
        "code_solutions",
        {
            "environment": environment(),
            "seed": args.seed,
            "tasks": rows,
            "trials": [asdict(t) for t in trials],
        },
    )
    console.print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
