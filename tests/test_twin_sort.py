"""Sort Cubes on the twin's three arms (scene sort_cubes, onboard.collab.twin_sort): the
symbolic reach and the arms' agree, SafeArm refuses a move out of an agent's reach, and the
oracle's plan runs on the arms with the cubes' panels, read back from physics, equal to the
symbolic state after every step.

Measured (2 shared cores): an episode takes 5 to 15 s of wall time (27 to 56 s simulated),
so the easiest and the hardest level run here (this file: about 30 s), and every start of
all five levels in ``bench/twin_sort.py --every-start`` (134 episodes, about 17 minutes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import pytest

from onboard.base.errors import SafetyError
from onboard.cli.main import main
from onboard.collab.envs.base import Snapshot
from onboard.collab.envs.sort import CUBES, SortCubes, SortState
from onboard.collab.taskfile import (
    PANELS,
    SORT_TARGETS,
    SortLevel,
    TeamTask,
    find_team_task,
    sort_starts,
)
from onboard.collab.twin_sort import APPROACH, SCENE, SLOTS, SortRig, grasp_pose
from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.twin import SCENES, Twin, load_scene
from onboard.drivers.twin.scene import Scene
from onboard.evaluation.sort_twin import lay_out, run_episode, twin_assignment

#: metres an IK answer may miss by and still count as reaching (the sim arm's own tolerance)
IK_TOLERANCE = SimArmConfig().ik_tolerance


@pytest.fixture(scope="module")
def task() -> TeamTask:
    return find_team_task("sort_cubes")


@pytest.fixture(scope="module")
def rig(task: TeamTask) -> Iterator[SortRig]:
    with Twin(SCENE) as twin, SortRig(twin, task) as rig:
        twin.settle(0.2)
        yield rig


def _arm_reaches(rig: SortRig, agent: str, panel: str) -> tuple[bool, bool]:
    """(the agent's workspace holds every grasp and approach pose over ``panel``'s slots,
    the twin's IK reaches all of them within IK_TOLERANCE)."""
    twin, limits = rig.twin, rig.arms[agent].limits
    contained, reached = True, True
    for i in range(len(SLOTS)):
        grasp = grasp_pose(twin, agent, rig.panels[panel].slot(i))
        for pose in (grasp, Pose(grasp.x, grasp.y, grasp.z + APPROACH, grasp.rx, grasp.ry)):
            contained &= limits.workspace.contains(pose.position())
            reached &= twin.solve_ik(pose, arm=agent).residual <= IK_TOLERANCE
    return contained, reached


def test_the_symbolic_reach_is_the_arms_reach(rig: SortRig, task: TeamTask) -> None:
    """For every level's starts, every cube, agent and place panel: the symbolic env lets the
    agent move the cube there iff the agent's SafetyLimits workspace holds both panels and
    the twin's IK reaches a grasp pose (and the approach above it) over both, within the sim
    arm's IK tolerance (1 cm). The physics agrees on its own: IK misses every panel outside
    an agent's reach, so the workspace boxes only make that explicit."""
    env = SortCubes(task, next(iter(task.levels)))
    env.reset(0)
    twin_side = {(a, p): _arm_reaches(rig, a, p) for a in task.agent_names for p in PANELS}
    for (agent, panel), (contained, reached) in twin_side.items():
        inside = panel in task.agent(agent).reach
        assert contained == inside, f"{agent}'s workspace and {panel}"
        assert reached == inside, f"{agent}'s IK and {panel}"
    checked = 0
    for name in task.levels:
        level = task.level(name)
        assert isinstance(level, SortLevel)
        for start in sort_starts(*level.distance):
            state = SortState(tuple(PANELS.index(start[c]) for c in CUBES))
            env.restore(Snapshot(state, 0, 0.0, False, False))
            for cube in CUBES:
                at = start[cube]
                for agent in task.agent_names:
                    for place in PANELS:
                        if place == at:
                            continue
                        symbolic = env.legal(agent, f"PICK {cube} PLACE {place}") is None
                        physical = all(all(twin_side[agent, p]) for p in (at, place))
                        assert symbolic == physical, (start, cube, agent, place)
                        checked += 1
    assert checked > 1000


def test_a_move_out_of_reach_is_refused_and_the_arm_left_safe(rig: SortRig) -> None:
    twin = rig.twin
    lay_out(rig, {"blue_square": "panel3", "pink_polygon": "panel5", "yellow_trapezoid": "panel7"})
    before = twin_assignment(rig)
    step, joints = twin.snapshot.step, twin.joints("Alice")
    x, y, z = rig.panels["panel4"].center
    with pytest.raises(SafetyError, match="outside the workspace"):
        rig.arms["Alice"].move_to(grasp_pose(twin, "Alice", (x, y, z + 0.12)))
    with pytest.raises(SafetyError, match="outside the workspace"):
        rig.execute({"Alice": "PICK blue_square PLACE panel4"})  # panel3 in reach, panel4 not
    assert twin.snapshot.step == step, "nothing moved: the refusals came before any motion"
    assert twin.joints("Alice") == joints
    state = rig.arms["Alice"].state()
    assert not state.moving and not state.stopped and not state.gripper_closed
    assert twin.held_object("Alice") is None and twin_assignment(rig) == before
    rig.execute({"Alice": "PICK blue_square PLACE panel2"})  # the arm still works in reach
    assert twin_assignment(rig)["blue_square"] == "panel2"


@pytest.mark.parametrize("level", ["level1", "level5"])
def test_an_episode_runs_on_the_arms_as_in_the_symbolic_env(
    rig: SortRig, task: TeamTask, level: str
) -> None:
    episode = run_episode(rig, SortCubes(task, level), seed=0)
    trace = [(s.executed, s.symbolic, s.twin) for s in episode.steps]
    assert episode.twin_start == episode.start
    assert episode.agreed, trace
    assert episode.success and episode.twin_success, trace
    assert all(s.executed for s in episode.steps), "every step moved a cube"


def test_each_arm_moves_alone_in_its_own_base_frame(rig: SortRig) -> None:
    twin = rig.twin
    others = {a: twin.joints(a) for a in ("Alice", "Chad")}
    goal = Pose(0.35, 0.05, 0.2, math.pi, 0.0, 0.0)  # Bob's frame: over panel4
    rig.arms["Bob"].move_to(goal)
    assert math.dist(twin.ee_pose("Bob").position(), goal.position()) < 0.005
    world = twin.to_world(twin.ee_pose("Bob").position(), "Bob")
    assert math.dist(world, (0.35, 0.05, 0.2)) < 0.005  # Bob stands at the origin
    alice = twin.to_base(world, "Alice")
    assert math.dist(alice, (0.35, -0.75, 0.2)) < 0.005  # 0.8 m to Alice's right
    for arm, joints in others.items():
        assert twin.joints(arm) == pytest.approx(joints, abs=1e-3), f"{arm} held still"
    rig.arms["Bob"].home()


def test_a_scene_has_one_arm_table_or_named_arms() -> None:
    assert list(load_scene(SCENES / "sort_cubes.toml").arm_specs()) == ["Alice", "Bob", "Chad"]
    assert list(load_scene(SCENES / "blocks.toml").arm_specs()) == ["arm"]
    with pytest.raises(ValueError, match="not both"):
        Scene.model_validate({"arm": {}, "arms": [{"name": "a"}]})
    with pytest.raises(ValueError, match="unique"):
        Scene.model_validate({"arms": [{"name": "a"}, {"name": "a", "position": [0, 1, 0]}]})


def test_the_command_runs_a_methods_plan_on_the_twin_beside_the_oracles(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ReAd-J on the team stand-in chooses the joint actions (the symbolic env's episode, its
    critic vetoing); the arms run them step by step, judged from physics after each."""
    argv = ["task", "twin", "sort_cubes", "--level", "level1", "--method", "read_j", "--json"]
    assert main(argv) == 0
    oracle, read_j = map(json.loads, capsys.readouterr().out.splitlines())
    assert (oracle["plan"], read_j["plan"]) == ("oracle", "read_j")
    assert oracle["seed"] == read_j["seed"] and oracle["start"] == read_j["start"]
    for episode in (oracle, read_j):
        assert episode["level"] == "level1" and episode["agreed"] and episode["twin_success"]
        assert episode["steps"][-1]["twin"] == SORT_TARGETS
    assert read_j["steps"] != oracle["steps"]  # the method's own plan, not the oracle's


def test_the_command_refuses_a_task_without_a_twin_rig(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["task", "twin", "sweep_floor"]) == 2
    assert "the twin runs sort_cubes only" in capsys.readouterr().err
    assert main(["task", "twin", "sort_cubes", "--level", "level9"]) == 2
    assert "no level 'level9'" in capsys.readouterr().err
