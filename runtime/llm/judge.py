"""Was the request done? The verifier model's question, one implementation for ReplanVLM's
Extra Bot (runtime/replan/episode.py) and for a scene skill's goal the runtime could not
compile into relations (runtime/manip/goal.py).

The model sees the request, what the robot ran, how it ended, the scene before and after as
the robot's perception describes it, what changed, and the camera images; it answers JSON
``{"done": bool, "reason": str}``. Only ``true`` passes; the reason is the feedback of a
re-ask and the cause of a failure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from onboard.llm.content import user_message
from onboard.llm.types import Message

__all__ = ["judge_messages", "judge_schema", "read_judgement", "verdict_schema"]

_ANSWER = (
    'Answer in JSON: {"done": true or false, "reason": "<what is not as the instruction asks, '
    'or why it is done>"}.'
)


def judge_messages(
    role: str,
    setting: str,
    request: str,
    what_ran: str,
    ended: str,
    before: str,
    after: str,
    changes: str,
    images: Sequence[bytes] = (),
    notes: Sequence[str] = (),
) -> list[Message]:
    """The question: ``role`` names the judge, ``setting`` says what it sees; ``images``
    are described in order by ``notes``."""
    system = (
        f"{role}\n{setting} Judge from what is seen after the run whether the instruction is "
        f"done. {_ANSWER}"
    )
    text = (
        f"Instruction: {request}\n{what_ran}\nHow the run ended: {ended}\n"
        f"Before the run:\n{before}\nAfter the run:\n{after}\nChanges:\n{changes}"
    )
    if notes:
        text += "\nImages: " + "; ".join(f"image {i} is {n}" for i, n in enumerate(notes, 1))
        text += "."
    return [{"role": "system", "content": system}, user_message(text, list(images))]


def judge_schema() -> dict[str, Any]:
    return verdict_schema("done")


def verdict_schema(key: str) -> dict[str, Any]:
    """``{"<key>": bool, "reason": str}``, the reason at most 300 characters."""
    return {
        "type": "object",
        "properties": {key: {"type": "boolean"}, "reason": {"type": "string", "maxLength": 300}},
        "required": [key, "reason"],
        "additionalProperties": False,
    }


def read_judgement(text: str, key: str = "done") -> tuple[bool, str]:
    """``(value, reason)`` of a ``{"<key>": bool, "reason": str}`` reply; ValueError when
    it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get(key), bool):
        raise ValueError(f"the reply has no boolean {key!r}")
    return bool(data[key]), str(data.get("reason", ""))
