"""Overcooked-AI (the ReAd paper's adaptation) on the ``overcooked`` package's raw env:
the seed's settings, scripted deliveries within the step limits, infeasible actions with
their reasons, determinism, the kitchen text the stand-in reads back, and short episodes of
the joint methods on the team stand-in (the CI episode)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
from team_args import eval_args

from onboard.cli.task import evaluate
from onboard.collab import kitchen
from onboard.collab.envs import WAIT, TeamEnv, make_env
from onboard.collab.envs.overcooked import OvercookedAI
from onboard.collab.taskfile import TeamTask, load_team_task
from onboard.config import RobotConfig
from onboard.testing.team_standin.solvers import recognise, solver_for

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = {"cramped_room": 20, "forced_coordination": 25}
TASKS: dict[str, TeamTask] = {
    layout: load_team_task(ROOT / "tasks" / f"overcooked_{layout}.toml") for layout in LAYOUTS
}
JOINT_METHODS = ["read_j", "central_plan", "react", "reflexion", "mindagent"]

# Joint plans written out step by step (Alice's action, Bob's action), each delivering one
# 2-onion soup; "-" is WAIT.
SCRIPTS = {
    # Bob fills the pot first; Alice adds the second onion and starts it; Bob serves
    "cramped_room": [
        ("NORTH", "EAST"), ("WEST", "INTERACT"), ("INTERACT", "WEST"), ("-", "NORTH"),
        ("-", "INTERACT"), ("-", "SOUTH"), ("EAST", "WEST"), ("NORTH", "SOUTH"),
        ("INTERACT", "INTERACT"), ("INTERACT", "-"), ("SOUTH", "-"), ("-", "NORTH"),
        ("-", "EAST"), ("-", "NORTH"), ("-", "INTERACT"), ("-", "EAST"), ("-", "SOUTH"),
        ("-", "INTERACT"),
    ],
    # Bob (west) passes onions and a dish over the middle counters; Alice (east) cooks
    "forced_coordination": [
        ("-", "WEST"), ("-", "INTERACT"), ("-", "EAST"), ("-", "INTERACT"),
        ("SOUTH", "WEST"), ("WEST", "INTERACT"), ("INTERACT", "NORTH"), ("NORTH", "EAST"),
        ("INTERACT", "INTERACT"), ("WEST", "SOUTH"), ("INTERACT", "SOUTH"), ("NORTH", "WEST"),
        ("INTERACT", "INTERACT"), ("INTERACT", "EAST"), ("-", "INTERACT"), ("SOUTH", "-"),
        ("SOUTH", "-"), ("WEST", "-"), ("INTERACT", "-"), ("NORTH", "-"), ("NORTH", "-"),
        ("INTERACT", "-"), ("SOUTH", "-"), ("SOUTH", "-"), ("INTERACT", "-"),
    ],
}  # fmt: skip


def env_of(layout: str, seed: int = 0) -> TeamEnv:  # type: ignore[type-arg]
    env = make_env(TASKS[layout], layout)
    env.reset(seed)
    return env


def joint(pair: tuple[str, str]) -> dict[str, str]:
    return {a: WAIT if act == "-" else act for a, act in zip(("Alice", "Bob"), pair, strict=True)}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_scripted_joint_plan_serves_one_soup_within_the_limit(layout: str) -> None:
    env = env_of(layout)
    assert env.step_limit == LAYOUTS[layout] and len(SCRIPTS[layout]) <= env.step_limit
    for i, pair in enumerate(SCRIPTS[layout]):
        assert not env.done, i
        result = env.step(joint(pair))
        assert not any(result.feedback.values()), (i, result.feedback)
        assert result.reward == (1.0 if i == len(SCRIPTS[layout]) - 1 else 0.0), i
    assert env.success and env.done and env.reward_total == 1.0


def test_two_onions_fill_the_pot_and_cook_two_steps_after_interact() -> None:
    """The seed's settings on the package's dynamics: the pot takes 2 onions (a third is
    refused), does not start by itself, and is ready 2 steps after an empty-handed INTERACT."""
    env = env_of("cramped_room")
    for pair in SCRIPTS["cramped_room"][:8]:
        env.step(joint(pair))
    text = env.describe()
    assert "Pot (2,0): 1 of 2 onions, not cooking" in text and "holding an onion" in text
    env.step({"Alice": "INTERACT"})  # the second onion
    assert "Pot (2,0): 2 of 2 onions, not cooking" in env.describe()
    env.step({})
    assert "Pot (2,0): 2 of 2 onions, not cooking" in env.describe()  # no auto-start
    env.step({"Alice": "INTERACT"})
    assert "Pot (2,0): soup of 2 onions cooking, 1 more steps" in env.describe()
    env.step({})
    assert "Pot (2,0): soup of 2 onions ready" in env.describe()
    state = env.state.kitchen  # type: ignore[attr-defined]
    full = kitchen.Kitchen(state.grid, (kitchen.Chef("Alice", (2, 1), (0, -1), "onion"),
                                        state.chefs[1]), ((( 2, 0), 2, -1),), (), 2, 2)  # fmt: skip
    assert "takes no more onions" in str(kitchen.reason(full, "Alice", "INTERACT", {}))


def test_a_soup_of_other_onions_is_served_for_nothing() -> None:
    """Only the order's soup (2 onions) counts: a 1-onion soup served earns no reward."""
    env = env_of("cramped_room")
    script = [("NORTH", "-"), ("WEST", "-"), ("INTERACT", "-"), ("EAST", "-"), ("NORTH", "-"),
              ("INTERACT", "-"), ("INTERACT", "-"), ("SOUTH", "-"), ("WEST", "-"),
              ("SOUTH", "-"), ("INTERACT", "-"), ("NORTH", "-"), ("EAST", "-"), ("NORTH", "-"),
              ("INTERACT", "-"), ("SOUTH", "-"), ("EAST", "-"), ("SOUTH", "-"),
              ("INTERACT", "-")]  # fmt: skip
    assert len(script) <= 20
    for pair in script:
        result = env.step(joint(pair))
        assert not any(result.feedback.values()), (pair, result.feedback)
    assert "holding nothing" in env.describe().split("Alice: ")[1].split("\n")[0]
    assert env.reward_total == 0.0 and not env.success


# (layout, agent, action, the reason's words); at the layout's start
INFEASIBLE = [
    ("cramped_room", "Alice", "INTERACT", "Alice faces the floor at (1,1): nothing to interact"),
    ("cramped_room", "Bob", "NORTH", "the counter at (3,0) blocks Bob, who already faces it"),
    ("cramped_room", "Bob", "INTERACT", "the counter at (3,0) is empty and Bob holds nothing"),
    ("forced_coordination", "Alice", "INTERACT", "the pot at (3,0) has nothing to start"),
    ("forced_coordination", "Bob", "JUMP", "no action 'JUMP'"),
]  # fmt: skip


@pytest.mark.parametrize(("layout", "agent", "action", "words"), INFEASIBLE)
def test_an_infeasible_action_gets_its_reason_and_acts_as_wait(
    layout: str, agent: str, action: str, words: str
) -> None:
    env, twin = env_of(layout), env_of(layout)
    result = env.step({agent: action})
    twin.step({})
    assert result.feedback[agent] == f"{action} failed: {env.legal(agent, action) or words}"
    assert words in result.feedback[agent]
    assert env.snapshot().state == twin.snapshot().state


def test_a_move_into_a_counter_turns_the_chef_to_face_it() -> None:
    env = env_of("cramped_room")
    assert env.legal("Alice", "WEST") is None  # (0,2) is a counter: a turn
    env.step({"Alice": "WEST"})
    assert "Alice: at (1,2), facing west (towards (0,2))" in env.describe()
    assert "blocks Alice, who already faces it" in str(env.legal("Alice", "WEST"))


def random_run(layout: str, seed: int) -> list[tuple[str, bytes, float, str]]:
    env, rng = env_of(layout, seed), random.Random(seed)
    out = []
    while not env.done:
        if rng.random() < 0.5:
            chosen = {a: rng.choice(env.vocabulary[1:]) for a in env.agents}
        else:
            chosen = {}
            for a in env.agents:
                chosen[a] = env.useful(a, chosen)[0]
        result = env.step(chosen)
        out.append((env.describe(), env.features().tobytes(), result.reward,
                    repr(sorted(result.feedback.items()))))  # fmt: skip
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
def test_same_seed_same_trajectory_and_features_in_range(layout: str) -> None:
    assert random_run(layout, 3) == random_run(layout, 3)
    env = env_of(layout)
    assert len(env.features()) == len(env.feature_names)
    for seed in range(4):
        for _, features, _, _ in random_run(layout, seed):
            import numpy as np

            x = np.frombuffer(features, dtype=np.float32)
            assert np.all(x >= 0.0) and np.all(x <= 1.0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_oracle_serves_within_the_limit_with_feasible_actions(layout: str) -> None:
    env = env_of(layout)
    while not env.done:
        chosen: dict[str, str] = {}
        for agent in env.agents:
            chosen[agent] = env.useful(agent, chosen)[0]
            assert env.legal(agent, chosen[agent], chosen) is None
        assert not any(env.step(chosen).feedback.values())
    assert env.success and env.steps <= LAYOUTS[layout]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_stand_in_reads_the_kitchen_back_from_the_text(layout: str) -> None:
    """Along random and oracle runs: the text parses back to the env's kitchen, so the
    stand-in's solver (text only) judges feasibility and useful actions as the env does."""
    assert recognise(TASKS[layout].description) == "overcooked"
    for seed in range(3):
        env, rng = env_of(layout, seed), random.Random(f"read/{seed}")
        while not env.done:
            state_text = env.describe()
            assert kitchen.parse(state_text) == env.state.kitchen  # type: ignore[attr-defined]
            solver = solver_for("overcooked", state_text, {})
            chosen: dict[str, str] = {}
            for agent in env.agents:
                for action in env.vocabulary[1:]:
                    legal = env.legal(agent, action, chosen) is None
                    assert solver.feasible(agent, action, chosen) == legal, (agent, action)
                assert solver.useful(agent, chosen) == env.useful(agent, chosen)
                chosen[agent] = rng.choice([*env.vocabulary[1:], env.useful(agent, chosen)[0]])
            env.step(chosen)


def test_the_solver_refuses_a_text_that_is_not_a_kitchen() -> None:
    with pytest.raises(ValueError, match="not read as an Overcooked kitchen"):
        solver_for("overcooked", "yellow_cube1: on the table at panel3", {})


def test_without_the_extra_the_env_names_it() -> None:
    """A child interpreter where ``overcooked`` cannot be imported."""
    code = (
        "import sys; sys.modules['overcooked'] = None\n"
        "from pathlib import Path\n"
        "from onboard.base.errors import MissingExtraError\n"
        "from onboard.collab.envs import make_env\n"
        "from onboard.collab.taskfile import load_team_task\n"
        f"task = load_team_task(Path({str(ROOT / 'tasks' / 'overcooked_cramped_room.toml')!r}))\n"
        "try:\n"
        "    make_env(task, 'cramped_room')\n"
        "except MissingExtraError as exc:\n"
        "    assert isinstance(exc, ImportError)\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)  # fmt: skip
    assert "the overcooked extra" in done.stdout and ".[overcooked]" in done.stdout


def test_the_env_class_is_registered() -> None:
    assert isinstance(make_env(TASKS["cramped_room"], "cramped_room"), OvercookedAI)


def test_a_short_episode_per_joint_method_on_the_stand_in(robot: RobotConfig) -> None:
    """The CI episode: the five joint methods of the seed's Figure 9, two episodes each on
    Cramped Room at the default competence (shipped critic for ReAd-J); then Central Plan at
    competence 1, where the stand-in follows the text-read plan and serves on both layouts."""
    report = evaluate(robot, eval_args(task="overcooked_cramped_room", methods=JOINT_METHODS),
                      quiet=True)  # fmt: skip
    assert sorted({e.method for e in report.episodes}) == sorted(JOINT_METHODS)
    assert len(report.episodes) == 2 * len(JOINT_METHODS)
    for e in report.episodes:
        assert e.queries > 0 and 1 <= e.steps <= 20
        assert (e.critic == "trained") == (e.method == "read_j")
    for layout in LAYOUTS:
        args = eval_args(task=f"overcooked_{layout}", competence=1.0, methods=["central_plan"],
                         trials=1)  # fmt: skip
        perfect = evaluate(robot, args, quiet=True)
        (episode,) = perfect.episodes
        assert episode.success and episode.steps <= LAYOUTS[layout], episode


def test_a_soup_put_on_a_counter_keeps_its_onions_and_is_served_from_there() -> None:
    """A state the scripts do not reach: Alice holds a cooked soup facing an empty counter."""
    from onboard.collab.envs.base import Snapshot
    from onboard.collab.envs.overcooked import CookState

    env = env_of("cramped_room")
    start = env.state.kitchen  # type: ignore[attr-defined]
    alice = kitchen.Chef("Alice", (3, 2), (1, 0), "soup", 2)  # (4,2) is a counter
    state = CookState(kitchen.Kitchen(start.grid, (alice, start.chefs[1]), (), (), 2, 2), 0)
    env.restore(Snapshot(state, 0, 0.0, False, False))
    assert "Alice: at (3,2), facing east (towards (4,2)), holding a soup of 2 onions" in (
        env.describe()
    )
    env.step({"Alice": "INTERACT"})
    assert "Items on counters: soup of 2 onions at (4,2)" in env.describe()
    assert kitchen.parse(env.describe()) == env.state.kitchen  # type: ignore[attr-defined]
    env.step({"Alice": "INTERACT"})  # back in hand
    env.step({"Alice": "SOUTH"})  # face the serving counter at (3,3)
    result = env.step({"Alice": "INTERACT"})
    assert result.reward == 1.0 and env.success
