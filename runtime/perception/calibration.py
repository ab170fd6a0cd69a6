"""Hand-eye calibration of a fixed camera ("eye to hand"): where the camera is in the base frame.

The arm carries a marker (a coloured sphere or cube on the gripper) to N poses. At each pose the
camera sees the marker (pixel box + aligned depth -> a camera-frame point) and the arm reports
its tool pose (-> the marker's base-frame point, through the known marker offset). The rigid
transform that best maps the camera points onto the base points (Kabsch / Umeyama without
scale, least squares) is the camera-to-base transform; its RMS residual says how good it is.

    transform, rms = calibrate(arm, camera, poses, find_marker=color_marker((255, 0, 255)))
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CameraError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.camera.base import Camera, Frame
from onboard.drivers.rotations import rpy_to_matrix
from onboard.perception.pose import Box, HandEye, locate

__all__ = [
    "Calibration",
    "FindMarker",
    "Sample",
    "calibrate",
    "collect",
    "color_marker",
    "grid_poses",
    "marker_in_base",
    "solve_rigid",
]

log = logging.getLogger(__name__)

#: finds the marker in a frame: its pixel box (x1, y1, x2, y2), or None when it is not seen
FindMarker = Callable[[Frame], Box | None]
Points = npt.NDArray[np.float64]


class Calibration(NamedTuple):
    transform: HandEye  # camera frame -> base frame
    rms: float  # metres, over the poses used


@dataclass(frozen=True, eq=False)
class Sample:
    """One pose's pair of observations of the marker centre."""

    pose: Pose  # as the arm reported it
    camera: npt.NDArray[np.float64]  # camera frame
    base: npt.NDArray[np.float64]  # base frame


def grid_poses(
    low: Sequence[float],
    high: Sequence[float],
    steps: int = 2,
    orientation: Sequence[float] = (math.pi, 0.0, 0.0),
) -> list[Pose]:
    """Poses on a ``steps`` x ``steps`` x ``steps`` grid spanning the box ``low``..``high``
    (base frame, metres), all with ``orientation`` (rx, ry, rz; default: tool pointing down).
    Spread them as wide as the marker stays in view: the fit is only as good as the spread."""
    axes = [np.linspace(lo, hi, steps) for lo, hi in zip(low, high, strict=True)]
    rx, ry, rz = (float(a) for a in orientation)
    return [
        Pose(float(x), float(y), float(z), rx, ry, rz)
        for x in axes[0]
        for y in axes[1]
        for z in axes[2]
    ]


def marker_in_base(pose: Pose, offset: Sequence[float]) -> npt.NDArray[np.float64]:
    """The marker centre in the base frame: the tool point plus ``offset`` in the tool frame."""
    rotation = rpy_to_matrix((pose.rx, pose.ry, pose.rz))
    tool: npt.NDArray[np.float64] = np.asarray(pose.position(), dtype=np.float64)
    return tool + rotation @ np.asarray(offset, dtype=np.float64)


def collect(
    arm: Arm,
    camera: Camera,
    poses: Sequence[Pose],
    find_marker: FindMarker,
    marker_offset: Sequence[float] = (0.0, 0.0, 0.0),
    marker_radius: float = 0.0,
    settle: float = 0.3,
    centre: float = 0.3,
) -> list[Sample]:
    """Move to each pose, wait ``settle`` s, take the next new frame and locate the marker.

    A pose where the marker is not seen, or has no valid depth, is logged and skipped.
    ``marker_radius``: a sphere's radius; the camera sees its surface, its centre lies that far
    behind along the viewing ray (0 for a flat marker).
    """
    samples = []
    for n, target in enumerate(poses, 1):
        arm.move_to(target)
        if settle > 0:
            time.sleep(settle)
        frame = camera.read()
        box = find_marker(frame)
        if box is None:
            log.warning("calibrate: pose %d/%d %s: marker not seen", n, len(poses), target)
            continue
        try:
            seen = locate(box, frame.depth, frame.intrinsics, centre)
        except CameraError as exc:
            log.warning("calibrate: pose %d/%d: %s", n, len(poses), exc)
            continue
        reported = arm.state().pose
        samples.append(
            Sample(reported, seen.behind(marker_radius), marker_in_base(reported, marker_offset))
        )
    return samples


def solve_rigid(source: npt.ArrayLike, target: npt.ArrayLike) -> tuple[HandEye, Points]:
    """The rotation R and translation t minimising sum |R s + t - d|² (Kabsch), as a HandEye
    mapping ``source`` points (n, 3) onto ``target`` points, and each point's residual (m)."""
    src = np.asarray(source, dtype=np.float64).reshape(-1, 3)
    dst = np.asarray(target, dtype=np.float64).reshape(-1, 3)
    if src.shape != dst.shape or len(src) < 3:
        raise CameraError(f"calibrate: need 3 or more point pairs, got {len(src)} and {len(dst)}")
    src_mean, dst_mean = src.mean(axis=0), dst.mean(axis=0)
    spread = np.linalg.svd(src - src_mean, compute_uv=False)
    if spread[1] < 1e-3 * max(spread[0], 1e-12) or spread[1] < 1e-4:
        raise CameraError(
            "calibrate: the marker positions are (nearly) on one line: spread the poses out "
            "in all three directions"
        )
    u, _, vt = np.linalg.svd((src - src_mean).T @ (dst - dst_mean))
    flip = np.diag([1.0, 1.0, float(np.sign(np.linalg.det(vt.T @ u.T)) or 1.0)])
    rotation = vt.T @ flip @ u.T
    translation = dst_mean - rotation @ src_mean
    residuals = np.linalg.norm(src @ rotation.T + translation - dst, axis=1)
    return HandEye.from_parts(rotation, translation), residuals


def calibrate(
    arm: Arm,
    camera: Camera,
    poses: Sequence[Pose],
    find_marker: FindMarker,
    marker_offset: Sequence[float] = (0.0, 0.0, 0.0),
    marker_radius: float = 0.0,
    settle: float = 0.3,
    min_samples: int = 4,
) -> Calibration:
    """The camera-to-base transform from the marker seen at ``poses``, and its RMS residual (m).

    Raises CameraError when fewer than ``min_samples`` poses saw the marker, or when the poses
    that did are degenerate (on one line).
    """
    samples = collect(arm, camera, poses, find_marker, marker_offset, marker_radius, settle=settle)
    if len(samples) < max(min_samples, 3):
        raise CameraError(
            f"calibrate: the marker was seen at {len(samples)} of {len(poses)} poses, "
            f"{min_samples} needed: check the marker colour and that the poses face the camera"
        )
    transform, residuals = solve_rigid([s.camera for s in samples], [s.base for s in samples])
    rms = float(np.sqrt(np.mean(residuals**2)))
    worst = int(np.argmax(residuals))
    log.info(
        "calibrate: %d poses, rms %.1f mm, worst %.1f mm at %s",
        len(samples),
        rms * 1e3,
        residuals[worst] * 1e3,
        samples[worst].pose,
    )
    return Calibration(transform, rms)


def color_marker(
    rgb: Sequence[int], max_angle: float = 15.0, min_value: int = 40, min_pixels: int = 12
) -> FindMarker:
    """A marker finder by colour, robust to shading: pixels whose RGB direction is within
    ``max_angle`` degrees of ``rgb``'s and whose brightest channel reaches ``min_value``. The
    box spans their 2nd to 98th percentiles, so stray pixels elsewhere do not stretch it."""
    target = np.asarray(rgb, dtype=np.float32)
    target /= np.linalg.norm(target)
    min_cos = np.float32(np.cos(np.radians(max_angle)))

    def find(frame: Frame) -> Box | None:
        pixels = frame.color.astype(np.float32)
        norm = np.linalg.norm(pixels, axis=-1)
        similar = pixels @ target >= min_cos * np.maximum(norm, 1e-6)
        rows, cols = np.nonzero(similar & (frame.color.max(axis=-1) >= min_value))
        if rows.size < min_pixels:
            return None
        x1, x2 = np.percentile(cols, [2, 98])
        y1, y2 = np.percentile(rows, [2, 98])
        return (float(x1), float(y1), float(x2) + 1.0, float(y2) + 1.0)

    return find
