"""What perception reports about the person, and how it reads as text for the prompt."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PersonObservation"]


@dataclass(frozen=True)
class PersonObservation:
    """One perception update: the activity and gaze descriptors' outputs."""

    t: float
    activity: str | None
    toward: bool | None
    visible: bool = True
    distance: float | None = None

    def situation(self) -> str:
        """X of the seed's prompt: the human's situation as text."""
        if not self.visible:
            return "The person is not visible."
        parts = [self.activity or ""]
        if self.toward is not None:
            parts.append(
                "The person is looking at the robot."
                if self.toward
                else "The person is not looking at the robot."
            )
        return " ".join(p for p in parts if p)

    def images(self) -> tuple[bytes, ...]:
        """A person is seen as text only."""
        return ()

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PersonObservation:
        """The observation an ``observation`` record holds (:meth:`to_record`)."""
        activity, toward, distance = record["activity"], record["toward"], record["distance"]
        return cls(
            t=float(record["t"]),
            activity=None if activity is None else str(activity),
            toward=None if toward is None else bool(toward),
            visible=bool(record["visible"]),
            distance=None if distance is None else float(distance),
        )

    def to_record(self) -> dict[str, object]:
        return {
            "t": self.t,
            "activity": self.activity,
            "toward": self.toward,
            "visible": self.visible,
            "distance": None if self.distance is None else round(self.distance, 3),
        }
