"""The twin's RGB-D camera: PyBullet's TinyRenderer (CPU), depth linearised to metres.

Pixel convention as RealSense: pixel (u, v) has its centre at integer coordinates, so a
point at camera coordinates (X, Y, Z) (OpenCV frame: x right, y down, z forward) lands at
``u = fx * X / Z + cx``, ``v = fy * Y / Z + cy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from onboard.drivers.camera.base import Intrinsics
from onboard.drivers.twin.scene import CameraSpec

__all__ = [
    "DEFAULT_LIGHT",
    "LINK_SHIFT",
    "Images",
    "Light",
    "camera_pose",
    "intrinsics",
    "render",
    "split_segmentation",
]

#: a link-level segmentation value is ``body + ((link + 1) << LINK_SHIFT)``
LINK_SHIFT = 24

Images = tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32], npt.NDArray[np.int32]]


@dataclass(frozen=True)
class Light:
    """TinyRenderer's light, for renders that vary it (the detector's data and hard set).

    ``direction``: towards the light, world frame (any length). ``color``: RGB, 0..1.
    ``ambient``, ``diffuse``, ``specular``: the shading coefficients (the renderer's own
    defaults are about 0.6, 0.35 and 0.05). ``shadow``: cast shadows (about twice the render
    time). Without a Light, :func:`render` uses DEFAULT_LIGHT: the renderer's own default,
    passed every time, because TinyRenderer keeps the last light it was given.
    """

    direction: tuple[float, float, float]
    color: tuple[float, float, float] = (1.0, 1.0, 1.0)
    ambient: float = 0.6
    diffuse: float = 0.35
    specular: float = 0.05
    shadow: bool = False
    distance: float = 2.0

    def options(self) -> dict[str, Any]:
        """getCameraImage's keyword arguments."""
        return {
            "lightDirection": list(self.direction),
            "lightColor": list(self.color),
            "lightDistance": self.distance,
            "lightAmbientCoeff": self.ambient,
            "lightDiffuseCoeff": self.diffuse,
            "lightSpecularCoeff": self.specular,
            "shadow": int(self.shadow),
        }


#: TinyRenderer's default light (z up): the same images as passing no light at all
DEFAULT_LIGHT = Light(direction=(-50.0, 30.0, 100.0))


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


def render(p: Any, spec: CameraSpec, links: bool = False, light: Light | None = None) -> Images:
    """RGB (H, W, 3) uint8, depth (H, W) float32 metres along the optical axis (0 where
    nothing was hit), segmentation (H, W) int32 body ids (-1 for none).

    With ``links`` a segmentation value is ``body + ((link + 1) << 24)`` (PyBullet's
    ``ER_SEGMENTATION_MASK_OBJECT_AND_LINKINDEX``; the base link is -1, so a one-link body
    keeps its plain id): :func:`split_segmentation` takes it apart. ``light``: another light
    than the renderer's default (:class:`Light`).
    """
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
        flags=p.ER_SEGMENTATION_MASK_OBJECT_AND_LINKINDEX if links else 0,
        **(light or DEFAULT_LIGHT).options(),
    )
    rgb = np.ascontiguousarray(np.reshape(rgba, (spec.height, spec.width, 4))[:, :, :3], np.uint8)
    z = np.reshape(zbuffer, (spec.height, spec.width)).astype(np.float64)
    near, far = spec.near, spec.far
    depth = (far * near / (far - (far - near) * z)).astype(np.float32)
    depth[z >= 1.0] = 0.0
    labels = np.reshape(seg, (spec.height, spec.width)).astype(np.int32)
    return rgb, depth, labels


def split_segmentation(
    labels: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Body ids and link indices (-1: the base) of a ``render(..., links=True)`` segmentation;
    pixels that show nothing are -1 in both."""
    empty = labels < 0
    body = np.where(empty, -1, labels & ((1 << LINK_SHIFT) - 1)).astype(np.int32)
    link = np.where(empty, -1, (labels >> LINK_SHIFT) - 1).astype(np.int32)
    return body, link
