"""robot.toml's ``[fleet]`` (docs/fleet.md, "Each controller, an onboard up process"): what
``onboard check`` and ``onboard up --check`` say about a fleet member, in process. The member
running under ``onboard up`` is tests/test_fleet.py's (separate processes)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from onboard.cli.main import main

MISSION = Path(__file__).resolve().parent.parent / "skills" / "missions" / "example.toml"
ARM = '\n[drivers.arm]\nkind = "jaka"\nhost = "127.0.0.1"\nport = 1\nstatus_port = 2\n'


@pytest.fixture
def member(tmp_path: Path) -> Path:
    """A robot folder (onboard init, with a JAKA arm); its robot.toml's path."""
    assert main(["init", str(tmp_path / "member")]) == 0
    robot = tmp_path / "member" / "robot.toml"
    assert "[drivers.arm]" not in robot.read_text()
    robot.write_text(robot.read_text() + ARM)
    return robot


def check(robot: Path, capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--robot", str(robot), *more] if more else ["--robot", str(robot), "check"])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_member_is_named_by_check_and_runs_no_llm_or_missions(
    member: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with member.open("a") as f:
        f.write('\n[fleet]\nagent = "Bob"\nname = "lab"\nconnect = ["tcp/10.0.0.2:7447"]\n')
    code, out, err = check(member, capsys)
    assert code == 0, err
    assert ("  fleet lab: agent Bob of sort_cubes in the scene sort_cubes, over "
            "tcp/10.0.0.2:7447 (onboard up runs its controller)") in out  # fmt: skip
    # a mission beside it: the arm is the coordinator's
    missions = member.parent / "skills" / "missions"
    missions.mkdir()
    shutil.copy(MISSION, missions / "example.toml")
    code, _, err = check(member, capsys, "up", "--check")
    assert code == 2
    assert "[fleet] a fleet member's arm is the coordinator's: it runs no missions" in err


@pytest.mark.parametrize(
    ("table", "line"),
    [
        ('agent = "Bob"\nconnect = ["udp/127.0.0.1:7447"]',
         "[fleet.connect] Value error, endpoint 'udp/127.0.0.1:7447': a Zenoh endpoint is "
         "tcp/HOST:PORT"),
        ('agent = "Bob"\nconnect = ["tcp/127.0.0.1:7447"]\nperiod = 0.5\ntimeout = 0.6',
         "[fleet] Value error, timeout 0.6 s is under two periods (0.5 s)"),
        ('agent = "Bob"', "[fleet] Value error, a fleet member needs an endpoint"),
        ('agent = "coordinator"\nconnect = ["tcp/127.0.0.1:7447"]',
         "agent 'coordinator': the coordinator's name in key expressions"),
        ('agent = "Bob"\nconnect = ["tcp/127.0.0.1:7447"]\nscene = "blocks"',
         "[fleet.agent] agent 'Bob': the scene blocks has no such arm"),
        ('agent = "Bob/1"\nconnect = ["tcp/127.0.0.1:7447"]', "[fleet.agent] String should match"),
    ],
)  # fmt: skip
def test_a_wrong_fleet_table_is_one_line(
    member: Path, table: str, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with member.open("a") as f:
        f.write(f"\n[fleet]\n{table}\n")
    code, _, err = check(member, capsys)
    assert code == 2
    assert line in err, err
    assert "Traceback" not in err
