"""Sort Cubes on the twin's three arms: every level, a few seeds, the oracle's plan run on
the arms (SimArm behind each agent's SafeArm) and judged from physics after every step.

    .venv/bin/python bench/twin_sort.py [--seeds N | --every-start]

Per episode: the start's distance, the steps, whether the symbolic env and the twin both end
with every cube on target, whether the twin agreed with the symbolic state after every step,
and the simulated and wall seconds. Results: bench/results/twin_sort.json.
"""

from __future__ import annotations

import argparse
import time

from _common import environment, write_results
from rich.console import Console
from rich.table import Table

from onboard.collab.envs.sort import SortCubes
from onboard.collab.taskfile import SortLevel, find_team_task, sort_distance, sort_starts
from onboard.collab.twin_sort import SCENE, SortRig
from onboard.drivers.twin import Twin
from onboard.evaluation.sort_twin import run_episode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="episodes per level (default 3)")
    parser.add_argument(
        "--every-start", action="store_true", help="one episode from each start of each level"
    )
    args = parser.parse_args()
    task = find_team_task("sort_cubes")
    table = Table(title="Sort Cubes on three twin arms (oracle plan)")
    columns = ["level", "start" if args.every_start else "seed", "distance", "steps"]
    for column in [*columns, "success", "twin agreed", "sim s", "wall s"]:
        table.add_column(column, justify="right")
    episodes = []
    with Twin(SCENE) as twin, SortRig(twin, task) as rig:
        for level, settings in task.levels.items():
            assert isinstance(settings, SortLevel)
            starts: list[dict[str, str] | None] = (
                list(sort_starts(*settings.distance)) if args.every_start else [None] * args.seeds
            )
            for seed, start in enumerate(starts):
                wall = time.perf_counter()
                episode = run_episode(rig, SortCubes(task, level), seed, start)
                wall = time.perf_counter() - wall
                row = {
                    "level": level,
                    "seed": seed,
                    "distance": sort_distance(episode.start),
                    "steps": len(episode.steps),
                    "success": episode.success and episode.twin_success,
                    "agreed": episode.agreed,
                    "sim_seconds": episode.sim_seconds,
                    "wall_seconds": wall,
                }
                episodes.append(row)
                table.add_row(
                    level,
                    str(seed),
                    str(row["distance"]),
                    str(row["steps"]),
                    "yes" if row["success"] else "NO",
                    "yes" if row["agreed"] else "NO",
                    f"{episode.sim_seconds:.1f}",
                    f"{wall:.1f}",
                )
    Console().print(table)
    passed = sum(bool(e["success"]) and bool(e["agreed"]) for e in episodes)
    print(f"{passed}/{len(episodes)} episodes ended on target with the twin agreeing at every step")
    name = "twin_sort_every_start" if args.every_start else "twin_sort"
    path = write_results(name, {"environment": environment(), "episodes": episodes})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
