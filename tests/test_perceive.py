"""The perceived scene state on the seven tasks' twin scenes: the real twin, its camera, the
real ONNX detector, the robot API's eyes; the twin's truth only to set the table up."""

from __future__ import annotations

import random
import re

import pytest

from onboard.config import RobotConfig
from onboard.evaluation.code_tasks import load_code_tasks, set_up
from onboard.evaluation.code_trials import code_world
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.replan.perceive import perceive, scene_image
from onboard.replan.scene_state import SceneState

TASKS = {t.number: t for t in load_code_tasks()}
LINE = re.compile(
    r"- [a-z0-9 ]+ at \(-?\d\.\d{3}, -?\d\.\d{3}, -?\d\.\d{3}\)"
    r"(, on the [a-z0-9 ]+|, in the [a-z0-9 ]+)?"
)


def seen_on(robot: RobotConfig, embedder: Embedder, task: int) -> SceneState:
    with code_world(robot, TASKS[task].scene, embedder, detector()) as (twin, api):
        set_up(twin, TASKS[task], random.Random(f"perceive/{task}"))
        api.home()
        return perceive(api, TASKS[task].scene)


def assert_text_form(state: SceneState) -> None:
    lines = state.text().splitlines()
    unsure = [f"Not sure: {u.why}." for u in state.unknown]  # what the look cannot tell, last
    assert lines[len(lines) - len(unsure) :] == unsure
    lines = lines[: len(lines) - len(unsure)]
    assert lines[0] == "Objects seen (centre x, y, z in metres, robot base frame):"
    assert all(LINE.fullmatch(line) for line in lines[1:-1]), lines
    assert lines[-1] == f"The gripper holds: {state.held or 'nothing'}."


def test_the_tower_is_red_under_yellow_under_blue(robot: RobotConfig, embedder: Embedder) -> None:
    state = seen_on(robot, embedder, 2)
    red, yellow, blue = (state.named(f"{c} block") for c in ("red", "yellow", "blue"))
    assert red is not None and yellow is not None and blue is not None, state.text()
    assert (red.on, yellow.on, blue.on) == ("table", "red block", "yellow block"), state.text()
    assert red.position[2] < yellow.position[2] < blue.position[2]
    assert all(o.inside is None for o in (red, yellow, blue))
    box = state.named("box")
    assert box is not None and box.on == "table"
    assert state.held is None
    assert_text_form(state)


def test_the_fruit_rides_the_conveyor_and_the_plates_lie_beside_it(
    robot: RobotConfig, embedder: Embedder
) -> None:
    state = seen_on(robot, embedder, 5)
    fruit = [o for o in state.objects if o.kind in ("apple", "orange", "lemon")]
    assert sorted(o.kind for o in fruit) == ["apple", "lemon", "orange"], state.text()
    assert all(o.inside == "conveyor" for o in fruit), state.text()
    plates = [o for o in state.objects if o.kind == "plate"]
    assert len(plates) == 2 and all(p.inside is None for p in plates), state.text()
    assert sorted(round(p.position[1], 1) for p in plates) == [-0.2, 0.2]
    assert_text_form(state)


def test_without_the_workcell_no_conveyor_is_known(robot: RobotConfig, embedder: Embedder) -> None:
    with code_world(robot, TASKS[4].scene, embedder, detector()) as (_twin, api):
        api.home()
        state = perceive(api)
    assert {o.inside for o in state.objects} == {None}
    assert {o.on for o in state.objects} == {"table"}, state.text()


def test_the_box_holds_the_block_after_put_in_and_the_hand_what_it_picked(
    robot: RobotConfig, embedder: Embedder
) -> None:
    task = TASKS[1]
    with code_world(robot, task.scene, embedder, detector()) as (twin, api):
        set_up(twin, task, random.Random("perceive/1"))
        api.home()
        before = perceive(api)
        api.pick("green block")
        holding = perceive(api)
        frame = scene_image(api)
        api.put_in("box")
        api.home()
        after = perceive(api)
    green = before.named("green block")
    assert green is not None and green.inside is None and green.on == "table"
    assert holding.held == "green block"
    assert "The gripper holds: green block." in holding.text().splitlines()
    held = holding.named("green block")
    assert held is None or (held.on is None and held.inside is None)
    assert frame.dtype.name == "uint8" and frame.ndim == 3 and frame.shape[2] == 3
    green = after.named("green block")
    assert green is not None and green.inside == "box" and green.on == "box", after.text()
    assert after.held is None
    assert [o.name for o in after.objects if o.inside == "box"] == ["green block"], after.text()


def test_the_closed_drawer_is_seen_and_what_is_in_it_is_not(
    robot: RobotConfig, embedder: Embedder
) -> None:
    state = seen_on(robot, embedder, 6)
    assert {o.kind for o in state.objects} == {"drawer", "green block"}, state.text()
    green = state.named("green block")
    assert green is not None and green.on == "table" and green.inside is None


@pytest.mark.parametrize("task", [1, 3, 4, 7])
def test_every_loose_object_of_the_other_tasks_rests_on_something(
    robot: RobotConfig, embedder: Embedder, task: int
) -> None:
    state = seen_on(robot, embedder, task)
    assert state.objects, state.text()
    assert all(o.on is not None for o in state.objects), state.text()
    assert_text_form(state)
