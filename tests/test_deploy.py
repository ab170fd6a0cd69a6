"""deploy/onboard.service: systemd accepts it, and it runs ``onboard up`` as docs/service.md
says (notify, watchdog, restarts, an unprivileged user, the hardening options)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from onboard.cli.main import _parser

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "onboard.service"
INSTALLED = "/opt/onboard/.venv/bin/onboard"


def _settings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            found.setdefault(key, []).append(value)
    return found


def test_the_unit_runs_onboard_up_as_a_watched_hardened_notify_service() -> None:
    unit = _settings()
    assert unit["Type"] == ["notify"] and float(unit["WatchdogSec"][0]) > 0
    assert unit["Restart"] == ["on-failure"] and unit["User"] != ["root"]
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert unit[key] == ["yes"], key
    assert unit["ProtectSystem"] == ["strict"] and unit["ReadWritePaths"]
    assert unit["SuccessExitStatus"] == ["143"]  # SIGTERM's exit code (docs/exit-codes.md)
    for command in (*unit["ExecStartPre"], *unit["ExecStart"]):
        binary, *argv = shlex.split(command)
        assert binary == INSTALLED
        args = _parser().parse_args(argv)  # flags onboard up takes
        assert args.func.__name__ == "_up"
    assert _parser().parse_args(shlex.split(unit["ExecStartPre"][0])[1:]).check


NO_ANALYZE = "systemd-analyze is not installed here (Debian's systemd package): not verified"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason=NO_ANALYZE)
def test_systemd_analyze_verify_accepts_the_unit(tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: this checkout's onboard stands in for
    # the installed one
    here = str(Path(sys.executable).parent / "onboard")
    unit = tmp_path / "onboard.service"
    unit.write_text(UNIT.read_text(encoding="utf-8").replace(INSTALLED, here), encoding="utf-8")
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
