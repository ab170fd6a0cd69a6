"""The user's request as relations the camera can check: a scene skill's success is verified,
never taken from the model's "done".

Once per episode, before the first step, the LLM translates the request under a JSON schema
(purpose ``goal``; recorded like every exchange, so a replay answers it from the recording)::

    {"mentions": ["the red one", "the blue block"],
     "relations": [{"relation": "on", "object": "red block", "target": "blue block"}]}

The runtime accepts a translation only where the request's own words support it, so a model
that answers with something the user did not ask for cannot make the robot claim success:

- every mention must be words of the request, and must resolve (``resolve.py``) to an object
  in view or a region; one that does not ends the episode at once, naming it and listing what
  is in view ("the apple is not in view (in view: ...)");
- every relation's object and target must be a resolved mention, and every mention must be
  used by a relation, as many times as it is named (a part of the request left out is not
  understood);
- each relation's kind must be cued by the request's words (``on`` by "on", "onto", "stack";
  ``given`` by "hand", "give", "me"; ...).

A translation that fails these ends the episode at once with ``goal not understood: ...``.
One that names things in view but compiles into no relation ("line the blocks up nicely") is
*judged*: at the end step the verifier model (onboard.llm.judge, ReplanVLM's Extra Bot's
question) compares the first look with a fresh one and must answer ``done: true``; nothing
having changed is never done. A request that names nothing in view and asks for no relation
ends at once. A goal that holds at the first look ends in success with no
motion; the skill's end step passes its check only when every relation holds in a fresh look
(:class:`GoalCheck`), else it is re-asked within the decision's rounds and then the episode
fails with ``goal not verified: <what is missing>``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from onboard.base.errors import LLMError
from onboard.llm.judge import judge_messages, judge_schema, read_judgement
from onboard.llm.replies import parse_reply
from onboard.llm.types import Message
from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.skill import Skill
from onboard.manip.observation import SceneObservation
from onboard.manip.resolve import ObjectResolver
from onboard.manip.verify import HANDED, Effect, Geometry
from onboard.perception.unknown import why_unknown

__all__ = [
    "GOAL_PROMPT",
    "RELATIONS",
    "Goal",
    "GoalCheck",
    "Relation",
    "SceneGoal",
    "cued",
    "mention_phrase",
    "relations_schema",
    "request_words",
]

#: metres an object must move to count as a change (a judged goal's before and after)
MOVED = 0.02
JUDGE_ROLE = "You are the verifier of a robot arm: you judge whether a request was done."

#: what a goal may ask of an object: on an object, in a region, off an object, held by the
#: gripper, given (held out at the hand-over point)
RELATIONS = ("on", "in", "off", "held", "given")

#: words of the request that cue each relation ("put X to the right side" cues ``in``)
_CUES = {
    "on": r"on|onto|atop|top|stack|stacked|upon",
    "in": r"in|into|inside|to|toward|towards|on|onto|at|over",
    "off": r"off|unstack|remove|from",
    "held": r"pick|lift|hold|grab|grasp|take|raise",
    "given": r"hand|give|pass|me|bring|fetch",
}
_WORDS = re.compile(r"[a-z0-9]+")
_ARTICLE = re.compile(r"^(?:the|a|an|that|this|my|your|some)\s+")


def relations_schema(
    kinds: Sequence[str],
    objects: Sequence[str],
    targets: Sequence[str],
    mentions: int,
    relations: int,
    mention_length: int = 24,
) -> dict[str, Any]:
    """The JSON schema of a goal reply: ``mentions`` (words of the request) and ``relations``
    (``{"relation": one of kinds, "object": one of objects, "target": one of targets}``)."""
    relation = {
        "type": "object",
        "properties": {
            "relation": {"type": "string", "enum": list(kinds)},
            "object": {"type": "string", "enum": list(objects)},
            "target": {"type": "string", "enum": list(targets)},
        },
        "required": ["relation", "object", "target"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {
            "mentions": {
                "type": "array",
                "items": {"type": "string", "maxLength": mention_length},
                "maxItems": mentions,
            },
            "relations": {"type": "array", "items": relation, "maxItems": relations},
        },
        "required": ["mentions", "relations"],
        "additionalProperties": False,
    }


def request_words(request: str) -> str:
    """The request's words, lower case, one space apart (what mentions and cues match)."""
    return " ".join(_WORDS.findall(request.lower()))


def mention_phrase(mention: str) -> str:
    """A mention as words with no leading article ("the Red block" -> "red block")."""
    return _ARTICLE.sub("", " ".join(_WORDS.findall(mention.lower())))


def cued(kind: str, words: str) -> bool:
    """Whether a word of the request (``request_words``) asks for a relation of ``kind``."""
    return re.search(rf"\b(?:{_CUES[kind]})\b", words) is not None


GOAL_PROMPT = (
    'Write the end state the request asks for, as a dictionary with the keys "mentions" and '
    '"relations". "mentions": every object or place the request names, in the request\'s own '
    'words. "relations": what must hold when the request is fulfilled, each a dictionary with '
    '"relation" (one of: on, in, off, held, given), "object" (an object the camera sees) and '
    '"target" (for on and off: an object; for in: a region; else "none"). Use the names the '
    "camera gives. Give no relation for what the request does not ask."
)


@dataclass(frozen=True)
class Relation:
    kind: str
    subject: str
    other: str | None = None

    def text(self) -> str:
        if self.kind == "on":
            return f"the {self.subject} on the {self.other}"
        if self.kind == "in":
            return f"the {self.subject} in the {self.other}"
        if self.kind == "off":
            return f"the {self.subject} off the {self.other}, on the table"
        if self.kind == "held":
            return f"the {self.subject} held"
        return f"the {self.subject} held out to the user"


@dataclass(frozen=True)
class Goal:
    """A request, compiled: every relation must hold at the end."""

    request: str
    relations: tuple[Relation, ...]

    def to_record(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "relations": [
                {"relation": r.kind, "object": r.subject, "target": r.other or "none"}
                for r in self.relations
            ],
        }


class SceneGoal:
    """Implements :class:`~onboard.loop.engine.GoalGate` for scene skills."""

    def __init__(
        self, skill: Skill, request: str, resolver: ObjectResolver, known: Sequence[str] = ()
    ) -> None:
        """``known``: the kinds of object the detector can name ("red block", "apple"): a
        mention of one that is not in view is "not in view", of anything else "unknown"."""
        self.skill = skill
        self.request = request
        self.resolver = resolver
        self.known = [k.replace("_", " ") for k in known]
        #: no relation compiled: the verifier model judges the end step (see the module doc)
        self.judged = False
        self.geometry = Geometry(skill)
        self.goal: Goal | None = None
        #: the look the goal was read against (a judged goal's "before")
        self.first: SceneObservation | None = None

    # -- the question ----------------------------------------------------------------------

    def messages(self, skill: Skill, observation: Observation) -> list[Message]:
        regions = ", ".join(self.geometry.scene.regions)
        seen = observation.situation()
        text = (
            f'The user asked a robot arm above a table: "{self.request}".\n{seen}\n'
            f"Regions: {regions}.\n{GOAL_PROMPT}"
        )
        return [{"role": "user", "content": text}]

    def schema(self, skill: Skill, observation: Observation) -> dict[str, Any]:
        names = _names(observation) + self._hideable(observation)
        targets = [*names, *self.geometry.scene.regions, "none"]
        return relations_schema(RELATIONS, names or ["none"], targets, mentions=4, relations=3)

    # -- the answer ------------------------------------------------------------------------

    def read(self, text: str, observation: Observation) -> Verdict:
        """The translation, accepted (ok) or the cause it cannot be (feedback)."""
        try:
            parsed = parse_reply(text)
        except LLMError as exc:
            return Verdict(False, f"goal not understood: the reply is not a dictionary ({exc})")
        mentions, relations = parsed.get("mentions"), parsed.get("relations")
        if not isinstance(mentions, list) or not isinstance(relations, list):
            return Verdict(False, "goal not understood: the reply has no mentions and relations")
        view = observation.scene.view if isinstance(observation, SceneObservation) else None
        if view is not None:  # "not in view" would be a guess: nothing moves, and it says why
            return Verdict(False, f"goal not understood: could not see: the view is {view}")
        if isinstance(observation, SceneObservation):
            self.first = observation
        names = _names(observation)
        regions = list(self.geometry.scene.regions)
        mentionable = names + self._hideable(observation)
        words = request_words(self.request)
        found: dict[str, str] = {}  # mention -> name
        for mention in (m for m in mentions if isinstance(m, str) and m.strip()):
            phrase = mention_phrase(mention)
            if not phrase or f" {phrase} " not in f" {words} ":
                why = f"{mention!r} is not words of the request"
                return Verdict(False, f"goal not understood: {why}")
            resolved = self.resolver.resolve(phrase, names + regions)
            if resolved.name is None:
                hidden = self._hidden(phrase, observation)
                if hidden is None:
                    return Verdict(False, self._not_there(phrase, names, regions))
                found[phrase] = hidden
                continue
            found[phrase] = resolved.name
        used: set[str] = set()
        accepted = []
        for raw in relations:
            relation = _relation(raw)
            if relation is None:
                return Verdict(False, f"goal not understood: {json.dumps(raw)} is not a relation")
            problem = self._unsupported(relation, set(found.values()), mentionable, regions, words)
            if problem:
                return Verdict(False, f"goal not understood: {problem}")
            used.update(n for n in (relation.subject, relation.other) if n is not None)
            accepted.append(relation)
        if not accepted and not set(found.values()) & set(names):
            why = "it asks for no arrangement of what is in view"
            return Verdict(False, f"goal not understood: {why}")
        unused = sorted(p for p, name in found.items() if name not in used)
        if unused and accepted:
            return Verdict(False, f"goal not understood: nothing is asked of {', '.join(unused)}")
        named = sum(1 for m in mentions if isinstance(m, str) and m.strip())
        slots = sum(1 + (r.other is not None) for r in accepted)
        if named > slots and accepted:  # "red on blue and blue on red" read as one relation
            why = f"it names things {named} times, its relations use {slots}"
            return Verdict(False, f"goal not understood: only part of it: {why}")
        self.goal = Goal(self.request, tuple(accepted))
        self.judged = not accepted
        return Verdict(True, score=1.0)

    def _hidden(self, phrase: str, seen: Observation) -> str | None:
        """A kind the detector knows, not in view, while something in view rests raised (on
        what the camera cannot see): the mention may be hidden under it, so it stands."""
        hideable = self._hideable(seen)
        return self.resolver.resolve(phrase, hideable).name if hideable else None

    def _hideable(self, seen: Observation) -> list[str]:
        """The kinds not in view that could be hidden under an object resting raised."""
        if not isinstance(seen, SceneObservation):
            return []
        table = self.geometry.scene.table
        raised = any(
            float(o.position[2]) > table + float(o.size) and seen.holding != o.name
            for o in seen.scene.objects
        )  # or the look says something may hide it (runtime/perception/unknown.py)
        hiding = raised or bool(seen.scene.unknown)
        return [k for k in self.known if k not in seen.names()] if hiding else []

    def _not_there(self, phrase: str, names: list[str], regions: list[str]) -> str:
        seen, places = ", ".join(sorted(names)) or "nothing", ", ".join(regions)
        unseen = [k for k in self.known if k not in names]
        if unseen and self.resolver.resolve(phrase, unseen).name is not None:
            return f"the {phrase} is not in view (in view: {seen})"
        return (
            f"the {phrase} is no object the robot knows and no region "
            f"(in view: {seen}; regions: {places})"
        )

    def _unsupported(
        self, r: Relation, mentioned: set[str], names: list[str], regions: list[str], words: str
    ) -> str:
        if r.subject not in mentioned:
            return f"the request does not name the {r.subject}"
        if r.kind in ("on", "off") and (r.other not in names or r.other == r.subject):
            return f"{r.kind} needs another object in view, not {r.other!r}"
        if r.kind == "in" and r.other not in regions:
            return f"in needs a region, not {r.other!r}"
        if r.other is not None and r.other not in mentioned:
            return f"the request does not name the {r.other}"
        if not cued(r.kind, words):
            return f"no word of the request asks for {r.kind}"
        return ""

    def to_record(self) -> dict[str, Any]:
        found = {} if self.goal is None else self.goal.to_record()
        return {**found, "judged": True} if self.judged else found

    # -- the verifier model, for a goal with no relation -----------------------------------

    def judge(self, actions: Sequence[str], after: Observation) -> list[Message] | None:
        """The verifier model's question at the end step, ``after`` against the look the goal
        was read with; None when the relations decide."""
        before = self.first
        if not self.judged or before is None or not isinstance(after, SceneObservation):
            return None
        images = [o.png for o in (before, after) if o.png is not None]
        notes = ["the table before the robot acted", "the table now"][: len(images)]
        return judge_messages(
            JUDGE_ROLE,
            "You see the table before and after the robot acted on a request, and what the "
            "robot's perception says changed.",
            self.request,
            "The robot's actions: " + (", ".join(actions) or "none"),
            "the robot says the request is done",
            before.situation(),
            after.situation(),
            _changes(before, after),
            images if self.skill.prompt.images else [],
            notes if self.skill.prompt.images else [],
        )

    def judge_schema(self) -> dict[str, Any]:
        return judge_schema()

    def judgement(self, text: str) -> Verdict:
        try:
            done, reason = read_judgement(text)
        except ValueError as exc:
            return Verdict(False, f"goal not verified: the verifier gave no verdict ({exc})")
        if done:
            return Verdict(True, reason, 1.0)
        return Verdict(False, f"goal not verified: {reason or 'the verifier says not done'}",
                       0.0, final=True)  # fmt: skip

    # -- the check -------------------------------------------------------------------------

    def met(self, observation: Observation) -> Verdict:
        """Every relation holds in ``observation``; else what is missing."""
        if self.goal is None:
            return Verdict(False, "the goal was never understood")
        if self.judged:
            return Verdict(False, "not yet: the verifier model judges it at the end")
        if not isinstance(observation, SceneObservation):
            return Verdict(False, "nothing is seen to verify the goal with")
        missing = [r.text() for r in self.goal.relations if not self._holds(r, observation)]
        if missing:
            return Verdict(False, "not yet: " + "; ".join(missing), 0.0)
        return Verdict(True, score=1.0)

    def unknown(self, observation: Observation) -> str | None:
        """Why what the goal needs cannot be told from ``observation``, or None: the view
        cannot be trusted, or a relation that does not hold names an object not seen that may
        be hidden (runtime/perception/unknown.py), or one in an unsure stack (on, off); a
        judged goal: an object of the first look not seen now may be hidden."""
        if not isinstance(observation, SceneObservation):
            return None
        scene = observation.scene
        if scene.view is not None:
            return f"the view is {scene.view}"
        regions = self.geometry.scene.regions
        if self.judged or self.goal is None:
            first = self.first
            if first is None:
                return None
            gone = [o.name for o in first.scene.objects if observation.find(o.name) is None]
            missing = [n for n in gone if observation.holding != n]
            return why_unknown(None, scene.unknown, missing, [], "in") if missing else None
        for r in self.goal.relations:
            if self._holds(r, observation):
                continue
            names = [n for n in (r.subject, r.other) if n is not None and n not in regions]
            seen = [n for n in names
                    if observation.find(n) is not None or observation.holding == n]  # fmt: skip
            why = why_unknown(None, scene.unknown, names, seen, r.kind)
            if why is not None:
                return why
        return None

    def _holds(self, r: Relation, seen: SceneObservation) -> bool:
        held = seen.holding == r.subject
        if r.kind == "held":
            return held
        subject = seen.find(r.subject)
        if subject is None:
            return False
        if r.kind == "given":
            point = self.geometry.scene.handover
            where = [float(v) for v in subject.position]
            return held and point is not None and math.dist(where, point) <= HANDED
        if held:
            return False  # on, in, off: the object rests where it is, let go
        assert r.other is not None
        resting = float(subject.position[2]) <= self.geometry.scene.table + float(subject.size)
        if r.kind == "on":
            return self.geometry.holds(Effect(r.kind, r.subject, r.other), seen)
        if r.kind == "in":  # on the table inside the region, not stacked on something there
            return resting and self.geometry.holds(Effect(r.kind, r.subject, r.other), seen)
        on_it = self.geometry.holds(Effect("on", r.subject, r.other), seen)
        return not on_it and resting


class GoalCheck:
    """Implements :class:`~onboard.loop.engine.Check`: the skill's end step passes only when
    the goal holds in what is seen now; its failure is final once the decision's rounds are
    spent (the episode fails with what is missing, the robot made safe first)."""

    name = "goal"

    def __init__(self, skill: Skill, goal: SceneGoal) -> None:
        self.skill = skill
        self.goal = goal

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        if not any(step.action == self.skill.end for step in steps):
            return Verdict(True)
        unknown = self.goal.unknown(observation)
        if unknown is not None:  # what the look cannot tell: never met, nor missing
            return Verdict(False, f"goal not verified: could not see: {unknown} (looked at twice)",
                           0.0, final=True)  # fmt: skip
        if self.goal.judged:
            first = self.goal.first
            if first is not None and not _changes(first, observation, moved_only=True):
                return Verdict(False, "goal not verified: nothing has changed", 0.0, final=True)
            return Verdict(True)  # the verifier model decides (engine: GoalGate.judge)
        met = self.goal.met(observation)
        if met.ok:
            return met
        missing = met.feedback.removeprefix("not yet: ")
        return Verdict(False, f"goal not verified: {missing}", 0.0, final=True)


def _changes(before: Observation, after: Observation, moved_only: bool = False) -> str:
    """What moved more than 2 cm, came into view or left it, and the gripper, one line each;
    ``moved_only``: only objects that moved or came into view ("" when none)."""
    if not isinstance(before, SceneObservation) or not isinstance(after, SceneObservation):
        return ""
    lines = []
    for obj in after.scene.objects:
        was = before.find(obj.name)
        now = tuple(round(float(v), 3) for v in obj.position)
        if was is None:
            lines.append(f"the {obj.name} came into view at {now}")
        elif math.dist([float(v) for v in was.position], now) > MOVED:
            old = tuple(round(float(v), 3) for v in was.position)
            lines.append(f"the {obj.name} moved from {old} to {now}")
    if moved_only:
        return "\n".join(lines)
    lines += [f"the {o.name} is no longer in view" for o in before.scene.objects
              if after.find(o.name) is None]  # fmt: skip
    if before.holding != after.holding:
        lines.append(f"the gripper held {before.holding or 'nothing'}, now "
                     f"{after.holding or 'nothing'}")  # fmt: skip
    return "\n".join(lines) or "nothing changed"


def _relation(raw: object) -> Relation | None:
    if not isinstance(raw, dict):
        return None
    kind, subject, other = raw.get("relation"), raw.get("object"), raw.get("target")
    if kind not in RELATIONS or not isinstance(subject, str):
        return None
    if kind in ("held", "given"):
        return Relation(kind, subject)
    return Relation(kind, subject, other) if isinstance(other, str) else None


def _names(observation: Observation) -> list[str]:
    return observation.names() if isinstance(observation, SceneObservation) else []
