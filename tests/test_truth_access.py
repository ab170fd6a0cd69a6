"""Only judges, disturbers, the twin's own drivers and servers, and calibration and dataset
tooling may read the twin's truth; the robot's code (the robot API above all) sees the world
through the camera, the detector and the arm's own state. A new reader fails this test."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: the Twin's accessors of what only the simulation knows
TRUTH = frozenset(
    {
        "object_pose", "set_object_pose", "held_object", "drawer_opening", "set_drawer",
        "put_drawer", "marker_position", "marker_body", "ray_test", "segmentation",
        "segmentation_id", "body_of", "name_of", "kind_of", "object_names", "render", "contacts",
    }
)  # fmt: skip

#: the only modules allowed to call them, and why
ALLOWED = {
    "drivers/twin/world.py": "the twin itself",
    "drivers/twin/camera.py": "the twin's renderer",
    "drivers/camera/twin_camera.py": "the sim camera renders the twin (what a camera sees)",
    "drivers/emulators/truth_server.py": "sim serve's truth server (judges over TCP)",
    "runtime/manip/replay.py": "a replay sets up the recorded scene",
    "runtime/evaluation/tidy_judge.py": "the tidy judge",
    "runtime/evaluation/code_judges.py": "the code tasks' judges",
    "runtime/evaluation/disturb.py": "the disturber: moves or drops objects during a run, logged",
    "runtime/evaluation/code_tasks.py": "a code trial's set-up: places the objects of a variation,"
    " renders the goal picture",
    "runtime/evaluation/sort_twin.py": "Sort Cubes on the twin: lays out a level's start, judges"
    " which panel each cube rests on",
    # the dry run's twin is built from the perceived scene: it is the model of what was seen,
    # so its perception is its own state, and the dry run watches it for collisions; neither
    # reads the twin the robot works in (or the world)
    "runtime/replan/dry_twin.py": "the dry run's own twin: its sight is its own state",
    "runtime/replan/dryrun.py": "the dry run's own twin: contacts, grasps, what moved",
    "models/detector/dataset.py": "the detector's training data (labels from segmentation)",
    "models/detector/train.py": "the detector's per-class AP on fresh renders (dataset.render)",
    "models/detector/evaluate.py": "the detector's mAP on the base and hard sets (dataset.render)",
}


def truth_readers() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in ("runtime", "drivers", "models", "skills"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            names = {
                node.func.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in TRUTH
            }
            if names:
                found[path.relative_to(ROOT).as_posix()] = names
    return found


def test_only_judges_disturbers_and_tooling_read_the_twins_truth() -> None:
    readers = truth_readers()
    strangers = {m: sorted(n) for m, n in readers.items() if m not in ALLOWED}
    assert not strangers, f"new readers of the twin's truth: {strangers}"


#: the dry run reads the state of its own twin only (see ALLOWED)
DRY_RUN = frozenset({"runtime/replan/dry_twin.py", "runtime/replan/dryrun.py"})


def test_the_robot_api_reads_no_truth() -> None:
    readers = truth_readers()
    assert not [m for m in readers if m.startswith("runtime/replan/") and m not in DRY_RUN]
    assert not [m for m in readers if m.startswith("runtime/manip/motions")]
