"""What perception reports about the person, and how it reads as text for the prompt."""

from __future__ import annotations

from dataclasses import dataclass

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

    def to_record(self) -> dict[str, object]:
        return {
            "t": self.t,
            "activity": self.activity,
            "toward": self.toward,
            "visible": self.visible,
            "distance": None if self.distance is None else round(self.distance, 3),
        }
