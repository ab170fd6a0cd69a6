"""``onboard calibrate`` on the physics twin: the written [hand_eye] against the twin's truth."""

from __future__ import annotations

import argparse
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest

from onboard.base.errors import ConfigError
from onboard.cli.calibrate import (
    CalibrationError,
    CalibrationResult,
    calibrate_command,
    write_hand_eye,
)
from onboard.config import load_robot
from onboard.drivers.rotations import quat_from_euler
from onboard.drivers.twin import SCENES, load_scene
from onboard.drivers.twin.camera import camera_pose
from onboard.drivers.twin.frames import Transform
from onboard.perception.pose import HandEye

SCENE = SCENES / "calibration.toml"

ROBOT = f"""\
# a robot calibrated on the twin
name = "calibration-test"   # kept as it is

[drivers.arm]
kind = "sim"
scene = "{SCENE.as_posix()}"
speed = 0.25

[drivers.camera]
kind = "sim"

[safety]   # generous: the grid spans 0.35..0.55 x -0.15..0.15 x 0.15..0.35 m
workspace = {{ min = [-0.8, -0.8, 0.0], max = [0.8, 0.8, 1.0] }}
max_speed = 0.5
default_speed = 0.25

# the evaluation settings follow
[eval]
seed = 3
"""


def args(**changes: object) -> argparse.Namespace:
    """The CLI's defaults (``onboard calibrate``), with 2 steps a side (8 poses) for speed."""
    values: dict[str, object] = {
        "low": [0.35, -0.15, 0.15],
        "high": [0.55, 0.15, 0.35],
        "steps": 2,
        "color": [255, 0, 255],
        "offset": [0.0, 0.0, 0.05],
        "radius": 0.02,
        "write": False,
    }
    return argparse.Namespace(**(values | changes))


def truth() -> HandEye:
    """Camera -> arm base, from the scene file alone."""
    scene = load_scene(SCENE)
    base = Transform(scene.arm.position, quat_from_euler(0.0, 0.0, math.radians(scene.arm.yaw)))
    return HandEye(base.inverse().matrix() @ camera_pose(scene.camera))


def rotation_error_deg(a: HandEye, b: HandEye) -> float:
    cos = (np.trace(a.rotation.T @ b.rotation) - 1) / 2
    return math.degrees(math.acos(min(1.0, max(-1.0, cos))))


@pytest.fixture
def robot_path(tmp_path: Path) -> Path:
    path = tmp_path / "robot.toml"
    path.write_text(ROBOT, encoding="utf-8")
    return path


def test_calibrate_writes_hand_eye_within_1cm_and_1deg(robot_path: Path) -> None:
    out = io.StringIO()
    code = calibrate_command(load_robot(robot_path), robot_path, args(write=True), out)
    assert code == 0
    printed = out.getvalue()
    assert "from 8 of 8 poses" in printed and "RMS residual" in printed
    assert "translation" in printed and "rpy" in printed and "quaternion_xyzw" in printed

    robot = load_robot(robot_path)
    assert robot.hand_eye is not None and robot.hand_eye.rms is not None
    found = HandEye.from_config(robot.hand_eye)
    assert np.linalg.norm(found.translation - truth().translation) < 0.01
    assert rotation_error_deg(found, truth()) < 1.0
    assert robot.hand_eye.rms < 0.005

    # the rest of the file is as it was, comments included; [hand_eye] is added at the end
    text = robot_path.read_text(encoding="utf-8")
    assert text.startswith(ROBOT)
    assert text[len(ROBOT) :].lstrip().startswith("[hand_eye]")

    assert not list(robot_path.parent.glob(".robot-*"))  # no temporary file left


OLD_HAND_EYE = """
[hand_eye]   # measured by hand
translation = [0.95, 0.0, 0.8]
rpy = [-2.5, 0.0, 1.5708]

# the evaluation settings follow
"""


def with_old_hand_eye() -> str:
    return ROBOT.replace("\n# the evaluation settings follow\n", OLD_HAND_EYE)


def test_without_write_robot_toml_is_untouched(robot_path: Path) -> None:
    """... and the output says how far the new result is from the [hand_eye] in the file."""
    robot_path.write_text(with_old_hand_eye(), encoding="utf-8")
    out = io.StringIO()
    assert calibrate_command(load_robot(robot_path), robot_path, args(), out) == 0
    assert "add --write" in out.getvalue()
    moved = re.search(
        r"vs robot.toml +([0-9.]+) mm and ([0-9.]+) deg from \[hand_eye\]", out.getvalue()
    )
    assert moved is not None
    assert 45 < float(moved.group(1)) < 75 and 1 < float(moved.group(2)) < 10
    assert robot_path.read_text(encoding="utf-8") == with_old_hand_eye()


def test_write_replaces_hand_eye_in_place(robot_path: Path) -> None:
    """An rpy-form [hand_eye] becomes the quaternion form where it was; the comment after it,
    which introduces the next table, stays."""
    robot_path.write_text(with_old_hand_eye(), encoding="utf-8")
    write_hand_eye(robot_path, CalibrationResult(truth(), np.array([0.001, 0.002]), [], 8))
    text = robot_path.read_text(encoding="utf-8")
    before, after = with_old_hand_eye().split(OLD_HAND_EYE)
    assert text.startswith(before) and text.rstrip().endswith(after.rstrip())
    assert text.count("[hand_eye]") == 1 and "\nrpy = " not in text
    assert text.index("[hand_eye]") < text.index("# the evaluation settings follow")
    assert "quaternion_xyzw" in text[: text.index("# the evaluation settings follow")]
    hand_eye = load_robot(robot_path).hand_eye
    assert hand_eye is not None and hand_eye.rms == pytest.approx(math.sqrt(2.5e-6), abs=1e-6)
    assert np.allclose(HandEye.from_config(hand_eye).matrix, truth().matrix, atol=1e-5)


@pytest.mark.parametrize("table", ["arm", "camera"])
def test_a_missing_device_names_the_table_to_add(robot_path: Path, table: str) -> None:
    start = ROBOT.index(f"[drivers.{table}]")
    end = ROBOT.index("\n\n", start)
    robot_path.write_text(ROBOT[:start] + ROBOT[end + 2 :], encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        calibrate_command(load_robot(robot_path), robot_path, args(write=True))
    message = str(caught.value)
    assert "\n" not in message
    assert f"add [drivers.{table}]" in message and str(robot_path) in message


def test_a_scene_without_a_marker_is_refused(robot_path: Path) -> None:
    tabletop = SCENES / "tabletop.toml"
    robot_path.write_text(ROBOT.replace(SCENE.as_posix(), tabletop.as_posix()), encoding="utf-8")
    with pytest.raises(CalibrationError, match=r"carries no marker: add \[arm.marker\]"):
        calibrate_command(load_robot(robot_path), robot_path, args())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"steps": 1}, "--steps must be 2 or more"),
        ({"color": [0, 0, 0]}, "--color takes R G B"),
        ({"color": [300, 0, 255]}, "--color takes R G B"),
        ({"low": [0.6, -0.15, 0.15]}, "must not exceed --high"),
        ({"radius": -0.01}, "--radius must be 0 or more"),
        ({"high": [0.55, 0.15, 1.5]}, "outside the safety limits.*z=1.5000"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    robot_path: Path, change: dict[str, object], match: str
) -> None:
    with pytest.raises(CalibrationError, match=match) as caught:
        calibrate_command(load_robot(robot_path), robot_path, args(write=True, **change))
    assert "\n" not in str(caught.value)
    assert robot_path.read_text(encoding="utf-8") == ROBOT


def test_a_write_that_would_not_load_leaves_robot_toml_alone(robot_path: Path) -> None:
    """The new file is validated before it replaces the old one."""
    result = CalibrationResult(truth(), np.array([0.001, 0.002, 0.001]), [], 3)
    broken = ROBOT.replace("seed = 3", "seed = 3\nunknown = 1")
    robot_path.write_text(broken, encoding="utf-8")
    with pytest.raises(CalibrationError, match="would break it, left unchanged") as caught:
        write_hand_eye(robot_path, result)
    assert "\n" not in str(caught.value)
    assert robot_path.read_text(encoding="utf-8") == broken
    assert not list(robot_path.parent.glob(".robot-*"))
