"""`make run` / `make test` set-up steps (tools/step.sh): each says what it does and how long
it takes, a long one is never silent, a failed one shows the end of its log."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEP = ROOT / "tools" / "step.sh"


def test_a_step_announces_itself_and_reports_its_time(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    done = subprocess.run(
        [STEP, log, "building things", "about 1 s", "sh", "-c", "echo compiler chatter"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0] == "onboard setup: building things (about 1 s)"
    assert lines[-1].startswith("  done in ") and lines[-1].endswith(" s")
    assert "compiler chatter" not in done.stdout  # it went to the log
    assert "compiler chatter" in log.read_text()


def test_a_long_step_says_it_is_still_running(tmp_path: Path) -> None:
    release = tmp_path / "release"
    command = ["sh", "-c", f"while [ ! -e {release} ]; do sleep 0.1; done"]
    with subprocess.Popen(
        [STEP, tmp_path / "setup.log", "building llama.cpp", "minutes", *command],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "ONBOARD_STEP_HEARTBEAT": "1"},
    ) as step:  # fmt: skip
        assert step.stdout is not None
        assert step.stdout.readline().startswith("onboard setup: building llama.cpp")
        heartbeat = step.stdout.readline()  # blocks until the step reports; the step waits for us
        release.touch()
        rest = step.stdout.read()
    assert heartbeat.startswith("  ... still building llama.cpp: ") and "s so far" in heartbeat
    assert step.returncode == 0 and "done in" in rest


def test_a_failed_step_shows_the_end_of_its_log_and_its_exit_code(tmp_path: Path) -> None:
    done = subprocess.run(
        [STEP, tmp_path / "setup.log", "installing", "1 min",
         "sh", "-c", "echo 'error: no compiler' >&2; exit 3"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 3
    assert "onboard setup: installing failed (exit 3)" in done.stderr
    assert "error: no compiler" in done.stderr
