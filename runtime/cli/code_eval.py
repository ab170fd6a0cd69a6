"""``onboard code do``: one ReplanVLM episode of a code task on the twin, recorded;
``onboard code eval``: the seven tasks per method and model, Tables II-V, JSON and a PNG.

The endpoint (``--llm``): ``standin`` (the stand-in VLM in its own process, planting the
seed's errors at ``--competence``), ``control`` (the stand-in planting none), ``local`` (the
bundled SmolLM2 on loopback: text-only, the scene as the detector's text), or an
OpenAI-compatible URL of a VLM.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from onboard.base.errors import UsageError

if TYPE_CHECKING:
    from onboard.config import RobotConfig
    from onboard.evaluation.code_eval import Method

__all__ = ["do_command", "eval_command", "vlm_endpoint"]

MODELS = ("standin", "control", "local")
#: the Decision Bot's token limit for the bundled SmolLM2 (``--llm local``)
LOCAL_TOKENS = 384
#: the methods of onboard.evaluation.code_eval.METHODS (a test keeps them equal), here so that
#: building the parser imports nothing heavy
METHOD_NAMES = ("full", "no_internal", "no_external", "no_both", "progprompt", "saycan")


@contextmanager
def vlm_endpoint(
    robot: RobotConfig, choice: str, competence: float, log: Path | None
) -> Iterator[tuple[RobotConfig, str, str]]:
    """``(robot, base_url, model label)`` for ``choice``; starts the server it names."""
    if choice in ("standin", "control"):
        from onboard.testing.vlm_standin import start_vlm_standin

        level = 1.0 if choice == "control" else competence
        with start_vlm_standin(robot.eval.seed, level, log) as url:
            yield robot, url, choice
    elif choice == "local":
        from onboard.llm.local_server import MODEL_ALIAS, local_server

        # a 135M model on the controller's CPU writes ~30 tokens/s: a short program fits in
        # LOCAL_TOKENS, and five cycles of 1536 would take minutes an episode
        decision = robot.code.decision.model_copy(update={"max_tokens": LOCAL_TOKENS})
        code = robot.code.model_copy(update={"decision": decision})
        llm = robot.llm.model_copy(update={"model": MODEL_ALIAS})
        with local_server() as url:
            yield robot.model_copy(update={"llm": llm, "code": code}), url, "smollm2"
    else:
        from onboard.base.urls import public_url
        from onboard.cli.endpoint import _check_url

        _check_url(choice)
        yield robot, choice.rstrip("/"), public_url(choice)


def _task(number: int):  # type: ignore[no-untyped-def]
    from onboard.evaluation.code_tasks import load_code_tasks

    tasks = {t.number: t for t in load_code_tasks()}
    if number not in tasks:
        raise UsageError(f"--task {number}: the code tasks are {', '.join(map(str, tasks))}")
    return tasks[number]


def do_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    """One episode of task ``--task`` by ``--method``; 0 when the judge passes it."""
    from onboard.evaluation.code_eval import METHODS, planted_log, recording_name, run_episode
    from onboard.evaluation.tidy_eval import detector
    from onboard.grounding.embedder import Embedder

    task = _task(args.task)
    method = _verdict(METHODS[args.method], args.seed_verdict)
    stamp = _stamp()
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "planted.jsonl"
        with vlm_endpoint(robot, args.llm, args.competence, log) as (robot, url, model):
            name = recording_name(task, method, model, args.trial)
            path = args.record or _in_recordings(robot, f"code-{stamp}") / name
            row = run_episode(
                robot, task, args.trial, robot.eval.seed, method, model, url,
                Embedder(robot.embedder_dir), detector(), path, planted_log(log), args.disturb,
            )  # fmt: skip
    if args.json:
        print(json.dumps(dataclasses.asdict(row)))
    else:
        verdict = "passed" if row.success else "failed"
        print(
            f"task {task.number} ({task.name}), {method.label}, {model}: {verdict} "
            f"({row.runs} run(s), {row.asks} request(s), {row.seconds:.1f} s)"
        )
    print(f"recorded: {path}")
    return 0 if row.success else 1


def eval_command(robot: RobotConfig, args: argparse.Namespace) -> int:
    """Every chosen task x method x model x trial; the tables, JSON, PNG."""
    from rich.progress import Progress

    from onboard.evaluation import code_report
    from onboard.evaluation.code_eval import (
        METHODS,
        InnerBot,
        planted_log,
        recording_name,
        run_episode,
        text_only_model,
    )
    from onboard.evaluation.tidy_eval import detector
    from onboard.grounding.embedder import Embedder

    tasks = [_task(n) for n in args.tasks]
    methods = [_verdict(METHODS[m], args.seed_verdict) for m in args.methods]
    full = _verdict(METHODS["full"], args.seed_verdict)
    models: Sequence[str] = args.models
    folder = args.recordings or _in_recordings(robot, f"code-eval-{_stamp()}")
    embedder, found = Embedder(robot.embedder_dir), detector()
    rows = []
    for earlier in args.with_rows:  # rows of an earlier run's --out, printed with these
        try:
            text = earlier.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--with {earlier}: cannot be read ({exc.strerror})") from exc
        rows += code_report.from_json(text, str(earlier))
    with (
        tempfile.TemporaryDirectory() as scratch,
        Progress(disable=args.json) as progress,
        ExitStack() as stack,
    ):
        inner = None
        if args.inner is not None:  # one endpoint for every model's Inner Bot
            endpoint = vlm_endpoint(
                robot, args.inner, args.competence, Path(scratch) / "inner.jsonl"
            )
            inner_robot, inner_url, label = stack.enter_context(endpoint)
            inner = InnerBot(inner_robot, inner_url, label, text_only_model(label))
        for choice in models:
            log = Path(scratch) / f"planted-{choice}.jsonl"
            trials = args.local_trials if choice == "local" else args.trials
            chosen = [m for m in methods if choice != "local" or m.name in args.local_methods]
            runs = [(t, m, k, False) for t, m, k in itertools.product(tasks, chosen, range(trials))]
            if full in chosen and choice != "local":
                extra = range(trials, trials + args.disturbed)
                runs += [(t, full, k, True) for t, k in itertools.product(tasks, extra)]
            bar = progress.add_task(choice, total=len(runs))
            with vlm_endpoint(robot, choice, args.competence, log) as (bots_robot, url, model):
                if inner is not None:
                    model = f"{model}, Inner Bot {inner.label}"
                for task, method, trial, disturb in runs:
                    path = folder / recording_name(task, method, model, trial)
                    row = run_episode(
                        bots_robot, task, trial, robot.eval.seed, method, model, url,
                        embedder, found, path, planted_log(log), disturb, inner,
                    )  # fmt: skip
                    rows.append(row)
                    progress.advance(bar)
                    if args.out is not None:  # a long run loses nothing it measured
                        args.out.write_text(code_report.to_json(rows), encoding="utf-8")
    document = code_report.to_json(rows)
    if args.out is not None:
        args.out.write_text(document, encoding="utf-8")
    if args.json:
        print(document)
    else:
        code_report.print_report(rows)
    if args.png is not None:
        models_seen = sorted({r.model for r in rows})
        for model in models_seen:
            png = args.png
            if len(models_seen) > 1:
                png = png.with_name(f"{png.stem}-{re.sub(r'[^A-Za-z0-9.]+', '_', model)}.png")
            png.write_bytes(code_report.chart_png(rows, model))
            print(f"chart: {png}")
    return 0


def _verdict(method: Method, seed: bool) -> Method:
    """``method`` with the seed's outer check alone (the Extra Bot, no goal reader) when
    ``seed`` is set."""
    if not seed or method.corrections is None:
        return method
    return dataclasses.replace(
        method, corrections=dataclasses.replace(method.corrections, goal=False)
    )


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%S")


def _in_recordings(robot: RobotConfig, name: str) -> Path:
    """``recordings/NAME``, the robot's recordings folder made if it is missing and its
    parent exists: a recorder makes the recording's own folder (NAME), never its parents."""
    if robot.recordings_dir.parent.is_dir():
        robot.recordings_dir.mkdir(exist_ok=True)
    return robot.recordings_dir / name


def add_parsers(code: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    q = code.add_parser(
        "do",
        help="one ReplanVLM episode of a code task on the twin, recorded and judged",
        description="Run code task N once: the Decision Bot writes plan and code from the "
        "camera image, the Inner Bot and the sandbox check it, it runs on the twin, the Extra "
        "Bot verifies; exit 0 when the task's judge passes it.",
    )
    q.add_argument("--task", type=int, required=True, help="the code task's number (1-7)")
    q.add_argument("--trial", type=int, default=0, help="the seeded variation (odd: disturbed)")
    q.add_argument("--method", choices=METHOD_NAMES, default="full")
    q.add_argument("--disturb", action="store_true", help="the gripper drops what it first holds")
    _endpoint_args(q, "standin")
    q.add_argument("--record", type=Path, help="the recording (default: under recordings/)")
    q.add_argument("--json", action="store_true", help="print the episode's row as JSON")
    q = code.add_parser(
        "eval",
        help="the code tasks per method and model: Tables II-V, JSON, a PNG (long: not CI)",
        description="Every task x method x model x trial on the twin, judged from its truth: "
        "Table II (success per task), III (baselines), IV (ablations), V (error detection and "
        "correction). Each episode is recorded under --recordings and replays.",
    )
    q.add_argument("--tasks", type=int, nargs="+", default=list(range(1, 8)), metavar="N")
    q.add_argument("--methods", nargs="+", choices=METHOD_NAMES, default=list(METHOD_NAMES))
    q.add_argument("--models", nargs="*", default=["standin", "control", "local"],
                   help="standin, control, local, or URLs")  # fmt: skip
    q.add_argument("--trials", type=int, default=10, help="trials per task and method")
    q.add_argument("--disturbed", type=int, default=10,
                   help="more ReplanVLM trials a task, each with a drop (Table V)")  # fmt: skip
    q.add_argument("--local-trials", type=int, default=2,
                   help="trials of SmolLM2's text-only rows (slow on a CPU)")  # fmt: skip
    q.add_argument("--local-methods", nargs="+", default=["full", "progprompt", "saycan"],
                   choices=METHOD_NAMES)  # fmt: skip
    q.add_argument("--competence", type=float, default=0.5, help="the stand-in's (0-1)")
    q.add_argument("--inner", metavar="MODEL",
                   help="serve the Inner Bot by another model (standin, control, local, or a "
                   "URL), so error detection is not graded by the model that planted the "
                   "errors; the rows' model names it")  # fmt: skip
    q.add_argument("--recordings", type=Path, help="where the episodes are recorded")
    q.add_argument("--png", type=Path, help="write the success chart here")
    q.add_argument("--out", type=Path, help="write the rows and tables as JSON here too")
    q.add_argument("--with", dest="with_rows", type=Path, nargs="+", default=[], metavar="FILE",
                   help="add the episodes of earlier runs' --out to the tables")  # fmt: skip
    q.add_argument("--json", action="store_true", help="print the rows and tables as JSON")
    _seed_verdict_arg(q)


def _endpoint_args(q: argparse.ArgumentParser, default: str) -> None:
    q.add_argument("--llm", default=default, help="standin, control, local, or a VLM's URL")
    q.add_argument("--competence", type=float, default=0.5, help="the stand-in's (0-1)")
    _seed_verdict_arg(q)


def _seed_verdict_arg(q: argparse.ArgumentParser) -> None:
    q.add_argument("--seed-verdict", action="store_true",
                   help="the seed's outer check alone: the Extra Bot judges every run, with no "
                   "goal reader (onboard's verdict checks the request's relations against the "
                   "camera)")  # fmt: skip
