"""``onboard task run TASK`` (one team episode, recorded) and ``onboard task eval TASK|--all``
(SR / ES / NQ tables, the claim column, the seed's Table 1, the ablation, the controls, JSON
and the PNG).

The LLM (``--llm``): ``standin`` the team stand-in, ``control`` the stand-in that ignores all
feedback, ``local`` SmolLM2 under llama.cpp (constrained decoding), a URL, or ``random`` the
uniform proposer (a control, onboard.collab.controls).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onboard.base.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from onboard.collab.evaluate import Cell, EvalSettings
    from onboard.collab.report import Report
    from onboard.collab.taskfile import TeamTask
    from onboard.config import RobotConfig
    from onboard.llm.client import Completes

# the parsers are built for every onboard command: numpy, onnxruntime and the simulators are
# imported by the commands themselves

__all__ = ["add_parsers", "eval_cells", "eval_command", "evaluate", "run_command"]

LLM_HELP = "standin | control | local | random | URL (default: the team stand-in)"


def add_parsers(task: Any) -> None:
    """Add ``run`` and ``eval`` to the ``task`` sub-parsers (main wires the functions)."""
    q = task.add_parser(
        "run",
        help="run one episode of a multi-robot task, recorded; print its outcome",
        description="One episode of a task level by a method (ReAd-S by default when the task"
        " file's critic mode is sequential), recorded under the robot's recordings folder.",
    )
    q.add_argument("task", help="a task name in tasks/ (sweep_floor) or a task file")
    q.add_argument("--level", help="the task level (default: the task file's first)")
    q.add_argument("--method", help="a team method (default: read_s or read_j, by the task file)")
    _common(q)
    q.add_argument("--record", type=Path, help="the recording (default: recordings/...)")
    q.add_argument("--json", action="store_true", help="print the outcome as JSON")
    q = task.add_parser(
        "eval",
        help="SR / ES / NQ per task, level and method; --all: every task with the claim column",
        description="Run each task level and method --trials times and print SR, ES and NQ"
        " (mean and std) with vetoes, fallbacks and OOD flags; --all every task; --disturb the"
        " seed's Table 1; --ablation the single-step ablation; --controls the random critic,"
        " the random proposer and the stand-in that ignores feedback.",
    )
    q.add_argument("task", nargs="?", help="a task name in tasks/ or a task file")
    q.add_argument("--all", action="store_true", help="every shipped task")
    q.add_argument("--levels", nargs="+", help="levels (default: every level of the task)")
    q.add_argument(
        "--ends",
        action="store_true",
        help="only each task's easiest and hardest level (the task file's first and last)",
    )
    q.add_argument(
        "--methods",
        nargs="+",
        help="methods (default: every registered one but the ablation's and the disturbance's)",
    )
    q.add_argument("--trials", type=int, default=5, help="episodes per cell (default 5)")
    q.add_argument(
        "--first-trial",
        type=int,
        default=0,
        help="the first trial's index (default 0): --trials 1 --first-trial K runs trial K of"
        " a whole cell from the same environment seed, a long cell an episode at a time",
    )
    _common(q)
    q.add_argument(
        "--disturb",
        action="store_true",
        help="Table 1: reset at step n = 0..3 on Make Sandwich recipe3",
    )
    q.add_argument(
        "--ablation", action="store_true", help="the single-step ablation on Sweep Floor Y3_G3"
    )
    q.add_argument(
        "--controls",
        action="store_true",
        help="add the controls: ReAd with a random critic, a random proposer with the trained "
        "critic, and the stand-in that ignores all feedback (its refusals and history)",
    )
    q.add_argument("--json", type=Path, help="write the report as JSON here")
    q.add_argument("--png", type=Path, help="write the figure (SR / ES / NQ against level)")
    q.add_argument(
        "--markdown", type=Path, help="write the main table as Markdown (SR / ES / NQ means)"
    )
    q.add_argument("--recordings", type=Path, help="write every episode's recording here")


def _common(q: argparse.ArgumentParser) -> None:
    q.add_argument("--llm", default="standin", help=LLM_HELP)
    q.add_argument("--competence", type=float, help="the stand-in's competence (default 0.6)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--constrained", action="store_true", help="ask for constrained JSON")
    q.add_argument(
        "--critic",
        choices=["trained", "random"],
        default="trained",
        help="the ReAd methods' critic (random: a control of the same shape)",
    )
    q.add_argument(
        "--critics",
        type=Path,
        help="the folder the task files' critic paths are "
        "relative to (default: the shipped models)",
    )


def _settings(
    args: argparse.Namespace, trials: int, recordings: Path | None, first_trial: int = 0
) -> EvalSettings:
    from onboard.collab.evaluate import EvalSettings

    if args.competence is not None and not 0.0 <= args.competence <= 1.0:  # nan too
        raise UsageError(f"--competence {args.competence}: must be within 0 and 1")
    return EvalSettings(
        trials=trials,
        first_trial=first_trial,
        seed=args.seed,
        llm=args.llm,
        competence=args.competence,
        constrained=True if args.constrained else None,
        critics_root=args.critics,
        recordings=recordings,
    )


def run_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    import json

    from onboard.cli.run import keep_quota
    from onboard.collab.evaluate import Cell, run_cells
    from onboard.collab.taskfile import find_team_task
    from onboard.loop.exitcodes import TABLE, ExitCode

    task = find_team_task(args.task)
    level = args.level or next(iter(task.levels))
    name = args.method or ("read_s" if task.critic.mode == "sequential" else "read_j")
    cell = Cell(task.name if _is_shipped(args.task) else args.task, level, name, critic=args.critic)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.record or robot.recordings_dir / f"team-{task.name}-{level}-{name}-{stamp}.jsonl"
    keep_quota(robot, path)
    settings = _settings(args, 1, None)
    with Endpoints(robot, settings) as llms:
        (episode,) = run_cells(robot, [cell], settings, llms, record=lambda cell, trial: path)
    if args.json:
        print(json.dumps({**episode.to_json(), "recording": str(path)}, sort_keys=True))
    else:
        verdict = "succeeded" if episode.success else "did not succeed"
        print(
            f"{task.name} {level} by {name} ({episode.llm}): {verdict} in {episode.steps} "
            f"steps, NQ {episode.queries}, vetoes {episode.vetoes}, fallbacks "
            f"{episode.fallbacks}, OOD flags {episode.ood_flags}"
        )
        print(f"recorded: {path}")
    code = ExitCode.SUCCESS if episode.success else ExitCode.TASK_FAILED
    if not args.json:
        print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def _is_shipped(name: str) -> bool:
    return not (name.endswith(".toml") or Path(name).exists())


def eval_cells(args: argparse.Namespace, tasks: list[tuple[str, TeamTask]]) -> list[Cell]:
    """The cells the command line asks for, in order: the main table (unless only
    --disturb or --ablation is asked for without a task), its controls, the ablation, the
    disturbance."""
    from onboard.collab.evaluate import (
        ABLATION,
        ABLATION_LEVEL,
        ABLATION_TASK,
        DISTURB_LEVEL,
        DISTURB_METHODS,
        DISTURB_STEPS,
        DISTURB_TASK,
        READ_METHODS,
        Cell,
        default_methods,
    )
    from onboard.collab.methods import registered

    cells: list[Cell] = []
    methods = args.methods or default_methods()
    for ref, task in tasks:
        for level in args.levels or _levels(task, args.ends):
            task.level(level)
            cells += [Cell(ref, level, m, critic=args.critic) for m in methods]
            if args.controls:
                reads = [m for m in methods if m in READ_METHODS]
                cells += [Cell(ref, level, m, critic="random") for m in reads]
                cells += [Cell(ref, level, m, proposer="random") for m in reads]
                if args.llm != "control":  # the evaluation's own LLM ignores feedback already
                    cells += [Cell(ref, level, m, proposer="control") for m in reads]
    if args.ablation:
        have = set(cells)
        cells += [
            c
            for m in ABLATION
            if (c := Cell(ABLATION_TASK, ABLATION_LEVEL, m, critic=args.critic)) not in have
        ]
    if args.disturb:
        cells += [
            Cell(DISTURB_TASK, DISTURB_LEVEL, m, disturb_at=n, critic=args.critic)
            for m in DISTURB_METHODS
            if m in registered()
            for n in DISTURB_STEPS
        ]
    return cells


def _levels(task: TeamTask, ends: bool) -> list[str]:
    levels = list(task.levels)  # a task file lists its levels from easiest to hardest
    return list(dict.fromkeys([levels[0], levels[-1]])) if ends else levels


def evaluate(robot: RobotConfig, args: argparse.Namespace, quiet: bool = False) -> Report:
    """Run what ``args`` asks for and return the report (the CLI's function, for tests)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from onboard.collab.evaluate import run_cells
    from onboard.collab.methods import registered
    from onboard.collab.report import Report
    from onboard.collab.taskfile import find_team_task, shipped_tasks_dir, team_task_files

    if args.all and args.task:
        raise UsageError("give a task or --all, not both")
    refs: list[str] = []
    if args.all:
        refs = [p.stem for p in team_task_files(shipped_tasks_dir())]
    elif args.task:
        refs = [args.task]
    elif not (args.disturb or args.ablation):
        raise UsageError("give a task, or --all (or --disturb / --ablation alone)")
    tasks = [(ref, find_team_task(ref)) for ref in refs]
    if args.levels and len(tasks) != 1:
        raise UsageError("--levels goes with one task")
    if args.levels and args.ends:
        raise UsageError("give --levels or --ends, not both")
    cells = eval_cells(args, tasks)
    settings = _settings(args, args.trials, args.recordings, args.first_trial)
    total = len(cells) * settings.trials
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        progress = stack.enter_context(
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                transient=True,
                disable=quiet,
            )
        )
        bar = progress.add_task("team eval", total=total)
        llms = stack.enter_context(Endpoints(robot, settings))
        episodes = run_cells(
            robot,
            cells,
            settings,
            llms,
            progress=lambda cell, done: progress.update(
                bar, completed=done, description=cell.label
            ),
        )
    levels = {task.name: list(task.levels) for _, task in tasks}
    for name in dict.fromkeys(e.task for e in episodes):
        if name not in levels:  # the ablation's and the disturbance's shipped tasks
            levels[name] = list(find_team_task(name).levels)
    shown = {
        k: (str(v) if isinstance(v, Path) else v)
        for k, v in vars(settings).items()
        if k not in ("recordings", "critics_root")
    }
    shown["cells"] = len(cells)
    return Report(
        shown,
        episodes,
        levels,
        list(registered()),
        {"seconds": round(time.perf_counter() - began, 3)},
    )


def eval_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    from rich.console import Console

    from onboard.collab.report import figure_png

    report = evaluate(robot, args)
    console = Console()
    report.print(console, disturbance=args.disturb)
    if args.json is not None:
        args.json.write_text(report.to_json() + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    if args.png is not None:
        args.png.write_bytes(figure_png(report.summaries, report.levels))
        print(f"wrote {args.png}")
    if args.markdown is not None:
        args.markdown.write_text(report.markdown(), encoding="utf-8")
        print(f"wrote {args.markdown}")
    seconds = report.timing.get("seconds", 0.0)
    print(f"{len(report.episodes)} episodes in {seconds:.1f} s", file=sys.stderr)
    return 0


class Endpoints:
    """The LLM of each cell (``run_cells``' ``llms``): one stand-in per cell, seeded by its
    task level so a cell's figures do not depend on which other cells ran; one local server
    or URL for the whole evaluation, shared; the random proposer per cell. A ``with`` block
    stops whatever it started."""

    def __init__(self, robot: RobotConfig, settings: EvalSettings) -> None:
        self.robot, self.settings = robot, settings
        self.stack = contextlib.ExitStack()
        self.shared: Any = None

    def __enter__(self) -> Endpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    @contextlib.contextmanager
    def open(self, cell: Cell, task: str) -> Iterator[tuple[Completes, str, bool]]:
        from onboard.cli.team_endpoint import team_endpoint
        from onboard.collab.evaluate import llm_seed
        from onboard.testing.team_standin.random_proposer import RandomProposer

        s = self.settings
        seed = llm_seed(s.seed, task, cell.level)
        choice = cell.proposer or s.llm
        if choice == "random":
            yield RandomProposer(seed), "random", bool(s.constrained)
        elif choice in ("standin", "control"):
            with team_endpoint(
                self.robot, choice, competence=s.competence, seed=seed, constrained=s.constrained
            ) as endpoint:
                yield endpoint.client, endpoint.label, endpoint.constrained
        else:
            if self.shared is None:
                self.shared = self.stack.enter_context(
                    team_endpoint(self.robot, choice, seed=s.seed, constrained=s.constrained)
                )
            yield self.shared.client, self.shared.label, self.shared.constrained
