"""Episodes on the WallClock: real seconds, a stand-in that takes real time to answer,
and a real ``onboard run`` process stopped with SIGTERM."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_cli import Signalled, robot_copy, signal_when, started

from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import (
    EpisodeOptions,
    HttpAsk,
    Judgement,
    JudgementKind,
    judge,
    run_episode,
)
from onboard.llm.client import ChatClient
from onboard.loop.engine import Outcome
from onboard.loop.exitcodes import ExitCode
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer

ROOT = Path(__file__).resolve().parent.parent
ONBOARD = Path(sys.executable).parent / "onboard"

# The person sits 1.5 m away (the approach's stop distance) and looks at the robot.
READY = """\
[scenario]
name = "ready-now"
description = "A person right in front of the robot, looking at it."
end = 3.0
distance = 1.5

[[activity]]
at = 0.0
text = "The person is sitting on a chair, waiting."

[[gaze]]
at = 0.0
toward = true

[[label]]
from = 0.0
to = 3.0
state = "ready"
"""

# Ends after one second; the person looks up at 0.5 s, while the LLM is still thinking.
SHORT = """\
[scenario]
name = "short"
end = 1.0
distance = 4.0

[[activity]]
at = 0.0
text = "The person is reading a book."

[[gaze]]
at = 0.0
toward = false

[[gaze]]
at = 0.5
toward = true

[[label]]
from = 0.0
to = 1.0
state = "ready"
"""


def write_scenario(tmp_path: Path, text: str) -> Scenario:
    path = tmp_path / "scenario.toml"
    path.write_text(text, encoding="utf-8")
    return load_scenario(path)


@dataclass
class WallRun:
    outcome: Outcome
    records: list[dict[str, Any]]
    seconds: float


def wall_episode(
    robot: RobotConfig, skill: Skill, mapper: ActionMapper, sc: Scenario, latency: float
) -> WallRun:
    with (
        StandInServer(seed=0, noise=0.0, format_noise=0.0, latency=latency) as standin,
        ChatClient(robot.llm, base_url=standin.base_url) as client,
    ):
        recorder = MemoryRecorder()
        began = time.monotonic()
        outcome = run_episode(
            robot, skill, sc, HttpAsk(client), mapper, recorder, EpisodeOptions(clock="wall")
        )
        seconds = time.monotonic() - began
    return WallRun(outcome, recorder.records, seconds)


def test_the_robot_speaks_within_the_scenario_on_wall_time(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    sc = write_scenario(tmp_path, READY)
    run = wall_episode(robot_tmp, skill, mapper, sc, latency=0.3)
    out = run.outcome
    assert out.spoke_at is not None and out.spoke_at < 3.0, out
    assert judge(out, sc).success, judge(out, sc)
    assert out.actions[0][1] == "approach" and out.actions[-1][1] == "speak"
    # every LLM answer really took the stand-in's 0.3 s of wall time
    replies = [r for r in run.records if r["kind"] == "reply"]
    assert replies and all(r["latency"] >= 0.3 for r in replies)
    assert all(r["virtual_latency"] >= 0.3 for r in replies)
    # the run lasts until the speech ends or the scenario does (3 s); not stuck after it
    assert 0.3 < run.seconds < 10.0
    assert run.records[-1]["kind"] == "end"


def test_a_slow_llm_blocks_neither_perception_nor_the_end(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    sc = write_scenario(tmp_path, SHORT)
    run = wall_episode(robot_tmp, skill, mapper, sc, latency=10.0)
    # run_episode returned at the scenario's end (1 s), not when the 10 s answers came back;
    # "< 5" leaves a loaded machine 4 s of slack and still tells the two apart
    assert run.seconds < 5.0
    out = run.outcome
    assert (out.finished, out.reason) == (False, "scenario ended")
    assert judge(out, sc) == Judgement(JudgementKind.NEVER_SPOKE, "timeout: no speak by 1 s")
    assert [a for _, a in out.actions] == ["approach"]
    kinds = [r["kind"] for r in run.records]
    assert "reply" not in kinds and kinds[-1] == "end"
    assert 1.0 <= run.records[-1]["t"] < 5.0
    # the gaze change at 0.5 s was perceived while a request was outstanding (before any
    # answer could come back)
    looked = [r for r in run.records if r["kind"] == "observation" and r["toward"] is True]
    assert len(looked) == 1 and 0.5 <= looked[0]["t"] < 5.0
    stimulus = next(r for r in run.records if r["kind"] == "stimulus")
    assert stimulus["reason"] == "situation changed" and stimulus["t"] < 5.0
    plan = [r for r in run.records if r["kind"] == "request" and r["purpose"] == "plan"]
    assert len(plan) == 1 and plan[0]["t"] < 5.0


# -- SIGTERM to `onboard run` ------------------------------------------------------------------


@dataclass
class Terminated:
    run: Signalled
    records: list[dict[str, Any]]


@pytest.fixture(scope="module")
def terminated(tmp_path_factory: pytest.TempPathFactory) -> Terminated:
    """`onboard run` on the wall clock, SIGTERM sent once the episode (its approach, 5 s of
    wall time) has started."""
    tmp_path = tmp_path_factory.mktemp("sigterm")
    record = tmp_path / "run.jsonl"
    with StandInServer(seed=0, noise=0.0, format_noise=0.0) as standin:
        run = signal_when(
            "--robot", robot_copy(tmp_path), "run", "engage", "--llm", standin.base_url,
            "--clock", "wall", "--scenario", ROOT / "skills" / "scenarios" / "person-object.toml",
            "--record", record, ready=started(record), cwd=tmp_path,
        )  # fmt: skip
    records = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()]
    return Terminated(run, records)


def test_sigterm_stops_the_run_and_exits_143(terminated: Terminated) -> None:
    assert terminated.run.code == ExitCode.SIGTERM == 143, terminated.run.err
    assert "Traceback" not in terminated.run.err
    assert "exit 143: stopped by signal" in terminated.run.out


def test_sigterm_is_recorded_as_the_end(terminated: Terminated) -> None:
    end = terminated.records[-1]
    assert end["kind"] == "end"
    assert "SIGTERM" in end["reason"]
    assert end["finished"] is False
    # stopped during the approach (the person is 4 m away: it takes 5 s)
    assert [a for _, a in end["actions"]] == ["approach"]
    assert end["t"] < 5.0
    assert end["wall"] >= terminated.run.signalled_at - 0.01
    assert not any(r["kind"] == "speech" for r in terminated.records)
    assert "said nothing" in terminated.run.out and "recorded:" in terminated.run.out


def test_sigterm_verdict_names_the_signal(terminated: Terminated) -> None:
    verdict = next(line for line in terminated.run.out.splitlines() if line.startswith("failure"))
    assert "SIGTERM" in verdict or "interrupted" in verdict or "stopped" in verdict
