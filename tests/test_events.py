"""runtime/loop/events.py: when the event manager asks the LLM again (stimulus types 1, 2-A, 2-B).

The manager runs on a VirtualClock with the real engage skill's actions. Its second-stage
collaborator is a small test implementation that answers after a virtual delay, as the
engine's LLM-backed one does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from onboard.hri.kind import person_changes
from onboard.hri.person import PersonObservation
from onboard.loop.clock import VirtualClock
from onboard.loop.events import EventManager
from onboard.loop.skill import Action, Skill, load_skill

ROOT = Path(__file__).resolve().parent.parent
BUSY = "The person is talking on the phone."
DONE = "The person has hung up the phone."


@pytest.fixture(scope="module")
def engage() -> Skill:
    return load_skill(ROOT / "skills" / "engage.toml")


def obs(
    activity: str | None = BUSY, toward: bool | None = False, visible: bool = True, t: float = 0.0
) -> PersonObservation:
    return PersonObservation(t=t, activity=activity, toward=toward, visible=visible)


class DelayedSecondStage:
    """Answers each second-stage question ``delay`` virtual seconds after it is asked."""

    def __init__(
        self,
        clock: VirtualClock,
        wait: float | None = 3.0,
        lose: bool | None = False,
        delay: float = 1.0,
    ) -> None:
        self.clock = clock
        self.wait = wait
        self.lose = lose
        self.delay = delay
        self.asked: list[tuple[Any, ...]] = []

    def wait_time(self, activity: str, answer: Callable[[float | None], None]) -> None:
        self.asked.append(("wait_time", activity, self.clock.now()))
        seconds = self.wait
        self.clock.call_later(self.delay, lambda: answer(seconds))

    def lose_person(
        self, activity: str, horizon: float, answer: Callable[[bool | None], None]
    ) -> None:
        self.asked.append(("lose_person", activity, horizon, self.clock.now()))
        yes = self.lose
        self.clock.call_later(self.delay, lambda: answer(yes))


@dataclass
class Harness:
    clock: VirtualClock
    second: DelayedSecondStage | None
    manager: EventManager
    fired: list[tuple[str, float]] = field(default_factory=list)
    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def at(self, when: float, callback: Callable[[], None]) -> None:
        self.clock.call_at(when, callback)

    def run(self, until: float = 100.0) -> list[tuple[str, float]]:
        self.clock.run(until)
        return self.fired


def harness(second_stage: bool = True, **answers: Any) -> Harness:
    clock = VirtualClock()
    second = DelayedSecondStage(clock, **answers) if second_stage else None
    fired: list[tuple[str, float]] = []
    records: list[tuple[str, dict[str, Any]]] = []
    manager = EventManager(
        clock,
        second,
        lambda reason: fired.append((reason, clock.now())),
        lambda kind, **fields: records.append((kind, fields)),
        changes=person_changes,
    )
    return Harness(clock, second, manager, fired, records)


def action(skill: Skill, name: str) -> Action:
    return skill.actions[name]


# ---------------------------------------------------------------------------- type 1


def test_gaze_stimulus_fires_on_gaze_change_not_activity_change(engage: Skill) -> None:
    h = harness(wait=math.inf)
    start = obs(BUSY, toward=False)
    h.manager.arm(action(engage, "wait for cue"), start)
    h.at(1.5, lambda: h.manager.observe(start, obs(DONE, toward=False)))
    h.at(2.5, lambda: h.manager.observe(obs(DONE, toward=False), obs(DONE, toward=True)))
    h.at(3.5, lambda: h.manager.observe(obs(DONE, toward=True), obs(DONE, toward=False)))
    assert h.run() == [("gaze changed", 2.5)]  # fires once, then the manager is disarmed
    assert h.records == [("stimulus", {"action": "wait for cue", "reason": "gaze changed"})]


def test_activity_stimulus_fires_on_activity_change_not_gaze_change(engage: Skill) -> None:
    h = harness(wait=math.inf)
    start = obs(BUSY, toward=False)
    h.manager.arm(action(engage, "wait"), start)
    h.at(1.5, lambda: h.manager.observe(start, obs(BUSY, toward=True)))
    h.at(2.5, lambda: h.manager.observe(obs(BUSY, toward=True), obs(DONE, toward=True)))
    assert h.run() == [("activity changed", 2.5)]
    assert h.records == [("stimulus", {"action": "wait", "reason": "activity changed"})]


@pytest.mark.parametrize("name", ["wait", "wait for cue"])
def test_type_1_does_not_fire_on_completion(engage: Skill, name: str) -> None:
    h = harness(wait=math.inf)
    h.manager.arm(action(engage, name), obs())
    h.at(1.0, h.manager.completed)
    assert h.run() == []


@pytest.mark.parametrize("name", ["wait", "wait for cue"])
def test_wait_time_bounds_type_1_from_the_action_start(engage: Skill, name: str) -> None:
    h = harness(wait=3.0, delay=1.0)
    h.at(2.0, lambda: h.manager.arm(action(engage, name), obs(BUSY)))
    # asked at 2.0, answered at 3.0: the bound is 2.0 + 3.0, not 3.0 + 3.0
    assert h.run() == [("wait time elapsed", 5.0)]
    assert h.second is not None
    assert h.second.asked == [("wait_time", BUSY, 2.0)]


def test_wait_time_already_passed_fires_when_the_answer_comes(engage: Skill) -> None:
    h = harness(wait=0.5, delay=2.0)
    h.manager.arm(action(engage, "wait"), obs())
    assert h.run() == [("wait time elapsed", 2.0)]


def test_wait_time_question_names_nothing_visible(engage: Skill) -> None:
    h = harness(wait=math.inf)
    h.manager.arm(action(engage, "wait for cue"), obs(activity=None, visible=False))
    h.run()
    assert h.second is not None
    assert h.second.asked == [("wait_time", "nothing visible", 0.0)]


@pytest.mark.parametrize("wait", [math.inf, None])
def test_unbounded_or_missing_wait_time_never_fires(engage: Skill, wait: float | None) -> None:
    h = harness(wait=wait)
    h.manager.arm(action(engage, "wait"), obs())
    assert h.run(until=1000.0) == []


def test_no_second_stage_means_no_bound(engage: Skill) -> None:
    h = harness(second_stage=False)
    start = obs(BUSY)
    h.manager.arm(action(engage, "wait"), start)
    assert h.run(until=1000.0) == []
    # the stimulus itself still works without a second stage
    h.manager.observe(start, obs(DONE))
    assert h.fired == [("activity changed", 1000.0)]


def test_type_1_change_cancels_the_wait_time_timer(engage: Skill) -> None:
    h = harness(wait=3.0, delay=1.0)
    start = obs(BUSY, toward=False)
    h.manager.arm(action(engage, "wait for cue"), start)
    h.at(2.0, lambda: h.manager.observe(start, obs(BUSY, toward=True)))
    assert h.run() == [("gaze changed", 2.0)]  # and not again at 3.0


# ---------------------------------------------------------------------------- type 2-A


@pytest.mark.parametrize("name", ["eye contact", "pause"])
def test_low_level_fires_on_completion_only(engage: Skill, name: str) -> None:
    h = harness(lose=True)
    start = obs(BUSY, toward=False)
    h.manager.arm(action(engage, name), start)
    h.at(0.5, lambda: h.manager.observe(start, obs(DONE, toward=True)))
    h.at(0.7, lambda: h.manager.observe(start, obs(visible=False)))
    h.at(2.0, h.manager.completed)
    assert h.run() == [("completed", 2.0)]
    assert h.second is not None
    assert h.second.asked == []  # 2-A asks no second-stage question


def test_completion_without_an_armed_action_does_nothing(engage: Skill) -> None:
    h = harness()
    h.manager.completed()
    h.manager.observe(obs(BUSY), obs(DONE))
    h.manager.arm(action(engage, "pause"), obs())
    h.manager.disarm()
    h.manager.completed()
    assert h.run() == []


# ---------------------------------------------------------------------------- type 2-B


def test_high_level_fires_on_completion(engage: Skill) -> None:
    h = harness(lose=False)
    h.manager.arm(action(engage, "approach"), obs())
    h.at(4.0, h.manager.completed)
    assert h.run() == [("completed", 4.0)]


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(obs(DONE, toward=False), id="activity"),
        pytest.param(obs(BUSY, toward=True), id="gaze"),
    ],
)
def test_high_level_fires_on_a_situation_change(engage: Skill, new: PersonObservation) -> None:
    h = harness(lose=False)
    start = obs(BUSY, toward=False)
    h.manager.arm(action(engage, "approach"), start)
    h.at(1.5, lambda: h.manager.observe(start, start))  # no change
    h.at(2.5, lambda: h.manager.observe(start, new))
    assert h.run() == [("situation changed", 2.5)]


def test_high_level_asks_lose_person_with_the_horizon(engage: Skill) -> None:
    h = harness(lose=True, delay=1.5)
    h.at(1.0, lambda: h.manager.arm(action(engage, "approach"), obs(BUSY)))
    assert h.run() == [("may lose the person", 2.5)]
    assert h.second is not None
    assert h.second.asked == [("lose_person", BUSY, 5.0, 1.0)]
    assert h.records == [("stimulus", {"action": "approach", "reason": "may lose the person"})]


@pytest.mark.parametrize("answer", [False, None])
def test_high_level_lose_person_no_does_not_fire(engage: Skill, answer: bool | None) -> None:
    h = harness(lose=answer)
    h.manager.arm(action(engage, "approach"), obs())
    assert h.run() == []


def test_high_level_without_second_stage_still_fires_on_change(engage: Skill) -> None:
    h = harness(second_stage=False)
    start = obs(BUSY, toward=False)
    h.manager.arm(action(engage, "approach"), start)
    h.at(3.0, lambda: h.manager.observe(start, obs(BUSY, toward=True)))
    assert h.run() == [("situation changed", 3.0)]


# ---------------------------------------------------------------------------- out of sight


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("wait", "activity changed"),
        ("wait for cue", "gaze changed"),
        ("approach", "situation changed"),
    ],
)
@pytest.mark.parametrize("leaving", [True, False], ids=["goes-out-of-sight", "comes-back"])
def test_visibility_change_counts_for_activity_and_gaze(
    engage: Skill, name: str, reason: str, leaving: bool
) -> None:
    h = harness(wait=math.inf, lose=False)
    # same activity and gaze fields: only visibility changes
    seen, unseen = obs(BUSY, toward=False), obs(BUSY, toward=False, visible=False)
    old, new = (seen, unseen) if leaving else (unseen, seen)
    h.manager.arm(action(engage, name), old)
    h.at(1.0, lambda: h.manager.observe(old, new))
    assert h.run() == [(reason, 1.0)]


# ---------------------------------------------------------------------------- disarm, stale


def test_disarm_prevents_a_later_timer(engage: Skill) -> None:
    h = harness(wait=3.0, delay=1.0)
    start = obs(BUSY)
    h.manager.arm(action(engage, "wait"), start)
    h.at(2.0, h.manager.disarm)  # the timer for 3.0 is set by now
    h.at(4.0, lambda: h.manager.observe(start, obs(DONE)))  # disarmed: ignored too
    assert h.run() == []


def test_disarm_before_the_answer_ignores_it(engage: Skill) -> None:
    h = harness(wait=3.0, lose=True, delay=1.0)
    h.manager.arm(action(engage, "approach"), obs())
    h.at(0.5, h.manager.disarm)
    assert h.run() == []


def test_stale_wait_time_answer_is_ignored(engage: Skill) -> None:
    h = harness(wait=2.0, delay=1.0)
    h.manager.arm(action(engage, "wait"), obs())  # answer at 1.0 -> would fire at 2.0
    h.at(0.5, lambda: h.manager.arm(action(engage, "wait for cue"), obs()))
    assert h.run() == [("wait time elapsed", 2.5)]  # 0.5 + 2.0, from the second arm only
    assert h.records == [("stimulus", {"action": "wait for cue", "reason": "wait time elapsed"})]


def test_stale_lose_person_answer_is_ignored(engage: Skill) -> None:
    h = harness(lose=True, delay=1.0)
    h.manager.arm(action(engage, "approach"), obs())  # "yes" arrives at 1.0
    h.at(0.5, lambda: h.manager.arm(action(engage, "pause"), obs()))
    h.at(3.0, h.manager.completed)
    assert h.run() == [("completed", 3.0)]


def test_rearming_from_the_fire_callback_watches_the_new_action(engage: Skill) -> None:
    """The engine begins the next action from inside ``fire``; the new arm must hold."""
    clock = VirtualClock()
    fired: list[tuple[str, float]] = []
    manager: EventManager

    def fire(reason: str) -> None:
        fired.append((reason, clock.now()))
        if len(fired) == 1:
            manager.arm(engage.actions["wait for cue"], obs(BUSY, toward=False))

    manager = EventManager(clock, DelayedSecondStage(clock, wait=4.0), fire, lambda *a, **k: None,
                           changes=person_changes)  # fmt: skip
    start = obs(BUSY, toward=False)
    manager.arm(engage.actions["wait"], start)
    clock.call_at(1.0, lambda: manager.observe(start, obs(DONE, toward=False)))
    clock.run(until=100.0)
    # "wait" fired at 1.0 (its own wait_time timer, due at 4.0, must not fire), then
    # "wait for cue" armed at 1.0 fires at its bound 1.0 + 4.0
    assert fired == [("activity changed", 1.0), ("wait time elapsed", 5.0)]
