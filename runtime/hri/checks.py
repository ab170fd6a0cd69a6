"""Checks that score a proposal before it runs (the seam a ReAd critic plugs into)."""

from __future__ import annotations

from collections.abc import Sequence

from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation, Step

__all__ = ["PersonVisible"]


class PersonVisible:
    """Refuses to run the end action (speaking to someone) when nobody is in sight."""

    name = "person-visible"

    def __init__(self, end_action: str) -> None:
        self.end_action = end_action

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        if any(s.action == self.end_action for s in steps) and not observation.visible:
            return Verdict(
                False,
                feedback=f"the person is out of sight, so '{self.end_action}' would reach no one",
                score=0.0,
            )
        return Verdict(True, score=1.0)
