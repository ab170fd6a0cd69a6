"""``onboard eval tidy``: the scene skill's goals, N trials each, judged from the twin's truth
(runtime/evaluation/tidy_eval.py). The robot's verdict (the episode finished with its end action
verified, or failed with a cause) stands beside the judge's: a table per goal, a confusion
table with false successes and false failures counted apart, and JSON with ``--json``."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from onboard import bundled
from onboard.base.errors import UsageError
from onboard.base.urls import public_url
from onboard.cli.endpoint import llm_endpoint
from onboard.cli.eval import STANDIN_NOTE
from onboard.config import RobotConfig
from onboard.evaluation.tidy_eval import TidyTrial, detector, run_tidy_trial
from onboard.evaluation.tidy_judge import TidyTask, load_tasks
from onboard.hri.session import HttpAsk
from onboard.llm.client import ChatClient
from onboard.llm.local_server import MODEL_ALIAS
from onboard.loop.exitcodes import ExitCode
from onboard.loop.skill import Skill
from onboard.manip.session import SceneOptions

__all__ = ["evaluate_tidy_command"]


def evaluate_tidy_command(robot: RobotConfig, skill: Skill, args: argparse.Namespace) -> int:
    if args.scenarios or args.no_action_text or args.no_second_stage:
        raise UsageError(f"{skill.name} is a scene skill: it has goals, not scenarios")
    goals = args.goals or bundled.skills_dir() / "tasks" / f"{skill.name}.toml"
    tasks, jitter = load_tasks(goals)
    seed = robot.eval.seed if args.seed is None else args.seed
    choice = args.llm or "standin"
    found_detector = detector()
    results: dict[str, list[TidyTrial]] = defaultdict(list)
    began = time.monotonic()
    with llm_endpoint(robot, choice) as (url, standin):
        latency = (
            args.latency
            if args.latency is not None
            else (robot.eval.standin_latency if standin else None)
        )
        constrained = robot.llm.decoding == "constrained"
        options = SceneOptions("virtual", constrained=constrained, latency=latency, limit=120.0)
        with (
            ChatClient(robot.llm, base_url=url) as client,
            Progress(console=Console(stderr=True), transient=True, disable=args.json) as bar,
        ):
            job = bar.add_task("episodes", total=len(tasks) * args.trials)
            for task in tasks:
                for trial in range(args.trials):
                    record = args.record / f"{task.name}-{trial}.jsonl" if args.record else None
                    ask = HttpAsk(client)
                    trial_result = run_tidy_trial(
                        robot,
                        skill,
                        task,
                        trial,
                        ask,
                        found_detector,
                        options,
                        jitter,
                        seed,
                        record,
                    )
                    results[task.name].append(trial_result)
                    bar.advance(job)
    wall = time.monotonic() - began
    llm = "standin" if standin else ("local" if choice == "local" else public_url(url))
    total = sum(len(runs) for runs in results.values())
    wrong = sum(t.finished != t.success for runs in results.values() for t in runs)
    code = ExitCode.SUCCESS if wrong == 0 else ExitCode.TASK_FAILED
    if args.json:
        print(json.dumps(_json(skill, llm, constrained, results, wall, goals)))
        return code
    named = {"standin": f"stand-in ({STANDIN_NOTE})", "local": f"local {MODEL_ALIAS}"}
    decoding = "constrained" if constrained else "free"
    title = f"{skill.name}: LLM {named.get(llm, llm)}, {decoding} decoding, goals {goals.name}"
    console = Console(width=None if sys.stdout.isatty() else 200)  # piped: the whole table
    console.print(_goal_table(tasks, results, title))
    console.print(_confusion_table(tasks, results))
    console.print(f"{args.trials} trials per goal, {total} episodes; {wall:.1f} s wall time",
                  soft_wrap=True)  # fmt: skip
    return code


def _goal_table(tasks: list[TidyTask], results: dict[str, list[TidyTrial]], title: str) -> Table:
    table = Table(title=title)
    for column in ("goal", "request", "robot: success", "judge: success", "false success",
                   "false failure", "median steps", "median episode s",
                   "the robot's cause of a failure"):  # fmt: skip
        table.add_column(column)
    for task in tasks:
        runs = results[task.name]
        failure = next((t for t in runs if not t.finished), None)
        table.add_row(
            task.name,
            task.goal,
            f"{sum(t.finished for t in runs)}/{len(runs)}",
            f"{sum(t.success for t in runs)}/{len(runs)}",
            *(str(n) for n in _tally(runs)[2:]),
            f"{statistics.median([len(t.actions) for t in runs]):g}",
            f"{statistics.median([t.seconds for t in runs]):.1f}",
            "" if failure is None else failure.end_reason,
        )
    return table


def _confusion_table(tasks: list[TidyTask], results: dict[str, list[TidyTrial]]) -> Table:
    """The robot's verdict against the judge's, per group of goals and in all."""
    table = Table(title="the robot's verdict against the judge's (the twin's truth)")
    for column in ("goals", "episodes", "both success", "both failure", "false success",
                   "false failure"):  # fmt: skip
        table.add_column(column, justify="left" if column == "goals" else "right")
    groups: dict[str, list[TidyTrial]] = defaultdict(list)
    for task in tasks:
        groups[task.kind] += results[task.name]
    groups["all"] = [t for runs in results.values() for t in runs]
    for group, runs in groups.items():
        table.add_row(group, str(len(runs)), *(str(n) for n in _tally(runs)))
    return table


def _tally(runs: list[TidyTrial]) -> tuple[int, int, int, int]:
    """Episodes where the robot (its finished verdict) and the judge (the twin's truth) say:
    both success, both failure, false success (robot only), false failure (judge only)."""
    return (
        sum(t.finished and t.success for t in runs),
        sum(not t.finished and not t.success for t in runs),
        sum(t.finished and not t.success for t in runs),
        sum(t.success and not t.finished for t in runs),
    )


def _json(
    skill: Skill,
    llm: str,
    constrained: bool,
    results: dict[str, list[TidyTrial]],
    wall: float,
    goals: Path,
) -> dict[str, object]:
    _, _, false_successes, false_failures = _tally([t for ts in results.values() for t in ts])
    return {
        "skill": skill.name,
        "goals_file": str(goals),
        "false_successes": false_successes,
        "false_failures": false_failures,
        "llm": llm,
        "decoding": "constrained" if constrained else "free",
        "wall_seconds": round(wall, 1),
        "goals": {
            name: {
                "robot_successes": sum(t.finished for t in trials),
                "judge_successes": sum(t.success for t in trials),
                "trials": len(trials),
                "episodes": [t.__dict__ for t in trials],
            }
            for name, trials in results.items()
        },
    }
