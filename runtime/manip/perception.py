"""A fresh look at the table: camera frame -> detector -> 3-D poses -> scene observation."""

from __future__ import annotations

from collections.abc import Callable

from onboard.drivers.camera.base import Camera
from onboard.llm.content import png_bytes
from onboard.manip.observation import SceneObservation
from onboard.perception.detector import Detector
from onboard.perception.latest import LATEST
from onboard.perception.scene_observer import SceneObserver

__all__ = ["ScenePerception"]


class ScenePerception:
    """Reads a new frame, detects, locates: one :class:`SceneObservation` per :meth:`look`.

    It reads the camera and the detector only; what the gripper holds comes from
    ``holding`` (the arm driver's own account of what it picked)."""

    def __init__(
        self,
        camera: Camera,
        detector: Detector,
        observer: SceneObserver,
        now: Callable[[], float],
        holding: Callable[[], str | None] = lambda: None,
        images: bool = False,
    ) -> None:
        self.camera = camera
        self.detector = detector
        self.observer = observer
        self.now = now
        self.holding = holding
        self.images = images

    def look(self) -> SceneObservation:
        """A look; a frame too dark or too blurred to trust (runtime/perception/view.py) is
        taken once more before the look says so (the loop sees the second)."""
        frame = self.camera.read()
        detections = self.detector.detect(frame.color)
        scene = self.observer.observe(detections, frame)
        if scene.view is not None:
            frame = self.camera.read()
            detections = self.detector.detect(frame.color)
            scene = self.observer.observe(detections, frame)
        LATEST.offer(frame.color, detections)
        png = png_bytes(frame.color) if self.images else None
        return SceneObservation(self.now(), scene, self.holding(), frame.index, png)
