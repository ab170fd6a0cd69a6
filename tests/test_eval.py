"""Honest evaluation: the judge tells failures apart, eval reports them per scenario and per
group (the seed's four ``shipped`` scenarios, the ``held-out`` ones), and eval decodes as
robot.toml says, the stand-in's requests included.

The judge's kinds come from real episodes (the real stand-in over HTTP, the real embedder, the
virtual clock) on hand-built scenarios; the stand-in's answers follow its documented policy
(runtime/testing/standin_policy.py) with noise 0.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from test_cli import ACTIONS, ROOT, SCENARIOS, onboard, robot_copy

from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import Scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, JudgementKind, judge, run_episode
from onboard.llm import prompts
from onboard.llm.client import ChatClient
from onboard.loop.engine import Check, Outcome, SkillRunner
from onboard.loop.recorder import MemoryRecorder
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer

HELD_OUT_SOURCE = ROOT / "bench" / "data" / "heldout-v2" / "scenarios"
HELD_OUT = SCENARIOS / "heldout"
SEED = ["person-robot", "person-object", "person-environment", "person-person"]
HELD_OUT_NAMES = sorted(p.stem for p in HELD_OUT_SOURCE.glob("*.toml"))
KINDS = [kind.value for kind in JudgementKind]
NOTE = "the stand-in's tables test the runtime, not a model"


def person(
    activity: str,
    looking: bool,
    labels: Sequence[tuple[float, float, str]],
    *,
    end: float = 20.0,
    motion: Sequence[tuple[float, float]] = (),
) -> Scenario:
    """A hand-built scenario: one activity and gaze from t = 0, 4 m from the robot."""
    return Scenario.model_validate(
        {
            "scenario": {"name": "hand-built", "end": end, "distance": 4.0},
            "activity": [{"at": 0.0, "text": activity}],
            "gaze": [{"at": 0.0, "toward": looking}],
            "label": [{"from": a, "to": b, "state": s} for a, b, s in labels],
            "motion": [{"at": a, "speed": v} for a, v in motion],
        }
    )


def episode(
    robot: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    sc: Scenario,
    *,
    checks: Sequence[Check] | None = None,
    on_runner: Callable[[SkillRunner], None] | None = None,
    constrained: bool = True,
    recorder: MemoryRecorder | None = None,
) -> Outcome:
    """One real episode, constrained as the shipped robot decodes (unless told otherwise),
    1 virtual s per reply."""
    options = EpisodeOptions(latency=1.0, constrained=constrained, keep_candidates=False)
    with (
        StandInServer(seed=0, noise=0.0, format_noise=0.0) as standin,
        ChatClient(robot.llm, base_url=standin.base_url) as client,
    ):
        return run_episode(robot, skill, sc, HttpAsk(client), mapper,
                           recorder or MemoryRecorder(), options,
                           checks=checks, on_runner=on_runner)  # fmt: skip


# -- the judge -----------------------------------------------------------------------------------


def test_a_busy_person_in_words_the_stand_in_does_not_know_is_spoken_to(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """ "knitting" is in none of the stand-in's keyword lists: it reads an idle person."""
    sc = person("The person is knitting a scarf on a bench.", False, [(0.0, 20.0, "not-ready")])
    out = episode(robot_tmp, skill, mapper, sc)
    verdict = judge(out, sc)
    assert verdict.kind is JudgementKind.SPOKE_NOT_READY and not verdict.success
    assert (
        out.spoke_at is not None and verdict.reason == f"spoke at {out.spoke_at:.1f} s (not-ready)"
    )


def test_a_busy_person_in_words_the_stand_in_knows_is_never_spoken_to(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    sc = person("The person is talking on a phone.", False, [(0.0, 20.0, "not-ready")])
    out = episode(robot_tmp, skill, mapper, sc)
    assert "wait" in [a for _, a in out.actions] and out.spoke_at is None
    verdict = judge(out, sc)
    assert (verdict.kind, verdict.reason) == (
        JudgementKind.NEVER_SPOKE,
        "timeout: no speak by 20 s",
    )


def test_a_ready_person_is_a_success_and_an_unlabelled_time_is_its_own_failure(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    sc = person("The person is sitting on a bench.", True, [(0.0, 20.0, "ready")])
    out = episode(robot_tmp, skill, mapper, sc)
    assert judge(out, sc).kind is JudgementKind.SUCCESS and judge(out, sc).success
    assert out.spoke_at is not None
    gap = person("The person is sitting on a bench.", True, [(0.0, 1.0, "ready")])
    verdict = judge(out, gap)
    assert verdict.kind is JudgementKind.SPOKE_UNLABELLED and not verdict.success
    assert verdict.reason == f"spoke at {out.spoke_at:.1f} s (unlabelled)"


def test_speaking_after_the_person_left_sight_is_apart_from_speaking_while_busy(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """Without the visibility check, the speak planned while the person was in sight runs
    after they ran out of the camera's range (8 m), whatever the label says."""
    sc = person("The person is sitting on a bench.", True, [(0.0, 20.0, "ready")],
                motion=[(8.6, 8.0)])  # fmt: skip
    out = episode(robot_tmp, skill, mapper, sc, checks=[])
    assert out.spoke_visible is False and out.spoke_at is not None
    verdict = judge(out, sc)
    assert verdict.kind is JudgementKind.SPOKE_OUT_OF_SIGHT
    assert verdict.reason == f"spoke at {out.spoke_at:.1f} s with the person out of sight"


def test_the_rest_of_a_plan_is_checked_again_before_it_runs(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    """Free text gives plans of several actions; a speak queued behind another action is
    checked against what is seen when its turn comes, not when the plan was made: the person
    has run out of sight by then, so the robot does not speak to nobody."""
    sc = person("The person is sitting on a bench.", True, [(0.0, 20.0, "ready")],
                motion=[(6.0, 8.0)])  # fmt: skip
    recorder = MemoryRecorder()
    out = episode(robot_tmp, skill, mapper, sc, constrained=False, recorder=recorder)
    assert out.spoke_visible is not False, "spoke with the person out of sight"
    dropped = [r for r in recorder.records if r.get("kind") == "dropped"]
    assert any("out of sight" in str(r.get("why")) for r in dropped), dropped


def test_an_episode_stopped_before_speaking_is_not_one_that_never_spoke(
    robot_tmp: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    sc = person("The person is sitting on a bench.", True, [(0.0, 20.0, "ready")])

    def stop_at_3_s(runner: SkillRunner) -> None:
        runner.clock.call_later(3.0, lambda: runner.stop("driver failed: base offline"))

    out = episode(robot_tmp, skill, mapper, sc, on_runner=stop_at_3_s)
    assert out.spoke_at is None and out.reason == "driver failed: base offline"
    verdict = judge(out, sc)
    assert verdict.kind is JudgementKind.STOPPED
    assert verdict.reason == "stopped before speaking: driver failed: base offline"


# -- the held-out scenarios ----------------------------------------------------------------------


def test_the_shipped_held_out_scenarios_are_the_held_out_set_byte_for_byte() -> None:
    """skills/scenarios/heldout/ ships bench/data/heldout-v2/scenarios (never edited)."""
    assert len(HELD_OUT_NAMES) == 9
    assert sorted(p.stem for p in HELD_OUT.glob("*.toml")) == HELD_OUT_NAMES
    for name in HELD_OUT_NAMES:
        shipped = (HELD_OUT / f"{name}.toml").read_bytes()
        assert shipped == (HELD_OUT_SOURCE / f"{name}.toml").read_bytes(), name


def test_eval_runs_the_shipped_and_the_held_out_groups_and_reports_them_apart() -> None:
    result = onboard("eval", "engage", "--trials", "2", "--json")
    assert result.code == 0, result.err
    report = json.loads(result.out)  # one JSON object and nothing else
    assert report["skill"] == "engage" and report["exit_code"] == 0
    assert report["llm"] == "standin" and report["note"] == NOTE
    assert report["decoding"] == "constrained"
    scenarios = report["scenarios"]
    assert [s["name"] for s in scenarios] == SEED + HELD_OUT_NAMES
    assert [s["group"] for s in scenarios] == ["shipped"] * 4 + ["held-out"] * 9
    for s in scenarios:
        assert list(s["kinds"]) == KINDS and sum(s["kinds"].values()) == 2
        assert s["kinds"]["success"] == s["successes"]
        found = Counter(t["kind"] for t in s["trials"])
        assert found == Counter({k: n for k, n in s["kinds"].items() if n})
        assert len(s["trials"]) == 2
        for trial in s["trials"]:
            assert isinstance(trial["reason"], str) and trial["reason"]
            assert trial["success"] == (trial["kind"] == "success")
            actions = trial["actions"]
            assert actions[0] == {"t": 0.0, "action": "approach"}
            assert all(a["action"] in ACTIONS for a in actions)
            times = [a["t"] for a in actions]
            assert times == sorted(times) and all(isinstance(t, float) for t in times)
            spoke = actions[-1]["action"] == "speak"
            assert spoke == (trial["kind"] == "success" or trial["kind"].startswith("spoke"))
    for group, names in (("shipped", SEED), ("held-out", HELD_OUT_NAMES)):
        total = report["groups"][group]
        members = [s for s in scenarios if s["group"] == group]
        assert total["scenarios"] == names and total["trials"] == 2 * len(names)
        assert total["successes"] == sum(s["successes"] for s in members)
        assert total["kinds"] == {k: sum(s["kinds"][k] for s in members) for k in KINDS}
    assert list(report["groups"]) == ["shipped", "held-out"]


def test_eval_tables_show_the_kinds_the_groups_and_the_decoding() -> None:
    result = onboard("eval", "engage", "--trials", "1")
    assert result.code == 0, result.err
    out = result.out
    assert "Table III: outcomes over trials; LLM stand-in (a runtime test, not a model), " \
        "constrained decoding" in out  # fmt: skip
    assert NOTE in out and "shipped total" in out and "held-out total" in out
    for header in ("spoke while", "not ready", "spoke out", "of sight", "stopped before"):
        assert header in out
    assert "Table IV: average count of each action; shipped" in out
    assert "Table IV: average count of each action; held-out" in out
    assert "-coat-exit" in out and "-robot" in out
    assert "constrained decoding" in out.splitlines()[-1]


def test_a_held_out_scenario_is_found_by_name_and_reported_in_its_group() -> None:
    result = onboard("eval", "engage", "--trials", "1", "--json", "--scenario", "heldout-coins",
                     "--scenario", "person-robot")  # fmt: skip
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert [(s["name"], s["group"]) for s in report["scenarios"]] == [
        ("heldout-coins", "held-out"),
        ("person-robot", "shipped"),
    ]
    assert list(report["groups"]) == ["held-out", "shipped"]


# -- the decoding robot.toml sets ----------------------------------------------------------------


def schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a request constrains its reply to (either response_format shape)."""
    rf = body.get("response_format")
    if rf is None:
        return None
    assert rf["type"] in ("json_object", "json_schema"), rf
    schema = rf.get("schema") or rf["json_schema"]["schema"]
    assert isinstance(schema, dict)
    return schema


def eval_against(server: StandInServer, tmp_path: Path, *replace: tuple[str, str]) -> Any:
    robot = robot_copy(tmp_path, replace=list(replace))
    result = onboard(
        "--robot",
        robot,
        "eval",
        "engage",
        "--trials",
        "1",
        "--llm",
        server.base_url,
        "--latency",
        "1.0",
        "--json",
        "--record",
        tmp_path / "rec",
        "--scenario",
        "person-object",
        "--scenario",
        "person-environment",
        "--critic",
        "none",
        cwd=tmp_path,
    )  # fmt: skip (decoding, not the critic)
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_eval_sends_every_request_constrained_as_robot_toml_says(
    tmp_path: Path, skill: Skill
) -> None:
    with StandInServer(seed=0, noise=0.0) as server:
        report = eval_against(server, tmp_path)
        requests = server.requests
    assert report["decoding"] == "constrained" and "note" not in report
    schemas = [schema_of(body) for body in requests]
    reason, waits = prompts.reason_schema(skill), skill.prompt.second_stage.wait_times
    assert reason is None and waits == [2, 5, 10, 20, 40]  # engage.toml: no reason, five waits
    expected = [
        prompts.plan_schema(list(skill.actions), reason),
        prompts.wait_time_schema(reason, waits),
        prompts.answer_schema(reason),
    ]
    assert requests and all(s is not None for s in schemas)
    # the first-stage plan and both second-stage questions, each with its own schema
    assert {json.dumps(s, sort_keys=True) for s in schemas} == {
        json.dumps(s, sort_keys=True) for s in expected
    }
    # and every reply the stand-in sent is the schema's plain JSON: nothing fell back
    records = [json.loads(line) for f in sorted((tmp_path / "rec").glob("*.jsonl"))
               for line in f.read_text(encoding="utf-8").splitlines()]  # fmt: skip
    replies = [r for r in records if r["kind"] == "reply"]
    assert len(replies) == len(requests)
    assert not [r for r in records if r["kind"] in ("error", "fallback", "candidate")]
    for record in replies:
        reply = json.loads(record["text"])
        assert "reason" not in reply
        if record["purpose"] == "plan":
            assert reply["action"] in skill.actions
        elif record["purpose"] == "wait_time":
            assert reply["wait_time"] in waits
        else:
            assert reply["answer"] in ("yes", "no")


def test_eval_sends_free_text_requests_when_robot_toml_says_free(tmp_path: Path) -> None:
    with StandInServer(seed=0, noise=0.0) as server:
        report = eval_against(server, tmp_path, ('decoding = "constrained"', 'decoding = "free"'))
        requests = server.requests
    assert report["decoding"] == "free"
    assert requests and not [body for body in requests if "response_format" in body]


def test_the_default_stand_in_eval_decodes_as_robot_toml_says(tmp_path: Path) -> None:
    """The stand-in eval starts its own server: its requests are in the recordings."""
    result = onboard("eval", "engage", "--trials", "1", "--json", "--record", tmp_path,
                     "--scenario", "person-object", "--critic", "none")  # fmt: skip
    assert result.code == 0, result.err
    assert json.loads(result.out)["decoding"] == "constrained"
    text = (tmp_path / "person-object-00.jsonl").read_text(encoding="utf-8")
    records = [json.loads(line) for line in text.splitlines()]
    assert records[0]["options"]["constrained"] is True
    requests = [r for r in records if r["kind"] == "request"]
    assert requests and all(r["constrained"] is True for r in requests)
    assert {r["purpose"] for r in requests} == {"plan", "wait_time", "lose_person"}
