"""Run the stand-in VLM in its own process: ``start_vlm_standin`` starts
``python -m onboard.testing.vlm_standin``, waits for the line with its URL, yields the base
URL, and ends the process on exit."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from onboard.base.errors import LLMError

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
    command = [*python, "-m", "onboard.testing.vlm_standin", "--port", "0", "--seed", str(seed),
               "--competence", str(competence)]  # fmt: skip
    if log is not None:
        command += ["--log", str(log)]
    errors = stderr.open("w", encoding="utf-8") if stderr is not None else subprocess.PIPE
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True, bufsize=1)
    try:
        url = _first_line(child, STARTUP)
        yield url
    finally:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
        if stderr is not None and not isinstance(errors, int):
            errors.close()


def _first_line(child: subprocess.Popen[str], timeout: float) -> str:
    """The child's first stdout line (its URL), read in a thread so the wait is bounded."""
    got: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        got.append(child.stdout.readline().strip())
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(timeout) or not got[0].startswith("http://"):
        child.kill()
        _, err = child.communicate()
        last = (err or "").strip().splitlines()[-1:] or ["no output on its standard error"]
        raise LLMError(f"the vlm stand-in did not start: {last[0]}")
    return got[0]
