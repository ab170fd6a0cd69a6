"""The physics engine's chatter stays off the user's terminal; nothing else is dropped."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from onboard.drivers.twin.quiet import engine_quiet


def test_loading_and_connecting_the_engine_prints_nothing() -> None:
    """A fresh process (the banner comes once, at import) builds a twin with its arm,
    which connects the engine twice, and prints only what it prints itself."""
    script = (
        "from onboard.drivers.twin.world import Twin\n"
        "with Twin('blocks') as twin:\n"
        "    print('built', len(twin.pandas), 'arm')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=120, check=True
    )
    assert done.stdout == b"built 1 arm\n"
    assert done.stderr == b""


def test_other_output_of_the_block_reaches_its_descriptor(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with engine_quiet():
        os.write(1, b"argv[0]=\nresult line\n")
        os.write(2, b"pybullet build time: Jan 1 2025\nb3Error: a real engine error\n")
    out, err = capfd.readouterr()
    assert out == "result line\n"
    assert err == "b3Error: a real engine error\n"
