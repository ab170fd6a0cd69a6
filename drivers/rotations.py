"""Rotations, written once: quaternions (x, y, z, w, as PyBullet and ROS), rotation matrices and
roll/pitch/yaw.

Roll, pitch, yaw are extrinsic XYZ, PyBullet's Euler convention and that of
:class:`~onboard.drivers.arm.base.Pose`: ``R = Rz(yaw) @ Ry(pitch) @ Rx(roll)``. The twin's
frames (:mod:`onboard.drivers.twin.frames`) and the hand-eye transform
(:mod:`onboard.perception.pose`) both use these.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "Quat",
    "Vec3",
    "matrix_to_quaternion",
    "matrix_to_rpy",
    "quat_angle",
    "quat_from_euler",
    "quat_mul",
    "quat_to_euler",
    "quat_to_matrix",
    "rot_y",
    "rot_z",
    "rpy_to_matrix",
    "slerp",
]

Vec3 = tuple[float, float, float]
Quat = tuple[float, float, float, float]


def rot_y(a: float) -> npt.NDArray[np.float64]:
    """The rotation by ``a`` radians about y."""
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rot_z(a: float) -> npt.NDArray[np.float64]:
    """The rotation by ``a`` radians about z."""
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


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


def matrix_to_quaternion(r: npt.ArrayLike) -> tuple[float, float, float, float]:
    """(x, y, z, w) with w >= 0 of a rotation matrix (Shepperd's method)."""
    m = np.asarray(r, dtype=np.float64)
    trace = float(np.trace(m))
    diag = np.diag(m)
    if trace >= diag.max():
        w = math.sqrt(1 + trace) / 2
        q = [(m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w)]
        q += [(m[1, 0] - m[0, 1]) / (4 * w), w]
    else:
        i = int(np.argmax(diag))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = math.sqrt(1 + m[i, i] - m[j, j] - m[k, k]) * 2
        q = [0.0, 0.0, 0.0, (m[k, j] - m[j, k]) / s]
        q[i], q[j], q[k] = s / 4, (m[j, i] + m[i, j]) / s, (m[k, i] + m[i, k]) / s
    sign = -1.0 if q[3] < 0 else 1.0
    return (sign * q[0], sign * q[1], sign * q[2], sign * q[3])


def rpy_to_matrix(rpy: Sequence[float]) -> npt.NDArray[np.float64]:
    """Roll, pitch, yaw (radians, extrinsic XYZ): R = Rz(yaw) Ry(pitch) Rx(roll)."""
    roll, pitch, yaw = (float(a) for a in rpy)
    cr, sr = math.cos(roll), math.sin(roll)
    cp, sp = math.cos(pitch), math.sin(pitch)
    cy, sy = math.cos(yaw), math.sin(yaw)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def matrix_to_rpy(r: npt.ArrayLike) -> tuple[float, float, float]:
    """Roll, pitch, yaw (radians, extrinsic XYZ) of a rotation matrix; inverse of rpy_to_matrix."""
    m = np.asarray(r, dtype=np.float64)
    pitch = math.asin(max(-1.0, min(1.0, -float(m[2, 0]))))
    if abs(m[2, 0]) < 1 - 1e-9:
        return math.atan2(m[2, 1], m[2, 2]), pitch, math.atan2(m[1, 0], m[0, 0])
    return math.atan2(-m[1, 2], m[1, 1]), pitch, 0.0  # gimbal lock: yaw folded into roll
