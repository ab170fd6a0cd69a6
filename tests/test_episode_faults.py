"""Whole episodes against a hostile endpoint (runtime/testing/fault_server.py, loopback HTTP),
on the virtual clock: the fallback comes at the deadline (recorded, virtual time), the
breaker stops asking a failing endpoint, a stop signal ends the episode, the recording
replays, and the API key is nowhere in what was written."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from arm_harness import BOUND
from test_cli import robot_copy, signal_when

from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.replay import replay
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.engine import Outcome
from onboard.loop.exitcodes import ExitCode
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.skill import Skill
from onboard.testing.fault_server import FaultServer

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "skills" / "scenarios" / "person-robot.toml"
SECRET = "sk-onboard-fault-4c1d9e0b"
DEADLINE = 1.0
#: the exchange's own cost on top of the deadline on a loaded two-core machine
SLACK = 3.0  # measured exchange time on a loaded machine; the slow faults last 5 s or more


def faulty_robot(robot: RobotConfig, **llm: Any) -> RobotConfig:
    settings = {
        "deadline": DEADLINE, "read_timeout": 5.0, "retries": 2, "api_key_env":
        "ONBOARD_FAULT_SECRET", "breaker_failures": 3, "breaker_cooldown": 8.0, **llm,
    }  # fmt: skip
    return robot.model_copy(update={"llm": robot.llm.model_copy(update=settings)})


def episode(
    robot: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    server: FaultServer,
    path: Path,
    options: EpisodeOptions | None = None,
) -> tuple[Outcome, list[dict[str, Any]]]:
    with (
        ChatClient(robot.llm, base_url=server.base_url) as client,
        Recorder(path) as recorder,
    ):
        outcome = run_episode(robot, skill, load_scenario(SCENARIO), HttpAsk(client), mapper,
                              recorder, options or EpisodeOptions())  # fmt: skip
    return outcome, list(read_recording(path))


def exchanges(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(request, its error) for every failed exchange of the episode."""
    requests = {r["id"]: r for r in records if r["kind"] == "request"}
    return [(requests[r["id"]], r) for r in records if r["kind"] == "error" and "id" in r]


def assert_written_without_the_key(robot: RobotConfig, path: Path) -> None:
    for file in [path, *robot.recordings_dir.glob("**/*")]:
        if file.is_file():
            assert SECRET not in file.read_text(encoding="utf-8"), file


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ONBOARD_FAULT_SECRET", SECRET)
    return SECRET


SLOW = ["drip_headers", "drip_body", "hang", "late"]
FAST = ["huge", "reset", "429", "503", "malformed", "echo_key_401"]


@pytest.mark.parametrize("mode", SLOW + FAST)
def test_a_faulty_endpoint_gets_the_fallback_at_the_deadline(
    mode: str,
    secret: str,
    robot_tmp: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    tmp_path: Path,
) -> None:
    robot = faulty_robot(robot_tmp, max_reply_bytes=65536)
    path = tmp_path / "episode.jsonl"
    with FaultServer(after=mode, drip=0.05, late=5.0, retry_after="30") as server:
        outcome, records = episode(robot, skill, mapper, server, path)
        asked = len(server.requests)
    failed = exchanges(records)
    assert failed and outcome.llm_replies == 0 and outcome.llm_failures == len(failed)
    fallbacks = [r for r in records if r["kind"] == "fallback"]
    assert fallbacks and fallbacks[0]["why"] == "no usable LLM reply"
    request, error = failed[0]
    took = error["t"] - request["t"]  # virtual seconds from the request to its failure
    assert took == pytest.approx(error["virtual_latency"], abs=1e-3)
    if mode in SLOW:
        assert DEADLINE <= took <= DEADLINE + SLACK, error
    else:
        assert took < DEADLINE, error  # fails fast, no waiting out the deadline
    plan_error = next(e for _, e in failed if e["purpose"] == "plan")
    assert fallbacks[0]["t"] == plan_error["t"]  # the fallback came when the exchange failed
    if mode == "huge":
        assert "max_reply_bytes = 65536" in error["message"]
    if mode in ("429", "503"):
        assert "Retry-After 30 s is past the deadline" in error["message"]
    # the breaker: three failures in a row, then no asking for 8 s of episode time
    [opened, *_] = [r for r in records if r["kind"] == "breaker" and r["state"] == "open"]
    skipped = [r for r in records if r["kind"] == "llm_skipped"]
    assert outcome.llm_skipped == len(skipped) >= 1
    assert all(opened["t"] <= r["t"] < opened["until"] for r in skipped[:1])
    assert asked <= 3 * (robot.llm.retries + 1) * (1 + len(failed) // 3)
    recorded, replayed = replay(path)
    assert recorded == replayed
    assert_written_without_the_key(robot, path)


def test_an_echoed_key_is_scrubbed_from_the_recording_and_the_candidates(
    secret: str, robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    robot = faulty_robot(robot_tmp)
    path = tmp_path / "episode.jsonl"
    with FaultServer(after="echo_key") as server:
        outcome, records = episode(robot, skill, mapper, server, path)
    assert outcome.llm_replies >= 1
    replies = [r for r in records if r["kind"] == "reply"]
    assert all("Bearer ***" in r["text"] for r in replies)
    assert_written_without_the_key(robot, path)
    recorded, replayed = replay(path)
    assert recorded == replayed


@pytest.mark.parametrize("clock", ["virtual", "wall"])
@pytest.mark.parametrize("mode", [*SLOW, "503"])
def test_a_stop_signal_ends_the_episode_within_a_second(
    mode: str,
    clock: str,
    secret: str,
    robot_tmp: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    tmp_path: Path,
) -> None:
    # the deadline (30 s) is far away: only the signal can end the exchange in time
    robot = faulty_robot(robot_tmp, deadline=30.0, read_timeout=60.0)
    path = tmp_path / "episode.jsonl"
    sent: list[float] = []

    def signal_once_asked() -> None:  # the first exchange is under way: the handlers are in
        if server.asked.wait(BOUND):
            sent.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGTERM)

    # late: answers after 20 s; 503: asks to retry after 20 s, within the 30 s deadline
    with FaultServer(after=mode, drip=0.05, late=20.0, retry_after="20") as server:
        sender = threading.Thread(target=signal_once_asked, daemon=True)
        sender.start()
        options = EpisodeOptions(clock=clock, handle_signals=True)
        outcome, records = episode(robot, skill, mapper, server, path, options)
        seconds = time.monotonic() - sent[0]
        sender.join()
    assert outcome.signal == "SIGTERM"
    [end] = [r for r in records if r["kind"] == "end"]
    assert end["reason"] == "SIGTERM received"
    # episode time: the stop came while the first exchange waited (the fault holds it 20 s);
    # it takes well under a second here, the bounds leave a loaded machine slack
    assert end["t"] < 6.0
    assert seconds < 5.0
    assert_written_without_the_key(robot, path)


def test_a_long_reply_under_the_cap_is_never_mapped(
    secret: str, robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    robot = faulty_robot(robot_tmp)
    path = tmp_path / "episode.jsonl"
    long = json.dumps({"action": "Wait for the person, then approach. " * 3000})  # ~110 kB
    assert len(long) < robot.llm.max_reply_bytes
    with FaultServer(content=long) as server:
        outcome, records = episode(robot, skill, mapper, server, path)
    assert outcome.llm_replies >= 1
    assert not [r for r in records if r["kind"] == "mapping"]
    errors = [r for r in records if r["kind"] == "error" and "over 1000" in r["message"]]
    assert errors
    assert next(r for r in records if r["kind"] == "fallback")["why"] == "unusable LLM reply"


def test_the_budget_refuses_a_runaway_loop_and_the_refusal_replays(
    secret: str, robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    robot = faulty_robot(robot_tmp, requests_per_minute=2, breaker_failures=0)
    path = tmp_path / "episode.jsonl"
    # one step per plan, so the refused request after it leaves the robot nothing to do
    # ("Stop and wait." is two steps since the mapper reads "and" between actions)
    with FaultServer(content='{"action": "Stop."}') as server:
        outcome, records = episode(robot, skill, mapper, server, path)
        asked = len(server.requests)
    assert asked == 2
    refused = [r for r in records if r["kind"] == "error" and "not asked" in r.get("message", "")]
    assert refused and "requests_per_minute = 2" in refused[0]["message"]
    assert outcome.llm_replies == 2 and outcome.llm_failures == len(refused)
    assert any(r["kind"] == "fallback" for r in records)
    recorded, replayed = replay(path)
    assert recorded == replayed


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, ExitCode.SIGTERM), (signal.SIGINT, ExitCode.SIGINT)]
)
def test_onboard_run_on_the_virtual_clock_stops_within_a_second(
    sig: signal.Signals, code: ExitCode, tmp_path: Path
) -> None:
    """The reported fault: a dripping endpoint kept `onboard run --clock virtual` deaf to
    SIGTERM and SIGINT until SIGKILL."""
    record = tmp_path / "run.jsonl"
    with FaultServer(after="drip_headers", drip=0.5) as server:
        run = signal_when(
            "--robot", robot_copy(tmp_path), "run", "engage", "--llm", server.base_url,
            "--clock", "virtual", "--scenario", SCENARIO, "--record", record,
            ready=lambda: bool(server.requests),  # the first exchange is dripping now
            cwd=tmp_path, sig=sig, waiting_for="an LLM request",
        )  # fmt: skip
    assert run.code == code, run.err
    assert run.seconds < 6.0  # well under a second here; the drip alone never ends
    end = [json.loads(line) for line in record.read_text(encoding="utf-8").splitlines()][-1]
    assert end["kind"] == "end" and sig.name in end["reason"]
