"""The camera's latest look, for the operator page: the frame and what the detector found in
it, kept by whichever perception looked last (a scene skill's, a code skill's) and read by the
control API from its own thread.

Only a reference to a copy of the frame is kept, so a look costs a copy (230 kB at 320x240);
it is encoded (JPEG) when the page asks, once per frame. The page shows what the robot saw,
not what the recording holds: a recording keeps a frame only when it was sent to an LLM.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from onboard.perception.detector import Detection

__all__ = ["LATEST", "LatestLook"]


@dataclass
class _Look:
    index: int  # counts looks in this process: the page reloads the image when it changes
    color: npt.NDArray[np.uint8]
    detections: list[dict[str, Any]]
    seen: float  # time.time() of the look
    jpeg: bytes | None = field(default=None, repr=False)


class LatestLook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._look: _Look | None = None
        self._count = 0

    def offer(self, color: npt.NDArray[np.uint8], detections: Sequence[Detection]) -> None:
        """A new look (the perception's thread): the frame, copied, and its detections."""
        found = [{"label": d.label, "score": round(float(d.score), 3),
                  "box": [round(float(v), 1) for v in d.box]} for d in detections]  # fmt: skip
        frame = np.array(color, dtype=np.uint8, copy=True)
        with self._lock:
            self._count += 1
            self._look = _Look(self._count, frame, found, time.time())

    def about(self) -> dict[str, Any] | None:
        """The latest look's index, time, size and detections (None: no look yet)."""
        with self._lock:
            look = self._look
        if look is None:
            return None
        height, width = look.color.shape[:2]
        return {"index": look.index, "seen": look.seen, "width": width, "height": height,
                "detections": look.detections}  # fmt: skip

    def jpeg(self) -> tuple[int, bytes] | None:
        """The latest frame as JPEG, with its index (encoded once per frame)."""
        from onboard.llm.content import encode_image

        with self._lock:
            look = self._look
        if look is None:
            return None
        if look.jpeg is None:
            look.jpeg = encode_image(look.color, "jpeg", quality=80)
        return look.index, look.jpeg


#: the process's one latest look
LATEST = LatestLook()
