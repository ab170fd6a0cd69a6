"""The camera interface: color, depth aligned to color, intrinsics, with freshness rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["Camera", "Frame", "Intrinsics"]


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics of the color stream, in pixels."""

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float


@dataclass(frozen=True)
class Frame:
    color: npt.NDArray[np.uint8]  # (H, W, 3) RGB
    depth: npt.NDArray[np.float32]  # (H, W) metres, aligned to color; 0 = no depth
    intrinsics: Intrinsics
    timestamp: float  # seconds, time.monotonic() when the frame arrived
    index: int = 0


class Camera(Protocol):
    def connect(self) -> None: ...

    def close(self) -> None: ...

    def read(self) -> Frame:
        """Block until the next new frame."""

    def read_timeout(self, timeout: float) -> Frame:
        """The next new frame within ``timeout`` seconds, else StaleFrame."""

    def latest(self, max_age: float) -> Frame:
        """The most recent frame if younger than ``max_age`` seconds, else StaleFrame."""
