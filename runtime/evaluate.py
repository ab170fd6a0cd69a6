"""``onboard eval``: run scenarios N times on the virtual clock; the seed's Tables III-VI."""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from runtime.commands import llm_endpoint
from runtime.config import RobotConfig
from runtime.engine import Ask
from runtime.exitcodes import TABLE, ExitCode
from runtime.llm import ChatClient
from runtime.mapping import ActionMapper
from runtime.recorder import MemoryRecorder, Recorder
from runtime.scenario import Scenario, load_scenario
from runtime.session import (
    EpisodeOptions,
    HttpAsk,
    episode_exit_code,
    judge,
    load_robot_skill,
    make_mapper,
    run_episode,
)
from runtime.skill import Skill

__all__ = ["Trial", "evaluate", "evaluate_command"]

SEED_SCENARIOS = ("person-robot", "person-object", "person-environment", "person-person")


@dataclass(frozen=True)
class Trial:
    success: bool
    reason: str
    actions: list[tuple[float, str]]
    phrase: str | None
    code: ExitCode = ExitCode.SUCCESS

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "reason": self.reason,
            "actions": [{"t": round(t, 3), "action": a} for t, a in self.actions],
            "phrase": self.phrase,
        }


def evaluate(
    robot: RobotConfig,
    skill: Skill,
    scenarios: list[Scenario],
    ask: Ask,
    mapper: ActionMapper,
    trials: int,
    options: EpisodeOptions,
    record_dir: Path | None = None,
) -> dict[str, list[Trial]]:
    """Every scenario ``trials`` times; a stop signal ends the evaluation after its episode."""
    results: dict[str, list[Trial]] = {}
    for scenario in scenarios:
        runs = results.setdefault(scenario.name, [])
        for index in range(trials):
            path = record_dir / f"{scenario.name}-{index:02d}.jsonl" if record_dir else None
            with Recorder(path) if path else MemoryRecorder() as recorder:
                outcome = run_episode(robot, skill, scenario, ask, mapper, recorder, options)
            success, reason = judge(outcome, scenario)
            code = episode_exit_code(outcome, success)
            runs.append(Trial(success, reason, list(outcome.actions), outcome.phrase, code))
            if outcome.signal is not None:
                return results
    return results


def evaluation_exit_code(results: dict[str, list[Trial]]) -> ExitCode:
    """Stopped by a signal, else LLM unreachable or incomplete if any episode was, else 0.

    Failed tasks are what the tables count, so they do not fail the evaluation.
    """
    codes = [t.code for runs in results.values() for t in runs]
    for worst in (ExitCode.SIGINT, ExitCode.SIGTERM, ExitCode.LLM_UNREACHABLE, ExitCode.INCOMPLETE):
        if worst in codes:
            return worst
    return ExitCode.SUCCESS


def action_counts(skill: Skill, runs: list[Trial]) -> dict[str, float]:
    counts: Counter[str] = Counter(a for trial in runs for _, a in trial.actions)
    return {name: counts[name] / max(1, len(runs)) for name in skill.actions}


def _tables(skill: Skill, results: dict[str, list[Trial]], ablation: bool) -> tuple[Table, Table]:
    first, second = ("V", "VI") if ablation else ("III", "IV")
    suffix = " (without action text)" if ablation else ""
    success = Table(title=f"Table {first}: successes over trials{suffix}")
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
    skill = load_robot_skill(robot, args.skill)
    files = args.scenarios or [
        robot.skills_dir / "scenarios" / f"{name}.toml" for name in SEED_SCENARIOS
    ]
    scenarios = [load_scenario(Path(f)) for f in files]
    mapper = make_mapper(robot, skill)
    if args.seed is not None:
        robot = robot.model_copy(update={"eval": robot.eval.model_copy(update={"seed": args.seed})})
    began = time.monotonic()
    with llm_endpoint(robot, args.llm or "standin") as (url, standin):
        latency = (
            args.latency
            if args.latency is not None
            else (robot.eval.standin_latency if standin else None)
        )
        options = EpisodeOptions(
            clock="virtual",
            action_text=not args.no_action_text,
            second_stage=not args.no_second_stage,
            constrained=robot.llm.decoding == "constrained" and not standin,
            latency=latency,
            keep_candidates=False,
            handle_signals=True,
        )
        with ChatClient(robot.llm, base_url=url) as client:
            results = evaluate(robot, skill, scenarios, HttpAsk(client), mapper, args.trials,
                               options, args.record)  # fmt: skip
    wall = time.monotonic() - began
    code = evaluation_exit_code(results)
    if args.json:
        print(json.dumps(_json(skill, url, standin, options, results, scenarios, wall, code)))
        return code
    console = Console()
    for table in _tables(skill, results, ablation=args.no_action_text):
        console.print(table)
    what = "stand-in" if standin else url
    console.print(f"LLM: {what}; second-stage questions {'on' if options.second_stage else 'off'}; "
                  f"{args.trials} trials per scenario; {wall:.1f} s wall time")  # fmt: skip
    if code != ExitCode.SUCCESS:
        console.print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def _json(
    skill: Skill,
    url: str,
    standin: bool,
    options: EpisodeOptions,
    results: dict[str, list[Trial]],
    scenarios: list[Scenario],
    wall: float,
    code: ExitCode,
) -> dict[str, Any]:
    return {
        "skill": skill.name,
        "exit_code": int(code),
        "llm": "standin" if standin else url,
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
