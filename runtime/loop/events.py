"""The event manager: decides *when* to ask the LLM, from the current action's stimuli.

Exactly the seed's section III-C:

- type 1 (``1-activity`` / ``1-gaze``): fire on a change of the person's activity / gaze,
  bounded by the second-stage ``wait_time`` answer (counted from the action's start);
- type 2-A: fire when the action completes;
- type 2-B: fire when the action completes, when the situation changes (activity or gaze),
  or when the second-stage "lose the person within T seconds" question answers yes;
- end: nothing more to ask; the skill ends when the action completes.

What counts as a change of activity or gaze is the skill kind's (``SkillKind.changes``; for a
person, ``onboard.hri.kind.person_changes``: going out of sight, or coming back, is both).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from onboard.loop.clock import Clock, Timer
from onboard.loop.skill import Action, Stimulus

__all__ = ["EventManager", "SecondStage", "no_changes"]

Fire = Callable[[str], None]
#: what changed between two observations: "activity", "gaze" (the skill kind says)
Changes = Callable[[Any, Any], frozenset[str]]


def no_changes(old: Any, new: Any) -> frozenset[str]:
    """A kind that tells no changes apart: only type 2-A stimuli fire."""
    return frozenset()


class SecondStage(Protocol):
    """Asks a second-stage question; the answer comes back on the loop (None = no answer)."""

    def wait_time(self, activity: str, answer: Callable[[float | None], None]) -> None: ...

    def lose_person(
        self, activity: str, horizon: float, answer: Callable[[bool | None], None]
    ) -> None: ...


class EventManager:
    def __init__(
        self,
        clock: Clock,
        second_stage: SecondStage | None,
        fire: Fire,
        record: Callable[..., Any],
        changes: Changes = no_changes,
    ) -> None:
        self._clock = clock
        self._changes = changes
        self._second_stage = second_stage
        self._fire = fire
        self._record = record
        self._action: Action | None = None
        self._began = 0.0
        self._epoch = 0
        self._timer: Timer | None = None

    def arm(self, action: Action, observed: Any) -> None:
        """A new action began: watch for its stimulus."""
        self.disarm()
        self._epoch += 1
        self._action, self._began = action, self._clock.now()
        epoch, activity = self._epoch, getattr(observed, "activity", None) or "nothing visible"
        if self._second_stage is None:
            return
        if action.stimulus in (Stimulus.ACTIVITY, Stimulus.GAZE):
            self._second_stage.wait_time(activity, lambda s: self._on_wait_time(epoch, s))
        elif action.stimulus is Stimulus.HIGH_LEVEL and action.spec.stimuli.horizon is not None:
            horizon = action.spec.stimuli.horizon
            self._second_stage.lose_person(activity, horizon, lambda yes: self._on_lose(epoch, yes))

    def disarm(self) -> None:
        self._action = None
        self._epoch += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def completed(self) -> None:
        """The current action's command finished by itself."""
        action = self._action
        if action is not None and action.stimulus in (Stimulus.LOW_LEVEL, Stimulus.HIGH_LEVEL):
            self._trigger("completed")

    def observe(self, old: Any, new: Any) -> None:
        action = self._action
        if action is None:
            return
        changed = self._changes(old, new)
        activity, gaze = "activity" in changed, "gaze" in changed
        stimulus = action.stimulus
        if stimulus is Stimulus.ACTIVITY and activity:
            self._trigger("activity changed")
        elif stimulus is Stimulus.GAZE and gaze:
            self._trigger("gaze changed")
        elif stimulus is Stimulus.HIGH_LEVEL and (activity or gaze):
            self._trigger("situation changed")

    def _on_wait_time(self, epoch: int, seconds: float | None) -> None:
        if epoch != self._epoch or seconds is None or math.isinf(seconds):
            return
        delay = self._began + seconds - self._clock.now()
        self._timer = self._clock.call_later(delay, lambda: self._trigger("wait time elapsed"))

    def _on_lose(self, epoch: int, yes: bool | None) -> None:
        if epoch == self._epoch and yes:
            self._trigger("may lose the person")

    def _trigger(self, reason: str) -> None:
        name = self._action.name if self._action else None
        self.disarm()
        self._record("stimulus", action=name, reason=reason)
        self._fire(reason)
