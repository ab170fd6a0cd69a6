"""``onboard eval tidy``: the scene skill's goals, N trials each, judged from the twin's truth
(runtime/testing/tidy_eval.py); one table, and JSON with ``--json``."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import defaultdict

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from onboard import bundled
from onboard.base.errors import UsageError
from onboard.cli.endpoint import llm_endpoint
from onboard.cli.eval import STANDIN_NOTE
from onboard.config import RobotConfig
from onboard.hri.session import HttpAsk
from onboard.llm.client import ChatClient
from onboard.llm.local_server import MODEL_ALIAS
from onboard.loop.exitcodes import ExitCode
from onboard.loop.skill import Skill
from onboard.manip.session import SceneOptions
from onboard.testing.tidy_eval import TidyTrial, detector, run_tidy_trial
from onboard.testing.tidy_judge import load_tasks

__all__ = ["evaluate_tidy_command"]


def evaluate_tidy_command(robot: RobotConfig, skill: Skill, args: argparse.Namespace) -> int:
    if args.scenarios or args.no_action_text or args.no_second_stage:
        raise UsageError(f"{skill.name} is a scene skill: it has goals, not scenarios")
    tasks, jitter = load_tasks(bundled.skills_dir() / "tasks" / f"{skill.name}.toml")
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
    llm = "standin" if standin else ("local" if choice == "local" else url)
    successes = sum(t.success for runs in results.values() for t in runs)
    total = sum(len(runs) for runs in results.values())
    code = ExitCode.SUCCESS if successes == total else ExitCode.TASK_FAILED
    if args.json:
        print(json.dumps(_json(skill, llm, constrained, results, wall)))
        return code
    named = {"standin": f"stand-in ({STANDIN_NOTE})", "local": f"local {MODEL_ALIAS}"}
    decoding = "constrained" if constrained else "free"
    table = Table(title=f"{skill.name}: LLM {named.get(llm, llm)}, {decoding} decoding")
    for column in ("goal", "request", "success", "median steps", "replans", "fallbacks",
                   "median episode s", "a failure"):  # fmt: skip
        table.add_column(column)
    requests = {t.name: t.goal for t in tasks}
    for name, runs in results.items():
        failure = next((t for t in runs if not t.success), None)
        table.add_row(
            name,
            requests[name],
            f"{sum(t.success for t in runs)}/{len(runs)}",
            f"{statistics.median([len(t.actions) for t in runs]):g}",
            str(sum(t.replans for t in runs)),
            str(sum(t.fallbacks for t in runs)),
            f"{statistics.median([t.seconds for t in runs]):.1f}",
            "" if failure is None else f"{failure.reason}; {failure.end_reason}",
        )
    table.add_row("all", "", f"{successes}/{total} ({successes / total:.0%})", *[""] * 5)
    console = Console()
    console.print(table)
    console.print(f"{args.trials} trials per goal; {wall:.1f} s wall time", soft_wrap=True)
    return code


def _json(
    skill: Skill, llm: str, constrained: bool, results: dict[str, list[TidyTrial]], wall: float
) -> dict[str, object]:
    return {
        "skill": skill.name,
        "llm": llm,
        "decoding": "constrained" if constrained else "free",
        "wall_seconds": round(wall, 1),
        "goals": {
            name: {
                "successes": sum(t.success for t in runs),
                "trials": len(runs),
                "episodes": [t.__dict__ for t in runs],
            }
            for name, runs in results.items()
        },
    }
