"""From a detection box and depth aligned to color to a 3-D point, and on to the robot's base.

Pixel conventions: detection boxes are (x1, y1, x2, y2) with pixel ``i`` spanning [i, i + 1)
(the detector's, as YOLO's); :func:`deproject` and :func:`project` take pixel *centres*, as
librealsense does (pixel ``i`` is centred on ``i``). Camera frame: x right, y down, z forward,
metres. :class:`HandEye` maps camera-frame points to the robot base frame (z up).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, model_validator

from onboard.base.errors import CameraError
from onboard.drivers.camera.base import Intrinsics
from onboard.drivers.rotations import (
    matrix_to_quaternion,
    quat_to_matrix,
    rpy_to_matrix,
)

__all__ = [
    "Box",
    "HandEye",
    "HandEyeConfig",
    "Located",
    "box_depth",
    "centre_region",
    "deproject",
    "locate",
    "project",
    "quaternion_to_matrix",
]

Box = tuple[
    float, float, float, float
]  # x1, y1, x2, y2 in pixels, as onboard.perception.detector.Box
Vector = npt.NDArray[np.float64]
DepthImage = npt.NDArray[np.float32]


def centre_region(
    box: Sequence[float], shape: tuple[int, ...], centre: float
) -> tuple[slice, slice]:
    """Row and column slices of the middle ``centre`` fraction of ``box`` (at least one pixel),
    clipped to an image of ``shape``."""
    x1, y1, x2, y2 = (float(v) for v in box)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    half_w, half_h = max((x2 - x1) * centre / 2, 0.5), max((y2 - y1) * centre / 2, 0.5)
    height, width = shape[0], shape[1]
    c0, c1 = _span(cx - half_w, cx + half_w, width)
    r0, r1 = _span(cy - half_h, cy + half_h, height)
    return slice(r0, r1), slice(c0, c1)


def _span(lo: float, hi: float, size: int) -> tuple[int, int]:
    start = min(max(math.floor(lo + 0.5), 0), size - 1)
    stop = max(min(math.floor(hi + 0.5), size), start + 1)
    return start, stop


def box_depth(
    depth: DepthImage, box: Sequence[float], centre: float = 0.5, max_depth: float = 10.0
) -> float:
    """Median depth (m) of the valid pixels in the middle ``centre`` fraction of ``box``.

    Zeros (no depth), NaNs and values beyond ``max_depth`` are holes and ignored; a box with
    no valid depth at all raises CameraError.
    """
    rows, cols = centre_region(box, depth.shape, centre)
    values = depth[rows, cols]
    valid = values[np.isfinite(values) & (values > 0) & (values <= max_depth)]
    if valid.size == 0:
        raise CameraError(
            f"no valid depth in the centre of box {_fmt_box(box)}: the object is too close, "
            "too far, shiny or transparent, or the depth stream is not aligned to color"
        )
    return float(np.median(valid))


def deproject(u: float, v: float, z: float, intrinsics: Intrinsics) -> Vector:
    """The camera-frame point at depth ``z`` seen at pixel centre (u, v) (pinhole model)."""
    i = intrinsics
    return np.array([(u - i.cx) / i.fx * z, (v - i.cy) / i.fy * z, z], dtype=np.float64)


def project(point: Sequence[float] | Vector, intrinsics: Intrinsics) -> tuple[float, float]:
    """The pixel centre (u, v) where a camera-frame point is seen."""
    x, y, z = (float(c) for c in point)
    if z <= 0:
        raise ValueError(f"point {x, y, z} is behind the camera")
    i = intrinsics
    return i.fx * x / z + i.cx, i.fy * y / z + i.cy


@dataclass(frozen=True, eq=False)
class Located:
    """Where a box is: the surface point on the ray through its centre, and its size."""

    point: Vector  # camera frame, metres: the visible surface at the box centre
    depth: float  # metres, the median valid depth used
    size: tuple[float, float]  # metres: the box's width and height at that depth
    ray: Vector = field(repr=False)  # unit vector from the camera through the box centre

    def behind(self, distance: float) -> Vector:
        """The point ``distance`` metres further along the ray (e.g. a sphere's centre)."""
        return self.point + self.ray * distance


def locate(
    box: Sequence[float],
    depth: DepthImage,
    intrinsics: Intrinsics,
    centre: float = 0.5,
    max_depth: float = 10.0,
) -> Located:
    """The 3-D point (camera frame) of an object seen in ``box``, from depth aligned to color.

    The depth is the median over the middle ``centre`` fraction of the box (robust to holes
    and to background at the box's corners); the pixel is the box centre.
    """
    if depth.shape[:2] != (intrinsics.height, intrinsics.width):
        raise CameraError(
            f"depth image {depth.shape[1]}x{depth.shape[0]} does not match the color intrinsics "
            f"{intrinsics.width}x{intrinsics.height}: align depth to color first"
        )
    z = box_depth(depth, box, centre, max_depth)
    x1, y1, x2, y2 = (float(v) for v in box)
    u, v = (x1 + x2) / 2 - 0.5, (y1 + y2) / 2 - 0.5
    point = deproject(u, v, z, intrinsics)
    size = ((x2 - x1) * z / intrinsics.fx, (y2 - y1) * z / intrinsics.fy)
    return Located(point=point, depth=z, size=size, ray=point / np.linalg.norm(point))


def _fmt_box(box: Sequence[float]) -> str:
    return "(" + ", ".join(f"{float(v):.0f}" for v in box) + ")"


# -- hand-eye ------------------------------------------------------------------------------

Finite = Annotated[float, Field(allow_inf_nan=False)]


class HandEyeConfig(BaseModel):
    """robot.toml: where the camera is in the robot base frame (camera-to-base transform).

    ``translation`` in metres; the rotation either as ``quaternion_xyzw`` (x, y, z, w) or as
    ``rpy`` (roll, pitch, yaw in radians, extrinsic XYZ as the arm's poses). ``rms`` is the
    residual ``onboard calibrate`` reported, for the record.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    translation: tuple[Finite, Finite, Finite]
    quaternion_xyzw: tuple[Finite, Finite, Finite, Finite] | None = None
    rpy: tuple[Finite, Finite, Finite] | None = None
    rms: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _one_rotation(self) -> HandEyeConfig:
        if (self.quaternion_xyzw is None) == (self.rpy is None):
            raise ValueError("give the rotation as exactly one of quaternion_xyzw or rpy")
        if self.quaternion_xyzw is not None and math.hypot(*self.quaternion_xyzw) < 1e-6:
            raise ValueError("quaternion_xyzw has zero length")
        return self


@dataclass(frozen=True, eq=False)
class HandEye:
    """A rigid transform (4x4) from the camera frame to the robot base frame."""

    matrix: npt.NDArray[np.float64]

    def __post_init__(self) -> None:
        m = np.asarray(self.matrix, dtype=np.float64)
        if m.shape != (4, 4) or not np.allclose(m[3], [0, 0, 0, 1]):
            raise ValueError(f"a hand-eye transform is a 4x4 rigid transform, got {m.shape}")
        r = m[:3, :3]
        if not np.allclose(r @ r.T, np.eye(3), atol=1e-6) or np.linalg.det(r) < 0:
            raise ValueError("the rotation part of the hand-eye transform is not a rotation")
        object.__setattr__(self, "matrix", m)

    @classmethod
    def identity(cls) -> HandEye:
        return cls(np.eye(4))

    @classmethod
    def from_parts(cls, rotation: npt.ArrayLike, translation: npt.ArrayLike) -> HandEye:
        m = np.eye(4)
        m[:3, :3] = np.asarray(rotation, dtype=np.float64)
        m[:3, 3] = translation
        return cls(m)

    @classmethod
    def from_quaternion(cls, translation: Sequence[float], xyzw: Sequence[float]) -> HandEye:
        return cls.from_parts(quaternion_to_matrix(xyzw), translation)

    @classmethod
    def from_rpy(cls, translation: Sequence[float], rpy: Sequence[float]) -> HandEye:
        return cls.from_parts(rpy_to_matrix(rpy), translation)

    @classmethod
    def from_config(cls, config: HandEyeConfig) -> HandEye:
        if config.quaternion_xyzw is not None:
            return cls.from_quaternion(config.translation, config.quaternion_xyzw)
        assert config.rpy is not None
        return cls.from_rpy(config.translation, config.rpy)

    @property
    def rotation(self) -> npt.NDArray[np.float64]:
        return self.matrix[:3, :3]

    @property
    def translation(self) -> Vector:
        return self.matrix[:3, 3]

    def apply(self, points: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Camera-frame point(s), shape (3,) or (n, 3), in the base frame."""
        p = np.asarray(points, dtype=np.float64)
        return p @ self.rotation.T + self.translation

    __call__ = apply

    def inverse(self) -> HandEye:
        r = self.rotation.T
        return HandEye.from_parts(r, -r @ self.translation)

    def to_config(self, rms: float | None = None) -> HandEyeConfig:
        """The robot.toml form (translation + quaternion_xyzw), rounded to 0.1 mm / 1e-6."""
        t = tuple(round(float(v), 5) for v in self.translation)
        q = tuple(round(float(v), 6) for v in matrix_to_quaternion(self.rotation))
        return HandEyeConfig(
            translation=(t[0], t[1], t[2]),
            quaternion_xyzw=(q[0], q[1], q[2], q[3]),
            rms=None if rms is None else round(rms, 6),
        )


def quaternion_to_matrix(xyzw: Sequence[float]) -> npt.NDArray[np.float64]:
    """The rotation matrix of a quaternion (x, y, z, w), normalised first."""
    x, y, z, w = np.asarray(xyzw, dtype=np.float64) / np.linalg.norm(xyzw)
    return quat_to_matrix((x, y, z, w))
