"""The prompts of the seed's Table I and section III-C, and their JSON schemas.

U is the robot's situation (goal + action text), X the human's (activity + gaze). No
history is kept between decisions, as in the seed: every question stands alone. Within one
decision, a re-ask carries the proposals refused so far, with their scores and the reasons
(:func:`refinement_note`), as ReAd's refinement prompt does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from string import Template
from typing import Any

from onboard.llm.types import Message
from onboard.loop.skill import Skill

__all__ = [
    "answer_schema",
    "closed_schema",
    "first_stage",
    "lose_person",
    "plan_schema",
    "reason_schema",
    "refinement_note",
    "wait_time",
    "wait_time_schema",
]


def first_stage(skill: Skill, robot_situation: str, human_situation: str) -> list[Message]:
    situation = Template(skill.prompt.situation).safe_substitute(
        U=robot_situation, X=human_situation
    )
    return [
        {"role": "user", "content": skill.prompt.intro},
        {"role": "assistant", "content": skill.prompt.ack or ""},
        {"role": "user", "content": situation},
    ]


def refinement_note(history: Sequence[Any]) -> str:
    """The refused proposals of this decision, oldest first: ``Note: refused so far: 1)
    "speak" (score 0.00): the person is out of sight. Propose something else.``

    ``history`` holds :class:`onboard.loop.kind.Attempt` s (proposal, score, feedback)."""
    if not history:
        return ""
    items = []
    for number, attempt in enumerate(history, start=1):
        score = "" if attempt.score is None else f" (score {attempt.score:.2f})"
        items.append(f'{number}) "{attempt.proposal}"{score}: {attempt.feedback.rstrip(".")}.')
    return "Note: refused so far: " + " ".join(items) + " Propose something else."


def wait_time(skill: Skill, activity: str) -> list[Message]:
    second = skill.questions
    text = Template(second.wait_time).safe_substitute(
        X_a=activity, W=_choices(second.wait_times or [])
    )
    return [{"role": "user", "content": text}]


def lose_person(skill: Skill, activity: str, horizon: float) -> list[Message]:
    text = Template(skill.questions.lose_person).safe_substitute(X_a=activity, T=f"{horizon:g}")
    return [{"role": "user", "content": text}]


def _choices(seconds: Sequence[float]) -> str:
    """``5, 10, 20 or 40``."""
    shown = [f"{s:g}" for s in seconds]
    return ", ".join(shown[:-1]) + " or " + shown[-1] if len(shown) > 1 else "".join(shown)


# Every schema is closed (additionalProperties false, every property required): OpenAI's strict
# Structured Outputs accept no other (onboard.llm.structured). The reason comes after the answer,
# so it never sways the answer under constraint: it only costs time, and a free one on a small
# model running on the robot can cost the whole deadline (skill TOML ``[prompt] reason``).

#: a reason of any length
FREE_REASON: dict[str, Any] = {"type": "string"}


def reason_schema(skill: Skill) -> dict[str, Any] | None:
    """The skill's ``[prompt] reason``: the schema of the reason key, None for none."""
    mode = skill.prompt.reason
    if mode == "none":
        return None
    if mode == "short":
        return {"type": "string", "maxLength": skill.prompt.reason_chars}
    return dict(FREE_REASON)


def closed_schema(answer: dict[str, Any], reason: Mapping[str, Any] | None) -> dict[str, Any]:
    """An object schema of ``answer``'s properties, then ``reason`` unless None: every
    property required, no other allowed."""
    properties = dict(answer)
    if reason is not None:
        properties["reason"] = dict(reason)
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def plan_schema(
    actions: Sequence[str], reason: Mapping[str, Any] | None = FREE_REASON
) -> dict[str, Any]:
    """Constrained decoding: ``action`` must be one of the action names."""
    return closed_schema({"action": {"type": "string", "enum": list(actions)}}, reason)


def wait_time_schema(
    reason: Mapping[str, Any] | None = FREE_REASON, choices: Sequence[float] | None = None
) -> dict[str, Any]:
    """``wait_time`` any number, or one of ``choices`` (the skill's ``wait_times``)."""
    number: dict[str, Any] = {"type": "number"}
    if choices is not None:
        number["enum"] = [int(c) if float(c).is_integer() else c for c in choices]
    return closed_schema({"wait_time": number}, reason)


def answer_schema(reason: Mapping[str, Any] | None = FREE_REASON) -> dict[str, Any]:
    return closed_schema({"answer": {"type": "string", "enum": ["yes", "no"]}}, reason)
