"""The base of the tests' stand-in detectors: the real ONNX model's boxes, changed in one
named way. A test whose subject is the runtime (what a scene state, a goal check or a skill
does with what a model reports) uses one, so that it rests on a documented behaviour, not on
one model file's weakness (issue 30: a better model must not break it)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from onboard.perception.detector import Detection, Detector

Found = list[Detection]


class AlteredDetector(Detector):
    """The real model's :meth:`detect_faint` (both :meth:`detect` and the scene state's look
    go through it), its boxes passed through :meth:`alter`: the one change a stand-in makes."""

    def alter(self, found: Found, dim: Found) -> tuple[Found, Found]:
        """The boxes at or above the threshold and the faint ones, changed (as they are here)."""
        return found, dim

    def detect_faint(self, image: npt.NDArray[np.uint8], floor: float) -> tuple[Found, Found]:
        return self.alter(*super().detect_faint(image, floor))
