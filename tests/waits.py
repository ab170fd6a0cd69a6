"""Helpers more than one test file uses: waiting on an event another thread makes, and the CLI
run in a child interpreter where an extra's package cannot be imported."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence

#: a failure guard only: every wait ends on the event it waits for
GUARD = 30.0


def until(done: Callable[[], bool]) -> bool:
    """Wait for ``done`` (state another thread changes), ``GUARD`` seconds at most."""
    end = time.monotonic() + GUARD
    while not done():
        if time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True


def cli_without(module: str, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``onboard ARGV`` in a child interpreter where ``module`` cannot be imported."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "from onboard.cli.main import main\n"
        f"sys.exit(main({list(argv)!r}))\n"
    )
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
