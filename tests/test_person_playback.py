"""A person episode replays from its recorded inputs (issue 28, item 2): the observations
perception pushed and the robot's completions come back from the recording at their times,
so a person who does what no scenario file says replays as the robot saw them. A format 3
recording re-simulates its scenario instead, and there the same episode diverges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from onboard import bundled
from onboard.base.errors import ReplayDivergence
from onboard.cli.replay import replay_recording
from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.person import PersonObservation
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.engine import SkillRunner
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer

#: what the person does at 9 s, behind the scenario's back
AWAY = "The person turns away and starts reading a newspaper."


def test_a_person_who_does_what_no_scenario_says_replays_as_the_robot_saw_them(
    robot: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    standin: StandInServer,
    tmp_path: Path,
) -> None:
    scenario = load_scenario(bundled.skills_dir() / "scenarios" / "person-object.toml")
    path = tmp_path / "turned-away.jsonl"

    def turns_away(runner: SkillRunner) -> None:
        seen = PersonObservation(t=9.0, activity=AWAY, toward=False, visible=True, distance=1.5)
        runner.clock.call_at(9.0, lambda: runner.observe(seen))

    with (
        ChatClient(robot.llm, base_url=standin.base_url) as client,
        Recorder(path) as recorder,
    ):
        outcome = run_episode(robot, skill, scenario, HttpAsk(client), mapper, recorder,
                              EpisodeOptions(latency=1.0), on_runner=turns_away)  # fmt: skip
    records = list(read_recording(path))
    asked = [json.dumps(r["messages"]) for r in records if r["kind"] == "request"]
    assert any(AWAY in text for text in asked), "the robot never asked about it"

    recorded, replayed = replay_recording(path)
    assert replayed == recorded == [action for _, action in outcome.actions]

    # the same recording as format 3: its replay re-simulates the scenario, where the person
    # never turned away
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    lines[0] = json.dumps({**header, "format": 3})
    old = tmp_path / "format-3.jsonl"
    old.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ReplayDivergence, match=r"request \d+ \(\w+\) differs from the recording"):
        replay_recording(old)
