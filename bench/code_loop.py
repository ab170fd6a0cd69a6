"""What the ReplanVLM loop costs beside the model (issue 13, item 7), each figure beside its
reference:

- dry-run time per program (the seven solutions, ``onboard.replan.dryrun.dry_run`` on a twin
  built from the perceived scene), beside the same solution's real run on the twin (with
  ``--real``; else part 1's median in ``bench/results/code_solutions.json``, when present);
- the sandbox: the allow-list check of each benign corpus program (beside ``ast.parse`` of
  it), the start of the sandbox with a no-op program (beside ``python -I -S -c pass``), and
  the per-call overhead over the pipe of ``holding()`` (the time between one call reaching
  the parent and the next, beside calling it in-process), p50/p99;
- image encoding of a 640x480 camera frame, PNG and JPEG (``onboard.llm.content``);
- the recording size per episode (its JSON lines and its images folder) and the loop's own
  time per cycle, excluding model time (:func:`cycle_overheads`), beside the model time per
  cycle: from the recordings given (``--recording``, e.g. ``onboard code do --record``'s),
  and from a short stand-in episode recorded here (the SayCan baseline on task 2, eight
  steps, against the schema stand-in server: :func:`standin_episode`).

    .venv/bin/python bench/code_loop.py [--repeat 200] [--recording PATH ...] [--real]
                                        [--no-dry-run]
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import RESULTS, ROOT, environment, fmt_ms, summary, write_results
from rich.console import Console
from rich.table import Table

from onboard.config import RobotConfig, load_robot
from onboard.drivers.twin.scene import find_scene, load_scene
from onboard.drivers.twin.world import Twin
from onboard.evaluation.code_tasks import benign_corpus, load_code_tasks, set_up, solution_path
from onboard.evaluation.code_trials import code_world, run_trial
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.llm.client import ChatClient
from onboard.llm.content import encode_image
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.recording import images_dir
from onboard.perception.detector import Detector
from onboard.replan.allowlist import check
from onboard.replan.api import call
from onboard.replan.baselines import SPOTS, run_saycan
from onboard.replan.dryrun import dry_run
from onboard.replan.names import API_NAMES
from onboard.replan.perceive import perceive
from onboard.replan.robot import code_limits
from onboard.replan.sandbox import run
from onboard.testing.schema_servers import SchemaServer

#: the records whose wall ``seconds`` are the robot acting, not the loop
ACTING = ("run", "step")


@dataclass(frozen=True)
class Cycle:
    """One gap of the loop: from a reply arriving to the next request leaving."""

    seconds: float  # the whole gap
    acting: float  # of it, the robot running a program or a step (records in ACTING)
    model: float  # the model time of the reply that opened the gap

    @property
    def own(self) -> float:
        """The loop's own time: the gap less the robot's acting."""
        return max(self.seconds - self.acting, 0.0)


def cycle_overheads(records: Iterable[Mapping[str, Any]]) -> list[Cycle]:
    """The loop's gaps in one recorded episode, model time excluded: for each ``reply``
    record, the time from its ``received_at`` to the ``sent_at`` of the next reply's
    exchange (both ``time.perf_counter()`` of the recording process, as
    ``ChatResult`` gives them). A reply without them (an older bot) is timed by the records'
    ``wall`` stamps instead: the reply's record to the next ``request`` record. The
    ``seconds`` of ``run`` and ``step`` records in the gap are the robot acting."""
    cycles: list[Cycle] = []
    last: Mapping[str, Any] | None = None
    acting = 0.0
    for record in records:
        kind = record.get("kind")
        if kind == "reply":
            if last is not None and record.get("sent_at") and last.get("received_at"):
                gap = float(record["sent_at"]) - float(last["received_at"])
                cycles.append(Cycle(gap, acting, float(last.get("latency", 0.0))))
            last, acting = record, 0.0
        elif kind == "request" and last is not None and not last.get("received_at"):
            gap = float(record["wall"]) - float(last["wall"])
            cycles.append(Cycle(gap, acting, float(last.get("latency", 0.0))))
            last, acting = None, 0.0
        elif kind in ACTING and last is not None:
            acting += float(record.get("seconds") or 0.0)
    return cycles


def recording_bytes(path: Path) -> tuple[int, int]:
    """(bytes of the JSON lines, bytes of its images folder)."""
    folder = images_dir(path)
    images = sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0
    return path.stat().st_size, images


def _timed(function: Any, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        function()
        samples.append(time.perf_counter() - began)
    return samples


# -- the parts ---------------------------------------------------------------------------------


def dry_runs(
    robot: RobotConfig, embedder: Embedder, found: Detector, real_runs: bool
) -> list[dict[str, Any]]:
    """Each task's solution dry-run on a twin built from the perceived scene of its seeded
    variation (trial 0, seed 0); the reference: the solution's real run on the twin, on the
    same variation (``real_runs``), else part 1's median from code_solutions.json."""
    real = {} if real_runs else _real_runs()
    out = []
    for task in load_code_tasks():
        with code_world(robot, task.scene, embedder, found) as (twin, api):
            set_up(twin, task, random.Random(f"0/{task.name}/0"))
            api.home()
            scene = perceive(api, task.scene)
        program = solution_path(task).read_text(encoding="utf-8")
        began = time.perf_counter()
        done = dry_run(robot, scene, program, task.scene)
        took = time.perf_counter() - began
        if real_runs:
            real[task.number] = run_trial(robot, task, 0, 0, embedder, found).wall_seconds
        out.append({
            "task": task.number, "name": task.name, "ended": done.ended,
            "message": done.message, "unseen": done.unseen, "calls": len(done.calls),
            "problems": len(done.problems), "seconds": took, "reported_seconds": done.seconds,
            "real_run_wall_seconds": real.get(task.number),
        })  # fmt: skip
    return out


def _real_runs() -> dict[int, float]:
    """Part 1's median wall time of each solution's run on the twin, when measured."""
    path = RESULTS / "code_solutions.json"
    if not path.is_file():
        return {}
    tasks = json.loads(path.read_text(encoding="utf-8")).get("tasks", [])
    return {t["task"]: t["wall_seconds_median"] for t in tasks}


def sandbox_figures(
    robot: RobotConfig, embedder: Embedder, found: Detector, repeat: int
) -> dict[str, Any]:
    sources = [path.read_text(encoding="utf-8") for path, _ in benign_corpus()]
    checks, parses = [], []
    for _ in range(max(repeat // 20, 3)):
        for source in sources:
            checks += _timed(lambda s=source: check(s, API_NAMES), 1)
            parses += _timed(lambda s=source: ast.parse(s), 1)
    limits = code_limits(robot.code)
    starts = 30
    with code_world(robot, "blocks", embedder, found) as (_twin, api):

        def dispatch(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
            return call(api, name, args, kwargs)

        noop = _timed(lambda: run("pass\n", API_NAMES, dispatch, limits), starts)
        python = _timed(
            lambda: subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True),
            starts,
        )
        arrivals: list[float] = []

        def stamped(name: str, args: list[Any], kwargs: dict[str, Any]) -> object:
            arrivals.append(time.perf_counter())
            return call(api, name, args, kwargs)

        result = run(f"for i in range({repeat + 1}):\n    holding()\n", API_NAMES, stamped, limits)
        assert result.ok, result.message
        per_call = [b - a for a, b in itertools.pairwise(arrivals)]
        direct = _timed(lambda: call(api, "holding", [], {}), repeat)
    return {
        "programs": len(sources),
        "check": summary(checks),
        "ast_parse": summary(parses),
        "noop_run": summary(noop),
        "python_start": summary(python),
        "per_call": summary(per_call),
        "direct_call": summary(direct),
    }


def encoding_figures(repeat: int) -> dict[str, Any]:
    scene = load_scene(find_scene("tower"))
    camera = scene.camera.model_copy(update={"width": 640, "height": 480})
    with Twin(scene.model_copy(update={"camera": camera})) as twin:
        twin.settle(0.3)
        frame = twin.render()[0]
    assert frame.shape == (480, 640, 3)
    out: dict[str, Any] = {"frame": list(frame.shape)}
    for form in ("png", "jpeg"):
        samples = _timed(lambda f=form: encode_image(frame, f), max(repeat // 10, 10))
        out[form] = {**summary(samples), "bytes": len(encode_image(frame, form))}  # type: ignore[arg-type]
    out["raw_bytes"] = int(frame.nbytes)
    return out


def standin_episode(robot: RobotConfig, embedder: Embedder, found: Detector, folder: Path) -> Path:
    """A SayCan episode of task 2 (8 steps) against the schema stand-in server, recorded to
    ``folder``. The server takes the first listed step it prefers, so it picks the blue
    block off the stack and puts it at the first free spot, then picks it there and puts it
    there again: eight steps with motions, for the cycles' timing, not for the task."""
    task = next(t for t in load_code_tasks() if t.number == 2)
    prefer = ['pick("blue block")', *(f"place([{x:.2f}, {y:.2f}])" for x, y in SPOTS)]
    path = folder / "saycan-task2.jsonl"
    config = robot.code.decision.llm(robot.llm)
    with (
        SchemaServer("llama-server", prefer=prefer) as server,
        ChatClient(config, base_url=server.base_url) as client,
        Recorder(path) as recorder,
        code_world(robot, task.scene, embedder, found) as (twin, api),
    ):
        set_up(twin, task, random.Random(f"0/{task.name}/0"))
        api.home()
        done = run_saycan(api, task.instruction, client, recorder, max_steps=8)
    return path, done.steps


def episode_figures(paths: Sequence[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        records = list(read_recording(path))
        cycles = cycle_overheads(records)
        lines, images = recording_bytes(path)
        replies = [r for r in records if r.get("kind") == "reply"]
        out.append({
            "recording": str(path), "records": len(records), "replies": len(replies),
            "bytes": lines, "image_bytes": images, "cycles": len(cycles),
            "own": summary([c.own for c in cycles]),
            "with_acting": summary([c.seconds for c in cycles]),
            "model": summary([float(r.get("latency", 0.0)) for r in replies]),
        })  # fmt: skip
    return out


# -- output ------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="samples of the fast figures")
    parser.add_argument("--recording", type=Path, action="append", default=[],
                        help="a recorded code episode (JSON lines) to size and time")  # fmt: skip
    parser.add_argument("--no-dry-run", action="store_true", help="skip the dry runs")
    parser.add_argument(
        "--real", action="store_true", help="run each solution on the twin too (the reference)"
    )
    args = parser.parse_args()
    robot = load_robot(ROOT / "robot.toml")
    embedder, found = Embedder(robot.embedder_dir), detector()
    console = Console()
    data: dict[str, Any] = {"environment": environment(), "repeat": args.repeat}

    table = Table(title="ReplanVLM loop: costs beside the model (p50 / p99 / max)")
    for column in ("figure", "measured", "reference", "reference is"):
        table.add_column(column)

    data["dry_runs"] = None if args.no_dry_run else dry_runs(robot, embedder, found, args.real)
    for row in data["dry_runs"] or []:
        real = row["real_run_wall_seconds"]
        unseen = ", stopped unseen" if row["unseen"] else ""
        table.add_row(
            f"dry run, task {row['task']} {row['name']}",
            f"{row['seconds']:.2f} s ({row['ended']}{unseen}, {row['calls']} calls, "
            f"{row['problems']} problems)",
            "n/a" if real is None else f"{real:.2f} s",
            "its real run on the twin" + ("" if args.real else " (part 1's median)"),
        )
    table.add_section()

    sandbox = data["sandbox"] = sandbox_figures(robot, embedder, found, args.repeat)
    table.add_row(f"allow-list check ({sandbox['programs']} corpus programs)",
                  fmt_ms(sandbox["check"]), fmt_ms(sandbox["ast_parse"]),
                  "ast.parse of the same programs")  # fmt: skip
    table.add_row("sandbox start + no-op program", fmt_ms(sandbox["noop_run"]),
                  fmt_ms(sandbox["python_start"]), "python -I -S -c pass")  # fmt: skip
    table.add_row("API call over the pipe, holding()", fmt_ms(sandbox["per_call"]),
                  fmt_ms(sandbox["direct_call"]), "the same call in-process")  # fmt: skip
    table.add_section()

    images = data["images"] = encoding_figures(args.repeat)
    for form in ("png", "jpeg"):
        table.add_row(f"encode a 640x480 frame, {form.upper()}", fmt_ms(images[form]),
                      f"{images[form]['bytes'] / 1024:.0f} KiB of "
                      f"{images['raw_bytes'] / 1024:.0f} KiB raw", "the encoded size")  # fmt: skip
    table.add_section()

    with tempfile.TemporaryDirectory() as folder:
        standin, data["standin_steps"] = standin_episode(robot, embedder, found, Path(folder))
        paths = [*args.recording, standin]
        data["episodes"] = episode_figures(paths)
    for row, path in zip(data["episodes"], paths, strict=True):
        name = "stand-in SayCan episode, task 2" if path not in args.recording else path.name
        table.add_row(f"recording size: {name}",
                      f"{(row['bytes'] + row['image_bytes']) / 1024:.1f} KiB "
                      f"({row['image_bytes'] / 1024:.1f} KiB images, {row['records']} records)",
                      f"{row['replies']} replies", "model exchanges in it")  # fmt: skip
        table.add_row(f"loop's own time per cycle: {name}",
                      fmt_ms(row["own"]), fmt_ms(row["model"]),
                      "the model's time per cycle")  # fmt: skip
        table.add_row(f"  the same with the robot acting: {name}", fmt_ms(row["with_acting"]),
                      "", "")  # fmt: skip
    console.print(table)
    path = write_results("code_loop", data)
    console.print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
