"""``onboard task twin sort_cubes [--level L]``: Sort Cubes on the physics twin's three arms.

The oracle's plan (each agent the first useful action given the earlier ones') runs on the
twin's Pandas through SimArm behind each agent's SafeArm (onboard.collab.twin_sort); after
every step the cubes' panels, read back from physics by the judge of onboard.evaluation.sort_twin,
are compared with the symbolic env's.
Exit 0 when the episode succeeds and the twin agreed at every step, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from onboard.base.errors import UsageError

__all__ = ["add_parser", "twin_command"]

#: the tasks with a twin rig
TWIN_TASKS = ("sort_cubes",)


def add_parser(task: Any) -> None:
    """Add ``twin`` to the ``task`` sub-parsers (main wires the function)."""
    q = task.add_parser(
        "twin",
        help="run a team task's oracle plan on the physics twin's arms (sort_cubes)",
        description="Sort Cubes on three twin Pandas: the oracle's plan for each level, each"
        " agent's arm behind SafeArm limits that match its reach; the cubes' panels read back"
        " from physics after every step and compared with the symbolic state.",
    )
    q.add_argument("task", help="the task: " + ", ".join(TWIN_TASKS))
    q.add_argument("--level", nargs="+", help="levels (default: every level of the task)")
    q.add_argument("--seed", type=int, default=0, help="the start's seed (default 0)")
    q.add_argument("--json", action="store_true", help="print one JSON line per episode")


def twin_command(args: argparse.Namespace) -> int:
    from onboard.collab.envs.sort import SortCubes
    from onboard.collab.taskfile import find_team_task
    from onboard.collab.twin_sort import SCENE, SortRig
    from onboard.drivers.twin.world import Twin
    from onboard.evaluation.sort_twin import run_episode
    from onboard.loop.exitcodes import ExitCode

    task = find_team_task(args.task)
    if task.env not in TWIN_TASKS:
        raise UsageError(f"task {args.task!r}: the twin runs {', '.join(TWIN_TASKS)} only")
    levels = args.level or list(task.levels)
    unknown = [level for level in levels if level not in task.levels]
    if unknown:
        raise UsageError(f"no level {unknown[0]!r} (levels: {', '.join(task.levels)})")
    ok = True
    with Twin(SCENE) as twin, SortRig(twin, task) as rig:
        for level in levels:
            wall = time.perf_counter()
            episode = run_episode(rig, SortCubes(task, level), args.seed)
            wall = time.perf_counter() - wall
            passed = episode.success and episode.twin_success and episode.agreed
            ok &= passed
            if args.json:
                record = {
                    "task": task.name,
                    "level": level,
                    "seed": args.seed,
                    "start": episode.start,
                    "steps": [
                        {"executed": s.executed, "symbolic": s.symbolic, "twin": s.twin}
                        for s in episode.steps
                    ],
                    "success": episode.success,
                    "twin_success": episode.twin_success,
                    "agreed": episode.agreed,
                    "sim_seconds": round(episode.sim_seconds, 2),
                    "wall_seconds": round(wall, 2),
                }
                print(json.dumps(record, sort_keys=True))
                continue
            start = ", ".join(f"{c} on {p}" for c, p in episode.start.items())
            print(f"{task.name} {level} (seed {args.seed}): {start}")
            for i, s in enumerate(episode.steps, start=1):
                moves = "; ".join(f"{a}: {act}" for a, act in s.executed.items()) or "all WAIT"
                mark = "agrees" if s.agreed else f"DIFFERS: twin {s.twin}"
                print(f"  step {i}: {moves} -> {mark}")
            verdict = "succeeded" if passed else "did not succeed"
            print(
                f"  {verdict} in {len(episode.steps)} steps; the twin agreed with the symbolic "
                f"state: {'yes' if episode.agreed else 'no'} ({episode.sim_seconds:.1f} s "
                f"simulated, {wall:.1f} s wall)"
            )
    return ExitCode.SUCCESS if ok else ExitCode.TASK_FAILED
