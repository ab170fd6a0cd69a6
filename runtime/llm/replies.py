"""Read what an LLM meant from what it wrote.

Models wrap their JSON in code fences, surround it with prose, use single quotes or curly
quotes, or answer in plain text. :func:`parse_reply` finds the dictionary if there is one,
and otherwise keeps the text itself as the answer.
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any

from onboard.base.errors import LLMReplyError

__all__ = ["parse_reply", "reply_action", "reply_answer", "reply_phrase", "reply_wait_time"]

_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)```", re.DOTALL)
_CURLY = str.maketrans({"“": '"', "”": '"', "‘": "'", "’": "'"})
_QUOTED = re.compile(
    r"""(?<![A-Za-z])'([^']{2,}?(?:'[a-z]+[^']*?)*[.?!])'(?![A-Za-z])|["“]([^"“”]{4,})["”]"""
)


def parse_reply(text: str) -> dict[str, Any]:
    """The dictionary in ``text``; ``{"action": text}`` when it holds none."""
    cleaned = text.translate(_CURLY).strip()
    fenced = _FENCE.search(cleaned)
    if fenced:
        cleaned = fenced.group(1).strip()
    for candidate in _objects(cleaned):
        parsed = _load(candidate)
        if isinstance(parsed, dict):
            return {str(k).lower(): v for k, v in parsed.items()}
    if not cleaned:
        raise LLMReplyError("LLM reply is empty")
    return {"action": cleaned}


def _objects(text: str) -> list[str]:
    """Balanced ``{...}`` spans, outermost first, ignoring braces inside strings."""
    spans, depth, start, quote, escaped = [], 0, -1, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'" and depth:
            # an apostrophe inside a word is not a quote
            if (
                ch == "'"
                and 0 < i < len(text) - 1
                and text[i - 1].isalpha()
                and text[i + 1].isalpha()
            ):
                continue
            quote = ch
        elif ch == "{":
            depth, start = depth + 1, i if depth == 0 else start
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans


_UNREADABLE = (ValueError, SyntaxError, TypeError, MemoryError, RecursionError)


def _load(candidate: str) -> object:
    """JSON, else a Python literal (single quotes); None when it is neither."""
    try:
        return json.loads(candidate)
    except _UNREADABLE:  # JSONDecodeError is a ValueError; deep nesting a RecursionError
        pass
    try:
        return ast.literal_eval(candidate)
    except _UNREADABLE:
        return None


#: the longest action text mapped; a longer one is an unusable reply (mapping time grows with
#: the number of clauses, and a reply this long is no plan)
MAX_ACTION_CHARS = 1000


def reply_action(reply: dict[str, Any]) -> str:
    """The free-text action of a first-stage reply."""
    action = reply.get("action")
    if isinstance(action, list):
        action = ", then ".join(str(a) for a in action)
    if not isinstance(action, str) or not action.strip():
        raise LLMReplyError(f"LLM reply has no usable 'action' (keys: {sorted(reply)})")
    if len(action.strip()) > MAX_ACTION_CHARS:
        raise LLMReplyError(
            f"LLM reply's action is {len(action.strip())} characters, over {MAX_ACTION_CHARS}"
        )
    return action.strip()


def reply_phrase(reply: dict[str, Any]) -> str | None:
    """What to say, if the reply suggests it: a phrase key or a quoted sentence."""
    for key in ("phrase", "speech", "say", "utterance"):
        value = reply.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    action = reply.get("action")
    if isinstance(action, str):
        found = _QUOTED.search(action.translate(_CURLY))
        if found:
            return (found.group(1) or found.group(2)).strip()
    return None


def reply_wait_time(reply: dict[str, Any]) -> float:
    """Seconds from a wait_time answer; ``inf`` for an unbounded wait."""
    value = reply.get("wait_time", reply.get("action"))
    if isinstance(value, bool):
        raise LLMReplyError("wait_time is a boolean, not seconds")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        found = re.search(r"\binf(?:inite|inity)?\b|[-+]?\d+(?:\.\d+)?", value.lower())
        if not found:
            raise LLMReplyError(f"wait_time {value[:40]!r} holds no number")
        seconds = math.inf if found.group().startswith("inf") else float(found.group())
    elif value is None:
        seconds = math.inf
    else:
        raise LLMReplyError(f"wait_time of type {type(value).__name__}")
    if seconds < 0 or math.isnan(seconds):
        raise LLMReplyError(f"wait_time {seconds} is not a duration")
    return seconds


def reply_answer(reply: dict[str, Any]) -> bool:
    """A yes/no answer."""
    value = reply.get("answer", reply.get("action"))
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        words = re.findall(r"[a-z]+", value.lower())
        if words and words[0] in ("yes", "true", "y"):
            return True
        if words and words[0] in ("no", "false", "n"):
            return False
    raise LLMReplyError(f"answer {value!r} is neither yes nor no")
