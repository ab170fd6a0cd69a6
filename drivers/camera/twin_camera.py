"""The camera of the physics twin: the Camera interface over the twin's RGB-D renderer.

Frames are rendered on demand: ``read`` renders a new frame of the twin as it is now,
``latest`` re-uses the last frame while it is young enough. ``freeze()`` makes the camera
behave like a frozen one for fault-injection tests: reads wait out their timeout and raise
StaleFrame, until ``unfreeze()``.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CameraError, StaleFrame
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.device import Device
from onboard.drivers.twin.world import Twin

__all__ = ["SimCamera"]


class SimCamera(Device):
    """Implements :class:`~onboard.drivers.camera.base.Camera` over the physics twin
    (:class:`~onboard.drivers.twin.Twin`)."""

    def __init__(self, twin: Twin, timeout: float = 2.0) -> None:
        self.twin = twin
        self.timeout = timeout  # seconds ``read()`` waits for a frame
        self._connected = False
        self._thawed = threading.Event()
        self._thawed.set()
        self._last: Frame | None = None
        self._segmentation: npt.NDArray[np.int32] | None = None
        self._index = 0
        self._lock = threading.Lock()

    def connect(self) -> None:
        self._connected = True

    def close(self) -> None:
        self._connected = False

    def read(self) -> Frame:
        """A newly rendered frame; a frozen camera raises StaleFrame after ``timeout``."""
        return self.read_timeout(self.timeout)

    def read_timeout(self, timeout: float) -> Frame:
        self._require_connected()
        if not self._thawed.wait(timeout):
            raise StaleFrame(f"sim camera: no new frame within {timeout:.2f} s (frozen)")
        return self._render()

    def latest(self, max_age: float) -> Frame:
        self._require_connected()
        frame = self._last
        if frame is None:
            raise StaleFrame("sim camera: no frame yet; call read() first")
        age = time.monotonic() - frame.timestamp
        if age > max_age:
            raise StaleFrame(
                f"sim camera: the latest frame is {age:.3f} s old (max_age {max_age:.3f} s)"
            )
        return frame

    def intrinsics(self) -> Intrinsics:
        return self.twin.intrinsics()

    @property
    def segmentation(self) -> npt.NDArray[np.int32] | None:
        """Body ids of the last frame's pixels (see ``Twin.segmentation_id``)."""
        return self._segmentation

    def freeze(self) -> None:
        """Stop delivering frames, as a hung camera would."""
        self._thawed.clear()

    def unfreeze(self) -> None:
        self._thawed.set()

    def _render(self) -> Frame:
        rgb, depth, seg = self.twin.render()
        with self._lock:
            self._index += 1
            frame = Frame(rgb, depth, self.twin.intrinsics(), time.monotonic(), self._index)
            self._last, self._segmentation = frame, seg
        return frame

    def _require_connected(self) -> None:
        if not self._connected:
            raise CameraError("sim camera: not connected: call connect() first")
