"""A fresh look at the table: camera frame -> detector -> 3-D poses -> scene observation."""

from __future__ import annotations

from collections.abc import Callable

from onboard.drivers.camera.base import Camera, Frame
from onboard.llm.content import png_bytes
from onboard.manip.observation import SceneObservation
from onboard.perception.detector import Detector
from onboard.perception.latest import LATEST
from onboard.perception.scene_observer import SceneObserver, SceneState
from onboard.perception.self_filter import Hand
from onboard.perception.unknown import FAINT

__all__ = ["ScenePerception"]


class ScenePerception:
    """Reads a new frame, detects, locates: one :class:`SceneObservation` per :meth:`look`.

    It reads the camera and the detector only; what the gripper holds comes from
    ``holding`` (the arm driver's own account of what it picked), and where the hand is
    from ``hand`` (None when the arm cannot say): a box on the hand is unknown, not an
    object (runtime/perception/self_filter.py)."""

    def __init__(
        self,
        camera: Camera,
        detector: Detector,
        observer: SceneObserver,
        now: Callable[[], float],
        holding: Callable[[], str | None] = lambda: None,
        images: bool = False,
        hand: Callable[[], Hand | None] = lambda: None,
    ) -> None:
        self.camera = camera
        self.detector = detector
        self.observer = observer
        self.now = now
        self.holding = holding
        self.images = images
        self.hand = hand

    def look(self) -> SceneObservation:
        """A look; one that cannot tell everything (a frame too dark or too blurred to trust:
        runtime/perception/view.py; a faint box, an unsure stack, a container:
        runtime/perception/unknown.py) is taken once more before the look says so (the loop
        sees the second). The skill's arm moves only by its steps: the second look is from
        the same pose."""
        frame, scene = self._look()
        if scene.view is not None or scene.unknown:
            frame, scene = self._look()
        png = png_bytes(frame.color) if self.images else None
        return SceneObservation(self.now(), scene, self.holding(), frame.index, png)

    def _look(self) -> tuple[Frame, SceneState]:
        frame = self.camera.read()
        found, dim = self.detector.detect_faint(frame.color, FAINT)
        LATEST.offer(frame.color, found)
        hand = self.hand()
        return frame, self.observer.observe(found, frame, dim, self.detector.conf, hand)
