"""``onboard calibrate``: hand-eye calibration with the arm and camera of robot.toml.

The arm carries a coloured sphere (``--color``, ``--radius``, ``--offset`` from the tool point
in the tool frame) through a grid of poses spanning ``--low``..``--high`` (base frame, tool
pointing down); the camera finds it by colour at each. The camera-to-base transform that best
maps what the camera saw onto where the arm put the marker is printed with its RMS residual,
and with ``--write`` stored as ``[hand_eye]`` in robot.toml (comments and layout kept; the new
file is validated before it atomically replaces the old one).

On the physics twin, the shipped scene ``calibration`` (``drivers/twin/scenes/calibration.toml``)
has the Panda carry such a marker (magenta, 2 cm radius, 5 cm beyond the finger tips: the
defaults)::

    [drivers.arm]
    kind = "sim"
    scene = "calibration"

    [drivers.camera]
    kind = "sim"
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import numpy.typing as npt
import tomlkit
import tomlkit.exceptions
from tomlkit.items import Comment, Table, Whitespace

from onboard.base.errors import CalibrationError, CameraError, ConfigError, OnboardError, Problem
from onboard.config import RobotConfig, load_robot
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.safety import SafeArm
from onboard.drivers.camera.base import Camera
from onboard.drivers.rotations import matrix_to_quaternion, matrix_to_rpy
from onboard.perception.calibration import Sample, collect, color_marker, grid_poses, solve_rigid
from onboard.perception.pose import HandEye, HandEyeConfig

__all__ = [
    "MIN_SAMPLES",
    "CalibrationError",
    "CalibrationResult",
    "calibrate_command",
    "run_calibration",
    "write_hand_eye",
]

MIN_SAMPLES = 4  # poses that must see the marker
SETTLE = 0.3  # seconds a real arm and camera get after each move (the sim arm blocks)


@dataclass(frozen=True, eq=False)
class CalibrationResult:
    """What one calibration found: the transform, its residuals and the samples behind it."""

    transform: HandEye  # camera frame -> base frame
    residuals: npt.NDArray[np.float64]  # metres, one per sample
    samples: list[Sample]
    poses: int  # poses visited

    @property
    def rms(self) -> float:
        return float(np.sqrt(np.mean(self.residuals**2)))

    @property
    def worst(self) -> float:
        return float(self.residuals.max())


def calibrate_command(
    robot: RobotConfig, robot_path: Path, args: argparse.Namespace, out: TextIO | None = None
) -> int:
    """Run ``onboard calibrate`` (see the module doc); 0 on success. Errors raise one line."""
    out = out or sys.stdout
    poses = _poses(args)
    _require_devices(robot, robot_path)
    from onboard.drivers.factory import hardware

    drivers = robot.drivers
    with hardware(drivers.arm, drivers.camera, robot.safety, robot.root) as hw:
        assert hw.arm is not None and hw.camera is not None
        if (
            hw.twin is not None
            and robot.drivers.arm is not None
            and robot.drivers.arm.kind == "sim"
        ):
            if not hw.twin.has_marker():
                scene = hw.twin.path or "the scene"
                raise CalibrationError(
                    f"{scene}: the simulated arm carries no marker: add [arm.marker] to the "
                    'scene, or use the shipped scene: scene = "calibration"'
                )
            settle = 0.0
        else:
            settle = SETTLE
        _check_reachable(hw.arm, poses)
        print(
            f"calibrate: {len(poses)} poses in [{_fmt(args.low)}]..[{_fmt(args.high)}] m, "
            f"marker rgb {tuple(args.color)} r={args.radius * 1000:.0f} mm "
            f"at [{_fmt(args.offset)}] m from the tool",
            file=out,
            flush=True,
        )
        result = run_calibration(hw.arm, hw.camera, poses, args, settle)
    _report(result, robot, out)
    if args.write:
        write_hand_eye(robot_path, result)
        print(f"wrote [hand_eye] to {robot_path}", file=out)
    else:
        print(f"not written: add --write to store it as [hand_eye] in {robot_path}", file=out)
    return 0


def run_calibration(
    arm: Arm, camera: Camera, poses: Sequence[Pose], args: argparse.Namespace, settle: float
) -> CalibrationResult:
    """Collect the marker at ``poses`` and fit the camera-to-base transform."""
    find = color_marker(tuple(args.color))
    samples = collect(arm, camera, poses, find, tuple(args.offset), args.radius, settle=settle)
    if len(samples) < MIN_SAMPLES:
        raise CameraError(
            f"calibrate: the marker was seen at {len(samples)} of {len(poses)} poses, "
            f"{MIN_SAMPLES} needed: check --color, the lighting, and that the poses keep the "
            "marker in view"
        )
    transform, residuals = solve_rigid([s.camera for s in samples], [s.base for s in samples])
    return CalibrationResult(transform, residuals, samples, len(poses))


def write_hand_eye(robot_path: Path, result: CalibrationResult) -> None:
    """Store ``result`` as ``[hand_eye]`` in robot.toml, keeping the rest of the file as it is.

    The new text is written next to the file, loaded and validated with ``load_robot``, and
    only then moved over the old file (atomically), so a failure leaves robot.toml untouched.
    """
    target = robot_path.resolve()
    try:
        document = tomlkit.parse(target.read_text(encoding="utf-8"))
    except (OSError, tomlkit.exceptions.ParseError) as exc:
        raise CalibrationError(f"{robot_path}: cannot read it to write [hand_eye]: {exc}") from exc
    config = result.transform.to_config(result.rms)
    table = _hand_eye_table(config, result)
    old = document.get("hand_eye")
    if old is not None:
        if isinstance(old, Table):
            # comments and blank lines after its last key introduce what follows: keep them
            body = old.value.body
            last = max((i for i, (key, _) in enumerate(body) if key is not None), default=-1)
            for _, item in body[last + 1 :]:
                if isinstance(item, Comment | Whitespace):
                    table.add(item)
        document["hand_eye"] = table
    else:
        document.add(tomlkit.nl())
        document.add("hand_eye", table)
    _replace_validated(target, robot_path, tomlkit.dumps(document), config)


def _hand_eye_table(config: HandEyeConfig, result: CalibrationResult) -> Table:
    roll, pitch, yaw = (math.degrees(a) for a in matrix_to_rpy(result.transform.rotation))
    today = datetime.date.today().isoformat()
    table = tomlkit.table()
    table.add(tomlkit.comment(f"camera -> base, written by `onboard calibrate` on {today}"))
    table.add(
        tomlkit.comment(
            f"{len(result.samples)} of {result.poses} poses, worst residual "
            f"{result.worst * 1000:.1f} mm; rpy = [{roll:.2f}, {pitch:.2f}, {yaw:.2f}] deg"
        )
    )
    assert config.quaternion_xyzw is not None
    table.add("translation", tomlkit.item(list(config.translation)))
    table.add("quaternion_xyzw", tomlkit.item(list(config.quaternion_xyzw)))
    table.add("rms", config.rms)
    return table


def _replace_validated(target: Path, shown: Path, content: str, expected: HandEyeConfig) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".toml", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(tmp, stat.S_IMODE(target.stat().st_mode))  # mkstemp makes it owner-only
        try:
            written = load_robot(Path(tmp)).hand_eye
        except ConfigError as exc:
            first = str(exc.problems[0]) if exc.problems else str(exc)
            raise CalibrationError(
                f"{shown}: writing [hand_eye] would break it, left unchanged: {first}"
            ) from exc
        if written != expected:
            raise CalibrationError(
                f"{shown}: [hand_eye] did not read back as written, left unchanged"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _poses(args: argparse.Namespace) -> list[Pose]:
    for name in ("low", "high", "offset"):
        values = getattr(args, name)
        if len(values) != 3 or not all(math.isfinite(v) for v in values):
            raise CalibrationError(f"calibrate: --{name} takes three finite numbers (metres)")
    if any(lo > hi for lo, hi in zip(args.low, args.high, strict=True)):
        raise CalibrationError(
            f"calibrate: --low [{_fmt(args.low)}] must not exceed --high [{_fmt(args.high)}]"
        )
    if args.steps < 2:
        raise CalibrationError(f"calibrate: --steps must be 2 or more, got {args.steps}")
    if len(args.color) != 3 or not all(0 <= c <= 255 for c in args.color) or max(args.color) == 0:
        raise CalibrationError(
            f"calibrate: --color takes R G B in 0..255, not all zero, got {tuple(args.color)}"
        )
    if not (math.isfinite(args.radius) and args.radius >= 0):
        raise CalibrationError(f"calibrate: --radius must be 0 or more metres, got {args.radius}")
    return grid_poses(args.low, args.high, args.steps)


def _require_devices(robot: RobotConfig, robot_path: Path) -> None:
    missing = [
        f"[drivers.{name}]"
        for name, config in (("arm", robot.drivers.arm), ("camera", robot.drivers.camera))
        if config is None
    ]
    if missing:
        raise ConfigError(
            [
                Problem(
                    robot_path,
                    "drivers",
                    None,
                    f"calibrate needs an arm and a camera: add {' and '.join(missing)} "
                    '(e.g. kind = "sim")',
                )
            ]
        )


def _check_reachable(arm: SafeArm, poses: Sequence[Pose]) -> None:
    """Refuse the whole grid up front if a pose breaks the safety limits (or would be clamped,
    which would distort the grid), before the arm moves at all."""
    for pose in poses:
        try:
            sent = arm.check_move(pose, None)
        except OnboardError as exc:
            raise CalibrationError(
                f"calibrate: --low/--high reach outside the safety limits: {exc}"
            ) from exc
        if sent.clamped:
            raise CalibrationError(
                f"calibrate: grid pose x={pose.x:.3f} y={pose.y:.3f} z={pose.z:.3f} would be "
                f"clamped by the safety limits ({'; '.join(sent.clamped)}); narrow --low/--high"
            )


def _report(result: CalibrationResult, robot: RobotConfig, out: TextIO) -> None:
    t = result.transform
    rpy = [math.degrees(a) for a in matrix_to_rpy(t.rotation)]
    print(
        f"hand-eye (camera -> base) from {len(result.samples)} of {result.poses} poses: "
        f"RMS residual {result.rms * 1000:.2f} mm, worst {result.worst * 1000:.2f} mm",
        file=out,
    )
    print(f"  translation      [{_fmt(t.translation, 4)}] m", file=out)
    print(f"  rpy              [{_fmt(rpy, 2)}] deg (roll, pitch, yaw; extrinsic XYZ)", file=out)
    print(f"  quaternion_xyzw  [{_fmt(matrix_to_quaternion(t.rotation), 6)}]", file=out)
    if robot.hand_eye is not None:
        old = HandEye.from_config(robot.hand_eye)
        moved = float(np.linalg.norm(old.translation - t.translation))
        cos = (float(np.trace(old.rotation.T @ t.rotation)) - 1) / 2
        turned = math.degrees(math.acos(min(1.0, max(-1.0, cos))))
        print(
            f"  vs robot.toml    {moved * 1000:.1f} mm and {turned:.2f} deg from [hand_eye]",
            file=out,
        )


def _fmt(values: Sequence[float] | npt.NDArray[np.float64], digits: int = 3) -> str:
    return ", ".join(f"{float(v):.{digits}f}" for v in values)
