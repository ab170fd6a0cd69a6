"""SmolLM2 on the team tasks (issue 14): Central Plan, ReAd-J and ReAd-S at each task's easiest
and hardest level, 5 episodes a cell, an episode at a time, kept between sessions.

    python bench/team_smollm2.py            # run the episodes not yet measured, then the table
    python bench/team_smollm2.py --max 2    # at most two episodes, then the table
    python bench/team_smollm2.py --table    # the table only
    python bench/team_smollm2.py --recordings DIR   # and record each cell's episodes in DIR

A ReAd cell can take hours on a 2-core machine (every re-ask is a local-model call), more than
one session has. So a cell is measured an episode at a time, each episode one run of the
documented command::

    onboard task eval TASK --levels LEVEL --methods METHOD --llm local --trials 1 \
        --first-trial K --json F

(trial K of the cell, from the environment seed a whole ``--trials 5`` run gives it), and its
report is committed as ``bench/results/team-smollm2/TASK-LEVEL-METHOD/tK.json`` (the folder
is kept in git, unlike the other results). The cells measured before that are one file each,
``TASK-LEVEL-METHOD.json``, from one ``--trials 5`` run. An episode whose file exists is not
run again; stop the script at any time and only the episode under way is lost. The cells
run cheapest first: Sweep Floor, then Make Sandwich, then Sort Cubes; Central Plan, then
ReAd-J, then ReAd-S.

The table merges every cell's report: SR / ES / NQ (successes of 5, mean steps, mean requests)
per task, level and method, and per episode the critic's vetoes, failed proposals (unreadable
or infeasible) and fallbacks. It is printed, and written to ``team-smollm2.json`` and
``team-smollm2.md`` beside the folder.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _common import RESULTS, ROOT, environment
from rich.console import Console
from rich.table import Table

from onboard.collab.evaluate import Episode, Summary, summarize
from onboard.collab.report import Report
from onboard.collab.taskfile import find_team_task

CELLS_DIR = RESULTS / "team-smollm2"
TASKS = ("sweep_floor", "make_sandwich", "sort_cubes")  # cheapest first
METHODS = ("central_plan", "read_j", "read_s")
TRIALS = 5


def ends(task: str) -> list[str]:
    """The task file's easiest and hardest level (its levels are listed easiest first)."""
    levels = list(find_team_task(task).levels)
    return list(dict.fromkeys([levels[0], levels[-1]]))


def cells() -> list[tuple[str, str, str]]:
    return [(t, lv, m) for t in TASKS for m in METHODS for lv in ends(t)]


def cell_file(task: str, level: str, method: str) -> Path:
    """A cell measured in one run (the cells measured before the episode files)."""
    return CELLS_DIR / f"{task}-{level}-{method}.json"


def episode_file(task: str, level: str, method: str, trial: int) -> Path:
    return CELLS_DIR / f"{task}-{level}-{method}" / f"t{trial}.json"


def missing_trials(task: str, level: str, method: str) -> list[int]:
    if cell_file(task, level, method).is_file():
        return []
    return [k for k in range(TRIALS) if not episode_file(task, level, method, k).is_file()]


def run_episode(
    task: str, level: str, method: str, trial: int, console: Console, recordings: Path | None
) -> bool:
    """Trial ``trial`` of a cell through the CLI; its report is kept only when the run
    completes."""
    out = episode_file(task, level, method, trial)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_suffix(".partial")
    command = [
        str(Path(sys.executable).with_name("onboard")),
        "task", "eval", task, "--levels", level, "--methods", method, "--llm", "local",
        "--trials", "1", "--first-trial", str(trial), "--json", str(partial),
    ]  # fmt: skip
    if recordings is not None:  # request records show a long episode's progress as it runs
        command += ["--recordings", str(recordings / f"{task}-{level}-{method}")]
    console.print(f"[bold]{task} {level} {method} trial {trial}[/]: {' '.join(command[1:])}")
    began, measured_on = time.monotonic(), environment()  # the code the episode starts with
    done = subprocess.run(command, cwd=ROOT, check=False)
    if done.returncode != 0 or not partial.is_file():
        console.print(f"[red]{task} {level} {method} trial {trial}: exit {done.returncode}[/]")
        partial.unlink(missing_ok=True)
        return False
    report = json.loads(partial.read_text(encoding="utf-8"))
    report["timing"]["wall_s"] = round(time.monotonic() - began, 1)
    report["measured_on"] = measured_on
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    partial.unlink()
    return True


def load_episodes() -> list[Episode]:
    paths = sorted(CELLS_DIR.glob("*.json")) + sorted(CELLS_DIR.glob("*/t*.json"))
    episodes: list[Episode] = []
    for path in paths:
        episodes += Report.from_json(path.read_text(encoding="utf-8"), str(path)).episodes
    return episodes


def table(episodes: list[Episode], console: Console) -> dict[str, object]:
    found = {(s.task, s.level, s.method): s for s in summarize(episodes)}
    grid = Table(title="SmolLM2 on the team tasks: successes / ES / NQ, 5 episodes a cell")
    per_episode = Table(title="per episode: vetoes / failed proposals / fallbacks")
    for t in (grid, per_episode):
        t.add_column("task")
        t.add_column("level")
        for m in METHODS:
            t.add_column(m, justify="right")
    markdown = [
        "| task | level | " + " | ".join(f"{m} SR / ES / NQ" for m in METHODS) + " |",
        "|---|---|" + "---|" * len(METHODS),
    ]
    costs = [
        "| task | level | "
        + " | ".join(f"{m} vetoes / failed / fallbacks" for m in METHODS)
        + " |",
        "|---|---|" + "---|" * len(METHODS),
    ]
    rows = []
    for task in TASKS:
        for level in ends(task):
            cells_here = [found.get((task, level, m)) for m in METHODS]
            mine = {
                m: [e for e in episodes if (e.task, e.level, e.method) == (task, level, m)]
                for m in METHODS
            }
            figures = [_figures(s) for s in cells_here]
            spent = [_costs(mine[m]) for m in METHODS]
            grid.add_row(task, level, *figures)
            per_episode.add_row(task, level, *spent)
            markdown.append(f"| {task} | {level} | " + " | ".join(figures) + " |")
            costs.append(f"| {task} | {level} | " + " | ".join(spent) + " |")
            rows += [
                {"task": task, "level": level, "method": m, **s.to_json()}
                for m, s in zip(METHODS, cells_here, strict=True)
                if s is not None
            ]
    console.print(grid)
    console.print(per_episode)
    return {"rows": rows, "markdown": "\n".join(markdown) + "\n\n" + "\n".join(costs) + "\n"}


def _figures(s: Summary | None) -> str:
    if s is None:
        return "not yet"
    shown = f"{round(s.sr.mean * s.episodes)}/{s.episodes} / {s.es.mean:.1f} / {s.nq.mean:.0f}"
    return shown if s.episodes >= TRIALS else f"{shown} (so far)"


def _costs(episodes: list[Episode]) -> str:
    if not episodes:
        return "not yet"
    n = len(episodes)
    vetoes, failed, fallbacks = (
        sum(getattr(e, k) for e in episodes) / n for k in ("vetoes", "failed", "fallbacks")
    )
    return f"{vetoes:.1f} / {failed:.1f} / {fallbacks:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max", type=int, default=None, help="run at most this many episodes")
    parser.add_argument("--table", action="store_true", help="print the table, run nothing")
    parser.add_argument("--recordings", type=Path, default=None, help="record episodes here")
    args = parser.parse_args()
    console = Console(width=140)
    CELLS_DIR.mkdir(parents=True, exist_ok=True)
    if args.recordings is not None:  # a cell's recordings go in a new folder inside it
        args.recordings.mkdir(parents=True, exist_ok=True)
    if not args.table:
        missing = {c: missing_trials(*c) for c in cells()}
        todo = [(*c, k) for c, trials in missing.items() for k in trials]
        unmeasured = sum(bool(trials) for trials in missing.values())
        console.print(f"{unmeasured} of {len(cells())} cells not complete: {len(todo)} episodes")
        for task, level, method, trial in todo[: args.max]:
            run_episode(task, level, method, trial, console, args.recordings)
    results = table(load_episodes(), console)
    (RESULTS / "team-smollm2.json").write_text(
        json.dumps({"environment": environment(), **results}, indent=1) + "\n", encoding="utf-8"
    )
    (RESULTS / "team-smollm2.md").write_text(str(results["markdown"]), encoding="utf-8")
    console.print(f"wrote {(RESULTS / 'team-smollm2.md').relative_to(ROOT)}")


if __name__ == "__main__":
    main()
