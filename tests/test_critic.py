"""The critic contract: real ONNX files (built here with the ``onnx`` package, a dev
dependency), their cards, the seed's advantages, the OOD guard, the dataset format, and
``onboard critic check`` failing with one line per bad file. Runs in CI (no torch needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_cli import onboard, one_line_error

from onboard.base.errors import CriticError
from onboard.collab.card import (
    CriticCard,
    Metrics,
    OodRange,
    Training,
    card_path,
    check_card,
    load_card,
    write_card,
)
from onboard.collab.critic import BOUND_BATCHES, CHUNK, Critic, QModel, file_sha256
from onboard.collab.dataset import (
    Dataset,
    DatasetMeta,
    load_dataset,
    mc_returns,
    prefix_targets,
    save_dataset,
)
from onboard.collab.mlp import MlpWeights, to_onnx

AGENTS = ["Alice", "Bob", "Chad"]
VOCABULARY = ["ABSENT", "WAIT", "DUMP", "MOVE blue_cube", "MOVE red_cube", "SWEEP red_cube"]
FEATURES = ["red_x", "red_y", "blue_x", "steps_left"]
GAMMA = 0.9


def make_card(model: Path, **changes: object) -> CriticCard:
    fields: dict[str, object] = {
        "task": "toy_sweep",  # no shipped task: checked against its model only
        "level": "Y2_G3",
        "agents": AGENTS,
        "vocabulary": VOCABULARY,
        "features": FEATURES,
        "gamma": GAMMA,
        "sha256": file_sha256(model),
        "ood": OodRange(low=[0.0] * 4, high=[1.0, 1.0, 1.0, 0.5], margin=0.1),
        "training": Training(data="data/x.npz", episodes=10, heldout_episodes=2,
                             transitions=90, behaviour="uniform", augmentation=0.0, seed=0),
        "metrics": Metrics(heldout_transitions=20, mse=0.1, mse_baseline=0.5,
                           spearman_advantage=0.6, advantage_pairs=12, wait_gap=0.05),
    }  # fmt: skip
    fields.update(changes)
    return CriticCard.model_validate(fields)


def make_critic(
    folder: Path, name: str = "Y2_G3", weights: MlpWeights | None = None, **changes: object
) -> tuple[Path, MlpWeights]:
    weights = weights or MlpWeights.random(len(FEATURES), len(AGENTS), len(VOCABULARY), (16, 8), 0)
    model = folder / f"{name}.onnx"
    to_onnx(weights, model)
    write_card(make_card(model, **changes), card_path(model))
    return model, weights


@pytest.fixture
def critic_files(tmp_path: Path) -> tuple[Path, MlpWeights]:
    return make_critic(tmp_path)


STATE = np.array([0.2, 0.7, 0.4, 0.25], np.float32)


# -- Q and the seed's advantages ------------------------------------------------------------


def test_q_is_the_mlp(critic_files: tuple[Path, MlpWeights]) -> None:
    model, weights = critic_files
    critic = Critic.load(model)
    rng = np.random.default_rng(0)
    states = rng.random((64, 4), dtype=np.float32)
    actions = rng.integers(0, len(VOCABULARY), (64, 3)).astype(np.int64)
    np.testing.assert_allclose(
        critic.q(states, actions), weights.forward(states, actions), rtol=1e-5, atol=1e-5
    )
    # a Gather row per slot is one-hot times a weight matrix: check against that reading
    one_hot = np.zeros((64, 3 * len(VOCABULARY)), np.float32)
    one_hot[np.arange(64)[:, None], actions + weights.offsets] = 1.0
    h = np.maximum(states @ weights.state_in + one_hot @ weights.embed + weights.bias_in, 0)
    for w, b in weights.hidden:
        h = np.maximum(h @ w + b, 0)
    np.testing.assert_allclose(
        critic.q(states, actions), h @ weights.out_w + weights.out_b, rtol=1e-4, atol=1e-4
    )


def q1(weights: MlpWeights, joint: list[int]) -> float:
    return float(weights.forward(STATE[None], np.array([joint], np.int64))[0])


def test_local_and_joint_advantages_follow_the_seed(critic_files: tuple[Path, MlpWeights]) -> None:
    model, weights = critic_files
    critic = Critic.load(model)
    dump, blue, red = (critic.index(a) for a in ("DUMP", "MOVE blue_cube", "MOVE red_cube"))
    # A_i = Q(s, a_1..i) - Q(s, a_1..i-1), ABSENT (0) for the agents after i
    score = critic.local_advantage(STATE, [dump], blue)
    assert score.value == pytest.approx(q1(weights, [dump, blue, 0]) - q1(weights, [dump, 0, 0]),
                                        abs=1e-5)  # fmt: skip
    assert score.ood is False
    # A = Q(s, a) - Q(s, w) / gamma with w the joint WAIT
    joint = critic.joint_advantage(STATE, [dump, blue, red])
    expected = q1(weights, [dump, blue, red]) - q1(weights, [1, 1, 1]) / GAMMA
    assert joint.value == pytest.approx(expected, abs=1e-5)
    # the local advantages telescope to Q(s, a) - Q(s, empty)
    total = sum(
        critic.local_advantage(STATE, [dump, blue, red][:i], [dump, blue, red][i]).value
        for i in range(3)
    )
    assert total == pytest.approx(q1(weights, [dump, blue, red]) - q1(weights, [0, 0, 0]), abs=1e-4)


def test_batched_scores_equal_one_at_a_time(critic_files: tuple[Path, MlpWeights]) -> None:
    critic = Critic.load(critic_files[0])
    candidates = list(range(1, len(VOCABULARY)))
    many = critic.local_advantages(STATE, [2], candidates)
    assert len(many) == len(candidates)
    for k, a in enumerate(candidates):
        assert many[k].value == pytest.approx(critic.local_advantage(STATE, [2], a).value, abs=1e-5)
    joints = [[a, b, 1] for a in candidates for b in candidates]
    batch = critic.joint_advantages(STATE, joints)
    for k in (0, 7, len(joints) - 1):
        assert batch[k].value == pytest.approx(
            critic.joint_advantage(STATE, joints[k]).value, abs=1e-5
        )
    # more candidates than one run takes (CHUNK rows): scored in chunks, same values
    many_joints = np.array(joints * 400, np.int64)[: CHUNK * 2 + 17]
    chunked = critic.joint_advantages(STATE, many_joints).values
    np.testing.assert_allclose(chunked, np.tile(batch.values, 400)[: len(many_joints)], atol=1e-5)


def test_small_batches_through_bound_buffers_are_each_their_own(
    critic_files: tuple[Path, MlpWeights],
) -> None:
    """Batches of one and two rows run through buffers bound once (the refinement's sizes):
    each call's Q is its own array, not the shared buffer a later call overwrites."""
    model, weights = critic_files
    qmodel = QModel(model)
    assert all(qmodel._bound[rows] is not None for rows in BOUND_BATCHES)  # the fast path ran
    rng = np.random.default_rng(3)
    for rows in (*BOUND_BATCHES, 3):
        calls = [
            (rng.random((rows, 4), dtype=np.float32),
             rng.integers(1, len(VOCABULARY), (rows, 3)).astype(np.int64))
            for _ in range(2)
        ]  # fmt: skip
        answers = [qmodel(states, actions) for states, actions in calls]
        for (states, actions), q in zip(calls, answers, strict=True):
            np.testing.assert_allclose(q, weights.forward(states, actions), rtol=1e-5, atol=1e-5)
        bad = np.full((rows, 3), len(VOCABULARY) + 5, np.int64)
        with pytest.raises(CriticError, match="inference failed"):
            qmodel(calls[0][0], bad)


def test_bad_indices_are_refused(critic_files: tuple[Path, MlpWeights]) -> None:
    critic = Critic.load(critic_files[0])
    with pytest.raises(ValueError, match="ABSENT"):
        critic.local_advantage(STATE, [], 0)  # ABSENT is not an action
    with pytest.raises(ValueError, match=r"within 1\.\.5"):
        critic.joint_advantage(STATE, [1, 2, 6])
    with pytest.raises(ValueError, match="no agent to score"):
        critic.local_advantage(STATE, [1, 1, 1], 1)
    with pytest.raises(ValueError, match="not an action"):
        critic.index("JUMP")
    with pytest.raises(ValueError, match="state shape"):
        critic.joint_advantage(STATE[:3], [1, 1, 1])


def test_the_ood_guard_flags_states_outside_the_training_range(
    critic_files: tuple[Path, MlpWeights],
) -> None:
    critic = Critic.load(critic_files[0])  # ranges [0, 1] x3 and [0, 0.5], margin 10%
    inside = STATE.copy()
    within_margin = np.array([1.05, -0.05, 0.5, 0.54], np.float32)
    beyond = np.array([0.5, 0.5, 0.5, 0.56], np.float32)
    nan = np.array([0.5, np.nan, 0.5, 0.2], np.float32)
    assert critic.ood(np.stack([inside, within_margin, beyond, nan])).tolist() == [
        False, False, True, True,
    ]  # fmt: skip
    assert bool(critic.ood(beyond)) is True
    assert critic.local_advantage(beyond, [], 2).ood is True
    assert critic.joint_advantages(beyond, [[2, 2, 2], [1, 1, 1]]).ood is True
    assert critic.joint_advantage(inside, [2, 2, 2]).ood is False


# -- one-line errors for every bad file -----------------------------------------------------


def plain_graph(
    path: Path,
    inputs: list[tuple[str, int, list[object]]],
    output: tuple[str, int, list[object]] = ("q", TensorProto.FLOAT, ["batch"]),
) -> Path:
    """A model with the given inputs whose output sums the first one over its last axis."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    node = helper.make_node("ReduceSum", [inputs[0][0], "axes"], [output[0]], keepdims=0)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*output)],
        [axes],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))  # fmt: skip
    return path


def with_card(model: Path, **changes: object) -> Path:
    write_card(make_card(model, **changes), card_path(model))
    return model


FLOAT, INT64, DOUBLE = TensorProto.FLOAT, TensorProto.INT64, TensorProto.DOUBLE


def bad_files(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A broken critic of one kind, and the reason its one error line must give."""
    small = MlpWeights.random(4, 3, 5, (8,), 1)  # an embedding of 5 actions, not 6
    if case == "no model":
        return tmp_path / "missing.onnx", "no such critic model"
    if case == "no card":
        model, _ = make_critic(tmp_path)
        card_path(model).unlink()
        return model, "no card"
    if case == "card syntax":
        model, _ = make_critic(tmp_path)
        card_path(model).write_text('task = "x\n', encoding="utf-8")
        return model, "TOML syntax error"
    if case == "card unknown key":
        model, _ = make_critic(tmp_path)
        text = card_path(model).read_text(encoding="utf-8")
        card_path(model).write_text(text.replace("gamma =", "gama =", 1), encoding="utf-8")
        return model, "[gama] unknown key"
    if case == "card ranges":
        model, _ = make_critic(tmp_path)
        text = card_path(model).read_text(encoding="utf-8")
        text = text.replace("low = [0.0, 0.0, 0.0, 0.0]", "low = [0.0, 0.0]")
        card_path(model).write_text(text, encoding="utf-8")
        return model, "ood.low has 2 values for 4 features"
    if case == "card vocabulary order":
        model, _ = make_critic(tmp_path, vocabulary=["ABSENT", "WAIT", "DUMP"])
        text = card_path(model).read_text(encoding="utf-8")
        text = text.replace('"ABSENT", "WAIT"', '"WAIT", "ABSENT"')
        card_path(model).write_text(text, encoding="utf-8")
        return model, "vocabulary must start with 'ABSENT', 'WAIT'"
    if case == "hash":
        model, _ = make_critic(tmp_path)
        to_onnx(small, model)  # replaced, card left as it was
        return model, "differs from its card's"
    if case == "not onnx":
        model = tmp_path / "junk.onnx"
        model.write_bytes(b"not a model")
        return with_card(model), "not a readable ONNX model"
    if case == "input names":
        model = plain_graph(tmp_path / "names.onnx",
                            [("state", FLOAT, ["b", 4]), ("acts", INT64, ["b", 3])])  # fmt: skip
        return with_card(model), "inputs ['acts', 'state']; expected inputs state float32"
    if case == "input dtype":
        model = plain_graph(
            tmp_path / "dtype.onnx",
            [("state", DOUBLE, ["b", 4]), ("actions", INT64, ["b", 3])],
            ("q", DOUBLE, ["b"]),
        )
        return with_card(model), "input state is tensor(double)"
    if case == "input rank":
        model = plain_graph(tmp_path / "rank.onnx",
                            [("state", FLOAT, ["b", 4, 2]), ("actions", INT64, ["b", 3])],
                            ("q", FLOAT, ["b", 2]))  # fmt: skip
        return with_card(model), "input state has shape [b, 4, 2]"
    if case == "state width":
        model, _ = make_critic(tmp_path, weights=MlpWeights.random(5, 3, 6, (8,), 1))
        return model, "names 4 features, the model's state input has 5"
    if case == "agents":
        model, _ = make_critic(tmp_path, weights=MlpWeights.random(4, 2, 6, (8,), 1))
        return model, "names 3 agents, the model's actions input has 2"
    if case == "vocabulary (metadata)":
        model, _ = make_critic(tmp_path, weights=small)
        return model, "has a vocabulary of 6, the model's embedding has 5 actions per agent"
    if case == "vocabulary (probe)":
        model = tmp_path / "nometa.onnx"
        to_onnx(small, model)
        graph = onnx.load(str(model))
        del graph.metadata_props[:]
        onnx.save(graph, str(model))
        return with_card(model), "the model fails on action index 5"
    raise AssertionError(case)


CASES = [
    "no model", "no card", "card syntax", "card unknown key", "card ranges",
    "card vocabulary order", "hash", "not onnx", "input names", "input dtype", "input rank",
    "state width", "agents", "vocabulary (metadata)", "vocabulary (probe)",
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_every_bad_critic_is_one_error_line_naming_its_file(tmp_path: Path, case: str) -> None:
    model, reason = bad_files(tmp_path, case)
    with pytest.raises(CriticError) as caught:
        Critic.load(model)
    message = str(caught.value)
    assert "\n" not in message
    assert reason in message, message
    assert message.startswith((str(model), str(card_path(model)))), message


def test_a_card_problem_names_its_line(tmp_path: Path) -> None:
    model, _ = bad_files(tmp_path, "card unknown key")
    line = next(
        n
        for n, text in enumerate(card_path(model).read_text().splitlines(), 1)
        if text.startswith("gama")
    )
    with pytest.raises(CriticError, match=rf"^{card_path(model)}:{line}: \[gama\] unknown key"):
        Critic.load(model)


@pytest.mark.parametrize("case", ["no card", "hash", "state width", "vocabulary (probe)"])
def test_onboard_critic_check_fails_with_one_line(tmp_path: Path, case: str) -> None:
    model, reason = bad_files(tmp_path, case)
    result = onboard("critic", "check", model)
    line = one_line_error(result)
    assert result.code == 2
    assert reason in line and str(model.parent) in line, line


def test_onboard_critic_check_prints_the_card(critic_files: tuple[Path, MlpWeights]) -> None:
    result = onboard("critic", "check", critic_files[0])
    assert result.code == 0, result.err
    assert "task: toy_sweep  level: Y2_G3" in result.out
    assert "task file: not checked" in result.out
    assert "agents: Alice, Bob, Chad" in result.out
    assert "vocabulary (6): ABSENT, WAIT, DUMP" in result.out
    assert "Spearman of advantages 0.6 over 12" in result.out


# -- the card against a task level ------------------------------------------------------


def test_check_card_names_each_difference(critic_files: tuple[Path, MlpWeights]) -> None:
    card = load_card(card_path(critic_files[0]))
    assert check_card(card, "toy_sweep", "Y2_G3", VOCABULARY, FEATURES, AGENTS) == []
    swapped = [*VOCABULARY[:2], VOCABULARY[3], VOCABULARY[2], *VOCABULARY[4:]]
    assert check_card(card, "make_sandwich", "Y3_G3", swapped, FEATURES[:3], AGENTS[:2]) == [
        "the card is for task 'toy_sweep', not 'make_sandwich'",
        "the card is for level 'Y2_G3', not 'Y3_G3'",
        "agents ['Alice', 'Bob', 'Chad'] in the card, ['Alice', 'Bob'] in the task",
        "vocabulary[2] is 'DUMP' in the card, 'MOVE blue_cube' in the task",
        "features: 4 in the card, 3 in the task; the task lacks ['steps_left']",
    ]
    more = [*VOCABULARY, "MOVE green_cube"]
    assert check_card(card, "toy_sweep", "Y2_G3", more, FEATURES) == [
        "vocabulary: 6 in the card, 7 in the task; the task adds ['MOVE green_cube']"
    ]


def test_the_card_is_checked_against_its_task_file(tmp_path: Path) -> None:
    taskfile = pytest.importorskip("onboard.collab.taskfile", reason="needs the task files")
    envs = pytest.importorskip("onboard.collab.envs", reason="needs the simulators")
    path = taskfile.shipped_tasks_dir() / "sweep_floor.toml"
    task = taskfile.load_team_task(path)
    level = next(iter(task.levels))
    env = envs.make_env(task, level)
    vocabulary, features = list(env.vocabulary), list(env.feature_names)
    size = len(features)
    weights = MlpWeights.random(size, len(task.agents), len(vocabulary), (8,), 0)

    def critic_for(**changes: object) -> Path:
        fields: dict[str, object] = {
            "task": task.name, "level": level, "agents": list(task.agent_names),
            "vocabulary": vocabulary, "features": features,
            "ood": OodRange(low=[0.0] * size, high=[1.0] * size),
        }  # fmt: skip
        fields.update(changes)
        return make_critic(tmp_path, f"c{len(list(tmp_path.iterdir()))}", weights, **fields)[0]

    model = critic_for()
    shipped = onboard("critic", "check", model)  # the card's task, from the shipped folder
    assert shipped.code == 0, shipped.err
    assert f"task file: {path}: matches" in shipped.out
    assert onboard("critic", "check", model, "--task", path).code == 0
    swapped = [*vocabulary[:2], vocabulary[3], vocabulary[2], *vocabulary[4:]]
    line = one_line_error(onboard("critic", "check", critic_for(vocabulary=swapped)))
    assert f"vocabulary[2] is {vocabulary[3]!r} in the card, {vocabulary[2]!r} in the task" in line
    line = one_line_error(onboard("critic", "check", critic_for(level="Y9_G9")))
    assert f"level 'Y9_G9' is not a level of {path}" in line
    # a critic of a task whose agents reach other places (everything else the same)
    reach = {a: sorted(r) for a, r in env.reach.items()}
    assert onboard("critic", "check", critic_for(reach=reach)).code == 0
    first = task.agent_names[0]
    moved = {**reach, first: reach[first][:-1]}
    line = one_line_error(onboard("critic", "check", critic_for(reach=moved)))
    assert f"{first} reaches {moved[first]} in the card, {reach[first]} in the task" in line


def test_the_card_round_trips(critic_files: tuple[Path, MlpWeights]) -> None:
    model = critic_files[0]
    assert load_card(card_path(model)) == make_card(model)
    missing = make_card(model, metrics=Metrics(heldout_transitions=0, mse=None, mse_baseline=None,
                        spearman_advantage=None, advantage_pairs=0, wait_gap=None))  # fmt: skip
    write_card(missing, card_path(model))
    assert load_card(card_path(model)) == missing


def test_scoring_imports_no_environment_and_no_torch() -> None:
    done = subprocess.run(
        [sys.executable, "-P", "-X", "importtime", "-c", "import onboard.collab.critic"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "onboard.collab.critic" in modules and "onnxruntime" in modules
    forbidden = [
        m for m in modules
        if m.startswith(("onboard.collab.envs", "onboard.collab.taskfile", "torch",
                         "onboard.testing"))
    ]  # fmt: skip
    assert forbidden == []


# -- the dataset ----------------------------------------------------------------------------


def test_monte_carlo_returns_are_exact() -> None:
    # two episodes, interleaved and out of order: [0, 1, 0, 1] and [2, 0]
    rewards = np.array([1, 0, 0, 2, 1, 0], np.float32)
    episode = np.array([7, 3, 7, 3, 7, 7], np.int64)
    t = np.array([2, 1, 0, 0, 3, 1], np.int64)
    got = mc_returns(rewards, episode, t, gamma=0.5)
    # episode 7 by t: rewards 0, 0, 1, 1 -> R3 = 1, R2 = 1.5, R1 = 0.75, R0 = 0.375
    # episode 3 by t: rewards 2, 0 -> R1 = 0, R0 = 2
    np.testing.assert_allclose(got, [1.5, 0.0, 0.375, 2.0, 1.0, 0.75])


def test_prefix_targets_keep_the_first_u_agents() -> None:
    states = np.array([[0.1], [0.2]], np.float32)
    actions = np.array([[2, 3, 4], [5, 1, 2]], np.int64)
    s, a, r = prefix_targets(states, actions, np.array([1.5, -1.0], np.float32))
    assert a.tolist() == [
        [0, 0, 0], [2, 0, 0], [2, 3, 0], [2, 3, 4],
        [0, 0, 0], [5, 0, 0], [5, 1, 0], [5, 1, 2],
    ]  # fmt: skip
    assert s[:, 0].tolist() == pytest.approx([0.1] * 4 + [0.2] * 4)
    assert r.tolist() == [1.5] * 4 + [-1.0] * 4


def tiny_dataset() -> Dataset:
    meta = DatasetMeta(task="sweep_floor", level="Y2_G3", agents=AGENTS, vocabulary=VOCABULARY,
                       feature_names=FEATURES, behaviour="uniform", seeds=[0, 1])  # fmt: skip
    return Dataset(
        states=np.full((3, 4), 0.5, np.float32),
        actions=np.array([[1, 2, 3], [4, 5, 1], [1, 1, 1]], np.int64),
        rewards=np.array([0, 1, 0], np.float32),
        episode=np.array([0, 0, 1], np.int64),
        t=np.array([0, 1, 0], np.int64),
        meta=meta,
    )


def test_a_dataset_round_trips(tmp_path: Path) -> None:
    data = tiny_dataset()
    save_dataset(data, tmp_path / "d.npz")
    back = load_dataset(tmp_path / "d.npz")
    assert back.meta == data.meta
    for name in ("states", "actions", "rewards", "episode", "t"):
        np.testing.assert_array_equal(getattr(back, name), getattr(data, name))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"t": np.array([0, 2, 0], np.int64)}, "episode 0: steps t are not 0, 1, 2"),
        ({"actions": np.array([[1, 2], [4, 5], [1, 1]], np.int64)}, "expected [3, 3] (3 agents)"),
        ({"actions": np.array([[0, 2, 3], [4, 5, 1], [1, 1, 1]], np.int64)}, "never ABSENT"),
        ({"rewards": np.array([0, np.nan, 0], np.float32)}, "NaN"),
    ],
)
def test_a_bad_dataset_is_one_line(tmp_path: Path, change: dict[str, object], reason: str) -> None:
    data = tiny_dataset()
    fields = {k: getattr(data, k) for k in ("states", "actions", "rewards", "episode", "t")}
    fields.update(change)  # type: ignore[arg-type]
    path = tmp_path / "bad.npz"
    np.savez(path, **fields, meta=np.array(data.meta.model_dump_json()))  # type: ignore[arg-type]
    with pytest.raises(CriticError, match=rf"^{path}: .*") as caught:
        load_dataset(path)
    assert reason in str(caught.value)
    assert "\n" not in str(caught.value)


def test_not_a_dataset(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"junk")
    with pytest.raises(CriticError, match=r"not a readable \.npz"):
        load_dataset(junk)
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(CriticError, match="not a critic dataset"):
        load_dataset(tmp_path / "other.npz")
