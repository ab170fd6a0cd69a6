"""A skill's state machine as a Mermaid diagram."""

from __future__ import annotations

import re

from onboard.loop.engine import build_machine
from onboard.loop.skill import Skill

__all__ = ["mermaid"]


_ENTITIES = {"#": "#35;", '"': "#quot;", "<": "#lt;", ">": "#gt;"}


def _label(text: str) -> str:
    """``text`` inside a Mermaid state label: quotes and markup as entity codes, control
    characters as spaces, so a name never closes the label or starts a new line."""
    return "".join(_ENTITIES.get(c, c if c.isprintable() else " ") for c in text)


def _ids(names: list[str]) -> dict[str, str]:
    """A Mermaid state id per action name: ``[A-Za-z0-9_]`` only, unique."""
    ids: dict[str, str] = {}
    for name in names:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "state"
        node, n = base, 1
        while node in ids.values():
            n += 1
            node = f"{base}_{n}"
        ids[name] = node
    return ids


def mermaid(skill: Skill) -> str:
    """``stateDiagram-v2`` with the transitions the compiled machine really allows."""
    machine = build_machine(skill)
    node = _ids(list(skill.actions))
    lines = ["stateDiagram-v2"]
    for name, action in skill.actions.items():
        lines.append(f'    state "{_label(name)} ({action.stimulus.value})" as {node[name]}')
    lines.append(f"    [*] --> {node[skill.start]}")
    for event in machine.events.values():
        for source, transitions in event.transitions.items():
            for transition in transitions:
                dest = transition.dest
                if dest is None or source in ("idle", "done") or dest in ("idle", "done"):
                    continue
                lines.append(f"    {node[source]} --> {node[dest]}")
    lines.append(f"    {node[skill.end]} --> [*]")
    return "\n".join(lines)
