"""Which of the seven code tasks (``skills/tasks/code.toml``) an instruction is, by its words.

Each task has cue words, each with a weight; the task with the highest score wins, if it
scores at least :data:`ENOUGH`. Rewordings keep their cue words ("I could eat something",
"put the red cube in the box", "take the block out of the drawer").
"""

from __future__ import annotations

import re

__all__ = ["ENOUGH", "colour_order", "recognise"]

ENOUGH = 2.0

_CUES: dict[int, tuple[tuple[str, float], ...]] = {
    1: ((r"hungry|starving|eat|food|snack|peckish", 3.0),),
    2: ((r"\bred\b", 1.0), (r"block|cube", 0.5), (r"\bbox\b", 1.0), (r"\binto\b|\bin\b", 0.5)),
    3: ((r"picture|image|photo|shown", 2.0), (r"stack|pile|tower", 1.0)),
    4: ((r"conveyor|belt", 1.0), (r"order|reorder|arrange|sequence", 1.5),
        (r"block|cube", 0.5)),
    5: ((r"fruit|apple|lemon", 1.0), (r"plate", 1.0), (r"conveyor|belt|sort", 0.5)),
    6: ((r"drawer", 3.0),),
    7: ((r"bird|duck", 3.0), (r"\btoy", 1.0)),
}  # fmt: skip


def recognise(instruction: str) -> int | None:
    """The task number the instruction asks for, or None."""
    text = instruction.lower()
    scores = {
        task: sum(weight for cue, weight in cues if re.search(cue, text))
        for task, cues in _CUES.items()
    }
    best = max(scores, key=lambda t: scores[t])
    return best if scores[best] >= ENOUGH else None


_COLOUR = re.compile(r"\b(red|green|blue|yellow)\b", re.I)


def colour_order(instruction: str) -> list[str]:
    """The blocks an instruction names by colour, in the order it names them, each once."""
    order: list[str] = []
    for colour in _COLOUR.findall(instruction):
        block = f"{colour.lower()} block"
        if block not in order:
            order.append(block)
    return order
