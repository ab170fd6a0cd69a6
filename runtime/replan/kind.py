"""The code kind of skill (ReplanVLM, seed 002): what the loop sees and how a reply reads.

- the observation is one look of the robot API: the camera frame (encoded once, as the
  bots are sent it) and the scene perceived from it (:class:`CodeObservation`);
- the plan request is the Decision Bot's (runtime/replan/prompts.py): the request, the
  messages of the decision's earlier refused tries (newest :data:`KEEP_ERRORS`), the robot
  API's documentation, the frame and any goal pictures, or the scene as text for a model
  that reads no images;
- a reply reads as one ``run`` step carrying the plan and the program, then the skill's end
  step (the end runs once the run has passed its verification). A reply of the wrong form
  is still a step: the ``format`` check refuses it with what is wrong, so the Decision Bot
  is told, as the seed does, instead of the robot falling back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from onboard.llm.types import Message
from onboard.loop.events import no_changes
from onboard.loop.kind import Attempt, Observation, Plan, Step
from onboard.loop.skill import Action, Skill
from onboard.replan import prompts
from onboard.replan.prompts import Proposal
from onboard.replan.scene_state import SceneState

__all__ = ["KEEP_ERRORS", "RUN", "CodeKind", "CodeObservation", "proposal_of"]

#: the earlier tries' messages a prompt carries at most (the newest)
KEEP_ERRORS = 6
#: the action that runs a program; its step carries ``plan`` (lines) and ``code``, or
#: ``unreadable`` (why the reply is not a plan and a program)
RUN = "run"


@dataclass(frozen=True)
class CodeObservation:
    """One look: the frame as the bots are sent it (None: text only, or no camera) and the
    scene perceived, at the robot's time ``t``; ``purpose`` says why the loop looked."""

    t: float
    state: SceneState
    image: bytes | None = field(default=None, repr=False)
    purpose: str = "before"

    @property
    def visible(self) -> bool:
        return bool(self.state.objects)

    def situation(self) -> str:
        return self.state.text()

    def images(self) -> Sequence[bytes]:
        return () if self.image is None else (self.image,)

    def to_record(self) -> dict[str, object]:
        return {
            "purpose": self.purpose,
            "state": self.state.to_record(),
            "text": self.state.text(),
            "image": None if self.image is None else hashlib.sha256(self.image).hexdigest(),
        }


def proposal_of(step: Step) -> Proposal | None:
    """The plan and program a ``run`` step carries (None: an unreadable reply, or no run)."""
    if step.action != RUN or "code" not in step.args:
        return None
    plan = tuple(line for line in step.args.get("plan", "").split("\n") if line)
    return Proposal(plan, step.args["code"], "")


class CodeKind:
    """Implements :class:`~onboard.loop.kind.SkillKind` for generated code."""

    name = "code"

    def __init__(
        self,
        end: str,
        goal_images: Sequence[bytes] = (),
        goal_notes: Sequence[str] = (),
        text_only: bool = False,
    ) -> None:
        """``end``: the skill's end action, the step after the run; ``goal_images``: pictures
        the request refers to (each described in ``goal_notes``); ``text_only``: the scene
        goes as text and no image is sent (a model that reads none)."""
        self.end = end
        self.goal_images = list(goal_images)
        self.goal_notes = list(goal_notes)
        self.text_only = text_only
        #: the last plan request built: a second program is asked with the very same one
        self.asked: list[Message] = []

    def plan_messages(
        self,
        skill: Skill,
        step: Step,
        began: Observation,
        now: Observation,
        history: Sequence[Attempt],
        action_text: bool,
    ) -> list[Message]:
        images = list(now.images())
        notes = ["the table now, seen by the robot's camera"] if images else []
        if not self.text_only:
            images += self.goal_images
            notes += self.goal_notes
        self.asked = prompts.decision_messages(
            skill.goal,
            images,
            notes,
            scene_text=now.situation() if self.text_only else None,
            errors=[a.feedback for a in history][-KEEP_ERRORS:],
            role=skill.prompt.intro,
        )
        return self.asked

    def plan_schema(self, skill: Skill, now: Observation) -> dict[str, Any] | None:
        return None  # the reply is free text: PLAN: then CODE:

    def read_plan(self, text: str, now: Observation) -> Plan:
        read = prompts.read_proposal(text)
        if isinstance(read, str):
            return Plan([Step(RUN, {"unreadable": read})], record={"unreadable": read})
        step = Step(RUN, {"plan": "\n".join(read.plan), "code": read.code})
        return Plan([step, Step(self.end)], record={"proposal": read.to_record()})

    def command_args(self, action: Action, step: Step, now: Observation) -> dict[str, Any]:
        return {**action.spec.args, **step.args}

    def changes(self, old: Observation, new: Observation) -> frozenset[str]:
        return no_changes(old, new)
