"""``onboard eval``: run scenarios N times on the virtual clock; print the seed's Tables III-VI.

Every episode decodes as robot.toml's ``[llm] decoding`` says, the stand-in's too: the tables
measure what the robot runs. Table III tells the failures apart (the judge's kinds), per
scenario and per group (the seed's four ``shipped`` scenarios, the ``held-out`` ones).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape as markup_escape
from rich.table import Table

from onboard.base.errors import UsageError
from onboard.base.terminal import shown
from onboard.base.urls import public_url
from onboard.cli.endpoint import llm_endpoint
from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.evaluate import (
    Trial,
    action_counts,
    default_scenarios,
    evaluate,
    evaluation_exit_code,
    kind_counts,
    per_episode,
    ready_unspoken,
    scenario_group,
)
from onboard.hri.scenario import Scenario, find_scenario, load_scenario
from onboard.hri.session import (
    EpisodeOptions,
    HttpAsk,
    JudgementKind,
    load_robot_skill,
    make_mapper,
)
from onboard.llm.client import ChatClient
from onboard.llm.local_server import MODEL_ALIAS
from onboard.loop.exitcodes import TABLE, ExitCode
from onboard.loop.skill import Skill

__all__ = ["STANDIN_NOTE", "evaluate_command"]

STANDIN_NOTE = "the stand-in's tables test the runtime, not a model"

#: Table III's column per failure kind (success is the "success rate" column)
FAILURE_COLUMNS: dict[JudgementKind, str] = {
    JudgementKind.SPOKE_NOT_READY: "spoke while\nnot ready",
    JudgementKind.SPOKE_OUT_OF_SIGHT: "spoke out\nof sight",
    JudgementKind.NEVER_SPOKE: "never\nspoke",
    JudgementKind.STOPPED: "stopped before\nspeaking",
    JudgementKind.SPOKE_UNLABELLED: "spoke\nunlabelled",
}


def _by_group(
    results: dict[str, list[Trial]], groups: dict[str, str]
) -> dict[str, dict[str, list[Trial]]]:
    grouped: dict[str, dict[str, list[Trial]]] = {}
    for name, runs in results.items():
        grouped.setdefault(groups[name], {})[name] = runs
    return grouped


def _short(names: list[str]) -> dict[str, str]:
    """Column headers: what tells a group's scenarios apart ("person-robot" -> "-robot")."""
    if len(names) < 2:
        return {n: n for n in names}
    prefix = names[0]
    for name in names[1:]:
        while not name.startswith(prefix):
            prefix = prefix[:-1]
    cut = prefix.rfind("-")
    return {n: n[cut:] if cut > 0 and n[cut:] != "-" else n for n in names}


def _outcome_row(label: str, runs: list[Trial]) -> list[str]:
    counts = kind_counts(runs)
    each = per_episode(runs)
    return (
        [label, f"{counts[JudgementKind.SUCCESS]} / {len(runs)}"]
        + [str(counts[kind]) for kind in FAILURE_COLUMNS]
        + [str(ready_unspoken(runs)), f"{each['vetoes']:.1f}", f"{each['fallbacks']:.1f}"]
    )


def _tables(
    skill: Skill,
    grouped: dict[str, dict[str, list[Trial]]],
    ablation: bool,
    what: str,
    standin: bool,
) -> list[Table]:
    first, second = ("V", "VI") if ablation else ("III", "IV")
    suffix = " (without action text)" if ablation else ""
    # scenario names come from files: no escape sequence, no rich markup reaches the terminal
    grouped = {
        group: {markup_escape(shown(name)): runs for name, runs in results.items()}
        for group, results in grouped.items()
    }
    outcomes = Table(
        title=f"Table {first}: outcomes over trials{suffix}; {what}",
        caption=STANDIN_NOTE if standin else None,
    )
    outcomes.add_column("scenario")
    outcomes.add_column("success rate", justify="right")
    for header in FAILURE_COLUMNS.values():
        outcomes.add_column(header, justify="right")
    outcomes.add_column("ready, never\nspoken to", justify="right")
    outcomes.add_column("critic vetoes\n/ episode", justify="right")
    outcomes.add_column("fallbacks\n/ episode", justify="right")
    for group, results in grouped.items():
        for name, runs in results.items():
            outcomes.add_row(*_outcome_row(name, runs))
        every = [t for runs in results.values() for t in runs]
        outcomes.add_row(*_outcome_row(f"{group} total", every), style="bold", end_section=True)
    tables = [outcomes]
    for group, results in grouped.items():
        counts = Table(title=f"Table {second}: average count of each action{suffix}; {group}")
        counts.add_column("action")
        averages = {name: action_counts(skill, runs) for name, runs in results.items()}
        headers = _short(list(results))
        for name in results:
            counts.add_column(headers[name], justify="right")
        for action in skill.actions:
            counts.add_row(action, *[f"{averages[n][action]:.1f}" for n in results])
        tables.append(counts)
    return tables


def _evaluate_code(robot: RobotConfig, args: argparse.Namespace) -> int:
    """``onboard eval code``: the seven code tasks' tables, as ``onboard code eval --models M
    --trials N --disturbed N`` gives them (M: ``--llm``, default the stand-in)."""
    from onboard.cli.code_eval import eval_command
    from onboard.cli.main import _parser

    if args.scenarios or args.goals is not None:
        raise UsageError(
            "a code skill is evaluated on the seven code tasks: no --scenario, no --goals"
        )
    argv = ["code", "eval", "--trials", str(args.trials), "--disturbed", str(args.trials)]
    argv += ["--models", args.llm or "standin", "--local-trials", str(args.trials)]
    if args.record is not None:
        argv += ["--recordings", str(args.record)]
    if args.json:
        argv.append("--json")
    return eval_command(robot, _parser().parse_args(argv))


def _evaluate_team(robot: RobotConfig, args: argparse.Namespace) -> int:
    """``onboard eval team --task T``: ``onboard task eval T --trials N`` (``--level`` and
    ``--method`` narrow it to one cell row or column; without --task, every shipped task)."""
    from onboard.cli.main import _parser
    from onboard.cli.task import eval_command

    if args.scenarios or args.goals is not None:
        raise UsageError("a team skill is evaluated on task levels: no --scenario, no --goals")
    argv = ["task", "eval", *([args.task] if args.task else ["--all"])]
    argv += ["--trials", str(args.trials)]
    for flag, value in (("--levels", args.level), ("--methods", args.method),
                        ("--llm", args.llm), ("--seed", args.seed),
                        ("--recordings", args.record)):  # fmt: skip
        if value is not None:
            argv += [flag, str(value)]
    return eval_command(robot, _parser().parse_args(argv))


def evaluate_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    if args.trials < 1:
        raise UsageError(f"--trials {args.trials}: must be 1 or more")
    if args.latency is not None and not (math.isfinite(args.latency) and args.latency >= 0):
        raise UsageError(f"--latency {args.latency}: must be a finite number of seconds >= 0")
    skill = with_critic(load_robot_skill(robot, args.skill), args.critic)
    if skill.kind == "code":
        return _evaluate_code(robot, args)
    if skill.kind == "team":
        return _evaluate_team(robot, args)
    if args.task or args.level or args.method:
        raise UsageError(f"{skill.name} is not a team skill: --task, --level and --method are "
                         "for team skills")  # fmt: skip
    if skill.kind == "scene":
        from onboard.cli.eval_tidy import evaluate_tidy_command

        return evaluate_tidy_command(robot, skill, args)
    if args.goals is not None:
        raise UsageError(f"{skill.name} is a person skill: it has scenarios, not goals")
    folder = robot.skills_dir / "scenarios"
    files = [find_scenario(f, folder) for f in args.scenarios or []] or default_scenarios(folder)
    scenarios = [load_scenario(Path(f)) for f in files]
    groups = {
        s.name: scenario_group(Path(f), folder) for s, f in zip(scenarios, files, strict=True)
    }
    mapper = make_mapper(robot, skill)
    if args.seed is not None:
        robot = robot.model_copy(update={"eval": robot.eval.model_copy(update={"seed": args.seed})})
    began = time.monotonic()
    choice = args.llm or "standin"
    if choice == "random":
        return _evaluate_random(robot, skill, scenarios, groups, mapper, args, began)
    with llm_endpoint(robot, choice) as (url, standin):
        latency = (
            args.latency
            if args.latency is not None
            else (robot.eval.standin_latency if standin else None)
        )
        options = _eval_options(args, robot.llm.decoding == "constrained", latency)
        with ChatClient(robot.llm, base_url=url) as client:
            results = evaluate(robot, skill, scenarios, HttpAsk(client), mapper, args.trials,
                               options, args.record)  # fmt: skip
    llm = "standin" if standin else ("local" if choice == "local" else public_url(url))
    return _report(skill, llm, options, results, groups, scenarios, args, began)


def _eval_options(
    args: argparse.Namespace, constrained: bool, latency: float | None
) -> EpisodeOptions:
    """Every evaluation's episodes: the virtual clock, the ablation flags, nothing kept."""
    return EpisodeOptions(
        clock="virtual",
        action_text=not args.no_action_text,
        second_stage=not args.no_second_stage,
        constrained=constrained,
        latency=latency,
        keep_candidates=False,
        handle_signals=True,
    )


def with_critic(skill: Skill, choice: str | None) -> Skill:
    """``--critic``: the skill's own ``[critic]`` (None), none, or another model file."""
    if choice is None:
        return skill
    if choice == "none":
        return dataclasses.replace(skill, critic=None)
    if skill.critic is None:
        raise UsageError(f"--critic {choice}: {skill.path} has no [critic] (its WAIT action)")
    path = Path(choice).resolve()
    alone = {"model": str(path), "members": []}  # another model, judged alone
    return dataclasses.replace(skill, critic=skill.critic.model_copy(update=alone))


def _evaluate_random(
    robot: RobotConfig,
    skill: Skill,
    scenarios: list[Scenario],
    groups: dict[str, str],
    mapper: ActionMapper,
    args: argparse.Namespace,
    began: float,
) -> int:
    """``--llm random``: the random proposer (a control: no planner behind the critic)."""
    from onboard.testing.random_ask import RandomAsk

    if robot.llm.decoding != "constrained":
        raise UsageError('--llm random chooses within the JSON schema: it needs [llm] decoding'
                         ' = "constrained"')  # fmt: skip
    latency = args.latency if args.latency is not None else robot.eval.standin_latency
    options = _eval_options(args, True, latency)
    ask = RandomAsk(robot.eval.seed)
    results = evaluate(robot, skill, scenarios, ask, mapper, args.trials, options, args.record)
    return _report(skill, "random", options, results, groups, scenarios, args, began)


def _report(
    skill: Skill,
    llm: str,
    options: EpisodeOptions,
    results: dict[str, list[Trial]],
    groups: dict[str, str],
    scenarios: list[Scenario],
    args: argparse.Namespace,
    began: float,
) -> int:
    wall = time.monotonic() - began
    standin = llm == "standin"
    code = evaluation_exit_code(results)
    grouped = _by_group(results, groups)
    decoding = "constrained" if options.constrained else "free"
    critic = f"; critic {skill.critic.model}" if skill.critic is not None else "; no critic"
    if args.json:
        print(json.dumps(_json(skill, llm, options, grouped, scenarios, wall, code)))
        return code
    named = {"standin": "stand-in (a runtime test, not a model)", "local": f"local {MODEL_ALIAS}",
             "random": "random proposer (a control)"}  # fmt: skip
    what = f"LLM {named.get(llm, llm)}, {decoding} decoding{critic}"
    tables = _tables(skill, grouped, args.no_action_text, what, standin)
    console = Console()
    if not console.is_terminal:  # to a file or a pipe (a README): no wrapping
        console = Console(width=max(console.width, *(_natural_width(t) for t in tables)))
    for table in tables:
        console.print(table)
    console.print(f"LLM: {named.get(llm, llm)}; {decoding} decoding{critic}; second-stage "
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
    grouped: dict[str, dict[str, list[Trial]]],
    scenarios: list[Scenario],
    wall: float,
    code: ExitCode,
) -> dict[str, Any]:
    group_of = {name: group for group, results in grouped.items() for name in results}
    results = {name: runs for group in grouped.values() for name, runs in group.items()}
    totals = {}
    for group, members in grouped.items():
        every = [t for runs in members.values() for t in runs]
        totals[group] = {
            "scenarios": list(members),
            "trials": len(every),
            "successes": sum(t.success for t in every),
            "kinds": kind_counts(every),
            "ready_never_spoken_to": ready_unspoken(every),
            "per_episode": per_episode(every),
        }
    return {
        "skill": skill.name,
        "exit_code": int(code),
        "llm": llm,
        **({"note": STANDIN_NOTE} if llm == "standin" else {}),
        "decoding": "constrained" if options.constrained else "free",
        "critic": None if skill.critic is None else skill.critic.model_dump(),
        "action_text": options.action_text,
        "second_stage": options.second_stage,
        "wall_seconds": round(wall, 2),
        "groups": totals,
        "scenarios": [
            {
                "name": s.name,
                "group": group_of[s.name],
                "successes": sum(t.success for t in results[s.name]),
                "kinds": kind_counts(results[s.name]),
                "ready_never_spoken_to": ready_unspoken(results[s.name]),
                "per_episode": per_episode(results[s.name]),
                "action_counts": action_counts(skill, results[s.name]),
                "trials": [t.to_json() for t in results[s.name]],
            }
            for s in scenarios
            if s.name in results
        ],
    }
