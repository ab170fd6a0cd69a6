"""The recorder is the one source of truth (issue 33, item 1): each record it writes is
published to its subscribers as written, and a subscriber that fails is detached and logged
once while the episode and its recording go on.

Real episodes: Engage against the stand-in LLM on loopback, on the virtual clock.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from onboard import bundled
from onboard.cli.replay import replay_recording
from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.recorder import Published, Recorder, read_recording
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer


class Fails:
    """A subscriber that raises at its ``at``-th record."""

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def __call__(self, published: Published) -> None:
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError("the live view's socket went away")


def test_subscribers_get_each_record_as_written_and_a_failing_one_is_detached_once(
    robot: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    standin: StandInServer,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = tmp_path / "episode.jsonl"
    scenario = load_scenario(bundled.skills_dir() / "scenarios" / "person-object.toml")
    seen: list[Published] = []
    fails = Fails(at=3)
    with (
        caplog.at_level(logging.WARNING, logger="onboard.loop.recorder"),
        ChatClient(robot.llm, base_url=standin.base_url) as client,
        Recorder(path) as recorder,
    ):
        recorder.subscribe(fails)
        recorder.subscribe(seen.append)
        outcome = run_episode(robot, skill, scenario, HttpAsk(client), mapper, recorder,
                              EpisodeOptions(latency=robot.eval.standin_latency))  # fmt: skip
    assert outcome.phrase, "the episode ran to its end despite the failed subscriber"
    # the subscriber after the failing one saw every record, exactly as the file holds it
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) > 20
    assert [p.line for p in seen] == lines
    assert [p.record for p in seen] == recorder.records == list(read_recording(path))
    # the failing one was called up to its failure, then never again; one warning says so
    assert fails.calls == 3
    assert [why for _, why in recorder.detached] == [
        "RuntimeError: the live view's socket went away"
    ]
    warnings = [r for r in caplog.records if r.name == "onboard.loop.recorder"]
    assert len(warnings) == 1 and "detached" in warnings[0].getMessage()
    assert recorder.fault is None
    recorded, replayed = replay_recording(path)
    assert recorded == replayed


def test_a_memory_recorder_publishes_too_and_unsubscribe_stops_it() -> None:
    recorder = Recorder(None)
    seen: list[Published] = []
    recorder.subscribe(seen.append)
    recorder.write("header", format=3)
    recorder.unsubscribe(seen.append)
    recorder.write("end", actions=[])
    assert [p.record["kind"] for p in seen] == ["header"]
    assert seen[0].line.startswith('{"seq": 0, ') and seen[0].line.endswith('"format": 3}')


def test_secrets_are_scrubbed_before_any_subscriber_sees_a_record(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    seen: list[Published] = []
    with Recorder(path) as recorder:
        recorder.hide("sk-live-123456")
        recorder.subscribe(seen.append)
        recorder.write("request", text="key sk-live-123456 here")
    assert "sk-live-123456" not in seen[0].line
    assert seen[0].line == path.read_text(encoding="utf-8").rstrip("\n")
