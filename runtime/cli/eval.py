"""``onboard eval``: run scenarios N times on the virtual clock; print the seed's Tables III-VI.

Every episode decodes as robot.toml's ``[llm] decoding`` says, the stand-in's too: the tables
measure what the robot runs.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from onboard.base.errors import UsageError
from onboard.cli.endpoint import llm_endpoint
from onboard.config import RobotConfig
from onboard.hri.evaluate import (
    SEED_SCENARIOS,
    Trial,
    action_counts,
    evaluate,
    evaluation_exit_code,
)
from onboard.hri.scenario import Scenario, find_scenario, load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, load_robot_skill, make_mapper
from onboard.llm.client import ChatClient
from onboard.llm.local_server import MODEL_ALIAS
from onboard.loop.exitcodes import TABLE, ExitCode
from onboard.loop.skill import Skill

__all__ = ["STANDIN_NOTE", "evaluate_command"]

STANDIN_NOTE = "the stand-in's tables test the runtime, not a model"


def _tables(
    skill: Skill, results: dict[str, list[Trial]], ablation: bool, what: str, standin: bool
) -> tuple[Table, Table]:
    first, second = ("V", "VI") if ablation else ("III", "IV")
    suffix = " (without action text)" if ablation else ""
    success = Table(
        title=f"Table {first}: successes over trials{suffix}; {what}",
        caption=STANDIN_NOTE if standin else None,
    )
    success.add_column("scenario")
    success.add_column("success rate", justify="right")
    for name, runs in results.items():
        success.add_row(name, f"{sum(t.success for t in runs)} / {len(runs)}")
    counts = Table(title=f"Table {second}: average count of each action{suffix}")
    counts.add_column("action")
    averages = {name: action_counts(skill, runs) for name, runs in results.items()}
    for name in results:
        counts.add_column(name.removeprefix("person"), justify="right")
    for action in skill.actions:
        counts.add_row(action, *[f"{averages[n][action]:.1f}" for n in results])
    return success, counts


def evaluate_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    if args.trials < 1:
        raise UsageError(f"--trials {args.trials}: must be 1 or more")
    if args.latency is not None and not (math.isfinite(args.latency) and args.latency >= 0):
        raise UsageError(f"--latency {args.latency}: must be a finite number of seconds >= 0")
    skill = load_robot_skill(robot, args.skill)
    folder = robot.skills_dir / "scenarios"
    files = [find_scenario(f, folder) for f in args.scenarios or []] or [
        folder / f"{name}.toml" for name in SEED_SCENARIOS
    ]
    scenarios = [load_scenario(Path(f)) for f in files]
    mapper = make_mapper(robot, skill)
    if args.seed is not None:
        robot = robot.model_copy(update={"eval": robot.eval.model_copy(update={"seed": args.seed})})
    began = time.monotonic()
    choice = args.llm or "standin"
    with llm_endpoint(robot, choice) as (url, standin):
        latency = (
            args.latency
            if args.latency is not None
            else (robot.eval.standin_latency if standin else None)
        )
        options = EpisodeOptions(
            clock="virtual",
            action_text=not args.no_action_text,
            second_stage=not args.no_second_stage,
            constrained=robot.llm.decoding == "constrained",
            latency=latency,
            keep_candidates=False,
            handle_signals=True,
        )
        with ChatClient(robot.llm, base_url=url) as client:
            results = evaluate(robot, skill, scenarios, HttpAsk(client), mapper, args.trials,
                               options, args.record)  # fmt: skip
    wall = time.monotonic() - began
    code = evaluation_exit_code(results)
    decoding = "constrained" if options.constrained else "free"
    llm = "standin" if standin else ("local" if choice == "local" else url)
    if args.json:
        print(json.dumps(_json(skill, llm, options, results, scenarios, wall, code)))
        return code
    named = {"standin": "stand-in (a runtime test, not a model)", "local": f"local {MODEL_ALIAS}"}
    what = f"LLM {named.get(llm, llm)}, {decoding} decoding"
    tables = _tables(skill, results, args.no_action_text, what, standin)
    console = Console()
    if not console.is_terminal:  # to a file or a pipe (a README): no wrapping
        console = Console(width=max(console.width, *(_natural_width(t) for t in tables)))
    for table in tables:
        console.print(table)
    console.print(f"LLM: {'stand-in' if standin else url}; {decoding} decoding; second-stage "
                  f"questions {'on' if options.second_stage else 'off'}; {args.trials} trials "
                  f"per scenario; {wall:.1f} s wall time", soft_wrap=True)  # fmt: skip
    if code != ExitCode.SUCCESS:
        console.print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def _natural_width(table: Table) -> int:
    wide = Console(width=1000)
    return wide.measure(table).maximum


def _json(
    skill: Skill,
    llm: str,
    options: EpisodeOptions,
    results: dict[str, list[Trial]],
    scenarios: list[Scenario],
    wall: float,
    code: ExitCode,
) -> dict[str, Any]:
    return {
        "skill": skill.name,
        "exit_code": int(code),
        "llm": llm,
        **({"note": STANDIN_NOTE} if llm == "standin" else {}),
        "decoding": "constrained" if options.constrained else "free",
        "action_text": options.action_text,
        "second_stage": options.second_stage,
        "wall_seconds": round(wall, 2),
        "scenarios": [
            {
                "name": s.name,
                "successes": sum(t.success for t in results[s.name]),
                "action_counts": action_counts(skill, results[s.name]),
                "trials": [t.to_json() for t in results[s.name]],
            }
            for s in scenarios
            if s.name in results
        ],
    }
