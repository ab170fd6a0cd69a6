"""The ReplanVLM loop on the physics twin, driven by scripted bots over real loopback HTTP:
each correction (format, sandbox refusal, plan/code match, dry-run comparison, the Extra
Bot's "not done") goes back to the Decision Bot as an error message; five cycles without
agreement fail the task; the episode is recorded and replays. The twin's truth is read only
by the judge."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from scripted_bots import ScriptedBots, proposal, verdict

from onboard.config import RobotConfig
from onboard.drivers.twin.camera import DEFAULT_LIGHT
from onboard.drivers.twin.world import Twin
from onboard.evaluation.code_judges import judge
from onboard.evaluation.code_tasks import CodeTask, load_code_tasks, set_up
from onboard.evaluation.code_trials import code_world
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.llm.content import decode_image
from onboard.loop.recorder import Recorder, read_recording
from onboard.replan.api import RobotAPI, api_doc
from onboard.replan.bots import open_bots
from onboard.replan.episode import Corrections, RobotWorld, run_code_episode, twin_dry_runner
from onboard.replan.record import code_header
from onboard.replan.replay import replay_code_recording
from onboard.replan.robot import code_limits
from onboard.replan.sandbox import RunResult

HUNGRY_PLAN = ["Find the apple.", "Pick up the apple.", "Hold it out to the person."]
HUNGRY_CODE = 'detect()\npick("apple")\ngive_me()\n'
MISMATCHED = 'detect()\npick("apple")\n'
DONE = verdict("done", True, "the apple is held out")
MATCH = verdict("match", True, "each step is in the code")


def task(number: int) -> CodeTask:
    return next(t for t in load_code_tasks() if t.number == number)


@pytest.fixture
def hungry(robot: RobotConfig, embedder: Embedder) -> Iterator[tuple[Twin, RobotAPI, CodeTask]]:
    t = task(1)
    with code_world(robot, t.scene, embedder, detector()) as (twin, api):
        set_up(
            twin,
            t,
            random.Random("loop/1"),
            solved=lambda w: judge(w, t, robot.code.handover).passed,
        )
        api.home()
        yield twin, api, t


def world(twin: Twin, api: RobotAPI, robot: RobotConfig, t: CodeTask) -> RobotWorld:
    return RobotWorld(api, code_limits(robot.code), t.scene, lambda: twin.time)


def episode(
    robot: RobotConfig,
    server: ScriptedBots,
    w: RobotWorld,
    t: CodeTask,
    corrections: Corrections,
    path: Path | None = None,
):  # type: ignore[no-untyped-def]
    recorder = Recorder(path)
    header = code_header(robot, {"instruction": t.instruction, "number": t.number}, {})
    recorder.write("header", **header)
    with recorder, open_bots(robot, recorder, server.base_url) as bots:
        return run_code_episode(w, t.instruction, bots, corrections, recorder)


def errors_in(body: dict) -> str:  # type: ignore[type-arg]
    last = body["messages"][-1]["content"]
    text = last if isinstance(last, str) else last[0]["text"]
    return str(text.split("Error messages from earlier tries:")[1])


def test_each_internal_correction_reaches_the_next_decision_and_the_task_is_done(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask], tmp_path: Path
) -> None:
    twin, api, t = hungry
    server = ScriptedBots(
        decision=[
            "I would pick up the apple.",  # no PLAN / CODE: a format problem
            proposal(HUNGRY_PLAN, "import os\npick('apple')\n"),  # the sandbox refuses
            proposal(HUNGRY_PLAN, MISMATCHED),  # the Inner Bot: no give_me
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
        ],
        inner=[verdict("match", False, "step 3 (hold it out) is not in the code"), MATCH],
        extra=[DONE],
    )
    path = tmp_path / "hungry.jsonl"
    with server:
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections(), path)
    assert outcome.done and outcome.failed is None and outcome.runs == 1
    assert [e.phase for e in outcome.events] == ["format", "refused", "match"]
    asked = server.seen("decision")
    assert len(asked) == 4
    assert "none." in errors_in(asked[0])
    assert "no 'PLAN:' section" in errors_in(asked[1])
    assert "import" in errors_in(asked[2]) and "no 'PLAN:' section" in errors_in(asked[2])
    assert "step 3 (hold it out)" in errors_in(asked[3])
    assert judge(twin, t, robot.code.handover).passed
    # an OpenAI chat request per bot, with its own token limit; verdicts under json_schema
    inner = server.seen("inner")[0]
    assert asked[0]["model"] == robot.llm.model and inner["model"] == robot.llm.model
    assert asked[0]["max_tokens"] == robot.code.decision.max_tokens
    assert inner["max_tokens"] == robot.code.inner.max_tokens
    assert "response_format" not in asked[0]
    assert inner["response_format"]["type"] == "json_schema"
    assert inner["response_format"]["json_schema"]["schema"]["required"] == ["match", "reason"]
    assert [p["type"] for p in asked[0]["messages"][-1]["content"]] == ["text", "image_url"]
    # the prompt carries the API documentation byte for byte, and the camera's frame
    assert api_doc() in asked[0]["messages"][0]["content"]
    image = asked[0]["messages"][-1]["content"][1]["image_url"]["url"]
    frame = decode_image(base64.b64decode(image.split(",", 1)[1]))
    assert frame.shape[2] == 3 and frame.shape[0] >= 240  # the camera's own resolution
    # recorded, images by hash, and replayed to the same decisions
    kinds = [r["kind"] for r in read_recording(path)]
    assert kinds.count("request") == 1 + 4 + 2 + 1 and "end" in kinds  # goal reader first
    assert list((tmp_path / "hungry.images").glob("*.png"))
    recorded, replayed = replay_code_recording(path)
    assert recorded == replayed


def test_five_cycles_without_agreement_fail_the_task_and_nothing_runs(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask]
) -> None:
    twin, api, t = hungry
    server = ScriptedBots(
        decision=[proposal(HUNGRY_PLAN, MISMATCHED)],
        inner=[verdict("match", False, "the code never holds the apple out")],
        extra=[DONE],
    )
    with server:
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections())
    assert not outcome.done and outcome.runs == 0
    assert outcome.failed == "no program passed the checks in 5 proposal(s)"
    assert [e.phase for e in outcome.events] == ["match"] * 5
    assert not server.seen("extra")


def test_not_done_replans_with_the_extra_bots_reason(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask]
) -> None:
    twin, api, t = hungry
    reason = "nothing is held out: the apple is still on the table"
    server = ScriptedBots(
        decision=[
            proposal(["Find the apple."], "detect()\n"),
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
        ],
        inner=[MATCH],
        extra=[verdict("done", False, reason), DONE],
    )
    with server:  # the seed's outer check alone: the Extra Bot judges every run
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections(goal=False))
    assert outcome.done and outcome.runs == 2
    assert [e.phase for e in outcome.events] == ["extra"]
    assert reason in errors_in(server.seen("decision")[1])
    extra = server.seen("extra")[0]["messages"][-1]["content"]
    assert len([p for p in extra if p["type"] == "image_url"]) == 2  # before and after
    assert "Before the run:" in extra[0]["text"] and "Changes:" in extra[0]["text"]


def test_without_corrections_the_first_program_runs_once_and_is_not_checked(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask]
) -> None:
    twin, api, t = hungry
    server = ScriptedBots(decision=[proposal(HUNGRY_PLAN, MISMATCHED)], inner=[], extra=[])
    with server:
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections(False, False))
    assert outcome.runs == 1 and outcome.done  # the run ended without error: its own view
    assert not judge(twin, t, robot.code.handover).passed  # ... but the apple is not given
    assert not server.seen("inner") and not server.seen("extra")


def test_a_changed_reply_in_the_recording_diverges_on_replay(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask], tmp_path: Path
) -> None:
    twin, api, t = hungry
    server = ScriptedBots(
        decision=[proposal(HUNGRY_PLAN, HUNGRY_CODE)], inner=[MATCH], extra=[DONE]
    )
    path = tmp_path / "one.jsonl"
    with server:
        episode(robot, server, world(twin, api, robot, t), t, Corrections(), path)
    lines = path.read_text().splitlines()
    edited = []
    for line in lines:
        record = json.loads(line)
        if record["kind"] == "reply" and record["bot"] == "inner":
            record["text"] = verdict("match", False, "edited")
        edited.append(json.dumps(record))
    path.write_text("\n".join(edited) + "\n")
    recorded, replayed = replay_code_recording(path)
    assert recorded != replayed


def test_two_programs_that_disagree_in_the_dry_run_send_advice_back(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask], tmp_path: Path
) -> None:
    twin, api, t = hungry
    teddy = 'detect()\npick("teddy")\ngive_me()\n'
    server = ScriptedBots(
        decision=[
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
            proposal(HUNGRY_PLAN, teddy),  # the regenerated one hands over something else
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
        ],
        inner=[MATCH],
        extra=[DONE],
    )
    recorder = Recorder(tmp_path / "dry.jsonl")
    recorder.write("header", **code_header(robot, {"instruction": t.instruction}, {}))
    w = world(twin, api, robot, t)
    with server, recorder, open_bots(robot, recorder, server.base_url) as bots:
        outcome = run_code_episode(
            w, t.instruction, bots, Corrections(), recorder, dry=twin_dry_runner(robot, t.scene)
        )
    assert outcome.done and outcome.runs == 1
    assert [e.phase for e in outcome.events] == ["compare"]
    advice = errors_in(server.seen("decision")[2])
    assert "disagree" in advice and "apple" in advice
    assert [s for s in outcome.decisions if s.startswith("compare")] == [
        "compare: fail",
        "compare: ok",
    ]
    assert judge(twin, t, robot.code.handover).passed
    recorded, replayed = replay_code_recording(tmp_path / "dry.jsonl")
    assert recorded == replayed


def test_a_regenerated_program_the_sandbox_refuses_compares_with_nothing(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask], tmp_path: Path
) -> None:
    twin, api, t = hungry
    server = ScriptedBots(
        decision=[
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
            proposal(HUNGRY_PLAN, "x = random.randint(1, 2)\n"),  # refused: never run
        ],
        inner=[MATCH],
        extra=[DONE],
    )
    recorder = Recorder(None)
    w = world(twin, api, robot, t)
    with server, recorder, open_bots(robot, recorder, server.base_url) as bots:
        outcome = run_code_episode(
            w, t.instruction, bots, Corrections(), recorder, dry=twin_dry_runner(robot, t.scene)
        )
    assert outcome.done and outcome.events == []
    assert "dry_run: ok" in outcome.decisions
    assert any(r["kind"] == "skipped" and r["check"] == "compare" for r in recorder.records)


def test_a_replan_after_a_run_that_ended_early_moves_the_arm_again(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask]
) -> None:
    twin, api, t = hungry
    server = ScriptedBots(
        decision=[
            proposal(["Pick up the unicorn."], 'pick("unicorn")\n'),  # the API refuses: stopped
            proposal(HUNGRY_PLAN, HUNGRY_CODE),
        ],
        inner=[MATCH],
        extra=[verdict("done", False, "the apple is not handed over"), DONE],
    )
    with server:
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections(goal=False))
    assert outcome.decisions.count("run: api") == 1 and "run: ok" in outcome.decisions
    assert outcome.done and judge(twin, t, robot.code.handover).passed


def test_a_run_that_changed_nothing_is_sent_back_before_the_extra_bot_is_asked(
    robot: RobotConfig, hungry: tuple[Twin, RobotAPI, CodeTask]
) -> None:
    """ "I'm hungry" says no relation the camera can check: the goal is judged, and a run
    after which nothing seen has changed is not done, whatever the Extra Bot would say."""
    twin, api, t = hungry
    server = ScriptedBots(
        decision=[proposal(["Find the apple."], "detect()\n"), proposal(HUNGRY_PLAN, HUNGRY_CODE)],
        inner=[MATCH],
        extra=[DONE],  # it would say "done" after the first run too
    )
    with server:
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections())
    assert outcome.done and outcome.runs == 2
    assert [(e.phase, e.message) for e in outcome.events] == [
        ("goal", "nothing has changed since the request was read")
    ]
    assert len(server.seen("extra")) == 1  # after the second run only
    assert judge(twin, t, robot.code.handover).passed


@pytest.fixture
def tower(robot: RobotConfig, embedder: Embedder) -> Iterator[tuple[Twin, RobotAPI, CodeTask]]:
    t = task(2)
    with code_world(robot, t.scene, embedder, detector()) as (twin, api):
        set_up(twin, t, random.Random("loop/2"), solved=lambda w: judge(w, t, 0.0).passed)
        api.home()
        yield twin, api, t


def test_a_goal_with_relations_is_decided_by_the_camera_not_by_the_extra_bot(
    robot: RobotConfig, tower: tuple[Twin, RobotAPI, CodeTask], tmp_path: Path
) -> None:
    """ "Put the red block into the box": the red block in the box, checked in the fresh look
    after each run. A run that leaves it out is sent back with what the camera does not see,
    though the Extra Bot (never asked) would have said "done"; the episode replays."""
    twin, api, t = tower
    solution = (Path(__file__).parents[1] / "skills/tasks/code/task2.py").read_text()
    goal = {"mentions": ["red block", "box"],
            "relations": [{"relation": "in", "object": "red block", "target": "box"}]}  # fmt: skip
    server = ScriptedBots(
        goal=[json.dumps(goal)],
        decision=[proposal(["Look."], "detect()\n"), proposal(["Put it in the box."], solution)],
        inner=[MATCH],
        extra=[DONE],
    )
    path = tmp_path / "tower.jsonl"
    with server:
        outcome = episode(robot, server, world(twin, api, robot, t), t, Corrections(), path)
    # what is missing, and where the camera sees the red block instead (under what it sees
    # stacked on it: which of the tower's blocks show depends on the detector)
    ((phase, message),) = [(e.phase, e.message) for e in outcome.events]
    assert phase == "goal"
    assert message.startswith("after the run the camera does not see the red block in the box "
                              "(it is on the table, with the ")  # fmt: skip
    assert outcome.decisions[-1] == "goal: met" and outcome.done and outcome.runs == 2
    assert not server.seen("extra")
    assert judge(twin, t, robot.code.handover).passed
    assert "the camera does not see the red block in the box (it is on" in errors_in(
        server.seen("decision")[1]
    )
    goal_record = next(r for r in read_recording(path) if r["kind"] == "goal")
    assert goal_record["relations"] == goal["relations"]
    recorded, replayed = replay_code_recording(path)
    assert recorded == replayed


class _LightsOutWorld(RobotWorld):
    """The room's lights go down to an eighth while the program runs (the environment's
    doing, as a disturbance is: the loop is not told)."""

    def __init__(self, twin: Twin, *args: Any) -> None:
        super().__init__(*args)
        self.twin = twin

    def run(self, program: str) -> RunResult:
        result = super().run(program)
        self.twin.set_light(replace(DEFAULT_LIGHT, ambient=0.08, diffuse=0.05, specular=0.0))
        return result


def test_a_run_judged_in_the_dark_could_not_be_verified_never_done_nor_not_done(
    robot: RobotConfig, tower: tuple[Twin, RobotAPI, CodeTask]
) -> None:
    """The look after the run is too dark to trust (taken twice): the outer check says it
    could not verify, once, and the episode ends; the Extra Bot is not asked, nothing runs
    again on a guess."""
    twin, api, t = tower
    solution = (Path(__file__).parents[1] / "skills/tasks/code/task2.py").read_text()
    goal = {"mentions": ["red block", "box"],
            "relations": [{"relation": "in", "object": "red block", "target": "box"}]}  # fmt: skip
    server = ScriptedBots(goal=[json.dumps(goal)], decision=[proposal(["Do it."], solution)],
                          inner=[MATCH], extra=[DONE])  # fmt: skip
    world = _LightsOutWorld(twin, api, code_limits(robot.code), t.scene, lambda: twin.time)
    try:
        with server:
            outcome = episode(robot, server, world, t, Corrections())
    finally:
        twin.set_light(None)
    assert not outcome.done and outcome.runs == 1
    ((phase, message),) = [(e.phase, e.message) for e in outcome.events]
    assert phase == "goal" and message.startswith("could not verify: the view is too dark")
    assert not server.seen("extra")
    assert judge(twin, t, robot.code.handover).passed  # it was done: the robot could not see it
