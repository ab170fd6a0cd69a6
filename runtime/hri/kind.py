"""The person kind of skill (Plan-and-Act): the person seen as text, replies mapped onto
action names. See runtime/loop/kind.py."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from onboard.grounding.mapping import ActionMapper
from onboard.hri.person import PersonObservation
from onboard.llm import prompts
from onboard.llm.replies import parse_reply, reply_action, reply_phrase
from onboard.llm.types import Message
from onboard.loop.kind import Attempt, Observation, Plan, Step
from onboard.loop.skill import Action, Skill

__all__ = ["PersonKind", "person_changes"]


class PersonKind:
    name = "person"

    def __init__(self, mapper: ActionMapper) -> None:
        self.mapper = mapper

    def plan_messages(
        self,
        skill: Skill,
        step: Step,
        began: Observation,
        now: Observation,
        history: Sequence[Attempt],
        action_text: bool,
    ) -> list[Message]:
        robot = skill.goal
        if action_text:
            robot += " " + skill.actions[step.action].describe(observed_fields(began))
        human = now.situation()
        if history:
            human += " " + prompts.refinement_note(history)
        return prompts.first_stage(skill, robot, human)

    def plan_schema(self, skill: Skill, now: Observation) -> dict[str, Any] | None:
        return prompts.plan_schema(list(skill.actions), prompts.reason_schema(skill))

    def read_plan(self, text: str, now: Observation) -> Plan:
        parsed = parse_reply(text)
        action_text = reply_action(parsed)
        began = time.perf_counter()
        mapping = self.mapper.map(action_text)
        took = time.perf_counter() - began
        return Plan(
            steps=[Step(a) for a in mapping.actions],
            phrase=reply_phrase(parsed),
            record={"seconds": round(took, 6), **mapping.to_record()},
            reply=mapping.reply,
        )

    def command_args(self, action: Action, step: Step, now: Observation) -> dict[str, Any]:
        return dict(action.spec.args)

    def changes(self, old: Observation, new: Observation) -> frozenset[str]:
        return person_changes(old, new)


def person_changes(old: Any, new: Any) -> frozenset[str]:
    """A person's activity or gaze changed; going out of sight or coming back is both."""
    if not isinstance(old, PersonObservation) or not isinstance(new, PersonObservation):
        return frozenset()
    seen = old.visible != new.visible
    found = set()
    if seen or old.activity != new.activity:
        found.add("activity")
    if seen or old.toward != new.toward:
        found.add("gaze")
    return frozenset(found)


def observed_fields(observation: Observation) -> dict[str, str]:
    """The action text's fields: what was seen of the person when the action began."""
    activity = getattr(observation, "activity", None)
    toward = getattr(observation, "toward", None)
    return {
        "X_a": activity or "nothing visible",
        "X_g": "looking at the robot" if toward else "not looking at the robot",
    }
