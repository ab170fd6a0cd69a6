"""A code skill's goal, checked against perception: the robot's verdict after a run is what
the camera sees, not the Extra Bot's "done", wherever the request says what must hold.

Once per episode, before the first plan, the goal reader (the Decision Bot's endpoint, system
line :data:`~onboard.replan.prompts.GOAL_ROLE`) writes the request as relations over the
objects seen: ``on`` (resting on another object), ``in`` (inside a container: a box, a plate,
a drawer), ``held`` (in the gripper). The rules of tidy's goal (runtime/manip/goal.py) decide
whether a reply is read: every mention is words of the request and names an object seen (its
name or its kind, one object only), every relation's object and target were mentioned and
its kind is cued by the request's words, and every mention is used.

A request the relations cannot say ("I'm hungry", "stack them as in the picture", an order
on a conveyor, an object not in view) is *judged*, as a tidy goal with no relation is: after
each run the Extra Bot decides, once perception shows that something changed. A goal with
relations is *decided* by them: after each run every relation must hold in the fresh look
(:class:`~onboard.replan.checks.GoalVerify`), else the robot replans with what is missing; the
Extra Bot is not asked. Unlike tidy, a reply that cannot be read does not end the episode: the
seed's outer check (the Extra Bot) still stands, so the goal is judged, with the reason
recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onboard.base.errors import LLMError
from onboard.llm.replies import parse_reply
from onboard.llm.types import Message
from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation
from onboard.loop.skill import Skill
from onboard.manip.goal import cued, mention_phrase, request_words
from onboard.perception.unknown import why_unknown
from onboard.replan import prompts
from onboard.replan.scene_state import SceneState

__all__ = ["CodeGoal", "CodeRelation", "hidden_since"]


@dataclass(frozen=True)
class CodeRelation:
    kind: str
    subject: str
    other: str | None = None

    def text(self) -> str:
        if self.kind == "held":
            return f"the {self.subject} held"
        return f"the {self.subject} {self.kind} the {self.other}"

    def holds(self, state: SceneState) -> bool:
        if self.kind == "held":
            return state.held == self.subject
        seen = state.named(self.subject)
        if seen is None or state.held == self.subject:
            return False  # on and in: let go, resting where it is
        if self.kind == "in":
            return seen.inside == self.other
        return seen.on == self.other

    def to_record(self) -> dict[str, str]:
        return {"relation": self.kind, "object": self.subject, "target": self.other or "none"}

    def missing(self, state: SceneState) -> str:
        """What the camera does not see, and where the object is seen instead ("the red block
        in the box (it is on the table, with the blue block on it)"): what a planner needs to
        put it right."""
        return f"{self.text()} ({where(self.subject, state)})"


def where(name: str, state: SceneState) -> str:
    """Where ``name`` is seen now, and what rests on it."""
    seen = state.named(name)
    if state.held == name:
        return "it is in the gripper"
    if seen is None:
        return "it is not seen"
    if seen.inside is not None:
        at = f"it is in the {seen.inside}"
    elif seen.on in (None, "table"):
        at = "it is on the table"
    else:
        at = f"it is on the {seen.on}"
    above = [o.name for o in state.objects if o.on == name and o.name != name]
    if above:
        at += f", with the {' and the '.join(above)} on it"
    return at


class CodeGoal:
    """Implements :class:`~onboard.loop.engine.GoalGate` for code skills (see the module)."""

    def __init__(self, request: str) -> None:
        self.request = request
        self.relations: tuple[CodeRelation, ...] = ()
        #: why the relations do not decide ("" once they do): the Extra Bot judges
        self.why = "not read yet"
        #: the look the goal was read against (a judged goal's "before")
        self.first: SceneState | None = None

    @property
    def judged(self) -> bool:
        return not self.relations

    # -- the question ----------------------------------------------------------------------

    def messages(self, skill: Skill, observation: Observation) -> list[Message]:
        return prompts.goal_messages(self.request, observation.situation())

    def schema(self, skill: Skill, observation: Observation) -> dict[str, Any]:
        return prompts.goal_schema([o.name for o in _state(observation).objects])

    # -- the answer ------------------------------------------------------------------------

    def read(self, text: str, observation: Observation) -> Verdict:
        """Always ok: a reply that cannot be read leaves the goal judged (``why`` says why)."""
        state = _state(observation)
        self.first = state
        try:
            self.relations, self.why = self._relations(text, state), ""
        except _Unread as exc:
            self.relations, self.why = (), str(exc)
        return Verdict(True, score=1.0)

    def _relations(self, text: str, state: SceneState) -> tuple[CodeRelation, ...]:
        try:
            parsed = parse_reply(text)
        except LLMError as exc:
            raise _Unread(f"the reply is not a dictionary ({exc})") from None
        mentions, raw = parsed.get("mentions"), parsed.get("relations")
        if not isinstance(mentions, list) or not isinstance(raw, list):
            raise _Unread("the reply has no mentions and relations")
        words = request_words(self.request)
        found: dict[str, str] = {}  # phrase -> the object seen
        for mention in (m for m in mentions if isinstance(m, str) and m.strip()):
            phrase = mention_phrase(mention)
            if not phrase or f" {phrase} " not in f" {words} ":
                raise _Unread(f"{mention!r} is not words of the request")
            found[phrase] = _seen(phrase, state)
        relations = tuple(_relation(r) for r in raw)
        if not relations:
            raise _Unread("no relation says what must hold")
        named = set(found.values())
        for r in relations:
            for name in (r.subject, r.other):
                if name is not None and name not in named:
                    raise _Unread(f"the request does not name the {name}")
            if r.other == r.subject:
                raise _Unread(f"{r.text()} relates an object to itself")
            if not cued(r.kind, words):
                raise _Unread(f"no word of the request asks for {r.kind}")
        used = {n for r in relations for n in (r.subject, r.other) if n is not None}
        unused = sorted(p for p, name in found.items() if name not in used)
        if unused:
            raise _Unread(f"nothing is asked of {', '.join(unused)}")
        return relations

    def unknown(self, state: SceneState) -> str | None:
        """Why what the goal needs cannot be told from ``state`` (runtime/perception/unknown.py),
        or None: the view cannot be trusted; a relation that does not hold names an object not
        seen that may be hidden (in a box, a closed drawer, a stack; seen only faintly), or
        one in an unsure stack (on, off); a judged goal: an object seen when it was read is not
        seen now and may be hidden."""
        if state.view is not None:
            return f"the view is {state.view}"
        if self.judged:
            return None if self.first is None else hidden_since(self.first, state)
        for r in self.relations:
            if r.holds(state):
                continue
            names = [n for n in (r.subject, r.other) if n is not None]
            seen = [n for n in names if state.named(n) is not None or state.held == n]
            why = why_unknown(None, state.unknown, names, seen, r.kind)
            if why is not None:
                return why
        return None

    def met(self, observation: Observation) -> Verdict:
        """Every relation holds in what is seen; else what is missing. A judged goal is never
        met here: the Extra Bot judges it after a run."""
        if self.judged:
            return Verdict(False, f"judged: {self.why}")
        state = _state(observation)
        missing = [r.missing(state) for r in self.relations if not r.holds(state)]
        if missing:
            return Verdict(False, "not yet: " + "; ".join(missing), 0.0)
        return Verdict(True, score=1.0)

    def to_record(self) -> dict[str, Any]:
        if self.judged:
            return {"judged": True, "why": self.why}
        return {"relations": [r.to_record() for r in self.relations]}

    # -- no verifier model at the end step: the Extra Bot verifies each run ----------------

    def judge(self, actions: Sequence[str], after: Observation) -> list[Message] | None:
        return None

    def judge_schema(self) -> dict[str, Any]:
        return {}

    def judgement(self, text: str) -> Verdict:
        return Verdict(True)


def hidden_since(before: SceneState, after: SceneState) -> str | None:
    """Why an object seen ``before`` and not ``after`` (nor held) may still be there, or None
    (every such object is gone, as seen, or none is missing)."""
    missing = [
        o.name for o in before.objects if after.named(o.name) is None and after.held != o.name
    ]
    if not missing:
        return None
    return why_unknown(after.view, after.unknown, missing, [], "in")


class _Unread(Exception):
    """Why a goal reader's reply is not read as relations."""


def _state(observation: Observation) -> SceneState:
    state = getattr(observation, "state", None)
    if not isinstance(state, SceneState):
        raise TypeError(f"a code goal needs a CodeObservation, not {type(observation).__name__}")
    return state


def _seen(phrase: str, state: SceneState) -> str:
    """The one object seen that ``phrase`` names: by its name, else by its kind."""
    exact = [o.name for o in state.objects if o.name == phrase]
    if exact:
        return exact[0]
    kinds = [o.name for o in state.objects if o.kind.replace("_", " ") == phrase]
    if len(kinds) == 1:
        return kinds[0]
    if kinds:
        raise _Unread(f"the {phrase} could be any of {', '.join(kinds)}")
    raise _Unread(f"no {phrase} is seen")


def _relation(raw: object) -> CodeRelation:
    if not isinstance(raw, dict):
        raise _Unread(f"{json.dumps(raw)} is not a relation")
    kind, subject, other = raw.get("relation"), raw.get("object"), raw.get("target")
    if kind not in prompts.GOAL_RELATIONS or not isinstance(subject, str):
        raise _Unread(f"{json.dumps(raw)} is not a relation")
    if kind == "held":
        return CodeRelation(kind, subject)
    if not isinstance(other, str) or other == "none":
        raise _Unread(f"{kind} needs a target: {json.dumps(raw)}")
    return CodeRelation(kind, subject, other)
