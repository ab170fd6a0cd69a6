"""The twin's RGB-D camera: PyBullet's TinyRenderer (CPU), depth linearised to metres.

Pixel convention as RealSense: pixel (u, v) has its centre at integer coordinates, so a
point at camera coordinates (X, Y, Z) (OpenCV frame: x right, y down, z forward) lands at
``u = fx * X / Z + cx``, ``v = fy * Y / Z + cy``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from onboard.drivers.camera.base import Intrinsics
from onboard.drivers.twin.scene import CameraSpec

__all__ = ["Images", "camera_pose", "intrinsics", "render"]

Images = tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32], npt.NDArray[np.int32]]


def intrinsics(spec: CameraSpec) -> Intrinsics:
    fy = spec.height / 2 / math.tan(math.radians(spec.fov) / 2)
    return Intrinsics(
        width=spec.width,
        height=spec.height,
        fx=fy,
        fy=fy,
        cx=spec.width / 2 - 0.5,
        cy=spec.height / 2 - 0.5,
    )


def camera_pose(spec: CameraSpec) -> npt.NDArray[np.float64]:
    """Camera-to-world transform (4x4) of the OpenCV camera frame."""
    eye, target, up = (np.array(v, dtype=float) for v in (spec.position, spec.target, spec.up))
    forward = target - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = right, down, forward, eye
    return pose


def render(p: Any, spec: CameraSpec) -> Images:
    """RGB (H, W, 3) uint8, depth (H, W) float32 metres along the optical axis (0 where
    nothing was hit), segmentation (H, W) int32 body ids (-1 for none)."""
    view = p.computeViewMatrix(spec.position, spec.target, spec.up)
    projection = p.computeProjectionMatrixFOV(
        spec.fov, spec.width / spec.height, spec.near, spec.far
    )
    _, _, rgba, zbuffer, seg = p.getCameraImage(
        spec.width,
        spec.height,
        view,
        projection,
        renderer=p.ER_TINY_RENDERER,
    )
    rgb = np.ascontiguousarray(np.reshape(rgba, (spec.height, spec.width, 4))[:, :, :3], np.uint8)
    z = np.reshape(zbuffer, (spec.height, spec.width)).astype(np.float64)
    near, far = spec.near, spec.far
    depth = (far * near / (far - (far - near) * z)).astype(np.float32)
    depth[z >= 1.0] = 0.0
    labels = np.reshape(seg, (spec.height, spec.width)).astype(np.int32)
    return rgb, depth, labels
