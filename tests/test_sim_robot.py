"""The simulated robot latches a stop until resume(); the runner resumes only on purpose."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_episode import QUIET, Episode, scenario

from onboard.base.errors import DriverError
from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.hri.world import SimRobot, SimWorld
from onboard.llm.client import ChatClient
from onboard.loop.clock import VirtualClock
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer


def test_a_stop_is_latched_until_resume(robot: RobotConfig) -> None:
    clock = VirtualClock()
    world = SimWorld(scenario("person-robot"), robot.drivers.robot, clock, lambda _: None)
    driver = SimRobot(world)
    driver.stop()  # before any command: must not be lost
    with pytest.raises(DriverError, match="stopped"):
        driver.start("base.approach", {"stop_distance": 1.5}, lambda: None)
    assert not world.base_moving
    driver.resume()
    driver.start("base.approach", {"stop_distance": 1.5}, lambda: None)
    assert world.base_moving
    driver.stop()
    assert not world.base_moving
    with pytest.raises(DriverError, match="resume"):
        driver.start("speech.say", {"text": "hello"}, lambda: None)


def test_after_a_command_times_out_the_runner_resumes_for_the_fallback(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    approach = skill.actions["approach"]
    hasty = approach.spec.model_copy(update={"timeout": 0.5})  # the approach takes 5 s
    skill = replace(skill, actions={**skill.actions, "approach": replace(approach, spec=hasty)})
    with (
        StandInServer(seed=0, **QUIET) as standin,
        ChatClient(robot_tmp.llm, base_url=standin.base_url) as client,
    ):
        recorder = MemoryRecorder()
        outcome = run_episode(robot_tmp, skill, scenario("person-robot"), HttpAsk(client), mapper,
                              recorder, EpisodeOptions(latency=1.0))  # fmt: skip
    ep = Episode(outcome, recorder.records)
    errors = [e["message"] for e in ep.kind("error")]
    assert errors[0] == "approach: command timed out"
    assert not any("driver failed" in m or "refused" in m for m in errors)
    assert ep.names[:2] == ["approach", "pause"]
    assert {"kind": "done", "action": "pause"}.items() <= next(
        r for r in ep.records if r["kind"] == "done"
    ).items()
