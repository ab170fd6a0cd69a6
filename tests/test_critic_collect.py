"""onboard critic collect: the dataset is the episodes' real environment steps, the same for
the same seed; the behaviour episodes come from the team stand-in over HTTP (its own
process), read back from their recordings; probe states carry Monte Carlo values from
rollouts on seeds apart from the episodes'. No torch: runs in CI.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_cli import onboard

from onboard.collab.collect import CollectSettings, collect
from onboard.collab.dataset import Dataset, load_dataset, save_dataset
from onboard.collab.envs import WAIT, make_env
from onboard.collab.episode import TeamSettings, run_team_episode
from onboard.collab.methods import method
from onboard.collab.probes import ProbeSettings, rollout
from onboard.collab.taskfile import TeamTask, find_team_task
from onboard.config import load_robot
from onboard.llm.client import ChatClient
from onboard.loop.recorder import Recorder
from onboard.testing.team_standin import start_team_standin

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sweep() -> TeamTask:
    return find_team_task("sweep_floor")


def arrays(data: Dataset) -> list[np.ndarray]:
    return [data.states, data.actions, data.rewards, data.episode, data.t]


def replay_matches(task: TeamTask, level: str, data: Dataset) -> None:
    """Every row is the step its episode took: replaying the joint actions from the
    episode's seed gives the same features and rewards, and the episode ends with its rows."""
    env = make_env(task, level, starts="training")  # collection draws training starts only
    for number, seed in enumerate(data.meta.seeds):
        rows = np.flatnonzero(data.episode == number)
        assert list(data.t[rows]) == list(range(len(rows)))
        env.reset(seed)
        for row in rows:
            assert not env.done
            np.testing.assert_array_equal(env.features(), data.states[row])
            joint = {a: data.meta.vocabulary[i] for a, i in zip(env.agents, data.actions[row],
                                                                 strict=True)}  # fmt: skip
            assert env.step(joint).reward == data.rewards[row]
        assert env.done


def test_augmented_collect_is_the_same_for_a_seed_and_its_rows_are_env_steps(
    sweep: TeamTask,
) -> None:
    settings = CollectSettings(episodes=6, seed=4)
    first, again = collect(sweep, "Y2_G3", None, settings), collect(sweep, "Y2_G3", None, settings)
    for a, b in zip(arrays(first), arrays(again), strict=True):
        np.testing.assert_array_equal(a, b)
    assert first.meta == again.meta and first.meta.augmentation == 1.0
    other = collect(sweep, "Y2_G3", None, CollectSettings(episodes=6, seed=5))
    assert other.meta.seeds != first.meta.seeds
    replay_matches(sweep, "Y2_G3", first)
    # the augmented policy does take the joint WAIT and non-useful actions
    wait = first.meta.vocabulary.index(WAIT)
    assert (first.actions == wait).all(axis=1).any()


def test_behaviour_rows_are_the_recorded_env_steps(sweep: TeamTask) -> None:
    """Collect over a fresh stand-in, then run the same seeds through the episode runner
    with a recording over another fresh stand-in of the same seed: the rows are the
    recording's env_step records, one for one."""
    settings = CollectSettings(episodes=3, augment=0.0, seed=2)
    url, stop = start_team_standin(seed=0, competence=0.6)
    robot = load_robot(ROOT / "robot.toml")
    try:
        with ChatClient(robot.llm, base_url=url) as client:
            data = collect(sweep, "Y1_G1", client, settings, behaviour="standin@0.6")
    finally:
        stop()
    assert data.meta.augmentation == 0.0
    replay_matches(sweep, "Y1_G1", data)
    url, stop = start_team_standin(seed=0, competence=0.6)
    recorder = Recorder(None)
    try:
        with ChatClient(robot.llm, base_url=url) as client:
            env = make_env(sweep, "Y1_G1", starts="training")  # as collection draws them
            for seed in data.meta.seeds:
                run_team_episode(env, method("central_plan"), client, None,
                                 TeamSettings(sweep, "Y1_G1"), recorder, seed)  # fmt: skip
    finally:
        stop()
    steps = [r for r in recorder.records if r["kind"] == "env_step"]
    assert len(steps) == len(data)
    vocabulary = data.meta.vocabulary
    for row, record in enumerate(steps):
        np.testing.assert_array_equal(np.asarray(record["features"], np.float32),
                                      data.states[row])  # fmt: skip
        assert [vocabulary[i] for i in data.actions[row]] == [
            record["joint"][a] for a in data.meta.agents
        ]
        assert record["reward"] == data.rewards[row]


def test_probes_hold_monte_carlo_values_on_fresh_seeds(sweep: TeamTask, tmp_path: Path) -> None:
    probes = ProbeSettings(states=3, rollouts=2, first=4, joint=3)
    data = collect(sweep, "Y1_G1", None, CollectSettings(episodes=4, seed=1), probes=probes)
    found = data.probes
    assert found is not None and len(found) == 3
    assert not set(data.meta.probe_seeds) & set(data.meta.seeds)
    assert data.meta.probe_rollouts == 2 and "augmented" in data.meta.probe_policy
    wait = data.meta.vocabulary.index(WAIT)
    assert (found.joints[:, 0] == wait).all()  # the joint WAIT comes first
    assert (found.first == wait).any(axis=1).all()  # every state scores the first agent's WAIT
    limit = sum(0.95**k for k in range(sweep.step_limit)) * 1  # Y1_G1: one target cube
    for values in (found.value, found.first_q, found.joint_q):
        assert (values >= 0).all() and (values <= limit).all()
    path, again = tmp_path / "d.npz", tmp_path / "again.npz"
    save_dataset(data, path)
    save_dataset(collect(sweep, "Y1_G1", None, CollectSettings(episodes=4, seed=1),
                         probes=probes), again)  # fmt: skip
    assert path.read_bytes() == again.read_bytes()  # a card names its data's sha256
    back = load_dataset(path)
    assert back.probes is not None
    np.testing.assert_array_equal(back.probes.first_q, found.first_q)
    np.testing.assert_array_equal(back.probes.joints, found.joints)


def test_a_rollout_returns_the_discounted_rewards(sweep: TeamTask) -> None:
    """The oracle's plan from a fresh state, rolled out from a snapshot: its return is the
    discounted sum of the rewards the same steps give when run by hand."""
    env = make_env(sweep, "Y1_G1")
    env.reset(11)
    snap = env.snapshot()

    def oracle(env: object, fixed: object) -> dict[str, str]:
        joint: dict[str, str] = {}
        for agent in env.agents:  # type: ignore[attr-defined]
            joint[agent] = env.useful(agent, joint)[0]  # type: ignore[attr-defined]
        return joint

    value = rollout(env, snap, {}, oracle, 0.9)
    env.restore(snap)
    expected, k = 0.0, 0
    while not env.done:
        expected += 0.9**k * env.step(oracle(env, {})).reward
        k += 1
    assert env.success and value == pytest.approx(expected) and value > 0


def test_onboard_critic_collect_writes_probes(tmp_path: Path) -> None:
    out = tmp_path / "sweep.npz"
    args = ["--episodes", "3", "--augment", "1.0", "--probes", "2", "--rollouts", "2"]
    result = onboard("critic", "collect", "sweep_floor", "--level", "Y1_G1", *args, "--out", out)
    assert result.code == 0, result.err
    data = load_dataset(out)
    assert data.probes is not None and len(data.probes) == 2
    bad = onboard("critic", "collect", "sweep_floor", "--level", "Y1_G1", "--rollouts", "0",
                  "--out", out)  # fmt: skip
    assert bad.code == 2 and "--rollouts" in bad.err
