"""The team prompts and how a reply becomes one action per agent.

Every request's user message is made of sections with fixed headers, so the stand-in (which
parses them) and a person reading a recording find the same things in the same places, in
this order (what an episode never changes first, so a local server reuses its cache)::

    ## Task / ## Agents / ## Actions                      always
    ## History                                            when there is any
    ## State                                              always
    ## Chosen this step / ## Refused this step / ## Feedback   when there is any
    ## Reply                                              who to plan for, and the reply format

A request asks either for one agent (ReAd-S: ``NAME Bob ACTION <action>``) or for several at
once (ReAd-J, Central Plan: ``EXECUTE`` then one ``NAME ... ACTION ...`` line each). With
constrained decoding the request also carries :func:`reply_schema` (one property per agent
asked, an enum of that agent's own actions) and the reply is JSON; :func:`read_reply` reads both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from onboard.base.errors import LLMReplyError
from onboard.llm.types import Message
from onboard.loop.kind import Attempt

__all__ = [
    "ABSENT",
    "SYSTEM",
    "WAIT",
    "AgentText",
    "HistoryEntry",
    "Situation",
    "TaskText",
    "agent_request",
    "joint_request",
    "proposal_text",
    "read_reply",
    "reply_schema",
]

#: the critic's index 0 (an agent outside the subset): never proposed, never in a prompt
ABSENT = "ABSENT"
WAIT = "WAIT"

SYSTEM = (
    "You plan actions for robot arms that work together on one task. Each step every robot "
    "does one action at the same time. Answer only in the reply format asked for."
)


class AgentText(Protocol):
    """What a prompt says about one agent (onboard.collab.taskfile's TeamAgent has it)."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def reach(self) -> Sequence[Any]: ...


class TaskText(Protocol):
    """What a prompt says about the task (onboard.collab.taskfile's TeamTask has it)."""

    @property
    def description(self) -> str: ...

    @property
    def agents(self) -> Sequence[AgentText]: ...


@dataclass(frozen=True)
class Situation:
    """What every request of one step shares: the task, the state as text, the actions."""

    task: TaskText
    #: ``env.describe()``
    state: str
    #: the level's vocabulary (ABSENT, if there, is left out of every prompt)
    vocabulary: Sequence[str]

    @property
    def actions(self) -> list[str]:
        return [a for a in self.vocabulary if a != ABSENT]


@dataclass(frozen=True)
class HistoryEntry:
    """One line of ``## History``: an earlier step's proposal and what came of it
    (``score 0.42, accepted``; ``score -0.31, refused``; for Central Plan, nothing)."""

    step: int
    proposal: str
    outcome: str = ""

    def text(self) -> str:
        tail = f" -> {self.outcome}" if self.outcome else ""
        return f"step {self.step}: {self.proposal}{tail}"


def proposal_text(actions: Mapping[str, str]) -> str:
    """``Alice: MOVE red_cube, Bob: WAIT`` (in the mapping's order)."""
    return ", ".join(f"{agent}: {action}" for agent, action in actions.items())


def _agents_section(task: TaskText) -> str:
    lines = []
    for agent in task.agents:
        reach = ", ".join(str(r) for r in agent.reach) or "nothing"
        lines.append(f"{agent.name}: {agent.role.rstrip('.')}. Can reach: {reach}.")
    return "\n".join(lines)


def _user_message(
    situation: Situation,
    asked: Sequence[str],
    *,
    history: Sequence[HistoryEntry],
    history_note: str,
    chosen: Mapping[str, str],
    refused: Sequence[Attempt],
    feedback: Sequence[str],
    constrained: bool,
    reply_note: str = "",
) -> str:
    task = situation.task
    actions = ", ".join(situation.actions)
    # what never changes in an episode first, then what grows, then what changes each step:
    # a local server (llama.cpp) reuses the longest prefix it has already evaluated, so a new
    # step re-reads only the state and what follows it
    sections = [
        ("Task", task.description.strip()),
        ("Agents", _agents_section(task)),
        ("Actions", "\n".join(f"{agent.name}: {actions}" for agent in task.agents)),
    ]
    if history:
        lines = [history_note] if history_note else []
        sections.append(("History", "\n".join([*lines, *(h.text() for h in history)])))
    sections.append(("State", situation.state.strip()))
    if chosen:
        sections.append(("Chosen this step", "\n".join(f"{a}: {x}" for a, x in chosen.items())))
    if refused:
        sections.append(("Refused this step", _refused_lines(refused)))
    if feedback:
        sections.append(("Feedback", "\n".join(feedback)))
    sections.append(("Reply", _reply_section(asked, constrained, reply_note)))
    return "\n".join(f"## {header}\n{body}" for header, body in sections)


def _refused_lines(refused: Sequence[Attempt]) -> str:
    """One line per refused proposal, oldest first; a proposal refused again for the same
    reason is counted on its first line, not repeated (a small model's context is short)."""
    counts: dict[str, int] = {}
    for attempt in refused:
        line = f"{attempt.proposal} -> {attempt.feedback}"
        counts[line] = counts.get(line, 0) + 1
    return "\n".join(line if n == 1 else f"{line} ({n} times)" for line, n in counts.items())


def _reply_section(asked: Sequence[str], constrained: bool, note: str = "") -> str:
    """Who to plan for, then ``note`` (a method's extra ask: a thought, a message to the other
    robots, a reflection), then the reply format."""
    tail = f" {note.strip()}" if note.strip() else ""
    if len(asked) == 1:
        (agent,) = asked
        first = f"Plan the next action for {agent} only.{tail}"
        if constrained:
            return f'{first} Reply exactly as JSON:\n{{"{agent}": "<action>"}}'
        return f"{first} Reply exactly as:\nNAME {agent} ACTION <action>"
    first = f"Plan one action for each of {', '.join(asked)}.{tail}"
    if constrained:
        body = ", ".join(f'"{agent}": "<action>"' for agent in asked)
        return f"{first} Reply exactly as JSON:\n{{{body}}}"
    lines = "\n".join(f"NAME {agent} ACTION <action>" for agent in asked)
    return f"{first} Reply exactly as:\nEXECUTE\n{lines}"


def agent_request(
    situation: Situation,
    agent: str,
    *,
    history: Sequence[HistoryEntry] = (),
    history_note: str = "",
    chosen: Mapping[str, str] | None = None,
    refused: Sequence[Attempt] = (),
    feedback: Sequence[str] = (),
    constrained: bool = False,
    reply_note: str = "",
    system: str = SYSTEM,
) -> list[Message]:
    """The request for one agent's next action (ReAd-S): ``chosen`` holds the actions
    accepted for the agents before it this step, ``refused`` every refused proposal of this
    step (each an Attempt whose ``proposal`` is ``Bob: DUMP``). ``reply_note``: what else the
    reply holds before the action (RoCo's message to the other robots); ``system``: the
    method's own system message."""
    user = _user_message(
        situation, [agent], history=history, history_note=history_note, chosen=chosen or {},
        refused=refused, feedback=feedback, constrained=constrained, reply_note=reply_note,
    )  # fmt: skip
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def joint_request(
    situation: Situation,
    agents: Sequence[str],
    *,
    history: Sequence[HistoryEntry] = (),
    history_note: str = "",
    refused: Sequence[Attempt] = (),
    feedback: Sequence[str] = (),
    constrained: bool = False,
    reply_note: str = "",
    system: str = SYSTEM,
) -> list[Message]:
    """The request for one action of each of ``agents`` at once (ReAd-J, Central Plan; the
    baselines add a ``reply_note`` and their ``system`` message, as for :func:`agent_request`)."""
    user = _user_message(
        situation, agents, history=history, history_note=history_note, chosen={},
        refused=refused, feedback=feedback, constrained=constrained, reply_note=reply_note,
    )  # fmt: skip
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def reply_schema(actions: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The constrained reply: one property per agent asked, each an enum of that agent's
    actions (``TeamEnv.agent_actions``: WAIT and what its role and reach allow). Every
    property required and no other allowed, as OpenAI's strict mode wants
    (onboard.llm.structured)."""
    return {
        "type": "object",
        "properties": {
            agent: {"type": "string", "enum": [a for a in own if a != ABSENT]}
            for agent, own in actions.items()
        },
        "required": list(actions),
        "additionalProperties": False,
    }


# -- replies -------------------------------------------------------------------------------

_FENCE = re.compile(r"```(?:json|JSON|text)?\s*(.*?)```", re.DOTALL)
#: ``NAME Alice ACTION MOVE red_cube``, up to the line's end or the next NAME on the line
_LINE = re.compile(
    r"\bNAME\s*[:=]?\s*([A-Za-z][\w-]*)\s*[:,]?\s*ACTION\s*[:=]?\s*(.*?)(?=\bNAME\b|$)",
    re.I | re.M,
)
_EDGES = " \t\"'`[]()<>*.,;"


def read_reply(text: str, agents: Sequence[str], vocabulary: Sequence[str]) -> dict[str, str]:
    """One action per agent in ``agents``, from an ``EXECUTE`` / ``NAME x ACTION y`` text or
    a JSON object ``{"Alice": "MOVE red_cube"}``; each action is one of ``vocabulary`` (as
    spelled there; case and spacing in the reply do not matter). Lines for agents not asked
    are ignored. Raises LLMReplyError with the reason ("no ACTION for Bob", "unknown action
    'JUMP' for Alice", "unknown object 'purple_cube' for Alice ...")."""
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise LLMReplyError("empty reply")
    found = _json_actions(body, agents) if body.startswith("{") else _text_actions(body, agents)
    canon = _Canon(vocabulary)
    chosen: dict[str, str] = {}
    for agent in agents:
        said = found.get(agent)
        if said is None:
            raise LLMReplyError(f"no ACTION for {agent}")
        chosen[agent] = canon.action(said, agent)
    return chosen


def _json_actions(body: str, agents: Sequence[str]) -> dict[str, str]:
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise LLMReplyError(f"reply is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise LLMReplyError(f"reply is JSON {type(value).__name__}, not an object")
    names = {a.lower(): a for a in agents}
    found: dict[str, str] = {}
    for key, action in value.items():
        agent = names.get(str(key).strip().lower())
        if agent is None:
            continue
        if not isinstance(action, str):
            raise LLMReplyError(f"action for {agent} is {type(action).__name__}, not text")
        found[agent] = action
    return found


def _text_actions(body: str, agents: Sequence[str]) -> dict[str, str]:
    names = {a.lower(): a for a in agents}
    found: dict[str, str] = {}
    for matched in _LINE.finditer(body):
        agent = names.get(matched.group(1).lower())
        if agent is None:
            continue
        action = matched.group(2)
        if agent in found and _norm(found[agent]) != _norm(action):
            raise LLMReplyError(
                f"two actions for {agent}: {_quote(found[agent])} and {_quote(action)}"
            )
        found[agent] = action
    return found


def _norm(action: str) -> str:
    return " ".join(action.strip(_EDGES).split()).lower()


def _quote(action: str) -> str:
    shown = " ".join(action.split())
    return repr(shown if len(shown) <= 40 else shown[:37] + "...")


class _Canon:
    """The vocabulary by normalised spelling, and each verb's objects for the reasons."""

    def __init__(self, vocabulary: Iterable[str]) -> None:
        actions = [a for a in vocabulary if a != ABSENT]
        self.by_norm = {_norm(a): a for a in actions}
        self.objects: dict[str, list[str]] = {}
        for action in actions:
            verb, _, target = action.partition(" ")
            self.objects.setdefault(verb.lower(), [])
            if target:
                self.objects[verb.lower()].append(target)

    def action(self, said: str, agent: str) -> str:
        known = self.by_norm.get(_norm(said))
        if known is not None:
            return known
        verb, _, target = _norm(said).partition(" ")
        targets = self.objects.get(verb)
        if targets is None:
            raise LLMReplyError(f"unknown action {_quote(said.strip(_EDGES))} for {agent}")
        takes = ", ".join(targets) if targets else "no object"
        if not target:
            raise LLMReplyError(
                f"incomplete action {_quote(verb.upper())} for {agent} ({verb.upper()} "
                f"takes: {takes})"
            )
        raise LLMReplyError(
            f"unknown object {_quote(target)} for {agent} ({verb.upper()} takes: {takes})"
        )
