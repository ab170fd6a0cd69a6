"""The simulated robot latches a stop until resume(); the runner resumes only on purpose."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_episode import QUIET, Episode, scenario

from onboard.base.errors import DriverError
from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import Scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.hri.world import NEAREST, SimRobot, SimWorld
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


def test_a_person_walking_toward_the_robot_stops_at_arms_length(robot: RobotConfig) -> None:
    data = scenario("person-robot").model_dump(by_alias=True)
    data["motion"] = [{"at": 1.0, "speed": -1.0}]
    clock = VirtualClock()
    world = SimWorld(Scenario.model_validate(data), robot.drivers.robot, clock, lambda _: None)
    world.start()
    clock.run(until=2.0)
    assert world.distance == pytest.approx(3.0, abs=0.11)  # 4 m, walking 1 m/s from 1 s
    clock.run(until=10.0)
    assert world.distance == pytest.approx(NEAREST)


@pytest.mark.parametrize(("at", "looks_back"), [(5.0, False), (11.0, True)])
def test_a_person_free_to_talk_looks_back_at_a_robot_that_looks_at_them(
    robot: RobotConfig, at: float, looks_back: bool
) -> None:
    """person-person: talking with someone (not ready) until 10 s, then free and walking out;
    the robot's look draws theirs only once they are free, after ``notice_time``."""
    config = robot.drivers.robot.model_copy(update={"notice_time": 1.0})
    clock = VirtualClock()
    world = SimWorld(scenario("person-person"), config, clock, lambda _: None)
    world.start()
    clock.run(until=at)
    SimRobot(world).start("head.look_at_person", {}, lambda: None)
    assert world.toward is False
    clock.run(until=at + 1.05)
    assert world.toward is looks_back


def test_without_notice_time_the_person_follows_the_scenario_gaze_only(robot: RobotConfig) -> None:
    config = robot.drivers.robot.model_copy(update={"notice_time": None})
    clock = VirtualClock()
    world = SimWorld(scenario("person-person"), config, clock, lambda _: None)
    world.start()
    clock.run(until=11.0)
    SimRobot(world).start("head.look_at_person", {}, lambda: None)
    clock.run(until=13.0)
    assert world.toward is False
