"""One mission step run as ``onboard run`` runs an episode: in this process, on this
thread (so a stop signal stops the arm and closes the recording as it does there), recorded
in the recordings folder. Its verdict is the episode's exit code, read as a verdict."""

from __future__ import annotations

import argparse
import io
import time
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

from onboard.base.errors import OnboardError
from onboard.config import RobotConfig
from onboard.loop.exitcodes import TABLE, ExitCode, for_error
from onboard.loop.paths import inside, safe_name
from onboard.service.mission import Step

__all__ = ["StepResult", "recording_path", "run_step"]

#: the exit code of an episode as a step's verdict
VERDICTS = {
    ExitCode.SUCCESS: "success",
    ExitCode.TASK_FAILED: "failure",
    ExitCode.LLM_UNREACHABLE: "llm unreachable",
    ExitCode.INCOMPLETE: "incomplete",
}


@dataclass
class StepResult:
    code: int
    verdict: str
    seconds: float
    recording: Path | None
    #: what the episode printed (``onboard run``'s lines), kept for the log
    output: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def success(self) -> bool:
        return self.verdict == "success"


def recording_path(
    robot: RobotConfig, mission: str, step: Step, attempt: int, run: int | None = None
) -> Path:
    """Where the attempt's episode records: ``MISSION-RUN-STEP-ATTEMPT-STAMP.jsonl`` in the
    recordings folder (made if missing), with ``-2``, ``-3``... if that file exists. ``run``
    is the mission run's id in the service's state: with it a name is never given twice, even
    to a file the recordings quota has since deleted (a repeating mission makes many runs of
    one step a second)."""
    folder = robot.recordings_dir
    folder.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    which = "" if run is None else f"{run}-"
    base = f"{safe_name(mission)}-{which}{safe_name(step.name)}-{attempt}-{stamp}"
    name, n = f"{base}.jsonl", 1
    while (folder / name).exists():
        n += 1
        name = f"{base}-{n}.jsonl"
    return inside(folder, folder / name)


def run_step(
    robot: RobotConfig,
    mission: str,
    step: Step,
    attempt: int,
    llm: str | None,
    clock: str | None,
    record: Path | None = None,
) -> StepResult:
    """Run ``step``'s episode, recorded to ``record`` (default: :func:`recording_path`); a
    stop signal during it gives a result with code 130 or 143 (the episode stopped the
    robot), an input error one with verdict "error"."""
    from onboard.catalog import load_robot_skill
    from onboard.cli.run import run

    kind = load_robot_skill(robot, step.skill).kind
    if record is None:
        record = recording_path(robot, mission, step, attempt)
    args = argparse.Namespace(
        skill=step.skill,
        scenario=Path(step.scenario or "person-object"),
        llm=llm,
        clock=clock if kind in ("person", "scene") else None,
        record=record,
        goal=step.goal,
        scene=step.scene,
        task=step.task,
        level=step.level,
        method=step.method,
    )
    printed = io.StringIO()
    began = time.monotonic()
    error = None
    try:
        with redirect_stdout(printed):
            code = int(run(robot, args))
    except OnboardError as exc:
        code, error = int(for_error(exc)), str(exc)
    seconds = time.monotonic() - began
    verdict = VERDICTS.get(ExitCode(code), TABLE[ExitCode(code)][0]) if error is None else "error"
    if error is None and code == ExitCode.SUCCESS and seconds > step.timeout:
        verdict = "timeout"
    lines = [line for line in printed.getvalue().splitlines() if line.strip()]
    return StepResult(code, verdict, seconds, record if record.exists() else None, lines, error)
