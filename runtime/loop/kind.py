"""What differs between kinds of skill, behind one interface the loop calls.

The loop (runtime/loop/engine.py) is the same for every skill: a stimulus asks for a plan,
the plan is checked, its actions run, each is verified. What a skill *sees* and how a reply
becomes actions differ by kind:

- ``person`` (Plan-and-Act, runtime/hri/kind.py): the observation is the person's activity
  and gaze as text; a free-text reply maps onto action names;
- ``scene`` (ReplanVLM, runtime/manip/kind.py): the observation is a camera frame with
  detections and 3-D poses; a reply maps onto actions *with arguments* bound to objects in
  view ("pick the red block").

A :class:`SkillKind` builds the plan prompt from what is observed (images included where the
kind has them), reads a reply into :class:`Step` s, and gives each step's driver arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from onboard.llm.types import Message
from onboard.loop.skill import Action, Skill

__all__ = ["Attempt", "Observation", "Plan", "SkillKind", "Step"]


class Observation(Protocol):
    """One perception update, whatever the kind: a time, text for the prompt, a record."""

    @property
    def t(self) -> float: ...

    @property
    def visible(self) -> bool:
        """Whether the skill's subject (the person; the objects) is in view."""

    def situation(self) -> str:
        """What is observed, as the prompt's text."""

    def images(self) -> Sequence[bytes]:
        """PNG images a prompt may carry (none for a person seen as text)."""

    def to_record(self) -> dict[str, object]: ...


@dataclass(frozen=True)
class Step:
    """One action of a plan, with its arguments (``{"object": "red block"}``)."""

    action: str
    args: Mapping[str, str] = field(default_factory=dict)

    def text(self) -> str:
        bound = ", ".join(f"{k}={v}" for k, v in self.args.items())
        return f"{self.action}({bound})" if bound else self.action

    def to_record(self) -> dict[str, object]:
        return {"action": self.action, "args": dict(self.args)}


@dataclass(frozen=True)
class Plan:
    """A reply read as steps (empty: it matched nothing), and what the reading recorded."""

    steps: list[Step]
    phrase: str | None = None
    #: the mapping record (clauses, scores, refusals), written as the ``mapping`` record
    record: dict[str, Any] = field(default_factory=dict)
    #: the reply text kept as a bottom-up candidate when it matched nothing
    reply: str = ""


@dataclass(frozen=True)
class Attempt:
    """One refused proposal of a decision: what it was, its score, why it was refused. A
    re-ask carries every attempt of its decision so far (ReAd's refinement history)."""

    proposal: str
    feedback: str
    score: float | None = None
    #: the refused plan's steps (a kind's fallback may choose among them)
    steps: tuple[Step, ...] = ()

    def to_record(self) -> dict[str, object]:
        return {"proposal": self.proposal, "score": self.score, "feedback": self.feedback}


class SkillKind(Protocol):
    name: str

    def plan_messages(
        self,
        skill: Skill,
        step: Step,
        began: Observation,
        now: Observation,
        history: Sequence[Attempt],
        action_text: bool,
    ) -> list[Message]:
        """The plan request: the robot's goal and current step (its action's text filled with
        the step's arguments, or with what was observed when it ``began``), what is observed
        ``now``, and the refused attempts of this decision."""

    def plan_schema(self, skill: Skill, now: Observation) -> dict[str, Any] | None:
        """The JSON schema of a constrained plan reply (enums of actions, and objects in view
        for a scene)."""

    def read_plan(self, text: str, now: Observation) -> Plan:
        """The reply's steps; raises LLMError when the reply is unusable."""

    def command_args(self, action: Action, step: Step, now: Observation) -> dict[str, Any]:
        """The driver arguments of ``step`` (the action's own ``args`` and the step's)."""

    def changes(self, old: Observation, new: Observation) -> frozenset[str]:
        """What changed for the event manager: "activity", "gaze" (a person's), or nothing."""
