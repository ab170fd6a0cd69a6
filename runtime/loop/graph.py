"""A skill's state machine as a Mermaid diagram."""

from __future__ import annotations

from onboard.loop.engine import build_machine
from onboard.loop.skill import Skill

__all__ = ["mermaid"]


def _node(name: str) -> str:
    return name.replace(" ", "_")


def mermaid(skill: Skill) -> str:
    """``stateDiagram-v2`` with the transitions the compiled machine really allows."""
    machine = build_machine(skill)
    lines = ["stateDiagram-v2"]
    for name, action in skill.actions.items():
        lines.append(f'    state "{name} ({action.stimulus.value})" as {_node(name)}')
    lines.append(f"    [*] --> {_node(skill.start)}")
    for event in machine.events.values():
        for source, transitions in event.transitions.items():
            for transition in transitions:
                dest = transition.dest
                if dest is None or source in ("idle", "done") or dest in ("idle", "done"):
                    continue
                lines.append(f"    {_node(source)} --> {_node(dest)}")
    lines.append(f"    {_node(skill.end)} --> [*]")
    return "\n".join(lines)
