"""The Engage skill's learned critic (issue 15): its features, its verdicts with the shipped
model, its data, its errors, and the episodes and recordings it takes part in.

Verdicts are asserted only where the score is far from the threshold (``MARGIN``), and the
margin is asserted first: the critic runs in fp32 and its scores move by far less than that
between CPUs, so no verdict here rests on a floating-point tie.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from test_cli import Result, onboard, one_line_error, robot_copy, skills_copy
from test_eval import person

from onboard.base.errors import CriticError
from onboard.config import RobotConfig
from onboard.grounding.embedder import DIM, Embedder
from onboard.grounding.mapping import ActionMapper
from onboard.hri.collect import PersonCollectSettings, collect_person_data, reward_of
from onboard.hri.critic import (
    AGE_CAP,
    PersonFeatures,
    SkillCritic,
    critic_model_path,
    feature_names,
    load_skill_critic,
    open_skill_critic,
)
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import EpisodeOptions, JudgementKind, judge, judge_speech, run_episode
from onboard.loop.kind import Step
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill
from onboard.testing.random_ask import RandomAsk

ROOT = Path(__file__).resolve().parent.parent
TRAINING = ROOT / "bench" / "data" / "engage-train" / "scenarios"
MARGIN = 0.05


def seen(activity: str, toward: bool, t: float = 10.0, distance: float | None = 2.0) -> object:
    """A person observation as the event manager hands it to a check."""
    return SimpleNamespace(visible=True, activity=activity, toward=toward, distance=distance, t=t)


@pytest.fixture(scope="module")
def shipped(critic_skill: Skill, robot: RobotConfig) -> SkillCritic:
    critic = open_skill_critic(critic_skill, robot.embedder_dir)
    assert critic is not None
    return critic


# -- features -----------------------------------------------------------------------------------


def test_the_state_vector_holds_the_activity_embedding_gaze_distance_and_running_action(
    critic_skill: Skill, embedder: Embedder
) -> None:
    features = PersonFeatures(critic_skill, embedder.embed)
    assert features.names == feature_names(critic_skill) and len(features) == DIM + 5 + 7 + 1
    text = "The person is reading a newspaper."
    v = features.vector(seen(text, True, t=100.0, distance=2.5), "wait", since=10.0)
    assert np.allclose(v[:DIM], embedder.embed([text])[0])
    named = dict(zip(features.names, v.tolist(), strict=True))
    assert named["visible"] == 1 and named["looking_toward"] == 1 and named["looking_away"] == 0
    assert named["distance_m"] == 2.5 and named["distance_known"] == 1
    assert named["running=wait"] == 1 and sum(v[DIM + 5 : -1]) == 1
    assert named["running_for_s"] == AGE_CAP  # 90 s running, counted up to the cap
    gone = SimpleNamespace(visible=False, activity=None, toward=None, distance=None, t=3.0)
    v = features.vector(gone, "not an action", since=1.0)
    named = dict(zip(features.names, v.tolist(), strict=True))
    assert not v[:DIM].any() and named["visible"] == 0 and named["distance_known"] == 0
    assert named["running=idle"] == 1 and named["running_for_s"] == 2.0


# -- the shipped model's verdicts ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("activity", "toward", "allowed"),
    [
        ("The person is talking on a phone.", False, False),
        ("The person is talking with another person.", False, False),
        ("A woman is busy filling in a long form at the counter.", False, False),
        ("The person is sitting on a chair, waiting.", True, True),
        ("A man stands by the desk looking around, waiting for someone to help.", True, True),
    ],
)
def test_the_critic_refuses_speaking_to_a_busy_person_and_allows_it_to_a_ready_one(
    shipped: SkillCritic, activity: str, toward: bool, allowed: bool
) -> None:
    check = shipped.check(lambda: ("wait", 7.0))
    value, ood = check.score("speak", seen(activity, toward))
    assert not ood
    assert abs(value - shipped.epsilon) > MARGIN, f"{value:+.3f} is too near the threshold"
    verdict = check.check([SimpleNamespace(action="speak")], seen(activity, toward))  # type: ignore[list-item]
    assert verdict.ok is allowed and verdict.score == pytest.approx(value)
    if not allowed:
        assert f"scored 'speak' {value:+.2f}" in verdict.feedback
        assert f"threshold {shipped.epsilon:+.2f}" in verdict.feedback


def test_outside_the_training_range_the_seed_rule_allows_and_readiness_speaks_only_when_sure(
    shipped: SkillCritic, critic_skill: Skill, robot: RobotConfig
) -> None:
    """ReAd-J counts a state outside the training range as "score unknown" and allows it; the
    readiness rule scores speech there at the nearest state it knows and never refuses holding
    back on it (when unsure, it neither vouches for speech nor pushes for it)."""
    assert critic_skill.critic is not None
    seed_rule = critic_skill.critic.model_copy(update={
        "rule": "joint", "epsilon": 0.1, "ready": None, "members": [], "looking_away": None,
        "attend": None, "look_held": None})  # fmt: skip
    joint = open_skill_critic(dataclasses.replace(critic_skill, critic=seed_rule),
                              robot.embedder_dir)  # fmt: skip
    assert joint is not None
    check = joint.check(lambda: ("wait", 7.0))
    far = seen("The person is talking on a phone.", False, distance=60.0)
    assert check.score("speak", far)[1]
    verdict = check.check([Step("speak")], far)  # type: ignore[arg-type]
    assert verdict.ok and "score unknown" in verdict.feedback
    # a new wording is not out of range: the embedding is not boxed per dimension
    new_words = seen("Someone hums while painting her nails on the bench.", False)
    assert not check.score("speak", new_words)[1]
    folds = [f"models/critics/engage/fold{i}.onnx" for i in range(5)]
    measured = critic_skill.critic.model_copy(update={
        "rule": "readiness", "epsilon": -0.3, "ready": 0.3, "members": folds,
        "looking_away": None, "attend": None, "look_held": None})  # fmt: skip
    opened = open_skill_critic(
        dataclasses.replace(critic_skill, critic=measured), robot.embedder_dir
    )
    assert opened is not None
    shipped = opened  # the readiness rule as issue 27 measured it
    readiness = shipped.check(lambda: ("wait", 7.0))
    refused = readiness.check([Step("speak")], far)  # type: ignore[arg-type]
    assert not refused.ok and "outside its training range" in refused.feedback
    near_ready = seen("The person is sitting on a chair, waiting.", True, distance=0.5)
    value, ood = readiness.score("wait", near_ready)
    assert ood and value > shipped.spec.ready + MARGIN  # type: ignore[operator]
    assert readiness.check([Step("wait")], near_ready).ok  # type: ignore[arg-type]


def test_the_readiness_rule_holds_back_speech_to_a_busy_person_and_delay_before_a_ready_one(
    critic_skill: Skill, robot: RobotConfig
) -> None:
    """A plan that speaks is judged by speaking's own value (a step before it changes nothing);
    a plan that does not is refused only where speaking scores ``ready`` or more."""
    assert critic_skill.critic is not None
    spec = critic_skill.critic.model_copy(update={
        "rule": "readiness", "epsilon": 0.1, "ready": 0.3, "look_held": None,
        "answer_within": None})  # fmt: skip
    critic = open_skill_critic(dataclasses.replace(critic_skill, critic=spec), robot.embedder_dir)
    assert critic is not None
    check = critic.check(lambda: ("pause", 3.0))
    busy = seen("The person is talking on a phone.", False)
    ready = seen("The person is sitting on a chair, waiting.", True)
    q_busy, q_ready = check.score("speak", busy)[0], check.score("speak", ready)[0]
    assert q_busy < 0.1 - MARGIN and q_ready > 0.3 + MARGIN
    assert check.score("wait", ready)[0] == q_ready  # every action is scored by speaking's value

    def plan(*actions: str) -> list[Step]:
        return [Step(a) for a in actions]

    for proposal in (plan("speak"), plan("eye contact", "speak")):
        verdict = check.check(proposal, busy)  # type: ignore[arg-type]
        assert not verdict.ok and "scored 'speak'" in verdict.feedback
        assert check.check(proposal, ready).ok  # type: ignore[arg-type]
    assert check.check(plan("wait"), busy).ok  # type: ignore[arg-type]
    held = check.check(plan("wait for cue"), ready)  # type: ignore[arg-type]
    assert not held.ok and "looks ready" in held.feedback and held.score == q_ready
    spec = spec.model_copy(update={"ready": None})
    never = open_skill_critic(dataclasses.replace(critic_skill, critic=spec), robot.embedder_dir)
    assert never is not None
    assert never.check(lambda: ("pause", 3.0)).check(plan("wait"), ready).ok  # type: ignore[arg-type]


def test_the_gaze_bar_waits_for_a_look_after_a_busy_reading_and_asks_for_eye_contact(
    critic_skill: Skill, robot: RobotConfig
) -> None:
    """``looking_away``: speech to a person not looking at the robot needs that score, and no
    busy reading since their last look (a pause inside a task reads like its end; a look does
    not). ``attend``: while that bar holds a ready-looking person, only the action that draws a
    look may hold back, and a plan that takes it before speaking passes (its speech is checked
    again after the look)."""
    assert critic_skill.critic is not None
    folds = [f"models/critics/engage/fold{i}.onnx" for i in range(5)]
    spec = critic_skill.critic.model_copy(update={
        "rule": "readiness", "epsilon": 0.1, "ready": 0.3, "members": folds,
        "looking_away": 0.5, "attend": "eye contact", "look_held": None,
        "answer_within": None})  # fmt: skip
    critic = open_skill_critic(dataclasses.replace(critic_skill, critic=spec), robot.embedder_dir)
    assert critic is not None
    busy = seen("The person is talking on a phone.", False)
    free, free_looking = (seen("The person is sitting on a chair, waiting.", toward)
                          for toward in (False, True))  # fmt: skip
    check = critic.check(lambda: ("pause", 3.0))
    q_busy, q_free = check.score("speak", busy)[0], check.score("speak", free)[0]
    assert q_busy < 0.1 - MARGIN and q_free > 0.5 + MARGIN
    assert check.score("speak", free_looking)[0] > 0.3 + MARGIN

    def plan(*actions: str) -> list[Step]:
        return [Step(a) for a in actions]

    # no busy reading yet: a free person looking away scores over the bar
    assert critic.check(lambda: ("pause", 3.0)).check(plan("speak"), free).ok  # type: ignore[arg-type]
    assert not check.check(plan("speak"), busy).ok  # type: ignore[arg-type]
    after_busy = check.check(plan("speak"), free)  # type: ignore[arg-type]
    assert not after_busy.ok and "looked busy since they last looked" in after_busy.feedback
    assert "'eye contact' first" in after_busy.feedback
    held = check.check(plan("wait"), free)  # type: ignore[arg-type]
    assert not held.ok and "'eye contact' first" in held.feedback
    assert check.check(plan("eye contact"), free).ok  # type: ignore[arg-type]
    assert check.check(plan("eye contact", "speak"), free).ok  # type: ignore[arg-type]
    assert check.check(plan("speak"), free_looking).ok  # type: ignore[arg-type]
    assert check.check(plan("speak"), free).ok  # type: ignore[arg-type]  # no busy since the look
    # a higher bar than the free person's score: speech waits for their look
    strict = spec.model_copy(update={"looking_away": q_free + 2 * MARGIN})
    opened = open_skill_critic(dataclasses.replace(critic_skill, critic=strict), robot.embedder_dir)
    assert opened is not None
    check = opened.check(lambda: ("pause", 3.0))
    away = check.check(plan("speak"), free)  # type: ignore[arg-type]
    assert not away.ok and "not looking at the robot" in away.feedback
    assert check.check(plan("speak"), free_looking).ok  # type: ignore[arg-type]


def test_a_glance_from_a_task_is_no_invitation_and_never_speaks_only_to_a_look(
    critic_skill: Skill, robot: RobotConfig
) -> None:
    """``look_held``: after a busy reading, the person must have looked at the robot that long
    (a glance from a book is not the end of reading); ``looking_away = "never"``: a person not
    looking at the robot is not spoken to, however free they read. The look is timed by the
    episode's clock: a person's observation does not change while they keep looking."""
    assert critic_skill.critic is not None
    folds = [f"models/critics/engage/fold{i}.onnx" for i in range(5)]
    spec = critic_skill.critic.model_copy(update={
        "rule": "readiness", "epsilon": 0.1, "ready": 0.3, "members": folds,
        "looking_away": "never", "look_held": 2.0, "attend": "eye contact"})  # fmt: skip
    critic = open_skill_critic(dataclasses.replace(critic_skill, critic=spec), robot.embedder_dir)
    assert critic is not None
    clock = [5.0]
    check = critic.check(lambda: ("pause", 3.0), lambda: clock[0])
    busy = seen("The person is talking on a phone.", False, t=5.0)
    free = seen("The person is sitting on a chair, waiting.", False, t=6.0)
    assert check.score("speak", busy)[0] < 0.1 - MARGIN
    assert check.score("speak", free)[0] > 0.3 + MARGIN
    speak = [Step("speak")]
    clock[0] = 6.0
    never = check.check(speak, free)  # type: ignore[arg-type]
    assert not never.ok and "the person is not looking at the robot" in never.feedback
    assert not check.check(speak, busy).ok  # type: ignore[arg-type]
    looking = seen("The person is sitting on a chair, waiting.", True, t=10.0)
    clock[0] = 10.0
    early = check.check(speak, looking)  # type: ignore[arg-type]
    assert not early.ok and "for 0.0 s of 2.0 s" in early.feedback
    clock[0] = 11.5  # the same observation, the look held on
    assert "for 1.5 s of 2.0 s" in check.check(speak, looking).feedback  # type: ignore[arg-type]
    clock[0] = 12.5
    assert check.check(speak, looking).ok  # type: ignore[arg-type]
    # a look broken off starts again
    clock[0] = 13.0
    assert not check.check(speak, busy).ok  # type: ignore[arg-type]
    clock[0] = 20.0
    again = seen("The person is sitting on a chair, waiting.", True, t=20.0)
    assert not check.check(speak, again).ok  # type: ignore[arg-type]


def test_eye_contact_a_person_does_not_answer_reads_busy_until_a_look_is_held(
    critic_skill: Skill, robot: RobotConfig
) -> None:
    """``answer_within``: a person free to talk looks back at eye contact; one still looking
    away that long after it began is read busy, so a glance later (shorter than ``look_held``)
    does not open the way to speech, however free their words read."""
    assert critic_skill.critic is not None
    folds = [f"models/critics/engage/fold{i}.onnx" for i in range(5)]
    spec = critic_skill.critic.model_copy(update={
        "rule": "readiness", "epsilon": 0.1, "ready": 0.3, "members": folds,
        "looking_away": "never", "look_held": 3.0, "attend": "eye contact",
        "answer_within": 0.75})  # fmt: skip
    critic = open_skill_critic(dataclasses.replace(critic_skill, critic=spec), robot.embedder_dir)
    assert critic is not None
    clock, running = [4.0], [("wait", 0.0)]
    check = critic.check(lambda: running[0], lambda: clock[0])
    away = seen("The person is sitting on a chair, waiting.", False, t=4.0)
    assert check.score("speak", away)[0] > 0.3 + MARGIN  # the words read free
    speak = [Step("speak")]
    first = check.check(speak, away)  # type: ignore[arg-type]
    assert not first.ok and first.amend == (Step("eye contact"), Step("speak"))
    running[0], clock[0] = ("eye contact", 4.0), 4.5
    assert "not looking" in check.check(speak, away).feedback  # type: ignore[arg-type]
    assert not check.busy_since_look  # not yet: a person looks back within answer_within
    clock[0] = 5.0  # eye contact 1 s on, no look back
    check.check(speak, away)  # type: ignore[arg-type]
    assert check.busy_since_look
    glance = seen("The person is sitting on a chair, waiting.", True, t=7.0)
    running[0], clock[0] = ("wait", 5.0), 7.0
    refused = check.check(speak, glance)  # type: ignore[arg-type]
    assert not refused.ok and "looked busy before this look" in refused.feedback
    clock[0] = 8.5
    assert not check.check(speak, glance).ok  # type: ignore[arg-type]
    clock[0] = 10.0  # the look held 3 s
    assert check.check(speak, glance).ok  # type: ignore[arg-type]
    # without answer_within the unanswered eye contact means nothing
    plain = critic.spec.model_copy(update={"answer_within": None})
    bare = open_skill_critic(dataclasses.replace(critic_skill, critic=plain), robot.embedder_dir)
    assert bare is not None
    other = bare.check(lambda: ("eye contact", 4.0), lambda: 6.0)
    other.check(speak, away)  # type: ignore[arg-type]
    assert not other.busy_since_look


# -- episodes, recordings and the evaluation -----------------------------------------------------


def test_in_an_episode_the_critic_vetoes_speaking_during_a_call_and_the_recording_replays(
    robot_tmp: RobotConfig, critic_skill: Skill, mapper: ActionMapper, tmp_path: Path
) -> None:
    """The random proposer, speaking four times as often as anything else: without the critic
    it speaks during the call; with it, every such proposal is refused."""
    sc = person("The person is talking on a phone.", False, [(0.0, 20.0, "not-ready")])
    options = EpisodeOptions(latency=1.0, constrained=True, keep_candidates=False)
    bare = dataclasses.replace(critic_skill, critic=None)
    with MemoryRecorder() as recorder:
        out = run_episode(robot_tmp, bare, sc, RandomAsk(3, {"speak": 4.0}), mapper, recorder,
                          options)  # fmt: skip
    assert judge(out, sc).kind is JudgementKind.SPOKE_NOT_READY and not out.refused
    with MemoryRecorder() as recorder:
        out = run_episode(robot_tmp, critic_skill, sc, RandomAsk(3, {"speak": 4.0}), mapper,
                          recorder, options)  # fmt: skip
        records = list(recorder.records)
    assert judge(out, sc).kind is JudgementKind.NEVER_SPOKE
    assert out.refused.get("critic", 0) >= 1 and out.fallbacks >= 1
    refusals = [r for r in records if r["kind"] == "check" and r["check"] == "critic"
                and not r["ok"]]  # fmt: skip
    assert refusals and all(r["score"] < critic_skill.critic.epsilon for r in refusals)  # type: ignore[union-attr]
    assert any("scored 'speak'" in r["feedback"] for r in refusals)


@pytest.mark.parametrize(("label", "spoken"), [("ok-to-engage", True), ("not-ready", False)])
def test_speech_to_a_person_looking_away_is_amended_to_eye_contact_first(
    robot_tmp: RobotConfig, critic_skill: Skill, mapper: ActionMapper, label: str, spoken: bool
) -> None:
    """The shipped critic and the random proposer, speaking four times as often as anything
    else, before a person who reads free but is not looking at the robot: each speech is
    amended to eye contact first; a person free to talk looks back (the simulated person's
    ``notice_time``) and is spoken to; one labelled busy (the critic is wrong about the words)
    does not look back and is never spoken to."""
    sc = person("The person is sitting on a chair, waiting.", False, [(0.0, 20.0, label)])
    options = EpisodeOptions(latency=1.0, constrained=True, keep_candidates=False)
    with MemoryRecorder() as recorder:
        out = run_episode(robot_tmp, critic_skill, sc, RandomAsk(3, {"speak": 4.0}), mapper,
                          recorder, options)  # fmt: skip
        records = list(recorder.records)
    amended = [r for r in records if r["kind"] == "amend"]
    assert amended and amended[0]["steps"][0]["action"] == "eye contact"
    assert "not looking at the robot" in amended[0]["why"] or "looked busy" in amended[0]["why"]
    names = [a for _, a in out.actions]
    assert ("speak" in names) is spoken
    if spoken:
        assert names.index("eye contact") < names.index("speak")
        assert judge(out, sc).kind is JudgementKind.SUCCESS
    else:
        assert judge(out, sc).kind is JudgementKind.NEVER_SPOKE


@pytest.mark.parametrize(("guarded", "spoken"), [(False, True), (True, False)])
def test_a_busy_person_who_glances_at_the_robot_is_not_spoken_to_when_eye_contact_went_unanswered(
    robot_tmp: RobotConfig, critic_skill: Skill, mapper: ActionMapper, guarded: bool,
    spoken: bool,
) -> None:  # fmt: skip
    """A person labelled busy throughout whose words the critic reads as free (it is wrong),
    glancing at the robot for 1.5 s at 9 s. The random proposer, speaking four times as
    often as anything else: the gaze bar amends each speech to eye contact first, which the
    busy person does not answer; at the glance the look alone opens the way to speech, unless
    the unanswered eye contact marked them busy (``answer_within``) and the look must be held
    3 s (``look_held``)."""
    assert critic_skill.critic is not None
    keys = {"look_held": 3.0, "answer_within": 0.75} if guarded else {}
    spec = critic_skill.critic.model_copy(update={"look_held": None, "answer_within": None,
                                                  **keys})  # fmt: skip
    skill = dataclasses.replace(critic_skill, critic=spec)
    sc = Scenario.model_validate({
        "scenario": {"name": "glance", "end": 16.0, "distance": 3.0},
        "activity": [{"at": 0.0, "text": "The person is sitting on a chair, waiting."}],
        "gaze": [{"at": 0.0, "toward": False}, {"at": 9.0, "toward": True},
                 {"at": 10.5, "toward": False}],
        "label": [{"from": 0.0, "to": 16.0, "state": "not-ready"}]})  # fmt: skip
    options = EpisodeOptions(latency=1.0, constrained=True, keep_candidates=False)
    with MemoryRecorder() as recorder:
        out = run_episode(robot_tmp, skill, sc, RandomAsk(3, {"speak": 4.0}), mapper, recorder,
                          options)  # fmt: skip
    names = [a for _, a in out.actions]
    assert "eye contact" in names
    assert ("speak" in names) is spoken
    expected = JudgementKind.SPOKE_NOT_READY if spoken else JudgementKind.NEVER_SPOKE
    assert judge(out, sc).kind is expected


def test_eval_reports_the_critic_its_vetoes_and_fallbacks_and_none_turns_it_off(
    tmp_path: Path,
) -> None:
    args = ["eval", "engage", "--llm", "random", "--trials", "2", "--json",
            "--scenario", "person-object"]  # fmt: skip
    on, off = onboard(*args, cwd=tmp_path), onboard(*args, "--critic", "none", cwd=tmp_path)
    assert on.code == 0 and off.code == 0, on.err + off.err
    with_critic, without = json.loads(on.out), json.loads(off.out)
    assert with_critic["critic"]["model"] == "models/critics/engage/all.onnx"
    assert without["critic"] is None
    shipped = with_critic["groups"]["shipped"]
    assert shipped["per_episode"]["vetoes"] > 0
    assert set(shipped["per_episode"]) == {"vetoes", "fallbacks"}
    assert without["groups"]["shipped"]["per_episode"]["vetoes"] == 0


def test_a_recorded_episode_with_the_critic_replays(tmp_path: Path) -> None:
    recorded = onboard("eval", "engage", "--llm", "random", "--trials", "1", "--record",
                       tmp_path / "rec", "--scenario", "person-object", cwd=tmp_path)  # fmt: skip
    assert recorded.code == 0, recorded.err
    (recording,) = sorted((tmp_path / "rec").glob("*.jsonl"))
    header = json.loads(recording.read_text(encoding="utf-8").splitlines()[0])
    assert "critic" in json.dumps(header)
    replayed = onboard("replay", recording, cwd=tmp_path)
    assert replayed.code == 0, replayed.err
    assert "reproduces" in replayed.out


def test_a_recorded_episode_with_an_amended_plan_replays(tmp_path: Path) -> None:
    """The critic's amend (eye contact before speaking) is decided again from the recorded
    observations on replay, and the replay reproduces the episode."""
    recorded = onboard("eval", "engage", "--llm", "random", "--trials", "1", "--record",
                       tmp_path / "rec", "--scenario", "heldout-coins", cwd=tmp_path)  # fmt: skip
    assert recorded.code == 0, recorded.err
    (recording,) = sorted((tmp_path / "rec").glob("*.jsonl"))
    records = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()]
    assert any(r["kind"] == "amend" for r in records)
    replayed = onboard("replay", recording, cwd=tmp_path)
    assert replayed.code == 0, replayed.err
    assert "reproduces" in replayed.out


# -- its data -------------------------------------------------------------------------------------


def test_collected_data_holds_each_checked_state_and_a_speak_probe_judged_by_the_label(
    robot: RobotConfig, critic_skill: Skill, embedder: Embedder
) -> None:
    files = [TRAINING / "train-busy-cable-knot.toml", TRAINING / "train-ready-can-you-help.toml"]
    scenarios = [load_scenario(f) for f in files if f.is_file()]
    assert len(scenarios) == 2, "the training scenarios are named here"
    features = PersonFeatures(critic_skill, embedder.embed)
    settings = PersonCollectSettings(episodes=2, seed=5)
    data = collect_person_data(robot, critic_skill, scenarios, features, "wait", RandomAsk,
                               settings)  # fmt: skip
    again = collect_person_data(robot, critic_skill, scenarios, features, "wait", RandomAsk,
                                settings)  # fmt: skip
    assert np.array_equal(data.states, again.states) and np.array_equal(data.rewards, again.rewards)
    assert data.meta.vocabulary[1] == "WAIT" and data.meta.feature_names == features.names
    speak = data.meta.vocabulary.index("speak")
    policy = [e for e in data.episodes if e < 4]  # two episodes of each scenario, then probes
    policy_rows = np.isin(data.episode, policy)
    probes = ~policy_rows
    assert len(policy) == 4 and probes.sum() == policy_rows.sum()  # a probe per checked state
    assert len(np.unique(data.episode[probes])) == probes.sum()  # each its own episode
    assert (data.actions[probes, 0] == speak).all()
    assert set(data.rewards[probes].tolist()) <= {-1.0, 1.0}
    # the busy person's probes are -1 first, and the ready person's are all +1
    assert data.rewards[probes][0] == -1.0 and data.rewards[probes][-1] == 1.0
    # a policy episode's reward is on its last transition only
    for e in policy:
        rows = np.flatnonzero(data.episode == e)
        assert not data.rewards[rows[:-1]].any()
    # the busy scenario's probes while its person is busy are all -1
    assert reward_of(judge_speech(scenarios[0], 1.0, True).kind) == -1.0
    assert reward_of(judge_speech(scenarios[0], 20.0, True).kind) == 1.0
    assert reward_of(judge_speech(scenarios[0], 20.0, False).kind) == -1.0


def test_the_random_proposer_fills_the_schema_seeded_and_weighted() -> None:
    schema = {"properties": {"action": {"enum": ["a", "b", "speak"]}, "reason": {}}}
    first = [RandomAsk(7)("plan", [], schema).text for _ in range(1)]
    assert first == [RandomAsk(7)("plan", [], schema).text]
    ask = RandomAsk(1, {"speak": 50.0})
    picks = [json.loads(ask("plan", [], schema).text)["action"] for _ in range(200)]
    assert picks.count("speak") > 150 and set(picks) <= {"a", "b", "speak"}
    assert json.loads(ask("plan", [], schema).text)["reason"] == "random"
    with pytest.raises(Exception, match="no JSON schema"):
        RandomAsk(0)("plan", [], None)


# -- its errors -----------------------------------------------------------------------------------


def critic_section(skills: Path, text: str) -> None:
    path = skills / "engage.toml"
    body = path.read_text(encoding="utf-8")
    start = body.index("\n[critic]")
    path.write_text(body[:start] + "\n" + text, encoding="utf-8")


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ('[critic]\nmodel = "models/critics/engage/nothing.onnx"\nwait = "wait"\n',
         "no such critic model"),
        ('[critic]\nmodel = "models/critics/sort_cubes/level1.onnx"\nwait = "wait"\n',
         "[critic.model]"),
        ('[critic]\nmodel = "models/critics/engage/all.onnx"\nwait = "speak"\n', "end action"),
        ('[critic]\nmodel = "models/critics/engage/all.onnx"\nwait = "nap"\n', "nap"),
        ('[critic]\nmodel = "models/critics/engage/all.onnx"\nwait = "wait"\nrule = "readiness"'
         '\nlooking_away = 0.5\nattend = "wave"\n', "critic.attend"),
        ('[critic]\nmodel = "models/critics/engage/all.onnx"\nwait = "wait"\nlooking_away = 0.5\n',
         "only the readiness rule"),
        ('[critic]\nmodel = "models/critics/engage/all.onnx"\nwait = "wait"\nrule = "readiness"'
         '\nlook_held = 2.0\n', "look_held needs looking_away"),
        ('[critic]\nmodel = "models/critics/engage/all.onnx"\nwait = "wait"\nrule = "readiness"'
         '\nlooking_away = "never"\nanswer_within = 0.75\n', "answer_within needs attend"),
    ],
)  # fmt: skip
def test_a_bad_critic_section_is_one_line_naming_the_skill_file(
    tmp_path: Path, section: str, expected: str
) -> None:
    skills = skills_copy(tmp_path)
    critic_section(skills, section)
    robot = robot_copy(tmp_path, skills=skills)
    line = one_line_error(onboard("--robot", robot, "check"))
    assert "engage.toml" in line and expected in line


def test_a_critic_file_that_is_not_a_model_is_one_line(tmp_path: Path, critic_skill: Skill) -> None:
    """A file with a card that names it (its sha256) but holds no ONNX model."""
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"not an onnx model")
    card = critic_model_path("models/critics/engage/all.toml").read_text(encoding="utf-8")
    shipped_digest = card.split('sha256 = "', 1)[1].split('"', 1)[0]
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    (tmp_path / "broken.toml").write_text(card.replace(shipped_digest, digest), encoding="utf-8")
    with pytest.raises(CriticError) as caught:
        load_skill_critic(model, critic_skill, "wait")
    assert str(caught.value).startswith(str(model)) and "\n" not in str(caught.value)
    robot = robot_copy(tmp_path)
    result: Result = onboard("--robot", robot, "eval", "engage", "--llm", "random", "--trials",
                             "1", "--scenario", "person-object", "--critic", model)  # fmt: skip
    line = one_line_error(result)
    assert "broken.onnx" in line
