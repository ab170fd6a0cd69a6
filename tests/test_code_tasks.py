"""The seven code tasks on the twin: the task list, the conveyor's end stop, each judge on a
success state and near misses (set up by teleporting objects in the twin), the disturbers,
the goal picture; then (slow) each task's solution once, and every benign program through
the check and on the twin."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest

from onboard.base.errors import ConfigError
from onboard.config import RobotConfig
from onboard.drivers.arm.base import Pose
from onboard.drivers.twin.world import Twin
from onboard.evaluation.code_judges import judge
from onboard.evaluation.code_tasks import (
    benign_corpus,
    goal_image,
    load_code_tasks,
    set_up,
)
from onboard.evaluation.code_trials import code_world, limits_of, run_program, run_trial
from onboard.evaluation.disturb import Disturbance, disturbed
from onboard.evaluation.tidy_eval import detector
from onboard.grounding.embedder import Embedder
from onboard.replan.allowlist import check
from onboard.replan.names import API_NAMES

TASKS = {t.number: t for t in load_code_tasks()}
HANDOVER = (0.35, -0.25, 0.3)


def twin_of(number: int) -> Twin:
    twin = Twin(TASKS[number].scene)
    twin.settle(0.3)
    return twin


def put(twin: Twin, name: str, x: float, y: float, z: float) -> None:
    twin.set_object_pose(name, (x, y, z))


def hold(twin: Twin, name: str, at: tuple[float, float, float]) -> None:
    """The gripper closed on ``name`` with the tool at ``at`` (teleported there)."""
    twin.grip(False)
    twin.step(0.3)
    solution = twin.solve_ik(Pose(*at, math.pi, 0.0, 0.0))
    twin.reset_joints(solution.joints)
    twin.set_joint_targets(solution.joints, 1.0)
    twin.grip(True)
    for _ in range(240):  # kept between the fingers until they close on it
        put(twin, name, *twin.to_world(twin.ee_pose().position()))
        twin.step()
        if twin.held_object() == name:
            break
    twin.step(0.3)
    assert twin.held_object() == name


def test_the_task_list_has_seven_tasks_and_a_benign_corpus_of_twenty() -> None:
    assert sorted(TASKS) == [1, 2, 3, 4, 5, 6, 7]
    corpus = benign_corpus()
    assert len(corpus) >= 20
    files = {path.name for path, _ in corpus}
    assert {t.solution for t in TASKS.values()} <= files
    assert all(path.is_file() for path, _ in corpus)


def test_a_task_naming_an_object_its_scene_lacks_is_one_line(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parent.parent / "skills" / "tasks"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "task1.py").write_text("print(detect())\n")
    text = (shipped / "code.toml").read_text().split("[[task]]\nnumber = 2")[0]
    (tmp_path / "code.toml").write_text(text.replace('object = "apple"', 'object = "pear"'))
    with pytest.raises(ConfigError) as caught:
        load_code_tasks(tmp_path / "code.toml")
    assert str(caught.value).count("\n") == 0
    assert "code.toml" in str(caught.value) and "no pear" in str(caught.value)


def test_the_conveyor_queues_what_it_carries_at_its_end_stop() -> None:
    with twin_of(4) as twin:
        twin.step(15.0)
        xs = sorted(twin.object_pose(n)[0][0] for n in ("red block", "green block", "blue block"))
        for name in ("red block", "green block", "blue block"):
            (_, y, z), _ = twin.object_pose(name)
            assert abs(y) < 0.02 and 0.015 < z < 0.03, f"{name} left the belt"
    # the stop's inner face is at 0.58: three 4 cm blocks touching, the first against it
    assert xs == pytest.approx([0.48, 0.52, 0.56], abs=0.006)


def test_a_variation_is_seeded_and_never_starts_solved() -> None:
    task = TASKS[4]
    layouts = []
    for trial in (0, 1, 0):
        with Twin(task.scene) as twin:
            rng = random.Random(f"0/{task.name}/{trial}")
            layouts.append(set_up(twin, task, rng, lambda t: judge(t, task).passed))
            assert not judge(twin, task).passed
    assert layouts[0] == layouts[2] != layouts[1]


# -- judges: a success and near misses each ---------------------------------------------------


def test_given_needs_the_food_held_at_the_hand_over_point() -> None:
    task = TASKS[1]
    with twin_of(1) as twin:
        put(twin, "apple", *twin.to_world(HANDOVER))
        assert judge(twin, task, HANDOVER) == (
            False,
            "apple not held, 0.000 m from the hand-over point",
        )
        hold(twin, "apple", (0.45, 0.0, 0.3))
        passed, reason = judge(twin, task, HANDOVER)
        assert not passed and "held" in reason
        hold(twin, "blue block", HANDOVER)
        assert not judge(twin, task, HANDOVER).passed  # the wrong thing
    with twin_of(1) as twin:
        hold(twin, "apple", HANDOVER)
        assert judge(twin, task, HANDOVER).passed
        with pytest.raises(ValueError, match="hand-over"):
            judge(twin, task)


def test_inside_counts_the_red_block_in_the_box_only() -> None:
    task = TASKS[2]
    with twin_of(2) as twin:
        assert not judge(twin, task).passed  # at the bottom of the stack
        put(twin, "red block", 0.45 + 0.13, 0.28, 0.06)  # on the box's rim, or off it
        twin.step(0.5)
        assert not judge(twin, task).passed
        put(twin, "red block", 0.47, 0.26, 0.03)
        twin.step(0.5)
        assert judge(twin, task).passed, judge(twin, task).reason


def test_inside_fails_when_the_teddy_went_in_with_the_duck() -> None:
    task = TASKS[7]
    with twin_of(7) as twin:
        put(twin, "duck", 0.42, 0.28, 0.04)
        twin.step(0.5)
        assert judge(twin, task).passed, judge(twin, task).reason
        put(twin, "teddy", 0.5, 0.3, 0.06)
        twin.step(0.5)
        assert judge(twin, task) == (False, "teddy in the box too")


def test_stack_needs_the_pictures_order() -> None:
    task = TASKS[3]
    with twin_of(3) as twin:
        for i, name in enumerate(["green block", "red block", "blue block"]):
            put(twin, name, 0.45, 0.0, 0.0205 + 0.0405 * i)
        twin.step(0.5)
        assert judge(twin, task).passed, judge(twin, task).reason
        for i, name in enumerate(["green block", "blue block", "red block"]):
            put(twin, name, 0.45, 0.0, 0.0205 + 0.0405 * i)
        twin.step(0.5)
        passed, reason = judge(twin, task)
        assert not passed and reason.startswith("red block not on green block"), reason


def test_belt_order_reads_the_order_from_the_end_stop() -> None:
    task = TASKS[4]
    with twin_of(4) as twin:
        for x, name in zip(
            (0.3, 0.38, 0.46), ("red block", "green block", "blue block"), strict=True
        ):
            put(twin, name, x, 0.0, 0.0225)
        twin.step(1.0)
        assert judge(twin, task).passed, judge(twin, task).reason
        put(twin, "green block", 0.2, 0.0, 0.0225)  # behind the red one now
        twin.step(0.2)
        assert judge(twin, task).reason == "from the end: blue block, red block, green block"
        put(twin, "green block", 0.4, 0.2, 0.02)  # off the belt
        twin.step(0.2)
        assert "not on the conveyor" in judge(twin, task).reason


def test_on_plates_puts_each_fruit_on_its_side() -> None:
    task = TASKS[5]
    with twin_of(5) as twin:
        put(twin, "apple", 0.42, 0.25, 0.05)
        put(twin, "lemon", 0.42, -0.25, 0.04)
        twin.step(0.5)
        assert judge(twin, task).passed, judge(twin, task).reason
        put(twin, "orange", 0.42, -0.2, 0.05)
        twin.step(0.5)
        assert judge(twin, task) == (False, "orange on the right plate too")
        put(twin, "orange", 0.2, 0.3, 0.04)
        put(twin, "apple", 0.42, -0.3, 0.05)  # the wrong plate
        twin.step(0.5)
        assert judge(twin, task).reason.startswith("apple not on the left plate")


def test_out_of_drawer_needs_the_block_on_the_table() -> None:
    task = TASKS[6]
    with twin_of(6) as twin:
        passed, reason = judge(twin, task)
        assert not passed and "still in the drawer" in reason
        twin.set_drawer("drawer", 0.15)
        twin.step(1.5)
        assert "still in the drawer" in judge(twin, task).reason  # it came out with the drawer
        put(twin, "red block", 0.5, -0.06, 0.021)
        twin.step(0.3)
        assert judge(twin, task).passed, judge(twin, task).reason


# -- disturbers -------------------------------------------------------------------------------


def test_a_drop_disturbance_lets_go_of_the_held_block_and_logs_the_time() -> None:
    logged = []
    with (
        twin_of(3) as twin,
        disturbed(
            twin, Disturbance("drop", on="held", object="red block", after=0.6), logged.append
        ) as disturber,
    ):
        twin.step(0.2)
        assert not disturber.done  # nothing held yet
        hold(twin, "red block", (0.4, 0.0, 0.25))  # steps 0.3 s with the block in hand
        held_at = twin.time - 0.3
        assert not disturber.done
        twin.step(0.8)
        assert twin.held_object() is None
        (_, _, z), _ = twin.object_pose("red block")
    assert z == pytest.approx(0.02, abs=0.005), "it fell to the table"
    (event,) = disturber.events
    assert logged == [event] and event.what.startswith("dropped red block")
    assert event.time == pytest.approx(held_at + 0.6, abs=0.01)


def test_a_move_disturbance_happens_once_at_its_step() -> None:
    with (
        twin_of(3) as twin,
        disturbed(
            twin, Disturbance("move", on="step", object="blue block", step=100, to=(0.3, 0.2))
        ) as disturber,
    ):
        start = twin.snapshot.step
        twin.step(0.5)
        (x, y, _), _ = twin.object_pose("blue block")
    assert (x, y) == pytest.approx((0.3, 0.2), abs=0.005)
    (event,) = disturber.events
    assert event.step == 100 and start < 100 and event.time == pytest.approx(100 / 240, abs=1e-3)


def test_a_move_disturbance_needs_the_object_and_the_point() -> None:
    with pytest.raises(ValueError, match="to = "):
        Disturbance("move", object="red block")


def test_the_goal_picture_shows_green_under_red_under_blue() -> None:
    image = goal_image(TASKS[3]).astype(int)
    assert image.shape == (240, 320, 3)
    r, g, b = image[..., 0], image[..., 1], image[..., 2]
    rows = {
        "green": np.nonzero((g > r + 40) & (g > b + 20))[0],
        "red": np.nonzero((r > g + 80) & (r > b + 80))[0],
        "blue": np.nonzero((b > r + 60) & (b > g + 40))[0],
    }
    assert all(len(v) > 20 for v in rows.values()), {k: len(v) for k, v in rows.items()}
    mean = {k: float(v.mean()) for k, v in rows.items()}
    assert mean["green"] > mean["red"] > mean["blue"], mean  # lower in the image is lower
    with pytest.raises(ValueError, match="no goal scene"):
        goal_image(TASKS[1])


# -- slow: the solutions and the benign corpus on the twin ------------------------------------

#: what keeps a program from passing today (strict: each flips to a failure once fixed)
BLOCKED_TASKS: dict[int, str] = {}
BLOCKED_PROGRAMS: dict[str, str] = {}


def _blocked(why: str | None) -> pytest.MarkDecorator | tuple[()]:
    return pytest.mark.xfail(strict=True, reason=why) if why else ()


@pytest.mark.parametrize(
    "task",
    [pytest.param(n, marks=_blocked(BLOCKED_TASKS.get(n)), id=f"task{n}") for n in sorted(TASKS)],
)
def test_each_tasks_solution_passes_its_judge_once(
    robot: RobotConfig, embedder: Embedder, task: int
) -> None:
    done = run_trial(robot, TASKS[task], 0, 0, embedder, detector())
    assert done.passed, f"{done.reason}; {done.ended}: {done.message}"


CORPUS = benign_corpus()


def test_every_benign_program_is_accepted_by_the_check() -> None:
    refused = {p.name: check(p.read_text(), API_NAMES) for p, _ in CORPUS}
    assert {name: r for name, r in refused.items() if r} == {}


@pytest.mark.parametrize(
    ("path", "scene"),
    [
        pytest.param(p, s, marks=_blocked(BLOCKED_PROGRAMS.get(p.stem)), id=p.stem)
        for p, s in CORPUS
    ],
)
def test_every_benign_program_is_accepted_and_runs_on_the_twin(
    robot: RobotConfig, embedder: Embedder, path: Path, scene: str
) -> None:
    source = path.read_text()
    assert check(source, API_NAMES) == []
    with code_world(robot, scene, embedder, detector()) as (_twin, api):
        api.home()
        result = run_program(api, source, limits_of(robot))
    assert result.ok, f"{result.reason}: {result.message}"
