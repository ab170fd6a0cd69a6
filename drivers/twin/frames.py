"""Rigid transforms for the twin: quaternions (x, y, z, w, as PyBullet) and Pose conversion.

A :class:`~onboard.drivers.arm.base.Pose` holds roll/pitch/yaw, extrinsic XYZ, which is PyBullet's
Euler convention: ``R = Rz(rz) @ Ry(ry) @ Rx(rx)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onboard.drivers.arm.base import Pose

__all__ = [
    "Quat",
    "Transform",
    "Vec3",
    "quat_angle",
    "quat_from_euler",
    "quat_to_euler",
    "quat_to_matrix",
    "slerp",
]

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


def quat_from_euler(rx: float, ry: float, rz: float) -> Quat:
    cr, sr = math.cos(rx / 2), math.sin(rx / 2)
    cp, sp = math.cos(ry / 2), math.sin(ry / 2)
    cy, sy = math.cos(rz / 2), math.sin(rz / 2)
    return (
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
        cr * cp * cy + sr * sp * sy,
    )


def quat_to_euler(q: Quat) -> Vec3:
    x, y, z, w = q
    rx = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    ry = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    rz = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return (rx, ry, rz)


def quat_to_matrix(q: Quat) -> npt.NDArray[np.float64]:
    x, y, z, w = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def quat_mul(a: Quat, b: Quat) -> Quat:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return (
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    )


def quat_angle(a: Quat, b: Quat) -> float:
    """The rotation angle (radians, 0..pi) between two orientations."""
    dot = abs(sum(x * y for x, y in zip(a, b, strict=True)))
    return 2 * math.acos(min(1.0, dot))


def slerp(a: Quat, b: Quat, s: float) -> Quat:
    qa, qb = np.array(a), np.array(b)
    dot = float(qa @ qb)
    if dot < 0:
        qb, dot = -qb, -dot
    if dot > 0.9995:
        out = qa + s * (qb - qa)
    else:
        theta = math.acos(dot)
        out = (math.sin((1 - s) * theta) * qa + math.sin(s * theta) * qb) / math.sin(theta)
    out /= np.linalg.norm(out)
    return (float(out[0]), float(out[1]), float(out[2]), float(out[3]))


@dataclass(frozen=True)
class Transform:
    """A rigid transform: ``p_out = R @ p_in + t``."""

    position: Vec3 = (0.0, 0.0, 0.0)
    rotation: Quat = (0.0, 0.0, 0.0, 1.0)

    @classmethod
    def from_pose(cls, pose: Pose) -> Transform:
        return cls(pose.position(), quat_from_euler(pose.rx, pose.ry, pose.rz))

    def to_pose(self) -> Pose:
        rx, ry, rz = quat_to_euler(self.rotation)
        return Pose(*self.position, rx=rx, ry=ry, rz=rz)

    def apply(self, point: Vec3) -> Vec3:
        out = quat_to_matrix(self.rotation) @ np.array(point) + np.array(self.position)
        return (float(out[0]), float(out[1]), float(out[2]))

    def __matmul__(self, other: Transform) -> Transform:
        return Transform(self.apply(other.position), quat_mul(self.rotation, other.rotation))

    def inverse(self) -> Transform:
        x, y, z, w = self.rotation
        conj = (-x, -y, -z, w)
        back = quat_to_matrix(conj) @ -np.array(self.position)
        return Transform((float(back[0]), float(back[1]), float(back[2])), conj)

    def matrix(self) -> npt.NDArray[np.float64]:
        out = np.eye(4)
        out[:3, :3] = quat_to_matrix(self.rotation)
        out[:3, 3] = self.position
        return out
