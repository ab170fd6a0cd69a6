"""Run the team stand-in in its own process: ``start_team_standin`` starts ``python -m
onboard.testing.team_standin``, waits for the line with its URL and returns it with a
``stop`` that ends the process."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from onboard.testing.chat_standin import start_standin_process

__all__ = ["STARTUP", "start_team_standin"]

#: seconds the process may take to listen
STARTUP = 30.0


def start_team_standin(
    seed: int,
    competence: float,
    ignore_feedback: bool = False,
    log: Path | None = None,
    python: Sequence[str] = (sys.executable,),
    stderr: Path | None = None,
) -> tuple[str, Callable[[], None]]:
    """The stand-in in its own process: (base URL ``http://127.0.0.1:PORT/v1``, stop).
    ``python``: the interpreter command (a test may add ``-X importtime``); ``stderr``: a file
    for the child's standard error. LLMError when it does not start."""
    args = ["--port", "0", "--seed", str(seed), "--competence", str(competence)]
    if ignore_feedback:
        args.append("--ignore-feedback")
    if log is not None:
        args += ["--log", str(log)]
    return start_standin_process(
        "onboard.testing.team_standin", args, "team stand-in", STARTUP, python, stderr
    )
