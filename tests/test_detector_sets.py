"""The detector's evaluation sets (models/detector/dataset.py, evaluate.py): the hard set is
the one committed with its first score, the base set is the card's, the evaluation runs
without torch on real renders and the shipped model, and bad input is one line.

The committed measurements (models/detector/eval/*.json) carry their set's Conditions and a
fingerprint of its first renders (image bytes and boxes); rendering those again here checks
that neither the definition nor the code that draws it changed. TinyRenderer runs on the CPU
and the pinned pybullet, so the same renders come out byte for byte.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import itertools
import json
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from onboard.perception.detector import Detection

pytest.importorskip("onboard.drivers.twin", reason="the twin (pybullet) is not installed")

ROOT = Path(__file__).resolve().parent.parent
DETECTOR = ROOT / "models" / "detector"
RESULTS = sorted((DETECTOR / "eval").glob("*.json"))


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, DETECTOR / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


dataset = _module("dataset")
evaluate = _module("evaluate")


def test_no_torch_in_the_evaluation() -> None:
    assert "torch" not in sys.modules  # dataset and evaluate imported above


def test_the_sets_use_seeds_no_training_split_renders() -> None:
    training = {seed for _, seed in dataset.SPLITS.values()}
    assert not training & set(dataset.HARD_SEEDS)
    assert not training & set(dataset.FRESH_SEEDS)
    assert not set(dataset.HARD_SEEDS) & set(dataset.FRESH_SEEDS)
    assert dataset.Conditions() == dataset.BASE


def test_the_hard_set_was_measured_with_the_shipped_model() -> None:
    sha = evaluate.file_sha256(DETECTOR / "model.onnx")
    assert evaluate.result_path("hard", sha).is_file(), "the shipped model has no hard-set score"
    assert evaluate.result_path("base", sha).is_file(), "the shipped model has no base score"


def test_the_card_shows_the_spread_of_the_shipped_model() -> None:
    """CARD.md's spread section is the one evaluate.py --card generates from the files."""
    text = (DETECTOR / "CARD.md").read_text(encoding="utf-8")
    shown = evaluate.BEGIN + text.split(evaluate.BEGIN, 1)[1].split(evaluate.END, 1)[0]
    assert shown + evaluate.END == evaluate.card_section(), "run evaluate.py --card"


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.name)
def test_a_committed_measurement_is_of_the_set_as_defined_now(path: Path) -> None:
    """Its Conditions, seeds and count are the set's (a factor added since stays at its base
    value, which draws nothing), and its first renders render again byte for byte: the hard
    set is never edited after its first score."""
    result = json.loads(path.read_text(encoding="utf-8"))
    conditions, seeds = evaluate.SETS[result["set"]]
    now = json.loads(json.dumps(conditions.as_dict()))
    base = json.loads(json.dumps(dataset.BASE.as_dict()))
    assert now == base | result["conditions"]
    assert tuple(result["seeds"]) == seeds
    assert result["count"] == dataset.SET_COUNT
    samples = dataset.render(evaluate.PROBE, seeds[0], 1, conditions)
    assert evaluate.fingerprint(samples) == result["probe_sha256"]


def test_base_conditions_leave_the_image_alone_and_hard_ones_do_not() -> None:
    image = np.full((24, 32, 3), 100, np.uint8)
    rng = np.random.default_rng(0)
    assert dataset._degrade(rng, image, dataset.BASE) is image
    assert rng.random() == np.random.default_rng(0).random()  # BASE drew nothing
    hard = dataset._degrade(np.random.default_rng(0), image, dataset.HARD)
    assert hard.shape == image.shape and hard.dtype == np.uint8
    assert not np.array_equal(hard, image)
    assert dataset._light(np.random.default_rng(0), dataset.BASE) is None


def test_gaussian_blur_keeps_flat_images_and_spreads_an_edge() -> None:
    flat = np.full((10, 12, 3), 50.0, np.float32)
    np.testing.assert_allclose(dataset.gaussian_blur(flat, 1.5), flat, rtol=1e-5)
    edge = np.zeros((10, 12, 3), np.float32)
    edge[:, 6:] = 255.0
    blurred = dataset.gaussian_blur(edge, 1.0)
    assert 0 < blurred[5, 5, 0] < 128 < blurred[5, 6, 0] < 255
    np.testing.assert_allclose(blurred.sum(), edge.sum(), rtol=1e-4)  # nothing lost


def test_the_hard_set_measures_the_shipped_model_without_writing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tiny variant of the documented command: two renders of the hard set's first seed."""
    before = sorted((DETECTOR / "eval").glob("*.json"))
    seed = str(dataset.HARD_SEEDS[0])
    assert evaluate.main(["--set", "hard", "--seeds", seed, "--count", "2", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert f"model.onnx on the hard set: 2 renders from each of seeds [{seed}]" in out
    assert f"| seed {seed} | min | boxes |" in out
    assert "| name | boxes | found | weak | missed | taken for (most often) |" in out
    assert "wrote" not in out
    assert sorted((DETECTOR / "eval").glob("*.json")) == before


def test_outcomes_say_where_each_true_box_went() -> None:
    """The highest-scoring detection at IoU >= 0.5 decides, whatever its class; sides are in
    pixels of a 320-wide frame (a 640-wide render's boxes count half)."""
    lemon, block = (10.0, 10.0, 30.0, 26.0), (100.0, 100.0, 112.0, 112.0)
    shown = [
        [  # a 320x240 render: the lemon is taken for a yellow block (0.6 over its own 0.3)
            Detection("lemon", 0.3, lemon),
            Detection("yellow_block", 0.6, (11.0, 10.0, 30.0, 26.0)),
            Detection("yellow_block", 0.9, (60.0, 60.0, 70.0, 70.0)),  # overlaps nothing
        ],
        [Detection("yellow_block", 0.8, block)],  # a 640x480 render: found
        [Detection("yellow_block", 0.2, block)],  # found, but below what the runtime takes
        [Detection("yellow_block", 0.9, (100.0, 100.0, 106.0, 106.0))],  # IoU 0.25: missed
    ]
    truths = [[("lemon", lemon)], [("yellow_block", block)], [("yellow_block", block)]]
    truths.append([("yellow_block", block)])
    result = evaluate.outcomes(shown, truths, [320, 640, 320, 320])
    assert result["lemon"] == {"counts": {"as yellow_block": 1}, "median_side": {"taken": 16.0}}
    assert result["yellow_block"]["counts"] == {"found": 1, "weak": 1, "missed": 1}
    assert result["yellow_block"]["median_side"] == {"found": 6.0, "weak": 12.0, "missed": 12.0}
    table = evaluate.outcome_table({"classes": ["yellow_block", "lemon"], "outcomes": result})
    assert "| `lemon` | 1 | 0 | 0 | 0 | `yellow_block` 1 | – / – / 16.0 |" in table
    assert "| `yellow_block` | 3 | 1 | 1 | 1 | – | 6.0 / 12.0 / – |" in table


def test_the_card_shows_where_the_boxes_went_when_a_measurement_kept_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(b"a candidate")
    monkeypatch.setattr(evaluate, "RESULTS", tmp_path)
    per_class = {"lemon": 0.8, "yellow_block": 0.95}
    result = {
        "classes": ["yellow_block", "lemon"],
        "seeds": [101],
        "count": 2,
        "map": 0.875,
        "per_class": per_class,
        "per_seed": {"101": {"map": 0.875, "per_class": per_class}},
        "boxes": {"yellow_block": 3, "lemon": 1},
    }
    sha = evaluate.file_sha256(model)
    evaluate.result_path("base", sha).write_text(json.dumps(result))
    outcomes = {"lemon": {"counts": {"as yellow_block": 1}, "median_side": {"taken": 16.0}}}
    evaluate.result_path("hard", sha).write_text(json.dumps(result | {"outcomes": outcomes}))
    section = evaluate.card_section(model)
    assert section.count("Where the") == 1 and "Where the hard set's true boxes went" in section
    assert "| `lemon` | 1 | 0 | 0 | 0 | `yellow_block` 1 | – / – / 16.0 |" in section
    assert "`lemon` 0.800 (seed 101)" in section  # under 0.9 on a seed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seeds", "1", "11"], "seeds [1] render the training splits"),
        (["--set", "night"], "argument --set: invalid choice: 'night'"),
        (["--model", "no-such.onnx"], "no model file no-such.onnx"),
        (["--count", "0"], "--count and --workers must be at least 1"),
    ],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        evaluate.main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("evaluate.py: error: "), err
    assert message in err


def test_a_model_that_is_not_a_detector_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not an onnx file")
    with pytest.raises(SystemExit):
        evaluate.main(["--model", str(junk), "--count", "1", "--workers", "1"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("evaluate.py: error: "), err


def test_training_ranges_hold_the_hard_set_inside_not_at_the_edge() -> None:
    """Every range of TRAIN is wider than HARD's on both sides, unless a side is a natural
    bound (no blur, no noise, no extra objects: those the base conditions also have)."""
    train, hard = dataset.TRAIN.as_dict(), dataset.HARD.as_dict()
    assert np.all(np.array(train["camera_shift"]) > hard["camera_shift"])
    assert np.all(np.array(train["target_low"]) < hard["target_low"])
    assert np.all(np.array(train["target_high"]) > hard["target_high"])
    for key in ("fov", "light_elevation", "light_ambient", "light_diffuse", "exposure"):
        assert train[key][0] < hard[key][0] and train[key][1] > hard[key][1], key
    for key in ("light_specular", "blur", "noise", "clutter", "distractors"):
        assert train[key][0] <= hard[key][0] and train[key][1] > hard[key][1], key
    assert train["light_tint"] > hard["light_tint"]
    assert train["textures"] > 0 == hard["textures"]


def test_a_training_render_has_textures_and_labels() -> None:
    """The textured table and floor of a TRAIN scene; the labels are the masks' as ever."""
    rng = np.random.default_rng(0)
    textures = [dataset._texture_image(rng) for _ in range(6)]
    assert all(t.shape == (128, 128, 3) and t.dtype == np.uint8 for t in textures)
    assert all(t.std() > 2 for t in textures)  # not a flat colour
    conditions = dataclasses.replace(dataset.TRAIN, textures=1.0)
    samples = dataset.render(2, 7, 1, conditions)
    assert [s.image.shape[2] for s in samples] == [3, 3]
    assert any(s.truth for s in samples)
    for s in samples:
        height, width = s.image.shape[:2]
        for label, (x1, y1, x2, y2) in s.truth:
            assert label in dataset.CLASSES
            assert 0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height


def test_a_working_pose_puts_the_tool_over_the_table_pointing_down() -> None:
    """train.py --working-arm: the arm as the skills hold it (over the table, raised), in the
    view, where near home it mostly is not; the pose is drawn only when the share is not 0."""
    from onboard.drivers.twin import SCENES, Twin, load_scene

    (x0, y0), (x1, y1) = dataset.WORK_AREA
    scene = load_scene(SCENES / "tabletop.toml")
    layout = dataset.Layout(scene, {"red block": "red_block", "box": "box"}, "random")
    with Twin(scene) as twin:
        home = np.array(twin.scene.arm.home)
        down = twin.forward(tuple(map(float, home)))
        reached, held = [], []
        for k in range(8):
            twin.reset_joints(tuple(map(float, home)))
            twin.set_object_pose("red block", (0.45, 0.0, 0.02))
            dataset._working_pose(twin, np.random.default_rng(k), home, layout)
            tool = twin.ee_pose()
            reached.append(not np.allclose(twin.joints(), home))
            if reached[-1]:
                assert x0 - 0.01 <= tool.x <= x1 + 0.01 and y0 - 0.01 <= tool.y <= y1 + 0.01
                assert 0.02 <= tool.z <= dataset.WORK_HEIGHT + 0.01
                assert math.cos(tool.rx - down.rx) > 0.99 and math.cos(tool.ry - down.ry) > 0.99
                block = twin.object_pose("red block")[0]
                held.append(math.dist(block, (tool.x, tool.y, tool.z)) < 1e-3)
    assert sum(reached) >= 5 and 0 < sum(held) < sum(reached)  # held half the time, a block
    assert dataset.BASE.working_arm == dataset.HARD.working_arm == 0.0


def test_training_only_scenes_are_laid_out_as_the_tasks_leave_them() -> None:
    """The TASK_STATES (drawn in TRAIN's scenes only, never in BASE or HARD): belt_order's
    queue at the end stop goes away from the camera along its line of sight, a tower (task 2's
    colours or any, in any order) stands with its faces to the camera, task 7's duck sits
    inside the box, the tidy skill's pair is one block resting on another."""
    from onboard.drivers.twin import SCENES, Twin, load_scene

    view = load_scene(SCENES / "tabletop.toml")
    drawn = {
        dataset.random_layout(np.random.default_rng(k), view, conditions).composition
        for conditions in (dataset.BASE, dataset.HARD)
        for k in range(60)
    }
    assert drawn <= set(dataset.COMPOSITIONS)
    train = {
        dataset.random_layout(np.random.default_rng(k), view, dataset.TRAIN).composition
        for k in range(60)
    }
    assert train >= set(dataset.TASK_STATES)
    # train.py --states: a weight of 0 draws that state never, the others as weighed
    only = dataclasses.replace(
        dataset.TRAIN, scenes=1.0, states=(("duck_box", 0.0), ("facing_tower", 0.0))
    )
    weighed = [
        dataset.random_layout(np.random.default_rng(k), view, only).composition for k in range(60)
    ]
    assert set(weighed) == {"queue", "block_pair"}
    assert weighed.count("block_pair") > weighed.count("queue")  # 2 to 1
    camera = np.array(view.camera.position[:2])
    towers = {
        _tower_order(layout)
        for layout in (
            dataset.random_layout(
                np.random.default_rng([6, k]), view, dataset.TRAIN, "facing_tower"
            )
            for k in range(40)
        )
    }
    task2 = ("red_block", "yellow_block", "blue_block")
    assert task2 in towers and len(towers) > 4  # task 2's, and the tidy skill's any colours
    checks = {
        "queue": _check_queue,
        "facing_tower": _check_tower,
        "duck_box": _check_duck,
        "block_pair": _check_pair,
    }
    for k in range(4):
        rng = np.random.default_rng([5, k])
        for composition in dataset.TASK_STATES:
            layout = dataset.random_layout(rng, view, dataset.TRAIN, composition)
            check = checks[composition]
            if composition == "facing_tower":
                check = functools.partial(check, _tower_order(layout))
            elif composition == "block_pair":
                check = functools.partial(check, _tower_order(layout, blocks=4))
            with Twin(layout.scene) as twin:
                dataset.Placer(twin, layout, rng)()
                names = {label: name for name, label in reversed(layout.classes.items())}
                names |= {o.kind: o.name for o in layout.scene.objects if o.kind == "conveyor"}
                specs = {o.name: o for o in layout.scene.objects}
                check(
                    {c: _pose(twin, n) for c, n in names.items()},
                    {c: specs[n] for c, n in names.items()},
                    camera,
                )


Pose = tuple[np.ndarray, float]  # position, yaw


def _tower_order(layout: object, blocks: int = 3) -> tuple[str, ...]:
    """A facing_tower's blocks bottom up: its composition's first three, as the Placer
    takes them (``blocks=4``: a block_pair's bottom, top and the two others)."""
    classes: dict[str, str] = layout.classes  # type: ignore[attr-defined]
    return tuple(label for label in classes.values() if label in dataset.BLOCKS)[:blocks]


def _pose(twin: object, name: str) -> Pose:
    position, quat = twin.object_pose(name)  # type: ignore[attr-defined]
    return np.array(position), 2 * math.atan2(quat[2], quat[3])


def _check_queue(poses: dict[str, Pose], specs: dict[str, object], camera: np.ndarray) -> None:
    belt, axis = poses["conveyor"]
    sight = camera - belt[:2]
    # the belt's downstream end (+x, its stop) faces the camera, +-15 degrees
    assert abs(math.remainder(axis - math.atan2(sight[1], sight[0]), math.tau)) < 0.27
    blocks = sorted(
        (poses[c][0] for c in dataset.QUEUE),
        key=lambda p: -float(np.linalg.norm(p[:2] - camera)),
    )  # far to near: the nearest is at the stop
    line = blocks[-1][:2] - blocks[0][:2]
    cos = line @ sight / np.linalg.norm(line) / np.linalg.norm(sight)
    assert cos > math.cos(math.radians(22)), cos  # along the line of sight (15 + jitter)
    length = specs["conveyor"].extent[0]  # type: ignore[attr-defined]
    half = specs["red_block"].size / 2  # type: ignore[attr-defined]
    assert abs(np.linalg.norm(blocks[-1][:2] - belt[:2]) - (length / 2 - 0.02)) < half + 0.01
    for a, b in itertools.pairwise(blocks):  # touching, in a row, on the belt
        assert 0.03 < np.linalg.norm(b[:2] - a[:2]) < 0.06
        assert abs(a[2] - b[2]) < 0.006 and 0.015 < a[2] < 0.03


def _check_tower(
    order: tuple[str, ...], poses: dict[str, Pose], specs: dict[str, object], camera: np.ndarray
) -> None:
    placed = [poses[c] for c in order]
    bottom = placed[0][0][:2]  # the first; the second on it; the third on that, or elsewhere
    on = [k for k, (p, _) in enumerate(placed) if np.linalg.norm(p[:2] - bottom) < 0.006]
    assert on in ([0, 1], [0, 1, 2])
    tower = [placed[k] for k in on]
    for (p, _), (q, _) in itertools.pairwise(tower):
        assert 0.035 < q[2] - p[2] < 0.045  # stacked, face to face
    to_camera = math.atan2(*(camera - bottom)[::-1])
    for _, yaw in tower:  # yaw 0 (as task 2 leaves it) or squared to the camera, +-3 degrees
        off = min(abs(yaw), abs(math.remainder(yaw - to_camera, math.pi / 2)))
        assert math.degrees(off) < 3.1 and yaw == tower[0][1]


def _check_pair(
    order: tuple[str, ...], poses: dict[str, Pose], specs: dict[str, object], camera: np.ndarray
) -> None:
    (bottom, low), (top, high) = (poses[c] for c in order[:2])
    assert np.linalg.norm(top[:2] - bottom[:2]) < 0.006  # on it, as an arm places it
    sizes = [specs[c].size for c in order[:2]]  # type: ignore[attr-defined]
    assert abs(bottom[2] - sizes[0] / 2) < 0.002  # on the table
    assert abs(top[2] - bottom[2] - sum(sizes) / 2) < 0.002  # resting on the bottom block
    assert math.degrees(abs(math.remainder(high - low, math.tau))) < 5.1
    for name in order[2:]:  # the other blocks on the table (or out of view)
        assert poses[name][0][2] < 0.03 or poses[name][0][0] > 2.0


def _check_duck(poses: dict[str, Pose], specs: dict[str, object], camera: np.ndarray) -> None:
    (duck, _), (box, _) = poses["duck"], poses["box"]
    assert np.linalg.norm(duck[:2] - box[:2]) < 0.045 < specs["box"].size / 2  # type: ignore[attr-defined]
    assert 0.0 < duck[2] - box[2] < 0.1  # on its floor, below its rim


def test_opt_in_states_are_drawn_only_when_named_and_laid_out_as_they_say() -> None:
    """dataset.OPT_IN_STATES (train.py --states lookalikes=W, open_drawer=W): never in TRAIN's
    default draws; named, a yellow block stands beside a lemon (and a red block beside an
    apple), every one on the table's spot area, and the drawer is open half its travel or
    more, the blocks on its floor."""
    from onboard.drivers.twin import SCENES, Twin, load_scene

    view = load_scene(SCENES / "tabletop.toml")
    every = dataclasses.replace(dataset.TRAIN, scenes=1.0)
    default = {
        dataset.random_layout(np.random.default_rng(k), view, every).composition for k in range(80)
    }
    assert default == set(dataset.TASK_STATES)
    named = dataclasses.replace(every, states=tuple((s, 1.0) for s in dataset.OPT_IN_STATES))
    drawn = {
        dataset.random_layout(np.random.default_rng(k), view, named).composition for k in range(80)
    }
    assert drawn == set(dataset.TASK_STATES) | set(dataset.OPT_IN_STATES)
    (x0, x1), y1 = dataset.SPOT_X, dataset.SPOT_Y
    for k in range(8):  # a fruit put beside its block stays on the spot area, never past it
        rng = np.random.default_rng([8, k])
        layout = dataset.random_layout(rng, view, dataset.TRAIN, "lookalikes")
        with Twin(layout.scene) as twin:
            dataset.Placer(twin, layout, rng)()
            for name in layout.classes:
                x, y, _ = twin.object_pose(name)[0]
                assert x > 2 or (x0 <= x <= x1 and abs(y) <= y1), (k, name, x, y)
    for k in range(3):
        rng = np.random.default_rng([7, k])
        layout = dataset.random_layout(rng, view, dataset.TRAIN, "lookalikes")
        with Twin(layout.scene) as twin:
            dataset.Placer(twin, layout, rng)()
            on_table = {
                n: twin.object_pose(n)[0] for n in layout.classes if twin.object_pose(n)[0][0] < 2
            }
            for block, fruit in (("yellow_block", "lemon"), ("red_block", "apple")):
                blocks = [p for n, p in on_table.items() if layout.classes[n] == block]
                fruits = [p for n, p in on_table.items() if layout.classes[n] == fruit]
                for p in blocks[: len(fruits)]:  # paired in order; the nearest within 12 cm
                    assert min(math.dist(p[:2], q[:2]) for q in fruits) < 0.12
            assert any(layout.classes[n] == "lemon" for n in on_table)
        layout = dataset.random_layout(rng, view, dataset.TRAIN, "open_drawer")
        with Twin(layout.scene) as twin:
            dataset.Placer(twin, layout, rng)()
            (drawer,) = (n for n, c in layout.classes.items() if c == "drawer")
            depth = next(o.extent for o in layout.scene.objects if o.name == drawer)[0]
            assert twin.drawer_opening(drawer) >= 0.5 * 0.8 * (depth - dataset.WALL) - 1e-3
            centre = twin.object_pose(drawer)[0]
            for name, c in layout.classes.items():
                position = twin.object_pose(name)[0]
                if (
                    c in dataset.BLOCKS
                    and position[0] < 2
                    and math.dist(position[:2], centre[:2]) < 0.3
                ):
                    assert position[2] < centre[2] + 0.05  # in it or beside it, never on its top


def test_average_takes_the_weighted_mean_of_one_graphs_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """average.py (weight-space ensembling): each float tensor the weighted mean, the graph and
    metadata the first model's; another graph is refused in one line."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    average = _module("average")
    shipped = onnx.load(str(DETECTOR / "model.onnx"))
    shifted = onnx.load(str(DETECTOR / "model.onnx"))
    for init in shifted.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype.kind == "f":
            init.CopyFrom(numpy_helper.from_array(array + np.float32(1.0), init.name))
    onnx.save(shifted, str(tmp_path / "shifted.onnx"))
    out = tmp_path / "mean.onnx"
    args = ["--out", str(out), f"{DETECTOR / 'model.onnx'}=3", f"{tmp_path / 'shifted.onnx'}=1"]
    assert average.main(args) == 0
    assert capsys.readouterr().out.startswith(f"{out}: sha256 ")
    mean = onnx.load(str(out))
    assert mean.metadata_props == shipped.metadata_props
    for got, was in zip(mean.graph.initializer, shipped.graph.initializer, strict=True):
        a, b = numpy_helper.to_array(got), numpy_helper.to_array(was)
        expected = b + np.float32(0.25) if b.dtype.kind == "f" else b
        np.testing.assert_allclose(a, expected, rtol=0, atol=1e-6, err_msg=got.name)
    same = average.average([(DETECTOR / "model.onnx", 0.3), (DETECTOR / "model.onnx", 0.7)])
    assert same.graph.initializer == shipped.graph.initializer  # x * 0.3 + x * 0.7 is x
    other = tmp_path / "other.onnx"
    shifted.graph.node.pop()
    onnx.save(shifted, str(other))
    assert average.main(["--out", str(out), f"{DETECTOR / 'model.onnx'}=1", f"{other}=1"]) == 2
    err = capsys.readouterr().err
    assert err == f"average.py: error: {other}: another graph than {DETECTOR / 'model.onnx'}'s\n"


def _small_network(height: int, width: int, rows: int) -> Any:
    """A network of the detector's contract whose left and right differ: one 3x3 convolution of
    fixed random weights from the image to ``rows`` maps, flattened to [1, rows, anchors]."""
    from onnx import TensorProto, helper, numpy_helper

    weights = np.random.default_rng(3).normal(size=(rows, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["images", "w"], ["maps"], pads=[1, 1, 1, 1]),
        helper.make_node("Reshape", ["maps", "flat"], ["output0"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, rows, height * width])],
        [
            numpy_helper.from_array(weights, "w"),
            numpy_helper.from_array(np.array([1, rows, -1], np.int64), "flat"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_onnx(path: Path, image: np.ndarray) -> np.ndarray:
    """The output of the ONNX model at ``path`` for ``image`` ([1, 3, h, w]), by onnxruntime."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"images": image.astype(np.float32)})[0])


def test_mirror_returns_the_frames_boxes_then_the_mirror_images_turned_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mirror.py: the written model's output is the network's rows on the input, then its rows
    on the input flipped left to right with cx turned back (W - cx), run by onnxruntime; a model
    mirrored already, and one whose input width is not fixed, are refused in one line."""
    onnx = pytest.importorskip("onnx")
    mirror = _module("mirror")
    height, width, rows = 8, 12, 6
    onnx.save(_small_network(height, width, rows), str(tmp_path / "net.onnx"))
    out = tmp_path / "two.onnx"
    assert mirror.main([str(tmp_path / "net.onnx"), str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {out}")
    image = np.random.default_rng(4).random((1, 3, height, width), dtype=np.float32)

    frame = _run_onnx(tmp_path / "net.onnx", image)
    flipped = _run_onnx(tmp_path / "net.onnx", np.ascontiguousarray(image[..., ::-1]))
    flipped[:, 0] = width - flipped[:, 0]
    both = _run_onnx(out, image)
    assert both.shape == (1, rows, 2 * height * width)
    np.testing.assert_allclose(both, np.concatenate([frame, flipped], axis=2), atol=1e-5)
    assert not np.allclose(frame, flipped, atol=1e-3)  # the network tells left from right

    assert mirror.main([str(out), str(tmp_path / "again.onnx")]) == 2
    assert capsys.readouterr().err == (
        f"mirror.py: error: {out}: the model already looks at the mirror image\n"
    )
    dynamic = _small_network(height, width, rows)
    dynamic.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "width"
    onnx.save(dynamic, str(tmp_path / "dynamic.onnx"))
    assert mirror.main([str(tmp_path / "dynamic.onnx"), str(out)]) == 2
    assert "the model's input size and output shape must be fixed" in capsys.readouterr().err


def _bilinear_half_pixel(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """ONNX Resize (linear, half_pixel) of [1, 3, h, w] in numpy: edges clamped."""

    def axis(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        src = np.clip((np.arange(size_out) + 0.5) * size_in / size_out - 0.5, 0, size_in - 1)
        low = np.floor(src).astype(int)
        return low, np.minimum(low + 1, size_in - 1), (src - low).astype(np.float32)

    y0, y1, fy = axis(image.shape[2], height)
    x0, x1, fx = axis(image.shape[3], width)
    rows = image[:, :, y0] * (1 - fy)[:, None] + image[:, :, y1] * fy[:, None]
    return rows[..., x0] * (1 - fx) + rows[..., x1] * fx


def test_mirror_can_take_the_mirror_view_with_the_network_at_a_larger_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mirror.py --view: the flipped input resized (bilinear) to the view network's input, its
    boxes scaled back to the frame's input pixels before cx is turned back."""
    onnx = pytest.importorskip("onnx")
    mirror = _module("mirror")
    (height, width), (big_h, big_w), rows = (8, 12), (16, 18), 6
    onnx.save(_small_network(height, width, rows), str(tmp_path / "net.onnx"))
    onnx.save(_small_network(big_h, big_w, rows), str(tmp_path / "big.onnx"))
    out = tmp_path / "two.onnx"
    args = [str(tmp_path / "net.onnx"), str(out), "--view", str(tmp_path / "big.onnx")]
    assert mirror.main(args) == 0
    assert "frame 12x8 + mirror image 18x16" in capsys.readouterr().out
    image = np.random.default_rng(5).random((1, 3, height, width), dtype=np.float32)

    frame = _run_onnx(tmp_path / "net.onnx", image)
    view = _run_onnx(tmp_path / "big.onnx", _bilinear_half_pixel(image[..., ::-1], big_h, big_w))
    view[:, :4] *= np.array([width / big_w, height / big_h] * 2, np.float32)[None, :, None]
    view[:, 0] = width - view[:, 0]
    both = _run_onnx(out, image)
    assert both.shape == (1, rows, height * width + big_h * big_w)
    np.testing.assert_allclose(both, np.concatenate([frame, view], axis=2), atol=1e-4)

    narrow = _small_network(big_h, big_w, rows - 1)
    onnx.save(narrow, str(tmp_path / "narrow.onnx"))
    args[-1] = str(tmp_path / "narrow.onnx")
    assert mirror.main(args) == 2
    assert capsys.readouterr().err == (
        f"mirror.py: error: {tmp_path / 'narrow.onnx'}: the view's network has 5 output rows,"
        " not 6\n"
    )
