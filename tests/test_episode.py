"""Whole episodes on the virtual clock: the real stand-in over HTTP, the real embedder.

Expectations come from the stand-in policy table (runtime/testing/standin_policy.py) and the
scenario timings: the robot starts 4 m away and stops 1.5 m short at 0.5 m/s, so the
approach completes at 5.0 s; every LLM reply takes 1.0 virtual second
(``EpisodeOptions(latency=1.0)``); a pause takes 0.5 s and eye contact 1.0 s (robot.toml
defaults of the sim driver). With ``noise=0`` the intents are fixed; which paraphrase is
drawn depends on the seed, and some paraphrases do not map (the fallback ``pause`` runs),
so the sequences below are those of seed 0, and the invariants hold for every episode.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from onboard.config import LLMConfig, RobotConfig
from onboard.grounding.candidates import CandidateStore
from onboard.grounding.mapping import ActionMapper
from onboard.hri.checks import PersonVisible
from onboard.hri.kind import PersonKind
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import (
    EpisodeOptions,
    HttpAsk,
    Judgement,
    JudgementKind,
    judge,
    run_episode,
)
from onboard.hri.world import SimRobot, SimWorld
from onboard.llm.client import ChatClient, ChatResult, Message
from onboard.loop.clock import VirtualClock
from onboard.loop.engine import Outcome, SkillRunner
from onboard.loop.recorder import MemoryRecorder, Recorder
from onboard.loop.skill import Skill
from onboard.testing.standin_policy import OFF_SET_ACTIONS
from onboard.testing.standin_server import StandInServer

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "skills" / "scenarios"
QUIET = {"noise": 0.0, "format_noise": 0.0}
NEVER_SPOKE = JudgementKind.NEVER_SPOKE


def scenario(name: str) -> Scenario:
    return load_scenario(SCENARIOS / f"{name}.toml")


def shortened(name: str, end: float) -> Scenario:
    """A seed scenario that ends earlier (labels clipped), to keep slow runs short."""
    data = scenario(name).model_dump(by_alias=True)
    data["scenario"]["end"] = end
    data["label"] = [
        {**label, "to": min(label["to"], end)} for label in data["label"] if label["from"] < end
    ]
    return Scenario.model_validate(data)


@dataclass
class Episode:
    outcome: Outcome
    records: list[dict[str, Any]]
    requests: list[dict[str, Any]] = field(default_factory=list)

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]

    @property
    def names(self) -> list[str]:
        return [a for _, a in self.outcome.actions]

    def plan_replies(self) -> list[dict[str, Any]]:
        return [r for r in self.kind("reply") if r["purpose"] == "plan"]


def episode(
    robot: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    name: str | Scenario,
    server: dict[str, Any] | None = None,
    **options: Any,
) -> Episode:
    sc = scenario(name) if isinstance(name, str) else name
    with (
        StandInServer(**{"seed": 0, **QUIET, **(server or {})}) as standin,
        ChatClient(robot.llm, base_url=standin.base_url) as client,
    ):
        recorder = MemoryRecorder()
        opts = EpisodeOptions(latency=1.0, **options)
        outcome = run_episode(robot, skill, sc, HttpAsk(client), mapper, recorder, opts)
        return Episode(outcome, recorder.records, standin.requests)


def assert_engages(ep: Episode, sc: Scenario) -> None:
    """The invariants of a successful engage episode."""
    out = ep.outcome
    assert out.actions[0] == (0.0, "approach")
    assert out.actions[-1][1] == "speak" and ep.names.count("speak") == 1
    assert out.spoke_at == out.actions[-1][0]
    assert sc.label_at(out.spoke_at) in ("ok-to-engage", "ready")
    assert out.spoke_visible is True
    assert (out.finished, out.reason) == (True, "end action completed")
    verdict = judge(out, sc)
    assert verdict.success, verdict
    assert out.phrase and [r["text"] for r in ep.kind("speech")] == [out.phrase]
    assert ep.records[-1]["kind"] == "end" and ep.records[-1]["finished"] is True
    times = [t for t, _ in out.actions]
    assert times == sorted(times)
    assert_unmatched_replies_fall_back(ep)


def assert_unmatched_replies_fall_back(ep: Episode) -> None:
    """Each reply that maps to no action is a candidate, and the fallback pause runs."""
    unmatched = [m["reply"] for m in ep.kind("mapping") if m["actions"] == []]
    assert [c["reply"] for c in ep.kind("candidate")] == unmatched
    fallbacks = ep.kind("fallback")
    assert [f["why"] for f in fallbacks] == ["reply matches no action"] * len(unmatched)
    assert all(f["action"] == "pause" for f in fallbacks)
    by_fallback = [r for r in ep.kind("transition") if r["reason"].startswith("fallback")]
    assert [r["dest"] for r in by_fallback] == ["pause"] * len(unmatched)


# -- the four seed scenarios -------------------------------------------------------------------

# scenario: action names with seed 0, time of the first replan, time of the speech (None: any
# time inside an ok-to-engage / ready label; it depends on which paraphrases map)
EXPECTED = [
    # looking + APPROACHING -> [pause, eye contact, speak]; the first replan follows the
    # approach's completion at 5 s
    ("person-robot", ["approach", "pause", "eye contact", "speak"], 6.0, None),
    # busy + APPROACHING -> [pause, wait]; busy -> wait (wait_time 20 s); the activity change
    # at 18 s -> wait for cue (19 s); finished, not looking, wait_time 2 s -> speak at 22 s
    ("person-object", ["approach", "pause", "wait", "wait for cue", "speak"], 6.0, 22.0),
    # lose_person = yes (walking) answers at 1 s -> replan at 2 s: [pause, wait for cue]; then
    # the 2 s wait_time elapses -> speak, before the person walks out of sight
    ("person-environment", ["approach", "pause", "wait for cue", "speak"], 2.0, None),
    # like person-object, but the activity changes at 10 s: wait for cue at 11 s, speak at 14 s
    ("person-person", ["approach", "pause", "wait", "wait for cue", "speak"], 6.0, 14.0),
]


@pytest.mark.parametrize(
    ("name", "names", "replan", "spoke"), EXPECTED, ids=[e[0] for e in EXPECTED]
)
def test_seed_scenarios_engage(
    robot_tmp: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    name: str,
    names: list[str],
    replan: float,
    spoke: float | None,
) -> None:
    sc = scenario(name)
    ep = episode(robot_tmp, skill, mapper, name)
    assert_engages(ep, sc)
    assert ep.names == names
    assert ep.outcome.actions[1][0] == pytest.approx(replan)
    if spoke is not None:
        assert ep.outcome.spoke_at == pytest.approx(spoke)
    # every reply arrived exactly one virtual second after its request
    requests = {r["id"]: r["t"] for r in ep.kind("request")}
    for reply in ep.kind("reply"):
        assert reply["t"] == pytest.approx(requests[reply["id"]] + 1.0)
        assert reply["virtual_latency"] == 1.0
    # the speech is what the last plan asked for (a quoted phrase) or the default phrase
    assert ep.outcome.phrase in (skill.default_phrase, *_quoted(ep.plan_replies()[-1]["text"]))
    # unmatched replies are kept in the robot's candidates file
    kept = CandidateStore(robot_tmp.recordings_dir / "candidates.jsonl").list("engage")
    assert {c.reply for c in kept} == {c["reply"] for c in ep.kind("candidate")}


def _quoted(text: str) -> list[str]:
    action = json.loads(text)["action"]
    return [part for i, part in enumerate(action.split('"')) if i % 2 == 1]


@pytest.mark.parametrize("name", ["person-object", "person-person"])
def test_the_robot_waits_out_a_busy_person(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, name: str
) -> None:
    """Busy: wait_time 20 s, so only the activity change ends the wait."""
    sc = scenario(name)
    changed = sc.activity[1].at
    ep = episode(robot_tmp, skill, mapper, sc)
    second = [(r["purpose"], r["value"]) for r in ep.kind("second_stage")]
    assert second[0] == ("lose_person", False)
    assert ("wait_time", 20.0) in second
    stimuli = [(r["t"], r["action"], r["reason"]) for r in ep.kind("stimulus")]
    assert (changed, "wait", "activity changed") in stimuli
    wait_for_cue = next(t for t, a in ep.outcome.actions if a == "wait for cue")
    assert wait_for_cue == pytest.approx(changed + 1.0)
    # nothing is said while the person is busy (labelled not-ready)
    assert ep.outcome.spoke_at is not None and ep.outcome.spoke_at > changed


# -- ablations ---------------------------------------------------------------------------------


def _plan_prompts(requests: Sequence[dict[str, Any]]) -> list[str]:
    """The situation sentence ("<U> <X>") of each first-stage request the server got."""
    out = []
    for body in requests:
        last = body["messages"][-1]["content"]
        if len(body["messages"]) == 3:
            out.append(last)
    return out


def test_without_action_text_the_prompt_carries_no_robot_state(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    ep = episode(robot_tmp, skill, mapper, "person-object", action_text=False)
    prompts = _plan_prompts(ep.requests)
    assert prompts
    for text in prompts:
        assert text.startswith(skill.goal + " The person")
        assert "The robot is" not in text and "The robot made" not in text
    with_text = episode(robot_tmp, skill, mapper, "person-object")
    assert all(" The robot " in t for t in _plan_prompts(with_text.requests))


@pytest.mark.parametrize("name", ["person-robot", "person-object", "person-environment"])
def test_without_action_text_the_robot_never_plans_a_pause(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, name: str
) -> None:
    """The stand-in proposes pause only to an approaching robot, which it cannot see now."""
    ep = episode(robot_tmp, skill, mapper, name, action_text=False)
    assert ep.kind("mapping")
    assert all("pause" not in m["actions"] for m in ep.kind("mapping"))
    pauses = [r for r in ep.kind("transition") if r["dest"] == "pause"]
    assert all(r["reason"].startswith("fallback") for r in pauses)


def test_without_action_text_person_robot_is_greeted_at_once(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """Looking, state unknown -> [speak]: no pause and no eye contact first."""
    ep = episode(robot_tmp, skill, mapper, "person-robot", action_text=False)
    assert_engages(ep, scenario("person-robot"))
    assert ep.names == ["approach", "speak"]
    assert ep.outcome.spoke_at == pytest.approx(6.0)


def test_without_action_text_person_environment_fails(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """Without knowing it is already waiting for a cue, the robot keeps waiting for one."""
    sc = scenario("person-environment")
    ep = episode(robot_tmp, skill, mapper, sc, action_text=False)
    assert "speak" not in ep.names
    assert judge(ep.outcome, sc) == Judgement(NEVER_SPOKE, "timeout: no speak by 10 s")
    assert ep.outcome.reason == "scenario ended" and not ep.outcome.finished
    assert ep.names.count("wait for cue") >= 2
    # the same scenario with the action text succeeds (see test_seed_scenarios_engage)
    assert judge(episode(robot_tmp, skill, mapper, sc).outcome, sc).success


def test_without_second_stage_person_environment_never_replans(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """Only the lose-the-person answer interrupts the approach of someone walking away."""
    sc = scenario("person-environment")
    ep = episode(robot_tmp, skill, mapper, sc, second_stage=False)
    assert not any("human activity" in b["messages"][-1]["content"] for b in ep.requests)
    assert ep.kind("second_stage") == [] and ep.kind("request") == []
    assert ep.outcome.actions == [(0.0, "approach")]
    assert judge(ep.outcome, sc).kind is NEVER_SPOKE
    on = episode(robot_tmp, skill, mapper, sc)
    first = on.kind("second_stage")[0]
    assert (first["purpose"], first["value"]) == ("lose_person", True)
    assert on.kind("stimulus")[0]["reason"] == "may lose the person"


# -- robustness --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["person-robot", "person-object", "person-environment", "person-person"]
)
def test_wrapped_json_replies_still_engage(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, name: str
) -> None:
    """format_noise=1.0: every reply is fenced, in prose or a Python dict, never plain JSON."""
    ep = episode(robot_tmp, skill, mapper, name, server={"format_noise": 1.0})
    assert len(ep.kind("reply")) >= 2
    for reply in ep.kind("reply"):
        with pytest.raises(json.JSONDecodeError):
            json.loads(reply["text"])
    assert ep.kind("error") == []
    assert_engages(ep, scenario(name))


def test_out_of_set_replies_become_candidates_and_the_fallback_runs(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    sc = scenario("person-robot")
    ep = episode(robot_tmp, skill, mapper, sc, server={"off_set_rate": 1.0})
    plans = ep.plan_replies()
    assert len(plans) >= 5
    assert {json.loads(p["text"])["action"] for p in plans} <= set(OFF_SET_ACTIONS)
    mappings = ep.kind("mapping")
    assert len(mappings) == len(plans)
    unmatched = [m for m in mappings if m["actions"] == []]
    assert len(unmatched) >= len(plans) // 2
    assert_unmatched_replies_fall_back(ep)
    candidates = ep.kind("candidate")
    assert all(c["situation"].startswith("The person is sitting") for c in candidates)
    store = CandidateStore(robot_tmp.recordings_dir / "candidates.jsonl")
    assert {c.reply for c in store.list("engage")} == {c["reply"] for c in candidates}
    # none of the out-of-set actions is a greeting: the robot never speaks
    assert "speak" not in ep.names and ep.kind("speech") == [] and ep.outcome.spoke_at is None
    assert judge(ep.outcome, sc) == Judgement(NEVER_SPOKE, "timeout: no speak by 20 s")


def test_every_out_of_set_plan_is_no_match(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    ep = episode(robot_tmp, skill, mapper, "person-robot", server={"off_set_rate": 1.0})
    assert all(m["actions"] == [] for m in ep.kind("mapping"))
    assert len(ep.kind("candidate")) == len(ep.plan_replies())
    assert set(ep.names) == {"approach", "pause"}


# -- a runner assembled by hand, to see the driver and the decision timing ---------------------


@dataclass
class Direct:
    runner: SkillRunner
    driver: SimRobot
    records: list[dict[str, Any]]

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["kind"] == kind]


def run_direct(
    robot: RobotConfig, skill: Skill, mapper: ActionMapper, sc: Scenario, client: ChatClient
) -> Direct:
    """What run_episode assembles, on the virtual clock, keeping hold of runner and driver."""
    clock = VirtualClock()
    recorder = MemoryRecorder(clock.now)
    runner: SkillRunner | None = None

    def publish(observation: Any) -> None:
        if runner is not None:
            runner.observe(observation)

    world = SimWorld(sc, robot.drivers.robot, clock, publish)
    driver = SimRobot(world)
    runner = SkillRunner(
        skill,
        clock,
        driver,
        HttpAsk(client),
        PersonKind(mapper),
        recorder.write,
        latency=1.0,
        checks=[PersonVisible(skill.end)],
        on_finish=lambda _: clock.stop(),
    )
    try:
        world.start()
        runner.start(world.observation())
        clock.run(until=sc.end)
    finally:
        if not runner.finished:
            runner.stop("scenario ended")
        world.close()
    return Direct(runner, driver, recorder.records)


FAILING_LLMS = {
    # the server answers after 1 s; the client gives up after 0.3 s (deadline 0.5 s)
    "slow": {"latency": 1.0},
    # every request gets HTTP 500 and there are no retries
    "http-500": {"faults": ["500"] * 50},
}


@pytest.mark.parametrize("failure", list(FAILING_LLMS))
def test_a_failing_llm_falls_back_and_ends_safely(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, failure: str
) -> None:
    sc = shortened("person-robot", 9.0)
    config = LLMConfig(base_url="local", deadline=0.5, read_timeout=0.3, retries=0)
    with (
        StandInServer(seed=0, **QUIET, **FAILING_LLMS[failure]) as standin,
        ChatClient(config, base_url=standin.base_url) as client,
    ):
        run = run_direct(robot_tmp, skill, mapper, sc, client)
        asked = len(standin.requests)
    requests, errors = run.kind("request"), run.kind("error")
    assert run.kind("reply") == []
    assert len(errors) == len(requests) == asked >= 3
    assert all(e["source"] == "llm" for e in errors)
    plans = [r for r in requests if r["purpose"] == "plan"]
    assert len(plans) >= 2
    fallbacks = run.kind("fallback")
    assert len(fallbacks) == len(plans)
    assert {(f["action"], f["why"]) for f in fallbacks} == {("pause", "no usable LLM reply")}
    outcome = run.runner.outcome
    assert [a for _, a in outcome.actions] == ["approach"] + ["pause"] * len(plans)
    assert outcome.spoke_at is None and outcome.reason == "scenario ended"
    commands = [c for _, c in run.driver.log]
    assert "speech.say" not in commands
    assert commands.count("base.stop") == len(plans)
    assert run.driver.log[-1] == (pytest.approx(9.0), "stop")
    assert run.driver.world.base_moving is False
    assert run.records[-1]["kind"] == "end" and run.records[-1]["finished"] is False


def test_decision_overhead_is_measured_per_decision(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    sc = scenario("person-object")
    with (
        StandInServer(seed=0, **QUIET) as standin,
        ChatClient(robot_tmp.llm, base_url=standin.base_url) as client,
    ):
        run = run_direct(robot_tmp, skill, mapper, sc, client)
    plans = [r for r in run.kind("reply") if r["purpose"] == "plan"]
    overhead = run.runner.decision_overhead
    assert overhead, "no decision was timed"
    # every answered plan started an action (a planned one or the fallback): one entry each
    assert len(overhead) == len(plans) >= 3
    for before, after in overhead:
        assert 0.0 < before < 0.5  # stimulus -> request on the wire (prompt building)
        assert 0.0 < after < 0.5  # response headers -> action started (parsing, mapping)
    assert [a for _, a in run.runner.outcome.actions][-1] == "speak"
    assert ("speech.say" in [c for _, c in run.driver.log]) is True


# -- determinism and recording -----------------------------------------------------------------

VOLATILE = {"seconds", "wall", "latency"}


def _stable(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in records]


def test_same_seed_same_episode(robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper) -> None:
    noisy = {"seed": 7, "noise": 0.15, "format_noise": 0.1}
    first = episode(robot_tmp, skill, mapper, "person-object", server=noisy)
    second = episode(robot_tmp, skill, mapper, "person-object", server=noisy)
    assert len(first.records) > 20
    assert _stable(first.records) == _stable(second.records)
    assert first.outcome == second.outcome
    other = episode(robot_tmp, skill, mapper, "person-object", server={**noisy, "seed": 8})
    assert [r["text"] for r in other.kind("reply")] != [r["text"] for r in first.kind("reply")]


class ReadsTheRecording:
    """An Ask that looks at the recording file whenever the LLM is asked."""

    def __init__(self, ask: HttpAsk, path: Path) -> None:
        self.ask, self.path = ask, path
        self.seen: list[tuple[str, bool]] = []

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        last = json.loads(self.path.read_text(encoding="utf-8").splitlines()[-1])
        flushed = (
            last["kind"] == "request"
            and last["purpose"] == purpose
            and last["messages"] == [dict(m) for m in messages]
        )
        self.seen.append((purpose, flushed))
        return self.ask(purpose, messages, schema)


def test_the_recording_is_flushed_per_record(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    path = tmp_path / "episode.jsonl"
    sc = scenario("person-environment")
    with (
        StandInServer(seed=0, **QUIET) as standin,
        ChatClient(robot_tmp.llm, base_url=standin.base_url) as client,
        Recorder(path) as recorder,
    ):
        ask = ReadsTheRecording(HttpAsk(client), path)
        outcome = run_episode(
            robot_tmp, skill, sc, ask, mapper, recorder, EpisodeOptions(latency=1.0)
        )
        in_memory = recorder.records
    # while the episode ran, the request being answered was already on disk
    assert len(ask.seen) >= 4
    assert all(flushed for _, flushed in ask.seen), ask.seen
    lines = path.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert records == json.loads(json.dumps(in_memory, default=str))
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert records[0]["kind"] == "header" and records[-1]["kind"] == "end"
    assert records[-1]["actions"] == [[round(t, 3), a] for t, a in outcome.actions]
    assert records[0]["scenario"]["scenario"]["name"] == "person-environment"
    assert records[0]["options"]["action_text"] is True and records[0]["latency"] == 1.0


# -- mapping seen in these episodes ------------------------------------------------------------


def test_a_plan_keeps_its_last_step(mapper: ActionMapper) -> None:
    # the tail of the stand-in's plan for a person looking at an approaching robot
    reply = "Turn toward the person and look at their face, and finally offer the person some help."
    assert mapper.map(reply).actions in (["eye contact", "speak"], [])


@pytest.mark.parametrize(
    ("reply", "meant"),
    [
        # a near tie with the int8 kernels (wait for cue 0.789 vs eye contact 0.785), decided
        # by the CPU; with fp32 kernels 0.812 vs 0.794
        ("The robot should watch for the person to glance over.", "wait for cue"),
        # these three mapped to another action before the lexicon stage (not near ties)
        ("The robot should head back toward the person.", "approach"),
        ("The robot should go and look for the person again.", "approach"),
        ("The robot should stop approaching for now.", "pause"),
    ],
)
def test_stand_in_paraphrases_never_map_to_another_action(
    mapper: ActionMapper, reply: str, meant: str
) -> None:
    assert mapper.map(reply).actions in ([meant], [])
