"""What the robot sees of the table: the scene kind's observation."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from onboard.perception.scene_observer import SceneState, SeenObject

__all__ = ["SceneObservation"]


@dataclass(frozen=True)
class SceneObservation:
    """One look: the objects located in the base frame with their relations, what the
    gripper holds by the robot's own account, and the frame as PNG (for a VLM)."""

    t: float
    scene: SceneState
    holding: str | None = None
    frame: int = 0
    png: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def visible(self) -> bool:
        return bool(self.scene.objects)

    def names(self) -> list[str]:
        return [obj.name for obj in self.scene.objects]

    def find(self, name: str) -> SeenObject | None:
        return next((obj for obj in self.scene.objects if obj.name == name), None)

    def situation(self) -> str:
        held = f"The robot holds the {self.holding}." if self.holding else "The gripper is empty."
        where = "Objects on the table (x, y, z in metres, robot base frame):"
        return f"{where}\n{self.scene.text()}\n{held}"

    def images(self) -> tuple[bytes, ...]:
        return () if self.png is None else (self.png,)

    def to_record(self) -> dict[str, object]:
        return {
            "seen_at": self.t,  # when the frame was taken; the record's t is when it came
            "holding": self.holding,
            **self.scene.to_record(),  # its "frame": "base" or "camera"
            "frame_index": self.frame,
            **({"png": hashlib.sha256(self.png).hexdigest()} if self.png is not None else {}),
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], png: bytes | None = None) -> SceneObservation:
        """The look :meth:`to_record` wrote (``png``: its camera frame as PNG, from the
        recording's images folder)."""
        holding = record.get("holding")
        return cls(float(record.get("seen_at", record["t"])), SceneState.from_record(record),
                   None if holding is None else str(holding),
                   int(record.get("frame_index", 0)), png)  # fmt: skip
