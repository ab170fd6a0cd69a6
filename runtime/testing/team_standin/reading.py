"""Reading a team-task request: the prompt's sections (the shared contract's headers), who
to answer, the candidate actions, the chosen actions and the banned ones (FEEDBACK.md)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from onboard.testing.chat_standin import BadRequest

__all__ = ["BadRequest", "Bans", "Prompt", "bans", "read_prompt"]

HEADERS = (
    "Task",
    "Agents",
    "State",
    "Actions",
    "History",
    "Chosen this step",
    "Refused this step",
    "Feedback",
    "Reply",
)
#: words by which a feedback line says an action was bad (FEEDBACK.md)
BAD_WORDS = (
    "failed",
    "infeasible",
    "cannot",
    "can't",
    "not possible",
    "did nothing",
    "under the threshold",
    "bad",
    "wrong",
    "not useful",
    "avoid",
    "do not",
    "don't",
)
_BAD = re.compile("|".join(rf"\b{re.escape(w)}" for w in BAD_WORDS), re.IGNORECASE)
_ONLY = re.compile(r"for ([A-Za-z][A-Za-z0-9_]*) only")
_EACH = re.compile(r"for each of ([A-Za-z0-9_, ]+?)[.:]")


@dataclass
class Prompt:
    sections: dict[str, str]
    asked: list[str]  # the agents to answer, in order
    candidates: dict[str, list[str]]  # per asked agent
    reach: dict[str, list[str]]  # per agent named in ## Agents
    chosen: dict[str, str]
    schema: bool  # a constrained (JSON) reply
    key: str = field(default="")  # the draw's hash: the sections feedback does not touch


def sections(text: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## ") and line[3:].strip() in HEADERS:
            current = found.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {k: "\n".join(v).strip() for k, v in found.items()}


def _agent_lines(text: str) -> dict[str, str]:
    """``Name: rest`` lines -> {Name: rest}."""
    out = {}
    for line in text.splitlines():
        found = re.match(r"^\s*\[?([A-Za-z][A-Za-z0-9_]*)\]?:\s*(.*)$", line)
        if found:
            out[found.group(1)] = found.group(2).strip()
    return out


def _schema_enums(schema: Mapping[str, Any] | None) -> dict[str, list[str]]:
    if not isinstance(schema, Mapping):
        return {}
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return {}
    out = {}
    for name, spec in props.items():
        values = spec.get("enum") if isinstance(spec, Mapping) else None
        if isinstance(values, list):
            out[str(name)] = [v for v in values if isinstance(v, str)]
    return out


def read_prompt(text: str, schema: Mapping[str, Any] | None) -> Prompt:
    parts = sections(text)
    if "State" not in parts:
        raise BadRequest("the user message has no '## State' section")
    enums = _schema_enums(schema)
    reply = parts.get("Reply", "")
    if enums:
        required = schema.get("required") if isinstance(schema, Mapping) else None
        asked = [a for a in required if a in enums] if isinstance(required, list) else []
        asked = asked or list(enums)
    elif found := _ONLY.search(reply):
        asked = [found.group(1)]
    elif found := _EACH.search(reply):
        asked = [a.strip() for a in found.group(1).split(",") if a.strip()]
    else:
        raise BadRequest("the '## Reply' section names no agent to plan for")
    listed = {a: _split_actions(v) for a, v in _agent_lines(parts.get("Actions", "")).items()}
    every = sorted({x for v in listed.values() for x in v})
    candidates = {}
    for agent in asked:
        found_list = enums.get(agent) or listed.get(agent) or every
        candidates[agent] = [a for a in found_list if a != "ABSENT"]
        if not candidates[agent]:
            raise BadRequest(f"no actions listed for {agent}")
    reach = {}
    for agent, rest in _agent_lines(parts.get("Agents", "")).items():
        can = re.search(r"Can reach:\s*(.*?)\.?\s*$", rest)
        if can:
            reach[agent] = [p.strip() for p in re.split(r",\s*", can.group(1)) if p.strip()]
    chosen = _agent_lines(parts.get("Chosen this step", ""))
    key_text = "\n\n".join(parts.get(h, "") for h in ("Task", "State", "Chosen this step", "Reply"))
    key = hashlib.sha256(f"{key_text}\n{asked}".encode()).hexdigest()[:16]
    return Prompt(parts, asked, candidates, reach, chosen, bool(enums), key)


def _split_actions(text: str) -> list[str]:
    return [a.strip() for a in re.split(r"\s*[,;|]\s*", text.strip().rstrip(".")) if a.strip()]


def _named_action(line: str, actions: set[str]) -> str | None:
    """The action a feedback line names: the longest one in it, and of equally long ones the
    first in the line (``Alice: DUMP, Bob: WAIT`` names DUMP). Never a set's order, which
    changes with the process's hash seed."""
    found = [
        (-len(a), m.start(), a)
        for a in actions
        if (m := re.search(rf"(?<!\w){re.escape(a)}(?!\w)", line)) is not None
    ]
    return min(found)[2] if found else None


@dataclass
class Bans:
    """What feedback bans (FEEDBACK.md): single actions per agent (version 1's rule) and
    refused combinations of several agents' actions (version 2)."""

    single: dict[str, set[str]] = field(default_factory=dict)
    joint: list[dict[str, str]] = field(default_factory=list)

    def of(self, agent: str, picked: Mapping[str, str]) -> set[str]:
        """``agent``'s banned actions once the agents before it have ``picked`` theirs: its
        single bans, and each action that would complete a refused combination."""
        out = set(self.single.get(agent, ()))
        for combination in self.joint:
            if agent in combination and all(
                picked.get(other) == action
                for other, action in combination.items()
                if other != agent
            ):
                out.add(combination[agent])
        return out


def _pairs(line: str, agents: set[str], actions: set[str]) -> dict[str, str] | None:
    """The ``Agent: action`` pairs a line's proposal part is made of, when it is two or
    more of them, every agent known and every action a candidate; else None."""
    head = line.split(" -> ", 1)[0].strip()
    pairs: dict[str, str] = {}
    for part in head.split(","):
        match = re.fullmatch(r"\s*\[?([A-Za-z][A-Za-z0-9_]*)\]?:\s*(.*?)\s*", part)
        if match is None or match.group(1) not in agents or match.group(2) not in actions:
            return None
        pairs[match.group(1)] = match.group(2)
    return pairs if len(pairs) >= 2 else None


def bans(prompt: Prompt, actions: Sequence[str]) -> Bans:
    """The ban rule of FEEDBACK.md: what a refusal or a bad-feedback line names."""
    known_agents = set(prompt.reach) | set(prompt.asked) | set(prompt.chosen)
    known_actions = set(actions)
    out = Bans()
    for header, always_bad in (("Refused this step", True), ("Feedback", False)):
        for line in prompt.sections.get(header, "").splitlines():
            if not line.strip() or not (always_bad or _BAD.search(line)):
                continue
            combination = _pairs(line, known_agents, known_actions)
            if combination is not None:
                out.joint.append(combination)
                continue
            action = _named_action(line, known_actions)
            if action is None:
                continue
            lead = re.match(r"^\s*\[?([A-Za-z][A-Za-z0-9_]*)\]?:", line)
            if lead and lead.group(1) in known_agents:
                agents = [lead.group(1)]
            else:
                agents = [a for a in known_agents if re.search(rf"\b{re.escape(a)}\b", line)]
                agents = agents or list(prompt.asked)
            for agent in agents:
                out.single.setdefault(agent, set()).add(action)
    return out
