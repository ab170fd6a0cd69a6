"""``onboard task twin sort_cubes [--level L] [--method M --llm standin|local|URL]``: Sort
Cubes on the physics twin's three arms.

A plan runs on the twin's Pandas through SimArm behind each agent's SafeArm
(onboard.collab.twin_sort): with ``--method``, the joint actions that method's episode chose
(the team skill on the symbolic env, its LLM and critic, as ``onboard run team`` runs it),
step by step, with the oracle's plan (each agent the first useful action given the earlier
ones') as the reference row; without it, the oracle's alone. After every step the cubes'
panels, read back from physics by the judge of onboard.evaluation.sort_twin, are compared with
the symbolic env's. Exit 0 when the (method's) episode succeeds on the twin and the twin
agreed at every step, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onboard.base.errors import UsageError

if TYPE_CHECKING:
    from onboard.collab.evaluate import Episode
    from onboard.config import RobotConfig
    from onboard.evaluation.sort_twin import TwinEpisode

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
    q.add_argument(
        "--method",
        help="a team method (read_s, read_j, central_plan, ...): run the joint actions its "
        "episode chose; the oracle's plan is the reference row",
    )
    q.add_argument("--llm", default="standin", help="with --method: standin | control | local "
                   "| URL (default: the team stand-in)")  # fmt: skip
    q.add_argument("--competence", type=float, help="the stand-in's competence (default 0.6)")


def method_plan(
    robot: RobotConfig, args: argparse.Namespace, task_name: str, level: str, folder: Path
) -> tuple[list[dict[str, str]], int, Episode]:
    """The joint actions ``args.method``'s episode of ``level`` chose, step by step, the seed
    its environment was reset with, and its figures (the episode recorded in ``folder``)."""
    from onboard.cli.task import Endpoints, _settings
    from onboard.collab.evaluate import Cell, run_cells
    from onboard.loop.recorder import read_recording

    args.constrained, args.critics = False, None
    settings = _settings(args, 1, None)
    path = folder / f"{level}-{args.method}.jsonl"
    cell = Cell(task_name, level, args.method)
    with Endpoints(robot, settings) as llms:
        (episode,) = run_cells(robot, [cell], settings, llms, record=lambda cell, trial: path)
    joints = [dict(r["joint"]) for r in read_recording(path) if r["kind"] == "env_step"]
    return joints, episode.seed, episode


def twin_command(args: argparse.Namespace, robot: RobotConfig | None = None) -> int:
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
    if args.method is not None and robot is None:
        raise UsageError("--method needs a robot (robot.toml, or the bundled example)")
    ok = True
    with (
        tempfile.TemporaryDirectory(prefix="onboard-twin-") as scratch,
        Twin(SCENE) as twin,
        SortRig(twin, task) as rig,
    ):
        for level in levels:
            plans: list[tuple[str, list[dict[str, str]] | None, int, str]] = []
            seed = args.seed
            if args.method is not None:
                assert robot is not None
                joints, seed, chosen = method_plan(robot, args, args.task, level, Path(scratch))
                said = f"{chosen.llm}, NQ {chosen.queries}, vetoes {chosen.vetoes}"
                plans.append((args.method, joints, seed, said))
            plans.insert(0, ("oracle", None, seed, "the reference"))
            for name, plan, start_seed, said in plans:
                wall = time.perf_counter()
                env = SortCubes(task, level)
                env.starts = "held_out"  # as the method's evaluated episode drew its start
                episode = run_episode(rig, env, start_seed, plan=plan)
                wall = time.perf_counter() - wall
                passed = episode.success and episode.twin_success and episode.agreed
                if name != "oracle" or args.method is None:
                    ok &= passed
                _report(args, task.name, level, name, said, start_seed, episode, passed, wall)
    return ExitCode.SUCCESS if ok else ExitCode.TASK_FAILED


def _report(
    args: argparse.Namespace,
    task: str,
    level: str,
    plan: str,
    said: str,
    seed: int,
    episode: TwinEpisode,
    passed: bool,
    wall: float,
) -> None:
    if args.json:
        record = {
            "task": task,
            "level": level,
            "plan": plan,
            "seed": seed,
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
        return
    start = ", ".join(f"{c} on {p}" for c, p in episode.start.items())
    print(f"{task} {level} (seed {seed}), {plan}'s plan ({said}): {start}")
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
