"""The stand-in VLM (runtime/testing/vlm_standin/), a real process over real HTTP: it imports
nothing of the twin; its Decision replies for each task, from the twin's camera frames
rendered here, are read, accepted by the check, and (competence 1.0) pass tasks 1, 2 and 6
on the twin; its plan follows the image it is sent, not the table the twin holds; it plants
the errors of its ERRORS.md at their rates and reacts to feedback as documented there; its
match, extra and SayCan replies keep their schemas; a bad request is a one-line 400."""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from onboard.config import RobotConfig
from onboard.evaluation.code_judges import judge
from onboard.evaluation.code_tasks import CodeTask, goal_image, load_code_tasks, set_up
from onboard.evaluation.code_trials import code_world, limits_of, run_program
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.llm.content import png_bytes
from onboard.llm.structured import reply_problem
from onboard.replan.allowlist import check
from onboard.replan.names import API_NAMES
from onboard.replan.prompts import (
    DECISION_ROLE,
    Proposal,
    decision_messages,
    extra_messages,
    extra_schema,
    match_messages,
    match_schema,
    read_proposal,
    saycan_messages,
    saycan_schema,
)
from onboard.replan.scene_state import ObjectState, SceneState, changes_text
from onboard.testing.vlm_standin import start_vlm_standin
from onboard.testing.vlm_standin.planting import FIX_NAMED, rate

TASKS = {t.number: t for t in load_code_tasks()}
FORBIDDEN = ("pybullet", "onboard.drivers.twin", "onboard.evaluation")
GOAL_NOTE = "the goal picture: the blocks stacked as they should be"


def _post(url: str, messages: list[Any], schema: dict[str, Any] | None = None) -> httpx.Response:
    body: dict[str, Any] = {"model": "vlm-standin", "messages": messages}
    if schema is not None:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": schema, "strict": True},
        }
    return httpx.post(f"{url}/chat/completions", json=body, timeout=30.0)


def _content(url: str, messages: list[Any], schema: dict[str, Any] | None = None) -> str:
    reply = _post(url, messages, schema)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def _decide(url: str, task: CodeTask, images: list[bytes], errors: tuple[str, ...] = ()) -> str:
    notes = ["the camera's view of the table"] + [GOAL_NOTE] * (len(images) - 1)
    return _content(url, decision_messages(task.instruction, images, notes, errors=errors))


def _proposal(text: str) -> Proposal:
    proposal = read_proposal(text)
    assert isinstance(proposal, Proposal), f"{proposal}\n{text}"
    return proposal


def _log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def control(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("vlm") / "control.jsonl"
    with start_vlm_standin(seed=3, competence=1.0, log=log) as url:
        yield url, log


@pytest.fixture(scope="module")
def careless(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("vlm") / "careless.jsonl"
    with start_vlm_standin(seed=5, competence=0.0, log=log) as url:
        yield url, log


@pytest.fixture(scope="module")
def frames(robot: RobotConfig, embedder: Embedder) -> dict[int, bytes]:
    """Each task's first camera frame (trial 0 of seed 0), rendered by the twin here."""
    out = {}
    for number, task in TASKS.items():
        with code_world(robot, task.scene, embedder, detector()) as (twin, api):
            set_up(twin, task, random.Random(f"0/{task.name}/0"))
            api.home()
            out[number] = png_bytes(api.eyes.camera.read().color)
    return out


@pytest.fixture(scope="module")
def goal() -> bytes:
    return png_bytes(goal_image(TASKS[3]))


def test_the_child_imports_nothing_of_the_twin(tmp_path: Path, frames: dict[int, bytes]) -> None:
    errors = tmp_path / "importtime.txt"
    python = (sys.executable, "-X", "importtime")
    with start_vlm_standin(0, 0.5, None, python=python, stderr=errors) as url:
        _proposal(_decide(url, TASKS[2], [frames[2]]))  # what a request imports counts too
    imported = {
        line.rsplit("|", 1)[1].strip()
        for line in errors.read_text().splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert {"onboard.perception.detector", "onboard.testing.vlm_standin.server"} <= imported
    assert sorted(m for m in imported if m.startswith(FORBIDDEN)) == []


def test_each_tasks_decision_is_read_and_accepted(
    control: tuple[str, Path], frames: dict[int, bytes], goal: bytes
) -> None:
    url, log = control
    for number, task in TASKS.items():
        images = [frames[number], goal] if number == 3 else [frames[number]]
        proposal = _proposal(_decide(url, task, images))
        assert check(proposal.code, API_NAMES) == [], (number, proposal.code)
    lines = [r for r in _log(log) if r["bot"] == "decision"][-len(TASKS) :]
    assert [r["task"] for r in lines] == list(TASKS)
    assert all(r["planted"] == [] and r["mode"] == "image" for r in lines)


def test_the_picture_task_stacks_the_goal_pictures_order(
    control: tuple[str, Path], frames: dict[int, bytes], goal: bytes
) -> None:
    proposal = _proposal(_decide(control[0], TASKS[3], [frames[3], goal]))
    assert (
        "the green block at the bottom, the red block on it, the blue block on top"
        in (proposal.plan[0])
    )
    assert 'place("green block")' in proposal.code and 'place("red block")' in proposal.code


@pytest.mark.parametrize("number", [1, 2, 6])
def test_at_full_competence_the_decision_passes_its_task_on_the_twin(
    control: tuple[str, Path], robot: RobotConfig, embedder: Embedder, number: int
) -> None:
    task = TASKS[number]
    with code_world(robot, task.scene, embedder, detector()) as (twin, api):
        set_up(twin, task, random.Random(f"1/{task.name}/0"))
        api.home()
        proposal = _proposal(_decide(control[0], task, [png_bytes(api.eyes.camera.read().color)]))
        result = run_program(api, proposal.code, limits_of(robot))
        verdict = judge(twin, task, robot.code.handover)
    assert verdict.passed, f"{verdict.reason}; {result.reason}: {result.message}\n{proposal.code}"


def test_the_plan_follows_the_image_not_the_table(
    control: tuple[str, Path], robot: RobotConfig, embedder: Embedder, frames: dict[int, bytes]
) -> None:
    """The twin holds the tower (task 2's scene); the request carries the toys' image."""
    tower = TASKS[2]
    with code_world(robot, tower.scene, embedder, detector()) as (twin, api):
        set_up(twin, tower, random.Random("swap"))
        api.home()
        here = png_bytes(api.eyes.camera.read().color)
        swapped = _proposal(_decide(control[0], tower, [frames[7]]))
        honest = _proposal(_decide(control[0], tower, [here]))
    assert "duck" in swapped.plan[0] and "teddy" in swapped.plan[0]
    assert "yellow block" not in " ".join(swapped.plan)  # no stack seen: nothing to take off
    assert "the yellow block is on the red block" in honest.plan[0]
    assert "yellow block" in " ".join(honest.plan[1:]) and "duck" not in honest.plan[0]


# -- the planted errors and the reactions (ERRORS.md) -----------------------------------------

N = 60
ALPHA = 1e-4  # a seeded test: the bound only says how far off the rate a count may be


def _binomial_bounds(n: int, p: float) -> tuple[int, int]:
    """The counts outside which a Binomial(n, p) count falls with probability < ALPHA."""
    pmf = [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]
    low = next(k for k in range(n + 1) if sum(pmf[: k + 1]) >= ALPHA / 2)
    high = next(k for k in range(n, -1, -1) if sum(pmf[k:]) >= ALPHA / 2)
    return low, high


def _planted(
    url: str, log: Path, task: CodeTask, image: bytes, errors: tuple[str, ...]
) -> list[list[str]]:
    before = len(_log(log))
    replies = [_decide(url, task, [image], errors) for _ in range(N)]
    lines = _log(log)[before:]
    assert len(lines) == N
    for text, line in zip(replies, lines, strict=True):
        if "format" in line["planted"]:
            assert isinstance(read_proposal(text), str)
            continue
        proposal = _proposal(text)
        unstacked = any("off the stack" in step for step in proposal.plan)
        assert unstacked == ("unstack" not in line["planted"]), (line, proposal.plan)
    return [line["planted"] for line in lines]


def test_at_full_competence_nothing_is_planted(
    control: tuple[str, Path], frames: dict[int, bytes]
) -> None:
    url, log = control
    planted = _planted(url, log, TASKS[2], frames[2], ())
    assert planted == [[]] * N


def test_the_unstack_error_comes_at_its_rate_and_a_message_naming_the_stack_fixes_it(
    careless: tuple[str, Path], frames: dict[int, bytes]
) -> None:
    url, log = careless
    first = sum("unstack" in p for p in _planted(url, log, TASKS[2], frames[2], ()))
    low, high = _binomial_bounds(N, rate("unstack", 0.0))
    assert low <= first <= high, (first, low, high)
    named = ("the red block is not in the box: it is on the table; the yellow block is on it",)
    after = _planted(url, log, TASKS[2], frames[2], named)
    assert all(line["named"] == ["unstack"] for line in _log(log)[-N:])
    fixed = sum("unstack" in p for p in after)
    low, high = _binomial_bounds(N, rate("unstack", 0.0) * (1 - FIX_NAMED["unstack"]))
    assert low <= fixed <= high, (fixed, low, high)
    # a message that names something else leaves the error at its rate
    other = ("pick('red block'): the gripper closed on nothing",)
    repeated = sum("unstack" in p for p in _planted(url, log, TASKS[2], frames[2], other))
    low, high = _binomial_bounds(N, rate("unstack", 0.0))
    assert low <= repeated <= high, (repeated, low, high)


def test_a_planted_mismatch_is_caught_by_the_match_bot(
    careless: tuple[str, Path], control: tuple[str, Path], frames: dict[int, bytes]
) -> None:
    url, log = careless
    task = TASKS[7]
    seen = 0
    for _ in range(20):
        text = _decide(url, task, [frames[7]])
        line = _log(log)[-1]
        proposal = read_proposal(text)
        if isinstance(proposal, str):
            continue
        reply = _content(
            control[0], match_messages(task.instruction, proposal, [frames[7]]), match_schema()
        )
        assert reply_problem(reply, match_schema()) is None
        verdict = json.loads(reply)
        assert verdict["match"] == ("mismatch" not in line["planted"]), (verdict, line)
        if not verdict["match"]:
            assert "step" in verdict["reason"]
            seen += 1
    assert seen > 0  # rate 0.3 over 20 draws: seeded, so this does not flake


# -- the other bots ----------------------------------------------------------------------------


def _obj(
    name: str, x: float, y: float, z: float, on: str | None = "table", inside: str | None = None
) -> ObjectState:
    return ObjectState(
        name, name.split(" 2")[0], (x, y, z), on=on if inside is None else None, inside=inside
    )


def test_the_extra_bot_judges_the_after_state_and_names_what_is_wrong(
    control: tuple[str, Path],
) -> None:
    url = control[0]
    task = TASKS[2]
    plan = Proposal(
        ("Pick up the red block.", "Put it into the box."), 'pick("red block")\nput_in("box")\n', ""
    )
    before = SceneState(
        (
            _obj("red block", 0.5, -0.12, 0.02),
            _obj("yellow block", 0.5, -0.12, 0.06, on="red block"),
            _obj("box", 0.35, 0.35, -0.1),
        )
    )
    stuck = before
    done = SceneState(
        (
            _obj("red block", 0.35, 0.35, 0.0, inside="box"),
            _obj("yellow block", 0.36, -0.3, 0.02),
            _obj("box", 0.35, 0.35, -0.1),
        )
    )
    for after, expected in ((stuck, False), (done, True)):
        messages = extra_messages(
            task.instruction,
            plan,
            before.text(),
            after.text(),
            changes_text(before, after),
            "ok",
            None,
            None,
        )
        reply = _content(url, messages, extra_schema())
        assert reply_problem(reply, extra_schema()) is None
        verdict = json.loads(reply)
        assert verdict["done"] is expected, verdict
    assert (
        "red block is not in the box"
        in json.loads(
            _content(
                url,
                extra_messages(
                    task.instruction,
                    plan,
                    before.text(),
                    stuck.text(),
                    "- nothing changed",
                    "ok",
                    None,
                    None,
                ),
            )
        )["reason"]
    )


def _after(scene: SceneState, step: str) -> SceneState:
    """The scene once ``step`` is done, as the table would have it (the test's own
    bookkeeping: the stand-in sees only the text)."""
    objects = {o.name: o for o in scene.objects}
    held = scene.held
    if step.startswith("pick("):
        held = step[6:-2]
        objects[held] = replace(objects[held], position=(0.4, 0.0, 0.3), on=None)
    elif step.startswith("place([") and held is not None:
        x, y = json.loads(step[6:-1])
        objects[held] = replace(objects[held], position=(x, y, 0.02), on="table")
        held = None
    elif step.startswith("put_in(") and held is not None:
        box = objects[step[8:-2]].position
        objects[held] = replace(objects[held], position=box, on=None, inside=step[8:-2])
        held = None
    return SceneState(tuple(objects.values()), held=held)


def test_the_saycan_steps_follow_its_plan_and_keep_the_schema(control: tuple[str, Path]) -> None:
    url = control[0]
    task = TASKS[2]
    scene = SceneState(
        (
            _obj("red block", 0.5, -0.12, 0.02),
            _obj("yellow block", 0.5, -0.12, 0.06, on="red block"),
            _obj("box", 0.35, 0.35, -0.1),
        )
    )
    steps = [
        'pick("red block")',
        'pick("yellow block")',
        "place([0.5, -0.12])",
        "place([0.36, -0.3])",
        'put_in("box")',
        "home()",
        "done",
    ]
    taken: list[str] = []
    for _ in range(8):
        messages = saycan_messages(task.instruction, scene.text(), taken, steps)
        reply = _content(url, messages, saycan_schema(steps))
        assert reply_problem(reply, saycan_schema(steps)) is None
        taken.append(json.loads(reply)["step"])
        if taken[-1] == "done":
            break
        scene = _after(scene, taken[-1])
    assert taken == [
        'pick("yellow block")',
        "place([0.36, -0.3])",  # the free spot, not the stack's
        'pick("red block")',
        'put_in("box")',
        "done",
    ]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"not json", "not JSON"),
        (b'{"messages": 3}', "'messages' list"),
        (b'{"messages": [{"role": "system", "content": "You are a pirate."}]}', "names no bot"),
        (
            json.dumps(
                {
                    "messages": [
                        {
                            "role": "system",
                            "content": DECISION_ROLE,
                        },
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": "Instruction: x"},
                                {
                                    "type": "image_url",
                                    "image_url": {"url": "data:image/png;base64,AAAA"},
                                },
                            ],
                        },
                    ]
                }
            ).encode(),
            "image 1",
        ),
    ],
)
def test_a_bad_request_is_a_one_line_400(control: tuple[str, Path], body: bytes, says: str) -> None:
    reply = httpx.post(f"{control[0]}/chat/completions", content=body, timeout=10.0)
    assert reply.status_code == 400
    assert "\n" not in reply.text
    assert says in reply.json()["error"]["message"]


def test_the_models_list_names_the_stand_in(control: tuple[str, Path]) -> None:
    reply = httpx.get(f"{control[0]}/models", timeout=10.0)
    assert reply.json()["data"][0]["id"] == "vlm-standin"
