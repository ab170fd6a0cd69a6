"""Run the stand-in VLM in its own process: ``start_vlm_standin`` starts
``python -m onboard.testing.vlm_standin``, waits for the line with its URL, yields the base
URL, and ends the process on exit."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from onboard.testing.chat_standin import start_standin_process

__all__ = ["STARTUP", "start_vlm_standin"]

#: seconds the process may take to listen (it loads the detector first)
STARTUP = 60.0


@contextmanager
def start_vlm_standin(
    seed: int,
    competence: float,
    log: Path | None,
    python: Sequence[str] = (sys.executable,),
    stderr: Path | None = None,
) -> Iterator[str]:
    """The stand-in in its own process; yields its base URL (``http://127.0.0.1:PORT/v1``).
    ``python``: the interpreter command (a test may add flags such as ``-X importtime``);
    ``stderr``: a file for the child's standard error (default: kept for a failed start)."""
    args = ["--port", "0", "--seed", str(seed), "--competence", str(competence)]
    if log is not None:
        args += ["--log", str(log)]
    url, stop = start_standin_process(
        "onboard.testing.vlm_standin", args, "vlm stand-in", STARTUP, python, stderr
    )
    try:
        yield url
    finally:
        stop()
