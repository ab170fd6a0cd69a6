"""Rigid transforms for the twin (rotations from :mod:`onboard.drivers.rotations`) and Pose
conversion.

A :class:`~onboard.drivers.arm.base.Pose` holds roll/pitch/yaw, extrinsic XYZ, which is PyBullet's
Euler convention: ``R = Rz(rz) @ Ry(ry) @ Rx(rx)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onboard.drivers.arm.base import Pose
from onboard.drivers.rotations import (
    Quat,
    Vec3,
    quat_from_euler,
    quat_mul,
    quat_to_euler,
    quat_to_matrix,
)

__all__ = ["Transform"]


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
