"""Rounds bound every re-ask loop: after a failed check and after a failed verification.

A decision starts with the plan a stimulus asks for (round 0); each re-ask of it is one
round, at most the skill's ``max_rounds``; then the fallback runs and is never re-asked.
Episodes run on the virtual clock against the real stand-in over HTTP.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from arm_harness import BOUND
from test_episode import QUIET, Episode, scenario

from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import Scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm.client import ChatClient, ChatResult, Message
from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer

#: A person walking by who stays in place: lose_person says yes, so the robot replans at
#: 1 s while it still approaches (the approach completes at 5 s).
WALKING_BY = {
    "scenario": {"name": "walking-by", "description": "", "end": 20.0, "distance": 4.0},
    "activity": [{"at": 0.0, "text": "The person is walking by."}],
    "gaze": [{"at": 0.0, "toward": False}],
    "label": [{"from": 0.0, "to": 20.0, "state": "ok-to-engage"}],
}


@dataclass
class FailsOn:
    """A verifier that fails every completed action named in ``actions`` (all when empty)."""

    actions: Sequence[str] = ()
    name: str = "fails"

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict:
        if self.actions and step.action not in self.actions:
            return Verdict(True)
        return Verdict(False, f"{step.action} did not change what it should have")


def run(
    robot: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    sc: Scenario,
    verifier: FailsOn,
) -> Episode:
    with (
        StandInServer(seed=0, **QUIET) as standin,
        ChatClient(robot.llm, base_url=standin.base_url) as client,
    ):
        recorder = MemoryRecorder()
        outcome = run_episode(robot, skill, sc, HttpAsk(client), mapper, recorder,
                              EpisodeOptions(latency=1.0), verifiers=[verifier])  # fmt: skip
    return Episode(outcome, recorder.records)


def decisions(records: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The skill's start, then each plan request, grouped by decision: a re-ask belongs to
    the decision before it (the start action is the first decision's proposal)."""
    groups: list[list[dict[str, Any]]] = []
    for r in records:
        if r["kind"] == "start":
            groups.append([r])
        elif r["kind"] == "request" and r["purpose"] == "plan":
            if r["reason"] in ("check failed", "verification failed"):
                groups[-1].append(r)
            else:
                groups.append([r])
    return groups


@pytest.mark.parametrize("max_rounds", [0, 1, 3])
@pytest.mark.parametrize("name", ["person-robot", "person-object", "person-person"])
def test_a_verifier_that_always_fails_replans_at_most_max_rounds_per_decision(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, name: str, max_rounds: int
) -> None:
    ep = run(robot_tmp, replace(skill, max_rounds=max_rounds), mapper, scenario(name), FailsOn())
    groups = decisions(ep.records)
    assert groups, "no decision was made"
    assert all(len(g) - 1 <= max_rounds for g in groups), [len(g) for g in groups]
    reasks = ep.kind("reask")
    assert all(1 <= r["round"] <= max_rounds for r in reasks)
    assert len(reasks) == sum(len(g) - 1 for g in groups)
    # every failed verification ends in a re-ask, a fallback, or (the fallback's) spent rounds
    failed = [v for v in ep.kind("verify") if not v["ok"]]
    handled = len(reasks) + len(ep.kind("fallback")) + len(ep.kind("rounds_spent"))
    assert failed and len(failed) <= handled
    # the fallback is never re-asked: a failed verification of it only records spent rounds
    spent = ep.kind("rounds_spent")
    assert all(s["action"] == skill.fallback for s in spent)
    if max_rounds == 0:
        assert reasks == []


class ScriptedAsk:
    """The Ask seam answering from a script: plans name an action exactly (so the mapping is
    exact, whatever the embedder), lose_person says yes, wait_time 2 s."""

    def __init__(self, plans: Sequence[str]) -> None:
        self.plans = list(plans)

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        reply = {
            "plan": lambda: {"action": self.plans.pop(0) if self.plans else "wait"},
            "lose_person": lambda: {"answer": "yes"},
            "wait_time": lambda: {"wait_time": 2.0},
        }[purpose]()
        return ChatResult(text=json.dumps(reply), latency=0.0, attempts=1)


def test_a_plan_deferred_behind_an_action_whose_verification_fails_is_dropped(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    approach = skill.actions["approach"]
    steady = approach.spec.model_copy(update={"interruptible": False})
    skill = replace(skill, actions={**skill.actions, "approach": replace(approach, spec=steady)})
    sc = Scenario.model_validate(WALKING_BY)
    recorder = MemoryRecorder()
    # lose_person = yes at 1 s -> a plan at 2 s, while the approach (until 5 s) cannot yield
    ask = ScriptedAsk(["wait for cue", "eye contact"])
    options, verifiers = EpisodeOptions(latency=1.0), [FailsOn(["approach"])]
    outcome = run_episode(robot_tmp, skill, sc, ask, mapper, recorder, options, verifiers=verifiers)
    ep = Episode(outcome, recorder.records)
    deferred = ep.kind("deferred")
    assert deferred and deferred[0]["action"] == "approach", "the 1 s replan waits"
    dropped = ep.kind("dropped")
    assert [d["plan"] for d in dropped] == [deferred[0]["plan"]]
    assert dropped[0]["why"] == "verification failed"
    # the dropped plan never ran: the next transition after the approach is the re-ask's
    seq = ep.records.index(dropped[0])
    reask = next(r for r in ep.records[seq:] if r["kind"] == "reask")
    assert reask["round"] == 1
    after = [r for r in ep.records[seq:] if r["kind"] == "transition"]
    assert after and (after[0]["reason"], after[0]["dest"]) == ("plan", "eye contact")
    assert ep.records.index(after[0]) > ep.records.index(reask)
    assert "wait for cue" not in [a for _, a in ep.outcome.actions]


@dataclass
class Blocks:
    """A verifier that blocks until released: a slow model on the robot."""

    entered: threading.Event
    release: threading.Event
    name: str = "slow"

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict:
        self.entered.set()
        self.release.wait(BOUND)
        return Verdict(False, "too late to matter")


def test_a_slow_verifier_runs_off_the_loop_and_a_stop_does_not_wait_for_it(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """On the wall clock a verifier runs on a worker: while it blocks, a stop still reaches
    the robot at once and ends the episode; its late verdict changes nothing."""
    near = Scenario.model_validate({**WALKING_BY, "scenario": {**WALKING_BY["scenario"],
                                                               "distance": 1.6}})  # fmt: skip
    slow = Blocks(threading.Event(), threading.Event())
    runners: list[Any] = []

    def stop_while_verifying() -> None:
        if slow.entered.wait(BOUND):
            runners[0].clock.post(lambda: runners[0].stop("operator stop"))

    stopper = threading.Thread(target=stop_while_verifying)
    stopper.start()
    try:
        with (
            StandInServer(seed=0, **QUIET) as standin,
            ChatClient(robot_tmp.llm, base_url=standin.base_url) as client,
        ):
            recorder = MemoryRecorder()
            outcome = run_episode(robot_tmp, skill, near, HttpAsk(client), mapper, recorder,
                                  EpisodeOptions(clock="wall"), verifiers=[slow],
                                  on_runner=runners.append)  # fmt: skip
        assert slow.entered.is_set() and not slow.release.is_set()
        assert outcome.reason == "operator stop" and not outcome.finished
        assert not [r for r in recorder.records if r["kind"] == "verify"]
    finally:
        slow.release.set()
        stopper.join(BOUND)
