"""Every recording with a header and an end replays, stops included; a killed one is
an incomplete episode with its own exit code."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_cli import ROOT, onboard, one_line_error, robot_copy, signal_when, started

from onboard.hri.replay import ReplayAsk
from onboard.loop.exitcodes import ExitCode
from onboard.testing.standin_server import StandInServer

BOUND = 30.0


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`onboard run` on the wall clock, sent SIGTERM once the episode has started."""
    tmp_path = tmp_path_factory.mktemp("stopped")
    record = tmp_path / "run.jsonl"
    with StandInServer(seed=0, noise=0.0, format_noise=0.0) as standin:
        run = signal_when(
            "--robot", robot_copy(tmp_path), "run", "engage", "--llm", standin.base_url,
            "--clock", "wall", "--record", record,
            "--scenario", ROOT / "skills" / "scenarios" / "person-object.toml",
            ready=started(record), cwd=tmp_path,
        )  # fmt: skip
    assert run.code == ExitCode.SIGTERM, run.err
    return record


def records_of(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_a_signal_stopped_episode_records_its_signal(stopped: Path) -> None:
    end = records_of(stopped)[-1]
    assert end["kind"] == "end" and end["signal"] == "SIGTERM" and end["finished"] is False


def test_a_signal_stopped_episode_replays(stopped: Path, tmp_path: Path) -> None:
    result = onboard("replay", stopped, cwd=tmp_path)
    assert result.code == ExitCode.SUCCESS, result.out + result.err
    assert "reproduces" in result.out


def test_an_old_recording_names_the_signal_only_in_its_reason(
    stopped: Path, tmp_path: Path
) -> None:
    records = records_of(stopped)
    del records[-1]["signal"]
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = onboard("replay", old, cwd=tmp_path)
    assert result.code == ExitCode.SUCCESS, result.out + result.err


def test_a_killed_episode_is_incomplete_not_a_replay(stopped: Path, tmp_path: Path) -> None:
    lines = stopped.read_text(encoding="utf-8").splitlines(keepends=True)
    killed = tmp_path / "killed.jsonl"
    killed.write_text("".join(lines[:-1]), encoding="utf-8")  # no end record
    result = onboard("replay", killed, cwd=tmp_path)
    assert result.code == ExitCode.INCOMPLETE
    line = one_line_error(result)
    assert str(killed) in line and "incomplete episode" in line


def test_a_request_in_flight_at_the_end_is_never_answered_in_the_replay(tmp_path: Path) -> None:
    """A request with no recorded answer stays unanswered in the replay (infinite latency):
    the replay must not invent a failure, and a fallback, that the robot never had."""
    records = [
        {"kind": "request", "id": 1, "purpose": "plan", "messages": []},
        {"kind": "reply", "id": 1, "text": "speak", "latency": 0.2, "virtual_latency": 1.0},
        {"kind": "request", "id": 2, "purpose": "plan", "messages": []},
    ]
    ask = ReplayAsk(records, tmp_path / "x.jsonl")
    assert ask.next_latency() == 1.0
    assert ask("plan", [], None).text == "speak"
    assert ask.next_latency() == math.inf
