"""Exit codes a supervisor can use: the README's table, and each code from a real process."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest
from test_cli import ONBOARD, ROOT, SCENARIOS, Result, one_line_error, robot_copy
from test_cli import onboard as onboard_command

from onboard.loop.exitcodes import TABLE, ExitCode

NEVER_READY = """
[scenario]
name = "never-ready"
description = "A person on the phone for the whole episode, never looking at the robot."
end = 20.0
distance = 4.0

[[activity]]
at = 0.0
text = "The person is talking on a phone."

[[gaze]]
at = 0.0
toward = false

[[label]]
from = 0.0
to = 20.0
state = "not-ready"
"""


def test_the_readme_table_is_the_code_table() -> None:
    """The exit code table of the docs (docs/exit-codes.md, moved there from the README) is
    :data:`TABLE`, row for row."""
    page = (ROOT / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    section = page.split("# Exit codes", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \|$", section, re.MULTILINE)
    assert [(int(c), name.strip()) for c, name, _ in rows] == [
        (int(code), name) for code, (name, _) in TABLE.items()
    ]
    assert len(set(TABLE)) == len(ExitCode)


def onboard(*args: str | Path, cwd: Path = ROOT) -> Result:
    """A real ``onboard`` process: its exit status is what a supervisor sees."""
    return onboard_command(*args, cwd=cwd, process=True)


def test_a_closed_output_ends_quietly_with_its_code() -> None:
    """``onboard check | head -1``: the reader has gone before onboard writes (deterministic:
    the pipe's read end is closed first); no traceback, the output-closed code."""
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [ONBOARD, "check"], stdout=write, stderr=subprocess.PIPE, cwd=ROOT, timeout=60,
            text=True, check=False,
        )  # fmt: skip
    finally:
        os.close(write)
    assert done.returncode == ExitCode.OUTPUT_CLOSED
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def run_engage(
    tmp_path: Path, scenario: Path, *extra: str | Path, robot: Path | None = None
) -> Result:
    return onboard(
        "--robot", robot or robot_copy(tmp_path), "run", "engage", "--clock", "virtual",
        "--scenario", scenario, "--record", tmp_path / "episode.jsonl", *extra,
    )  # fmt: skip


def test_a_successful_episode_exits_0(tmp_path: Path) -> None:
    result = run_engage(tmp_path, SCENARIOS / "person-object.toml", "--llm", "standin")
    assert result.code == ExitCode.SUCCESS, result.err
    assert "success: spoke at" in result.out and "exit 0: success" in result.out


def test_a_never_ready_person_is_task_failed(tmp_path: Path) -> None:
    scenario = tmp_path / "never-ready.toml"
    scenario.write_text(NEVER_READY, encoding="utf-8")
    result = run_engage(tmp_path, scenario, "--llm", "standin")
    assert result.code == ExitCode.TASK_FAILED, result.err
    assert "failure: " in result.out and "exit 1: task failed" in result.out
    assert "Traceback" not in result.err


def test_a_broken_robot_toml_is_a_configuration_error(tmp_path: Path) -> None:
    robot = robot_copy(tmp_path, replace=[('clock = "', 'clock = "sundial-')])
    result = run_engage(tmp_path, SCENARIOS / "person-object.toml", robot=robot)
    assert result.code == ExitCode.INPUT_ERROR
    assert str(robot) in one_line_error(result)
    assert not (tmp_path / "episode.jsonl").exists(), "nothing ran"


def test_a_missing_scenario_is_an_input_error(tmp_path: Path) -> None:
    result = run_engage(tmp_path, tmp_path / "nope.toml", "--llm", "standin")
    assert result.code == ExitCode.INPUT_ERROR
    assert "nope.toml" in one_line_error(result)


def test_a_bad_command_line_is_an_input_error() -> None:
    assert onboard("run").code == ExitCode.INPUT_ERROR


def test_an_llm_nobody_answers_is_llm_unreachable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    scenario = SCENARIOS / "person-robot.toml"
    robot = robot_copy(tmp_path, replace=[("retries = 2", "retries = 0")])
    result = run_engage(tmp_path, scenario, "--llm", url, robot=robot)
    assert result.code == ExitCode.LLM_UNREACHABLE, result.out + result.err
    assert "exit 3: LLM unreachable" in result.out
    assert "said nothing" in result.out, "the fallback kept the robot from speaking"


def test_eval_with_an_llm_nobody_answers_is_llm_unreachable(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    robot = robot_copy(tmp_path, replace=[("retries = 2", "retries = 0")])
    result = onboard(
        "--robot", robot, "eval", "engage", "--trials", "1", "--llm", url, "--latency", "1.0",
        "--scenario", SCENARIOS / "person-robot.toml", "--json",
    )  # fmt: skip
    assert result.code == ExitCode.LLM_UNREACHABLE, result.err
    assert '"exit_code": 3' in result.out


def test_eval_exits_0_when_every_episode_reaches_a_verdict() -> None:
    result = onboard("eval", "engage", "--trials", "2", "--json")
    assert result.code == ExitCode.SUCCESS, result.err
    assert '"exit_code": 0' in result.out


@pytest.fixture
def skills_with_a_fallback_that_times_out(tmp_path: Path) -> Path:
    """engage, where the approach times out after 0.5 s and the fallback (base.stop, 0.5 s)
    times out after 0.1 s: the episode ends with no verdict."""
    text = (ROOT / "skills" / "engage.toml").read_text(encoding="utf-8")
    approach = 'command = "base.approach"\n'
    pause = 'command = "base.stop"\ninterruptible = false\ntimeout = 2.0\n'
    assert approach in text and pause in text
    text = text.replace(approach, approach + "timeout = 0.5\n")
    text = text.replace(pause, pause.replace("timeout = 2.0", "timeout = 0.1"))
    skills = tmp_path / "skills"
    (skills / "scenarios").mkdir(parents=True)
    (skills / "engage.toml").write_text(text, encoding="utf-8")
    return skills


def test_a_fallback_that_times_out_is_an_incomplete_episode(
    tmp_path: Path, skills_with_a_fallback_that_times_out: Path
) -> None:
    robot = robot_copy(tmp_path, skills=skills_with_a_fallback_that_times_out)
    result = run_engage(tmp_path, SCENARIOS / "person-object.toml", "--llm", "standin", robot=robot)
    assert result.code == ExitCode.INCOMPLETE, result.out + result.err
    assert "fallback pause timed out" in result.out
    assert "exit 4: incomplete episode" in result.out
