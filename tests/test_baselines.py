"""The SayCan- and ProgPrompt-style baselines (runtime/replan/baselines.py) on the real twin
with the real detector, asking a real HTTP server on loopback.

The server here is a scripted stand-in, documented as such: it sees only the HTTP request
(the scene as text, the steps listed, the steps taken) and answers as a competent model
would for task 2 (take the stack apart, top first, then the red block into the box). The
baselines' scene comes from perception alone (runtime/replan/perceive.py).
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from typing import Any, cast

import pytest

from onboard.base.errors import LLMError
from onboard.config import RobotConfig
from onboard.evaluation.code_judges import judge
from onboard.evaluation.code_tasks import load_code_tasks, set_up
from onboard.evaluation.code_trials import code_world
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.llm.client import ChatClient
from onboard.loop.recorder import MemoryRecorder, Recorder, read_recording
from onboard.replan.api import RobotAPI
from onboard.replan.baselines import (
    CLEAR,
    DONE,
    SPOTS,
    candidate_steps,
    free_spots,
    recorded_replies,
    run_progprompt,
    run_saycan,
)
from onboard.replan.perceive import perceive
from onboard.replan.prompts import DECISION_ROLE, SAYCAN_ROLE
from onboard.replan.robot import code_limits
from onboard.replan.scene_state import ObjectState, SceneState
from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_server import completion_json

TASKS = {t.number: t for t in load_code_tasks()}

Answer = Callable[[list[dict[str, Any]]], str]


class ScriptedServer(LoopbackServer):
    """A chat-completions server on loopback whose reply is ``answer(messages)``: it sees
    only the request. ``requests`` keeps every request body."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server = cast(ScriptedServer, cast(OwnedHTTPServer, self.server).owner)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        with server._lock:
            server.requests.append(body)
            content = server.answer(body["messages"])
        data = json.dumps(completion_json("scripted", content, 1)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ScriptedServer.handler = _Handler

_OBJECT = re.compile(r"^- (.+?) at \((-?[\d.]+), (-?[\d.]+), (-?[\d.]+)\)", re.MULTILINE)


def tower_step(messages: list[dict[str, Any]]) -> str:
    """Task 2 as a competent step chooser would do it, from the request's text alone."""
    assert messages[0]["content"].startswith(SAYCAN_ROLE)
    text = messages[-1]["content"]
    seen = {m[1]: tuple(float(v) for v in m.groups()[1:]) for m in _OBJECT.finditer(text)}
    held = re.search(r"The gripper holds: (.+)\.", text)
    holding = None if held is None or held[1] == "nothing" else held[1]
    taken = text.split("Steps taken so far:\n")[1].split("Steps to choose from:")[0]
    steps = re.findall(r"^- (.+)$", text.split("Steps to choose from:\n")[1], re.MULTILINE)
    if re.search(r"^\d+\. put_in\(box\)$", taken, re.MULTILINE):
        choice = DONE
    elif holding == "red block":
        choice = "put_in(box)"
    elif holding is not None:
        choice = next(s for s in steps if s.startswith("place(["))
    else:
        rx, ry, rz = seen["red block"]
        above = [
            (z, n)
            for n, (x, y, z) in seen.items()
            if n != "red block" and abs(x - rx) < 0.03 and abs(y - ry) < 0.03 and z > rz + 0.01
        ]
        choice = f"pick({max(above)[1]})" if above else "pick(red block)"
    assert choice in steps, (choice, steps)
    return json.dumps({"step": choice})


@contextmanager
def task_world(robot: RobotConfig, embedder: Embedder, number: int) -> Iterator[Any]:
    task = TASKS[number]
    with code_world(robot, task.scene, embedder, detector()) as (twin, api):
        set_up(twin, task, random.Random(f"0/{task.name}/0"))
        api.home()
        yield twin, api


def client_for(robot: RobotConfig, server: ScriptedServer) -> ChatClient:
    return ChatClient(robot.code.decision.llm(robot.llm), base_url=server.base_url)


def schema_of(body: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema a request's ``response_format`` carries, in either form."""
    form = body["response_format"]
    return form["schema"] if "schema" in form else form["json_schema"]["schema"]


def block(name: str, x: float, y: float, z: float = 0.02) -> ObjectState:
    return ObjectState(name, name.replace(" ", "_"), (x, y, z), (0.04, 0.04, 0.04), "table")


# -- the candidate steps -----------------------------------------------------------------------


def test_a_free_hand_is_offered_picks_and_the_drawer_a_full_hand_puts_down() -> None:
    box = ObjectState("box", "box", (0.45, 0.28, 0.03), (0.24, 0.24, 0.06), "table")
    drawer = ObjectState("drawer", "drawer", (0.3, 0.4, 0.1), None, "table")
    scene = SceneState((block("red block", 0.5, -0.12), box, drawer))
    free = [s.text for s in candidate_steps(scene)]
    assert free == ["pick(red block)", "open_drawer(drawer)", "home()", DONE]
    assert "close_drawer(drawer)" in [s.text for s in candidate_steps(scene, frozenset({"drawer"}))]
    held = SceneState(scene.objects, held="red block")
    full = [s.text for s in candidate_steps(held, frozenset({"drawer"}))]
    assert full[:3] == ["place([0.35, -0.30])", "place([0.50, -0.30])", "place([0.35, 0.05])"]
    assert full[3:] == ["put_in(box)", "put_in(drawer)", "give_me()", "home()", DONE]


def test_free_spots_keep_clear_of_what_is_seen() -> None:
    scene = SceneState((block("red block", 0.35, -0.30), block("blue block", 0.36, 0.06)))
    assert free_spots(scene) == [(0.50, -0.30), (0.55, 0.05), (0.30, 0.20)]
    two = SceneState((block("red block", 0.5, -0.12), block("blue block", 0.2, 0.0)))
    steps = candidate_steps(SceneState(two.objects, held="red block"))
    assert steps[0].text == "place(blue block)"
    assert steps[1].args == ([0.35, -0.30],)
    assert free_spots(scene, used={(0.50, -0.30)}) == [(0.55, 0.05), (0.30, 0.20), (0.40, -0.15)]


def test_a_spot_the_episode_used_is_not_offered_again_when_the_camera_misses_what_is_on_it(
    robot: RobotConfig, embedder: Embedder
) -> None:
    """What a 480-input candidate detector did (models/detector/CARD.md): the blue block put
    on the first spot went unseen, and the yellow one was offered the same spot."""
    first = SPOTS[0]

    def missing_the_first_spot(api: RobotAPI) -> SceneState:
        seen = perceive(api, TASKS[2].scene)
        kept = [o for o in seen.objects if math.dist(o.position[:2], first) > CLEAR]
        return replace(seen, objects=tuple(kept))

    with (
        ScriptedServer(tower_step) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (twin, api),
    ):
        done = run_saycan(
            api, TASKS[2].instruction, client, MemoryRecorder(), missing_the_first_spot
        )
        verdict = judge(twin, TASKS[2], robot.code.handover)
    assert verdict.passed and done.errors == [], (verdict.reason, done)
    places = [s for s in done.steps if s.startswith("place([")]
    assert places == ["place([0.35, -0.30])", "place([0.50, -0.30])"]


# -- on the twin -----------------------------------------------------------------------------


def test_saycan_takes_the_stack_apart_and_puts_the_red_block_in_the_box_then_replays(
    robot: RobotConfig, embedder: Embedder
) -> None:
    recorder = MemoryRecorder()
    with (
        ScriptedServer(tower_step) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (twin, api),
    ):
        done = run_saycan(api, TASKS[2].instruction, client, recorder)
        verdict = judge(twin, TASKS[2], robot.code.handover)
    assert verdict.passed, (verdict.reason, done)
    assert done.done and done.ended == "done" and done.errors == []
    assert done.steps[:2] == ["pick(blue block)", done.steps[1]]
    assert done.steps[1].startswith("place([")
    assert done.steps[2:] == ['pick(yellow block)', done.steps[3], 'pick(red block)',
                              'put_in(box)', DONE]  # fmt: skip
    assert done.model_calls == len(server.requests) == 7
    assert done.model_seconds > 0
    # constrained decoding: each request carried the listed steps as the schema's enum
    enum = schema_of(server.requests[0])["properties"]["step"]["enum"]
    assert enum[-2:] == ["home()", DONE]
    assert sorted(enum[:-2]) == ["pick(blue block)", "pick(red block)", "pick(yellow block)"]
    assert (
        "Scene (what the robot's detector sees):" in server.requests[0]["messages"][-1]["content"]
    )
    kinds = [r["kind"] for r in recorder.records]
    assert kinds[0] == "baseline" and kinds[-1] == "baseline_end"
    assert kinds.count("request") == kinds.count("reply") == 7
    assert kinds.count("scene") == 7 and kinds.count("step") == 7
    moves = [r for r in recorder.records if r["kind"] == "step" and r["call"] != DONE]
    assert len(moves) == 6 and all(r["ok"] and r["seconds"] > 0 for r in moves)
    reply = next(r for r in recorder.records if r["kind"] == "reply")
    assert 0 < reply["sent_at"] < reply["received_at"]

    # the same layout again, answered from the recording: the same steps, the same end
    replies = recorded_replies(recorder.records, "saycan")
    with task_world(robot, embedder, 2) as (twin, api):
        again = run_saycan(api, TASKS[2].instruction, replies, MemoryRecorder())
        assert judge(twin, TASKS[2], robot.code.handover).passed
    assert again.steps == done.steps and replies.diverged == []


def test_a_failed_step_is_shown_to_the_model_with_its_error(
    robot: RobotConfig, embedder: Embedder
) -> None:
    def blue_taken_away(messages: list[dict[str, Any]]) -> str:
        text = messages[-1]["content"]
        if "Steps taken so far:\nnone yet" in text:
            # a person takes the blue block off the stack while the model thinks
            twin.set_object_pose("blue block", (-0.4, 0.9, 0.02))
            return json.dumps({"step": "pick(blue block)"})
        assert "1. pick(blue block) failed: pick('blue block'): no blue block seen" in text
        return json.dumps({"step": DONE})

    with (
        ScriptedServer(blue_taken_away) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (twin, api),
    ):
        done = run_saycan(api, TASKS[2].instruction, client, MemoryRecorder())
        assert not judge(twin, TASKS[2], robot.code.handover).passed
    assert (done.done, done.ended, done.steps) == (True, "done", ["pick(blue block)", DONE])
    assert len(done.errors) == 1 and "no blue block seen" in done.errors[0]
    assert len(server.requests) == 2


def test_a_reply_that_is_not_one_of_the_steps_ends_the_episode(
    robot: RobotConfig, embedder: Embedder
) -> None:
    # a free hand is not offered give_me(): the client refuses the reply against the schema
    with (
        ScriptedServer(lambda m: json.dumps({"step": "give_me()"})) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (_twin, api),
    ):
        done = run_saycan(api, TASKS[2].instruction, client, MemoryRecorder())
    assert (done.done, done.ended, done.steps, done.model_calls) == (False, "no reply", [], 1)
    assert done.errors[0].startswith("step 1: ")


def test_saycan_stops_after_max_steps(robot: RobotConfig, embedder: Embedder) -> None:
    with (
        ScriptedServer(lambda m: json.dumps({"step": "home()"})) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (_twin, api),
    ):
        done = run_saycan(api, TASKS[2].instruction, client, MemoryRecorder(), max_steps=3)
    assert (done.done, done.ended, done.steps) == (False, "steps", ["home()"] * 3)
    assert len(server.requests) == 3
    assert "1. home()\n2. home()" in server.requests[2]["messages"][-1]["content"]


TOWER_PROGRAM = """PLAN:
1. Pick the red block.
2. Put it into the box.
CODE:
```python
pick("{name}")
put_in("box")
```"""


def test_progprompt_runs_the_program_once_without_an_image_and_without_correction(
    robot: RobotConfig, embedder: Embedder
) -> None:
    def program(messages: list[dict[str, Any]]) -> str:
        assert messages[0]["content"].startswith(DECISION_ROLE)
        assert isinstance(messages[-1]["content"], str)  # text only: no image parts
        return TOWER_PROGRAM.format(name="pear")

    recorder = MemoryRecorder()
    with (
        ScriptedServer(program) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (twin, api),
    ):
        done = run_progprompt(api, TASKS[2].instruction, client, recorder, code_limits(robot.code))
        assert not judge(twin, TASKS[2], robot.code.handover).passed
    assert (done.done, done.ended, done.model_calls) == (False, "api", 1)
    assert done.program == 'pick("pear")\nput_in("box")\n'
    assert done.steps == ['pick("pear")'] and "no pear seen" in done.errors[0]
    assert "red block at (" in server.requests[0]["messages"][-1]["content"]
    run_record = next(r for r in recorder.records if r["kind"] == "run")
    assert run_record["ended"] == "api"


def test_progprompt_reports_a_reply_without_code_and_a_refused_program(
    robot: RobotConfig, embedder: Embedder
) -> None:
    replies = iter(["I would pick the red block.", "PLAN:\n1. x\nCODE:\n```python\nimport os\n```"])
    with (
        ScriptedServer(lambda m: next(replies)) as server,
        client_for(robot, server) as client,
        task_world(robot, embedder, 2) as (_twin, api),
    ):
        limits = code_limits(robot.code)
        first = run_progprompt(api, "x", client, MemoryRecorder(), limits)
        second = run_progprompt(api, "x", client, MemoryRecorder(), limits)
    assert (first.ended, first.program, first.done) == ("format", None, False)
    assert "PLAN:" in first.errors[0]
    assert (second.ended, second.done) == ("refused", False) and "import" in second.errors[0]


def test_recorded_replies_answer_in_order_and_end_with_the_recording(tmp_path: Any) -> None:
    path = tmp_path / "episode.jsonl"
    with Recorder(path) as recorder:
        recorder.write("request", bot="saycan", purpose="step", messages=[{"role": "user",
                       "content": "a"}], schema=None)  # fmt: skip
        recorder.write("reply", bot="saycan", purpose="step", text='{"step": "done"}',
                       latency=0.5, model="m")  # fmt: skip
        recorder.write("request", bot="saycan", purpose="step", messages=[], schema=None)
        recorder.write("error", source="saycan", purpose="step", message="timed out")
    replies = recorded_replies(read_recording(path), "saycan")
    assert replies.complete([{"role": "user", "content": "a"}]).text == '{"step": "done"}'
    with pytest.raises(LLMError, match="timed out"):
        replies.complete([{"role": "user", "content": "b"}])
    assert replies.diverged == [
        "saycan: request 2 (step) differs from the recording: the number of messages: "
        "recorded 0, replayed 1"
    ]
    with pytest.raises(LLMError, match="no more recorded replies"):
        replies.complete([])
    assert "the replay asks more than was recorded (2 requests)" in replies.diverged[-1]
