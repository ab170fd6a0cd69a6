"""The team task simulators: determinism, WAIT, infeasible actions, features, the oracle, the
levels' minimal steps (breadth-first search), snapshots and the disturbance reset."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onboard.collab.envs import ABSENT, WAIT, TeamEnv, make_env
from onboard.collab.envs.registry import SHIPPED
from onboard.collab.envs.search import minimal_steps, oracle_steps
from onboard.collab.taskfile import ENV_SPECS, TeamTask, load_team_task

ROOT = Path(__file__).resolve().parent.parent
#: the RoCoBench tasks (one file each, named after its env); Overcooked-AI's rules (a start
#: fixed by the layout, a pot that cooks while the chefs WAIT, 20 and 25 steps) differ from
#: the contract these tests hold, and are tested in test_team_overcooked.py
TASKS = {name: load_team_task(ROOT / "tasks" / f"{name}.toml")
         for name in ENV_SPECS if name != "overcooked"}  # fmt: skip
LEVELS = [(name, level) for name, task in TASKS.items() for level in task.levels]
SEEDS = range(20)


def env_of(name: str, level: str, seed: int = 0) -> TeamEnv:  # type: ignore[type-arg]
    env = make_env(TASKS[name], level)
    env.reset(seed)
    return env


def random_joint(env: TeamEnv, rng: random.Random) -> dict[str, str]:  # type: ignore[type-arg]
    return {agent: rng.choice(env.vocabulary[1:]) for agent in env.agents}


def test_the_simulators_are_the_ones_task_files_name() -> None:
    assert set(SHIPPED) == set(ENV_SPECS)
    for name, task in TASKS.items():
        for level in task.levels:
            env = make_env(task, level)
            verbs = {action.split()[0] for action in env.vocabulary[1:]}
            assert verbs == ENV_SPECS[name].verbs == set(task.verbs)


@pytest.mark.parametrize(("name", "level"), LEVELS)
def test_vocabulary_and_features_are_fixed_per_level(name: str, level: str) -> None:
    a, b = env_of(name, level, 1), env_of(name, level, 2)
    assert a.vocabulary == b.vocabulary and a.feature_names == b.feature_names
    assert a.vocabulary[:2] == (ABSENT, WAIT)
    assert list(a.vocabulary[2:]) == sorted(a.vocabulary[2:])
    assert len(set(a.vocabulary)) == len(a.vocabulary)
    assert a.feature_names[-2:] == ("steps_taken", "steps_left")


@pytest.mark.parametrize(("name", "level"), LEVELS)
def test_same_seed_same_episode(name: str, level: str) -> None:
    def run(seed: int) -> list[tuple[str, bytes, float, str]]:
        env, rng = env_of(name, level, seed), random.Random(7)
        out = []
        while not env.done:
            result = env.step(random_joint(env, rng))
            out.append((env.describe(), env.features().tobytes(), result.reward,
                        repr(sorted(result.feedback.items()))))  # fmt: skip
        return out

    assert run(3) == run(3)
    starts = {env_of(name, level, seed).describe() for seed in SEEDS}
    assert len(starts) > 1  # the seed varies the start


@pytest.mark.parametrize(("name", "level"), LEVELS)
def test_joint_wait_changes_only_the_step_count(name: str, level: str) -> None:
    rng = random.Random(1)
    for seed in range(5):
        env = env_of(name, level, seed)
        for _ in range(3):  # from a few states along a random run
            before = env.snapshot()
            described = env.describe().splitlines()[:-1]
            result = env.step({agent: WAIT for agent in env.agents})
            assert result.reward == 0.0 and not any(result.feedback.values())
            assert env.snapshot().state == before.state
            assert env.steps == before.steps + 1
            assert env.describe().splitlines()[:-1] == described
            if env.done:
                break
            env.step(random_joint(env, rng))
            if env.done:
                break


@pytest.mark.parametrize(("name", "level"), LEVELS)
def test_features_are_float32_in_range_along_random_runs(name: str, level: str) -> None:
    rng = random.Random(2)
    for seed in range(5):
        env = env_of(name, level, seed)
        while True:
            x = env.features()
            assert x.dtype == np.float32 and x.shape == (len(env.feature_names),)
            assert np.all(x >= 0.0) and np.all(x <= 1.0), dict(
                zip(env.feature_names, x, strict=True)
            )
            if env.done:
                break
            env.step(random_joint(env, rng))
        assert x[-1] == 0.0 or env.success  # steps_left runs out unless the task is done


@pytest.mark.parametrize(("name", "level"), LEVELS)
def test_the_useful_oracle_solves_every_level_in_every_seed(name: str, level: str) -> None:
    for seed in SEEDS:
        env = env_of(name, level, seed)
        taken = oracle_steps(env)
        assert taken is not None and taken <= 15, (seed, env.describe())
        while not env.done:  # the same run, each action checked feasible
            chosen: dict[str, str] = {}
            for agent in env.agents:
                chosen[agent] = env.useful(agent, chosen)[0]
                assert env.legal(agent, chosen[agent], chosen) is None
            result = env.step(chosen)
            assert not any(result.feedback.values())
        assert env.success and env.reward_total == sub_goals(env)


@pytest.mark.parametrize(("name", "level"), LEVELS)
def test_an_agents_own_actions_keep_every_action_it_could_take(name: str, level: str) -> None:
    """The per-agent enum of a constrained reply drops only actions that can never go
    through from the state on: along oracle runs and random runs, whatever is feasible for
    an agent (given any earlier agent's feasible choice) is in its own actions."""
    rng = random.Random(f"own/{name}/{level}")
    for seed in range(8):
        env = env_of(name, level, seed)
        while not env.done:
            own = {agent: set(env.agent_actions(agent)) for agent in env.agents}
            for agent in env.agents:
                assert env.agent_actions(agent)[0] == WAIT and ABSENT not in own[agent]
                for first in env.agents:
                    for earlier in (WAIT, *own[first]):
                        chosen = {} if first == agent else {first: earlier}
                        feasible = {
                            a for a in env.vocabulary[1:] if env.legal(agent, a, chosen) is None
                        }
                        assert feasible <= own[agent], (seed, agent, feasible - own[agent])
            env.step(oracle_or_random(env, rng))


def oracle_or_random(env: TeamEnv, rng: random.Random) -> dict[str, str]:  # type: ignore[type-arg]
    if rng.random() < 0.5:
        return random_joint(env, rng)
    chosen: dict[str, str] = {}
    for agent in env.agents:
        chosen[agent] = env.useful(agent, chosen)[0]
    return chosen


def test_an_agents_own_actions_leave_out_its_role_and_reach() -> None:
    sweep = env_of("sweep_floor", "Y3_G3")
    pan, broom = sweep.agents
    assert "DUMP" in sweep.agent_actions(pan) and "DUMP" not in sweep.agent_actions(broom)
    assert not any(a.startswith("SWEEP") for a in sweep.agent_actions(pan))
    sandwich = env_of("make_sandwich", "recipe3")
    for agent in sandwich.agents:
        own = sandwich.agent_actions(agent)
        assert len(own) < len(sandwich.vocabulary) / 3, (agent, len(own))
    sort = env_of("sort_cubes", "level1")
    for agent in sort.agents:
        places = {a.split()[3] for a in sort.agent_actions(agent) if a != WAIT}
        assert places == set(sort.reach[agent])


def sub_goals(env: TeamEnv) -> float:  # type: ignore[type-arg]
    settings = env.settings
    if env.task.env == "sweep_floor":
        return float(settings.yellow)  # type: ignore[union-attr]
    if env.task.env == "make_sandwich":
        return float(len(settings.recipe))  # type: ignore[union-attr]
    return 3.0


@pytest.mark.parametrize(
    ("name", "level"),
    [lv for lv in LEVELS if lv[1] not in ("Y2_G3", "Y3_G3")],  # search takes 3-20 s there
)
def test_the_oracle_takes_the_fewest_steps(name: str, level: str) -> None:
    for seed in range(8):
        env = env_of(name, level, seed)
        assert oracle_steps(env) == minimal_steps(env), (seed, env.describe())


def test_recipe3_needs_at_least_8_steps_from_every_start() -> None:
    found = []
    for seed in SEEDS:
        env = env_of("make_sandwich", "recipe3", seed)
        found.append(minimal_steps(env))
    assert all(n is not None and 8 <= n <= 15 for n in found), found


# (task, level, agent, action, the reason's words)
INFEASIBLE = [
    ("sweep_floor", "Y2_G2", "Alice", "SWEEP yellow_cube1", "only Bob holds the broom"),
    ("sweep_floor", "Y2_G2", "Bob", "DUMP", "only Alice holds the dustpan"),
    ("sweep_floor", "Y2_G2", "Bob", "SWEEP yellow_cube1", "Bob is not in front of yellow_cube1"),
    ("make_sandwich", "recipe1", "Chad", "PUT cheese bread_slice1", "Chad is not holding cheese"),
    ("sort_cubes", "level3", "Alice", "PICK yellow_trapezoid PLACE panel1", "Alice cannot reach"),
    ("sort_cubes", "level3", "Chad", "JUMP", "no action 'JUMP'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "level", "agent", "action", "words"), INFEASIBLE)
def test_an_infeasible_action_is_reported_and_acts_as_wait(
    name: str, level: str, agent: str, action: str, words: str
) -> None:
    for seed in range(5):
        env = env_of(name, level, seed)
        if env.legal(agent, action) is None:
            continue  # feasible in this start (a cube within reach): not this test's case
        others = {a: env.useful(a)[0] for a in env.agents if a != agent}
        twin = env_of(name, level, seed)
        expected = twin.step({**others, agent: WAIT})
        result = env.step({**others, agent: action})
        assert result.feedback[agent].startswith(f"{action} failed: ")
        assert words in result.feedback[agent], result.feedback
        assert env.snapshot().state == twin.snapshot().state
        assert result.reward == expected.reward
        return
    pytest.fail("the action was feasible in every seed")


def test_far_side_foods_are_out_of_reach() -> None:
    env = env_of("make_sandwich", "recipe2", 0)
    text = env.describe()
    far = next(line.split(":")[0] for line in text.splitlines() if "on the left side" in line)
    assert env.legal("Chad", f"PICK {far}") == f"Chad cannot reach {far}: it is on the left side"
    assert env.legal("Dave", f"PICK {far}") is None


def test_clashes_within_a_step_go_to_the_later_agent() -> None:
    sandwich = env_of("make_sandwich", "recipe1", 0)
    sandwich.step({a: sandwich.useful(a)[0] for a in sandwich.agents})  # both grip something
    chad = sandwich.state.where.index("Chad")
    dave = sandwich.state.where.index("Dave")
    from onboard.collab.taskfile import FOODS

    joint = {"Chad": f"PUT {FOODS[chad]} table", "Dave": f"PUT {FOODS[dave]} table"}
    result = sandwich.step(joint)
    assert result.feedback["Chad"] == ""
    assert result.feedback["Dave"].endswith(
        "only one robot can PUT at a time (Chad PUTs this step)"
    )

    sort = env_of("sort_cubes", "level1", 0)
    cube = next(c for c in ("blue_square", "pink_polygon", "yellow_trapezoid")
                if "panel3" in sort.describe().split(f"{c}: on ")[1][:7])  # fmt: skip
    result = sort.step({"Alice": f"PICK {cube} PLACE panel1", "Bob": f"PICK {cube} PLACE panel5"})
    assert result.feedback["Bob"].endswith(f"Alice is moving {cube} this step")

    sweep = env_of("sweep_floor", "Y1_G1", 0)
    sweep.step({"Alice": "MOVE yellow_cube1", "Bob": "MOVE yellow_cube1"})
    result = sweep.step({"Alice": "MOVE green_cube1", "Bob": "SWEEP yellow_cube1"})
    assert result.feedback["Bob"].endswith("Alice must WAIT at yellow_cube1 while Bob SWEEPs")


def test_sweeping_a_green_cube_wastes_steps_and_earns_nothing() -> None:
    env = env_of("sweep_floor", "Y1_G1", 0)
    env.step({"Alice": "MOVE green_cube1", "Bob": "MOVE green_cube1"})
    assert env.step({"Alice": WAIT, "Bob": "SWEEP green_cube1"}).reward == 0.0
    assert env.step({"Alice": "DUMP"}).reward == 0.0
    assert "green_cube1: in the trash_bin" in env.describe() and not env.success


def test_snapshot_restore_and_the_disturbance_reset() -> None:
    env = env_of("make_sandwich", "recipe3", 4)
    for _ in range(3):
        env.step({a: env.useful(a)[0] for a in env.agents})
    snap, text, reward = env.snapshot(), env.describe(), env.reward_total
    env.step({a: env.useful(a)[0] for a in env.agents})
    env.restore(snap)
    assert env.describe() == text and env.steps == 3 and env.reward_total == reward
    env.reset_to(9)
    fresh = env_of("make_sandwich", "recipe3", 9)
    assert env.snapshot().state == fresh.snapshot().state  # the state starts again ...
    assert env.steps == 3 and env.reward_total == reward  # ... the episode goes on


def test_an_episode_ends_at_the_step_limit() -> None:
    env = env_of("sort_cubes", "level5", 0)
    for _ in range(15):
        env.step({})
    assert env.done and not env.success and env.steps == 15
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step({})


def test_describe_names_every_object_and_agent() -> None:
    for name, task in TASKS.items():
        level = list(task.levels)[-1]
        text = env_of(name, level).describe()
        objects = {a.split()[1] for a in make_env(task, level).vocabulary[2:] if " " in a}
        for word in (*objects, *task.agent_names):
            assert word in text, (name, word)
        assert text.splitlines()[-1] == "Step 0 of 15 taken."


def test_loading_a_task_file_imports_no_simulator() -> None:
    code = ("import sys; from pathlib import Path; from onboard.collab.taskfile import "
            "load_team_task; load_team_task(Path(sys.argv[1])); "
            "print([m for m in sys.modules if m.startswith('onboard.collab.envs')])")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, str(ROOT / "tasks" / "sort_cubes.toml")],
                          capture_output=True, text=True, check=True, timeout=60)  # fmt: skip
    assert done.stdout.strip() == "[]"


def test_make_env_refuses_a_level_the_file_lacks() -> None:
    from onboard.base.errors import TeamTaskError

    task: TeamTask = TASKS["sort_cubes"]
    with pytest.raises(TeamTaskError, match="no level 'level9'"):
        make_env(task, "level9")
