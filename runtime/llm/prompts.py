"""The prompts of the seed's Table I and section III-C, and their JSON schemas.

U is the robot's situation (goal + action text), X the human's (activity + gaze). No
history is kept between calls, as in the seed: every question stands alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from string import Template
from typing import Any

from onboard.llm.client import Message
from onboard.loop.skill import Skill

__all__ = [
    "answer_schema",
    "first_stage",
    "lose_person",
    "plan_schema",
    "wait_time",
    "wait_time_schema",
]


def first_stage(skill: Skill, robot_situation: str, human_situation: str) -> list[Message]:
    situation = Template(skill.prompt.situation).safe_substitute(
        U=robot_situation, X=human_situation
    )
    return [
        {"role": "user", "content": skill.prompt.intro},
        {"role": "assistant", "content": skill.prompt.ack},
        {"role": "user", "content": situation},
    ]


def wait_time(skill: Skill, activity: str) -> list[Message]:
    text = Template(skill.prompt.second_stage.wait_time).safe_substitute(X_a=activity)
    return [{"role": "user", "content": text}]


def lose_person(skill: Skill, activity: str, horizon: float) -> list[Message]:
    text = Template(skill.prompt.second_stage.lose_person).safe_substitute(
        X_a=activity, T=f"{horizon:g}"
    )
    return [{"role": "user", "content": text}]


# Every schema is closed (additionalProperties false, every property required): OpenAI's strict
# Structured Outputs accept no other (onboard.llm.structured).


def plan_schema(actions: Sequence[str]) -> dict[str, Any]:
    """Constrained decoding: ``action`` must be one of the action names."""
    return {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(actions)},
            "reason": {"type": "string"},
        },
        "required": ["action", "reason"],
        "additionalProperties": False,
    }


def wait_time_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"wait_time": {"type": "number"}, "reason": {"type": "string"}},
        "required": ["wait_time", "reason"],
        "additionalProperties": False,
    }


def answer_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no"]},
            "reason": {"type": "string"},
        },
        "required": ["answer", "reason"],
        "additionalProperties": False,
    }
