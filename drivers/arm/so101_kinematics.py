"""The SO-101 (and SO-100) arm's kinematics, and LeRobot's calibration files.

Five joints and a gripper: shoulder_pan (about z), then shoulder_lift, elbow_flex and
wrist_flex (parallel axes: a planar chain in the vertical plane the pan turns), wrist_roll
(about the tool's axis), gripper. The link lengths are approximate, read off the joint origins
of the public SO-101 description (base to shoulder 0.1166 m; shoulder to elbow 0.116 m, the
hypotenuse of its 0.1126 m and 0.028 m offsets; elbow to wrist 0.1349 m; wrist to the
jaw tips about 0.10 m), rounded, not copied; the SO-100 is close enough that the same
defaults are used. Give your own in robot.toml (``links``) when they differ.

Angles (radians): all zero is the arm upright, straight up; shoulder_lift, elbow_flex and
wrist_flex tilt forward (away from the base) when positive. The tool frame's z axis points
along the jaws (down is ``rx = pi``), as the other arms'
tools; with wrist_roll at zero the jaws open along the base frame's y axis (pan zero).

:func:`solve` is closed-form: the pan from the target's x, y; the tool's pitch and roll from
its orientation; the wrist point; then the two-link triangle, elbow up first and elbow down
if the first breaks a joint limit. Five joints cannot give every orientation: a target
whose tool axis does not lie in the plane of the pan is reached with the nearest one (its
position exactly), and :attr:`Solution.angle` says how far it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from onboard.base.errors import ArmError, ConfigError, Problem
from onboard.drivers.arm.base import Pose
from onboard.drivers.rotations import matrix_to_rpy, rot_y, rot_z, rpy_to_matrix

__all__ = [
    "JOINTS",
    "MOTORS",
    "Calibration",
    "Links",
    "MotorCalibration",
    "Solution",
    "forward",
    "load_calibration",
    "solve",
]

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
MOTORS = (*JOINTS, "gripper")
STEPS = 4096


@dataclass(frozen=True)
class Links:
    """Metres: the shoulder's height above the base, the upper arm, the forearm, the wrist
    flex axis to the tool point."""

    base: float = 0.1166
    upper: float = 0.116
    fore: float = 0.1349
    tool: float = 0.10


LINKS = Links()


def forward(joints: Sequence[float], links: Links = LINKS) -> Pose:
    """The tool's pose for five joint angles."""
    pan, lift, elbow, flex, roll = (float(q) for q in joints[:5])
    a1, a2 = lift, lift + elbow
    a3 = a2 + flex  # the tool's direction, from straight up
    r = links.upper * math.sin(a1) + links.fore * math.sin(a2) + links.tool * math.sin(a3)
    z = links.base + links.upper * math.cos(a1) + links.fore * math.cos(a2)
    z += links.tool * math.cos(a3)
    rotation = rot_z(pan) @ rot_y(a3) @ rot_z(roll + math.pi)  # roll 0, pointing down: rx = pi
    rx, ry, rz = matrix_to_rpy(rotation)
    return Pose(r * math.cos(pan), r * math.sin(pan), z, rx, ry, rz)


@dataclass(frozen=True)
class Solution:
    joints: tuple[float, ...]
    angle: float  # radians between the reached and the asked orientation


def solve(
    pose: Pose,
    links: Links = LINKS,
    lower: Sequence[float] | None = None,
    upper: Sequence[float] | None = None,
    seed: Sequence[float] | None = None,
) -> Solution:
    """Joints that put the tool at ``pose`` within the limits; ArmError naming why not."""
    x, y, z = pose.position()
    r_xy = math.hypot(x, y)
    if r_xy < 1e-4:
        raise ArmError(f"so101: {_fmt(pose)} is on the pan axis: no unique pan")
    target = rpy_to_matrix((pose.rx, pose.ry, pose.rz))
    best: Solution | None = None
    why = "out of reach"
    for pan, r in ((math.atan2(y, x), r_xy), (math.atan2(-y, -x), -r_xy)):
        axis = target[:, 2]
        along = axis[0] * math.cos(pan) + axis[1] * math.sin(pan)
        pitch = math.atan2(along, axis[2])  # the tool's direction from straight up
        local = rot_y(-pitch) @ rot_z(-pan) @ target
        roll = math.atan2(local[1, 0], local[0, 0]) - math.pi
        wr = r - links.tool * math.sin(pitch)
        wz = z - links.base - links.tool * math.cos(pitch)
        c = (wr * wr + wz * wz - links.upper**2 - links.fore**2) / (2 * links.upper * links.fore)
        if abs(c) > 1.0:
            continue
        for sign in (1.0, -1.0):
            elbow = sign * math.acos(c)
            lift = math.atan2(wr, wz) - math.atan2(
                links.fore * math.sin(elbow), links.upper + links.fore * math.cos(elbow)
            )
            flex = pitch - lift - elbow
            joints = tuple(_wrap(q) for q in (pan, lift, elbow, flex, roll))
            if lower is not None and upper is not None:
                outside = [
                    JOINTS[i]
                    for i, q in enumerate(joints)
                    if not lower[i] - 1e-9 <= q <= upper[i] + 1e-9
                ]
                if outside:
                    why = f"{outside[0]} would leave its limits"
                    continue
            reached = rpy_to_matrix(_rpy(forward(joints, links)))
            angle = _angle(reached, target)
            candidate = Solution(joints, angle)
            if best is None or _cost(candidate, seed) < _cost(best, seed):
                best = candidate
    if best is None:
        raise ArmError(f"so101: {_fmt(pose)} is out of reach ({why})")
    return best


def _cost(solution: Solution, seed: Sequence[float] | None) -> float:
    moved = (
        0.0 if seed is None else sum(abs(a - b) for a, b in zip(solution.joints, seed, strict=True))
    )
    return solution.angle * 10 + moved * 0.01


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


def _rpy(pose: Pose) -> tuple[float, float, float]:
    return (pose.rx, pose.ry, pose.rz)


def _angle(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> float:
    cos = (float(np.trace(a.T @ b)) - 1) / 2
    return math.acos(max(-1.0, min(1.0, cos)))


def _fmt(pose: Pose) -> str:
    return f"({pose.x:.3f}, {pose.y:.3f}, {pose.z:.3f})"


# -- calibration ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MotorCalibration:
    """One motor of LeRobot's calibration file: its bus id, whether its direction is
    reversed, the homing offset written to the servo, and the range (servo steps, after the
    offset) it was seen to move through while calibrating."""

    id: int
    drive_mode: int = 0
    homing_offset: int = 0
    range_min: int = 0
    range_max: int = STEPS - 1

    @property
    def middle(self) -> float:
        return (self.range_min + self.range_max) / 2

    def to_radians(self, steps: float) -> float:
        """Servo steps -> radians from the middle of the range (LeRobot's zero)."""
        value = (steps - self.middle) * 2 * math.pi / STEPS
        return -value if self.drive_mode else value

    def to_steps(self, radians: float) -> int:
        value = -radians if self.drive_mode else radians
        return round(self.middle + value * STEPS / (2 * math.pi))

    def limits(self) -> tuple[float, float]:
        a, b = self.to_radians(self.range_min), self.to_radians(self.range_max)
        return (min(a, b), max(a, b))


Calibration = Mapping[str, MotorCalibration]

#: with no calibration file: ids 1-6 in order, no offset, a range of +-120 degrees about the
#: servo's middle (the gripper: its middle to a quarter turn past it)
DEFAULT_CALIBRATION: dict[str, MotorCalibration] = {
    name: MotorCalibration(id=i + 1, range_min=683, range_max=3413) for i, name in enumerate(JOINTS)
} | {"gripper": MotorCalibration(id=6, range_min=2048, range_max=3072)}


def load_calibration(path: Path) -> dict[str, MotorCalibration]:
    """A LeRobot calibration file (``{"shoulder_pan": {"id": 1, "drive_mode": 0,
    "homing_offset": ..., "range_min": ..., "range_max": ...}, ...}``, as ``lerobot-calibrate``
    writes it); ConfigError naming the file and the motor."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise _bad(path, f"cannot read the calibration: {exc}") from exc
    if not isinstance(data, dict):
        raise _bad(path, "a calibration is a JSON object of motors")
    missing = [m for m in MOTORS if m not in data]
    if missing:
        raise _bad(path, f"no motor {missing[0]!r} (an SO-101 has {', '.join(MOTORS)})")
    motors: dict[str, MotorCalibration] = {}
    for name in MOTORS:
        entry = data[name]
        try:
            values = {k: int(entry[k]) for k in ("id", "drive_mode", "homing_offset")}
            values |= {k: int(entry[k]) for k in ("range_min", "range_max")}
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(
                path,
                f"motor {name!r} needs integer id, drive_mode, homing_offset, "
                f"range_min, range_max ({exc!r})",
            ) from exc
        if not 0 <= values["range_min"] < values["range_max"] < STEPS:
            raise _bad(path, f"motor {name!r}: range_min < range_max within 0-4095")
        motors[name] = MotorCalibration(**values)
    ids = [m.id for m in motors.values()]
    if len(set(ids)) != len(ids):
        raise _bad(path, "two motors share a bus id")
    return motors


def _bad(path: Path, message: str) -> ConfigError:
    return ConfigError([Problem(path, "", None, message)])


def describe(calibration: Mapping[str, MotorCalibration]) -> dict[str, dict[str, int]]:
    """The calibration as LeRobot writes it (for tests and ``onboard init``)."""
    return {
        name: {
            "id": m.id,
            "drive_mode": m.drive_mode,
            "homing_offset": m.homing_offset,
            "range_min": m.range_min,
            "range_max": m.range_max,
        }
        for name, m in calibration.items()
    }
