"""What differs between a recorded LLM request and the one a replay makes, in one line.

Every replay (person, scene, code and team episodes) checks each request against the
recording; when one differs, the user needs the field and both values, not that it differs.
For a prompt that is the first differing line, with a line of context on each side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["request_difference"]

#: characters of a line shown; a prompt line can be a whole JSON observation
SHOWN = 100


def request_difference(
    recorded: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    purpose: str | None = None,
    schema: Mapping[str, Any] | None = None,
    check_schema: bool = False,
) -> str | None:
    """None when the replayed request (``purpose``, ``messages`` and, with ``check_schema``,
    ``schema``) is the recorded one; else the first field that differs, with both values."""
    if purpose is not None and recorded.get("purpose") != purpose:
        return f"its purpose: recorded {recorded.get('purpose')!r}, replayed {purpose!r}"
    was = recorded.get("messages")
    now = [dict(m) for m in messages]
    if was != now:
        return _messages_difference(was, now)
    if check_schema and (recorded.get("schema") or None) != (dict(schema) if schema else None):
        return (
            f"its schema: recorded {_short(recorded.get('schema'))}, replayed "
            f"{_short(dict(schema) if schema else None)}"
        )
    return None


def _messages_difference(was: Any, now: list[dict[str, Any]]) -> str:
    if not isinstance(was, list):
        return f"its messages: recorded {type(was).__name__}, replayed a list"
    for number, (old, new) in enumerate(zip(was, now, strict=False), start=1):
        if old == new:
            continue
        if not isinstance(old, dict):
            return f"message {number}: recorded {_short(old)}, replayed {_short(new)}"
        where = f"message {number} ({new.get('role', '?')})"
        if old.get("content") != new.get("content") and old.get("role") == new.get("role"):
            return f"{where}, " + _text_difference(old.get("content"), new.get("content"))
        keys = sorted(set(old) | set(new), key=lambda k: (k != "role", str(k)))
        key = next(k for k in keys if old.get(k) != new.get(k))
        was_value, now_value = _short(old.get(key)), _short(new.get(key))
        return f"message {number}'s {key!r}: recorded {was_value}, replayed {now_value}"
    return f"the number of messages: recorded {len(was)}, replayed {len(now)}"


def _text_difference(old: Any, new: Any) -> str:
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        # a message in parts (text and images): the first part that differs
        for k, (a, b) in enumerate(zip(old, new, strict=True), start=1):
            if a == b:
                continue
            if isinstance(a, dict) and isinstance(b, dict) and a.get("type") == b.get("type"):
                if a.get("type") == "text":
                    return f"part {k} (text), " + _text_difference(a.get("text"), b.get("text"))
                return f"part {k} ({a.get('type')}): recorded {_short(a)}, replayed {_short(b)}"
            return f"part {k}: recorded {_short(a)}, replayed {_short(b)}"
    if not isinstance(old, str) or not isinstance(new, str):
        return f"content: recorded {_short(old)}, replayed {_short(new)}"
    old_lines, new_lines = old.splitlines(), new.splitlines()
    line = next(
        (k for k, (a, b) in enumerate(zip(old_lines, new_lines, strict=False)) if a != b),
        min(len(old_lines), len(new_lines)),
    )
    shown = f"line {line + 1}: " + _line_pair(old_lines, new_lines, line)
    context = []
    if line > 0:
        context.append(f"line {line} {_line(new_lines, line - 1)}")
    if line + 1 < max(len(old_lines), len(new_lines)):
        after = new_lines if line + 1 < len(new_lines) else old_lines
        context.append(f"line {line + 2} {_line(after, line + 1)}")
    return shown + (f" (context: {'; '.join(context)})" if context else "")


def _line_pair(old: list[str], new: list[str], k: int) -> str:
    """Both values of line ``k``; a long line from a little before its first difference."""
    if k < len(old) and k < len(new):
        a, b = old[k], new[k]
        same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                    min(len(a), len(b)))  # fmt: skip
        start = max(0, same - SHOWN // 3) if max(len(a), len(b)) > SHOWN else 0
        if start:
            cut = f"from character {start + 1}: "
            return (
                f"{cut}recorded {a[start : start + SHOWN]!r}, replayed {b[start : start + SHOWN]!r}"
            )
    return f"recorded {_line(old, k)}, replayed {_line(new, k)}"


def _line(lines: list[str], k: int) -> str:
    return repr(lines[k][:SHOWN]) if k < len(lines) else "(no such line)"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."
