"""Documented answer policy of the stand-in chat model (see ``runtime/testing/standin_server.py``).

The stand-in sees exactly what a real model sees: the chat request.  It parses
ONLY the last ``user`` message (lower-cased) and answers in free text, with
paraphrases and seeded noise.

Request kinds
=============

* first stage -- ``"<U> <X>"``: U = skill goal, optionally followed by the
  robot's action text; X = activity sentence + gaze sentence (or
  "The person is not visible.").
* second stage -- the ``wait_time`` question or the ``lose`` question (one user
  message, activity in single quotes after "for the human activity").
* a last user message ending in "understood?" (the intro alone) gets a plain
  text acknowledgement.  Anything else is treated as a first-stage situation.

Parsing (first stage)
=====================

Robot state: the first sentence starting with "the robot" (quoted text inside
it is allowed and ignored for keywords):

=====================================  ================
action-text keyword                    state
=====================================  ================
"waiting for the human to finish"      WAITING_ACTIVITY
"waiting for an eye contact"           WAITING_CUE
"made eye contact"                     EYE_CONTACT_DONE
"paused"                               PAUSED
"approaching"                          APPROACHING
(no robot sentence / none of these)    UNKNOWN
=====================================  ================

* looking: "is looking at the robot" appears (quoted text removed first);
* lost: "not visible" appears;
* activity class of the person text = the text after the robot action sentence,
  or, when there is none, the text after the first sentence (the goal).  The
  quoted old activity of "waiting for the human to finish" is inside the robot
  sentence and is therefore ignored.  Keywords match at a word start:

  ========  ===============================================================
  class     keywords (first matching row wins)
  ========  ===============================================================
  finished  finished | put away | hung up | ended | is done
  busy      phone | call | eating | talking with | talking to |
            conversation | typing | reading | working
  moving    walking | leaving | passing | heading
  idle      anything else
  ========  ===============================================================

Intent (ordered conceptual actions)
===================================

==========================  ==================  ============================
situation                   robot state         intent
==========================  ==================  ============================
lost                        any                 [approach]
looking                     APPROACHING         [pause, eye contact, speak]
looking                     WAITING_CUE,        [eye contact, speak]
                            WAITING_ACTIVITY,
                            PAUSED
looking                     EYE_CONTACT_DONE    [speak]
looking                     UNKNOWN             [speak]
not looking, busy           APPROACHING         [pause, wait]
not looking, busy           any other           [wait]
not looking, moving         APPROACHING         [pause, wait for cue]
not looking, moving         WAITING_CUE,        [speak]
                            EYE_CONTACT_DONE
not looking, moving         WAITING_ACTIVITY,   [wait for cue]
                            PAUSED, UNKNOWN
not looking, finished/idle  APPROACHING         [pause, wait for cue]
not looking, finished/idle  WAITING_CUE,        [speak]
                            EYE_CONTACT_DONE
not looking, finished/idle  others              [wait for cue]
==========================  ==================  ============================

Second stage
============

* wait_time: busy activity -> ``20.0``, otherwise ``2.0`` (reply keys
  ``wait_time``, ``reason``);
* lose: moving activity -> ``"yes"``, otherwise ``"no"`` (keys ``answer``,
  ``reason``).

The quoted activity is classified with the same keyword table.  Second-stage
answers carry no intent noise (format noise still applies).

Noise
=====

* ``noise`` (default 0.15): with this probability the intent is replaced by
  its alternative (first-stage only, also in constrained mode):

  ===========================  =================
  intent                       alternative
  ===========================  =================
  (pause, eye contact, speak)  (speak)
  (speak)                      (wait for cue)
  (eye contact, speak)         (speak)
  (pause, wait)                (wait)
  (pause, wait for cue)        (wait for cue)
  (wait for cue)               (speak)
  (wait)                       (wait for cue)
  (approach)                   (approach)
  ===========================  =================

* ``off_set_rate`` (default 0.0): with this probability a first-stage free-text
  reply carries an out-of-set action (e.g. "The robot should fetch a cup of
  water.") -- for bottom-up tests.  Never in constrained mode.
* ``format_noise`` (default 0.1): with this probability the JSON is wrapped in
  a ```json fence, or in prose ("Sure! Here is my answer: {...} Let me
  know ..."), or written as a Python dict (``repr``, single quotes).  Never
  applied when the request has a ``response_format`` of type ``json_object``
  or ``json_schema``.

Wording
=======

Free-text replies are ``{"action": <sentence>, "reason": <sentence>}``.  The
action sentence is built from :data:`PARAPHRASES` (>= 6 phrasings per action)
joined with varied connectors ("A, then B", "A and then B",
"A, B, and then C", ...); about half start with "The robot should", the rest
are imperative.  No phrasing reproduces a ``references`` string of
``skills/engage.toml``.

Constrained mode
================

If ``response_format`` carries a JSON schema whose ``properties.action`` has an
``enum`` (shapes ``{"type": "json_object", "schema": {...}}`` and
``{"type": "json_schema", "json_schema": {"schema": {...}}}``), the reply is
plain JSON ``{"action": <action name>, "reason": ...}`` where the action name is
the first intent action that is in the enum (``enum[0]`` if none is).

Determinism
===========

One ``random.Random(seed)`` per policy; :meth:`StandInPolicy.reply` runs under
a lock, so the same sequence of requests yields the same replies.
"""

from __future__ import annotations

import json
import random
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from onboard.testing.tidy_policy import TidyPolicy, is_goal_request, is_tidy_request

Intent = tuple[str, ...]

ACTIONS: tuple[str, ...] = ("approach", "wait", "wait for cue", "eye contact", "pause", "speak")


class RobotState(StrEnum):
    """Robot state as read from the action text of a first-stage request."""

    APPROACHING = "APPROACHING"
    WAITING_ACTIVITY = "WAITING_ACTIVITY"
    WAITING_CUE = "WAITING_CUE"
    EYE_CONTACT_DONE = "EYE_CONTACT_DONE"
    PAUSED = "PAUSED"
    UNKNOWN = "UNKNOWN"


class Activity(StrEnum):
    """Coarse class of the person's activity."""

    FINISHED = "finished"
    BUSY = "busy"
    MOVING = "moving"
    IDLE = "idle"


@dataclass(frozen=True)
class Situation:
    """What the policy extracted from a first-stage request."""

    state: RobotState
    looking: bool
    lost: bool
    activity: Activity


# --------------------------------------------------------------------------- parsing

_STATE_KEYWORDS: tuple[tuple[str, RobotState], ...] = (
    ("waiting for the human to finish", RobotState.WAITING_ACTIVITY),
    ("waiting for an eye contact", RobotState.WAITING_CUE),
    ("made eye contact", RobotState.EYE_CONTACT_DONE),
    ("paused", RobotState.PAUSED),
    ("approaching", RobotState.APPROACHING),
)
_ACTIVITY_PATTERNS: tuple[tuple[Activity, re.Pattern[str]], ...] = (
    (Activity.FINISHED, re.compile(r"\b(?:finished|put away|hung up|ended|is done)")),
    (
        Activity.BUSY,
        re.compile(
            r"\b(?:phone|call|eating|talking with|talking to|conversation|typing|reading|working)"
        ),
    ),
    (Activity.MOVING, re.compile(r"\b(?:walking|leaving|passing|heading)")),
)
_QUOTED = re.compile(r"\"[^\"]*\"")
_ROBOT_SENTENCE = re.compile(r"(?:^|[.!?]\s+)(the robot (?:[^.\"]|\"[^\"]*\")*\.?)")
_FIRST_SENTENCE = re.compile(r"^[^.!?]*[.!?]?\s*")
_SECOND_STAGE_ACTIVITY = re.compile(r"human activity '(.*)',\s*(?:how long|is there)")


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI "parts" form
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str))
    return ""


def last_user_text(messages: object) -> str:
    """Lower-cased, stripped text of the last ``user`` message ("" if none)."""
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content")).strip().lower()
    return ""


def classify_activity(text: str) -> Activity:
    """Activity class of a (lower-cased) person text; see the module table."""
    for activity, pattern in _ACTIVITY_PATTERNS:
        if pattern.search(text):
            return activity
    return Activity.IDLE


def _robot_state(sentence: str) -> RobotState:
    for keyword, state in _STATE_KEYWORDS:
        if keyword in sentence:
            return state
    return RobotState.UNKNOWN


def parse_situation(text: str) -> Situation:
    """Parse a lower-cased first-stage message ``"<U> <X>"``."""
    match = _ROBOT_SENTENCE.search(text)
    if match is not None:
        state = _robot_state(_QUOTED.sub('""', match.group(1)))
        person = text[match.end() :]
    else:
        state = RobotState.UNKNOWN
        person = _FIRST_SENTENCE.sub("", text, count=1)
    unquoted = _QUOTED.sub("", text)
    return Situation(
        state=state,
        looking="is looking at the robot" in unquoted,
        lost="not visible" in unquoted,
        activity=classify_activity(person),
    )


# --------------------------------------------------------------------------- intent

_LOOKING: dict[RobotState, Intent] = {
    RobotState.APPROACHING: ("pause", "eye contact", "speak"),
    RobotState.WAITING_CUE: ("eye contact", "speak"),
    RobotState.WAITING_ACTIVITY: ("eye contact", "speak"),
    RobotState.PAUSED: ("eye contact", "speak"),
    RobotState.EYE_CONTACT_DONE: ("speak",),
    RobotState.UNKNOWN: ("speak",),
}
# "moving" and "finished/idle" share one table (see the module docstring).
_NOT_LOOKING_FREE: dict[RobotState, Intent] = {
    RobotState.APPROACHING: ("pause", "wait for cue"),
    RobotState.WAITING_CUE: ("speak",),
    RobotState.EYE_CONTACT_DONE: ("speak",),
    RobotState.WAITING_ACTIVITY: ("wait for cue",),
    RobotState.PAUSED: ("wait for cue",),
    RobotState.UNKNOWN: ("wait for cue",),
}
NOISE_ALTERNATIVE: dict[Intent, Intent] = {
    ("pause", "eye contact", "speak"): ("speak",),
    ("speak",): ("wait for cue",),
    ("eye contact", "speak"): ("speak",),
    ("pause", "wait"): ("wait",),
    ("pause", "wait for cue"): ("wait for cue",),
    ("wait for cue",): ("speak",),
    ("wait",): ("wait for cue",),
    ("approach",): ("approach",),
}


def primary_intent(situation: Situation) -> Intent:
    """The noise-free intent for a situation (module docstring table)."""
    if situation.lost:
        return ("approach",)
    if situation.looking:
        return _LOOKING[situation.state]
    if situation.activity is Activity.BUSY:
        if situation.state is RobotState.APPROACHING:
            return ("pause", "wait")
        return ("wait",)
    return _NOT_LOOKING_FREE[situation.state]


# --------------------------------------------------------------------------- wording

PARAPHRASES: dict[str, tuple[str, ...]] = {
    "approach": (
        "move closer to the person",
        "head toward where the person was last seen",
        "walk over to the person at a calm pace",
        "close the distance to the person slowly",
        "head back toward the person",
        "keep heading toward the person",
        "go and look for the person again",
    ),
    "wait": (
        "hold on until the person has wrapped up",
        "give the person a moment to finish",
        "stay patient until the activity is over",
        "hang back until the person is free",
        "wait quietly while the person finishes up",
        "let the person complete what they are busy with",
        "keep a polite distance until the person is no longer occupied",
    ),
    "wait for cue": (
        "watch for the person to glance over",
        "wait until the person looks over",
        "hold position until the person shows interest",
        "wait for some sign that the person wants to engage",
        "stay put and wait for the person's attention",
        "keep an eye out for the person looking toward the robot",
        "remain nearby until the person meets the robot's gaze",
    ),
    "eye contact": (
        "meet the person's eyes",
        "look at the person and hold their gaze briefly",
        "face the person and establish eye contact",
        "turn toward the person and look at their face",
        "catch the person's eye",
        "return the person's look",
    ),
    "pause": (
        "stop right there for a moment",
        "come to a halt",
        "hold still briefly",
        "stop approaching for now",
        "freeze in place for a second",
        "put the approach on hold",
    ),
    "speak": (
        'say "Hi, may I help you?"',
        'greet the person with "Hello there, can I help you with anything?"',
        'politely say "Excuse me, is there anything I can do for you?"',
        "offer the person some help",
        "say hello and ask whether the person needs a hand",
        "start talking to the person in a friendly way",
        'ask "Good day! Are you looking for something?"',
    ),
}

OFF_SET_ACTIONS: tuple[str, ...] = (
    "The robot should go back to its charging station.",
    "The robot should fetch a cup of water.",
    "The robot should dance to some music.",
    "The robot should recalibrate its cameras.",
    "The robot should open the door for the person.",
    "The robot should report to the front desk.",
)

_REASONS: dict[str, tuple[str, ...]] = {
    "approach": (
        "The person is out of view, so the robot has to find them again first.",
        "Nobody can be engaged while the person cannot be seen.",
        "Getting the person back in sight comes before anything else.",
    ),
    "wait": (
        "Interrupting someone who is busy would be rude.",
        "The person is occupied right now and may not welcome an interruption.",
        "It is more polite to let the current activity end first.",
    ),
    "wait for cue": (
        "The person has not shown any interest yet, and pushing in may feel intrusive.",
        "A glance from the person would signal that they are open to talking.",
        "Speaking before the person notices the robot could startle them.",
    ),
    "eye contact": (
        "Meeting the person's gaze acknowledges them before any words are said.",
        "Eye contact is a gentle way to show the robot is attentive.",
        "The person is already looking, so returning the look feels natural.",
    ),
    "pause": (
        "Moving closer while the person reacts could make them uneasy.",
        "Stopping first gives the person room to decide whether to engage.",
        "The situation has changed, so continuing to move is not appropriate.",
    ),
    "speak": (
        "The person seems ready, so a friendly greeting is appropriate now.",
        "The person appears open to interaction, so offering help is natural.",
        "This is a good moment to start talking without being intrusive.",
    ),
    "off-set": (
        "This seems like the most useful thing to do right now.",
        "The robot has other duties that need attention.",
    ),
}

_TEMPLATES: dict[int, tuple[str, ...]] = {
    1: ("{0}",),
    2: ("{0}, then {1}", "{0} and {1}", "{0} and then {1}", "first {0}, then {1}"),
    3: ("{0}, {1}, and then {2}", "{0}, then {1}, and finally {2}", "first {0}, then {1}, and {2}"),
}


def render_intent(intent: Intent, rng: random.Random) -> str:
    """One free-text sentence for an intent, e.g. "The robot should A, then B."."""
    phrases = [rng.choice(PARAPHRASES[action]) for action in intent]
    body = rng.choice(_TEMPLATES[len(phrases)]).format(*phrases)
    if rng.random() < 0.5:
        return f"The robot should {body}."
    return f"{body[0].upper()}{body[1:]}."


def render_reason(key: str, rng: random.Random) -> str:
    """A short reason sentence; ``key`` is an action name or "off-set"."""
    return rng.choice(_REASONS[key])


# --------------------------------------------------------------------------- formatting

_PROSE_PREFIXES = ("Sure! Here is my answer: ", "Of course. My suggestion: ", "Here you go: ")
_PROSE_SUFFIXES = (" Let me know if you need anything else.", " Let me know if this helps.")


def format_json(obj: Mapping[str, object], rng: random.Random, probability: float) -> str:
    """``json.dumps(obj)``, or with ``probability`` a fenced / prose / dict variant."""
    text = json.dumps(obj)
    if rng.random() >= probability:
        return text
    variant = rng.randrange(3)
    if variant == 0:
        return f"```json\n{text}\n```"
    if variant == 1:
        return f"{rng.choice(_PROSE_PREFIXES)}{text}{rng.choice(_PROSE_SUFFIXES)}"
    return repr(dict(obj))


def _schema_of(response_format: object) -> object:
    if not isinstance(response_format, dict):
        return None
    schema = response_format.get("schema")
    nested = response_format.get("json_schema")
    if schema is None and isinstance(nested, dict):
        schema = nested.get("schema")
    return schema


def constrained_enum(response_format: object) -> list[str] | None:
    """The ``properties.action.enum`` of a response_format schema, if any."""
    schema = _schema_of(response_format)
    if not isinstance(schema, dict):
        return None
    properties = schema.get("properties")
    action = properties.get("action") if isinstance(properties, dict) else None
    enum = action.get("enum") if isinstance(action, dict) else None
    if not isinstance(enum, list) or not enum:
        return None
    return [str(item) for item in enum]


#: the stand-in's verifier answer: it has no rule to judge a request the runtime could not
#: compile, so it never says done (a judged success is tested with a scripted ask)
_NO_JUDGE = "the stand-in has no rule to judge this request"


def _relation_names(response_format: object) -> set[str] | None:
    """The names a goal schema lets a relation use (its targets' enum), if constrained."""
    schema = _schema_of(response_format)
    try:
        target = schema["properties"]["relations"]["items"]["properties"]["target"]  # type: ignore[index]
        return {str(name) for name in target["enum"]}
    except (KeyError, TypeError):
        return None


def fit_schema(obj: dict[str, object], response_format: object) -> dict[str, object]:
    """``obj`` as a constrained decoder would let it out: keys the schema lacks dropped, a
    string cut at its ``maxLength``, a number moved to the nearest of its ``enum``."""
    schema = _schema_of(response_format)
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return obj
    fitted: dict[str, object] = {}
    for key, value in obj.items():
        sub = properties.get(key)
        if not isinstance(sub, dict):
            continue
        enum = sub.get("enum")
        if isinstance(value, int | float) and isinstance(enum, list) and enum:
            wanted = float(value)
            value = min(enum, key=lambda option: (abs(float(option) - wanted), float(option)))
        limit = sub.get("maxLength")
        if isinstance(value, str) and isinstance(limit, int):
            value = value[:limit]
        fitted[key] = value
    return fitted


def is_json_mode(response_format: object) -> bool:
    """True for response_format types that force plain JSON output."""
    return isinstance(response_format, dict) and response_format.get("type") in (
        "json_object",
        "json_schema",
    )


# --------------------------------------------------------------------------- policy

_WAIT_TIME_REASONS: dict[bool, tuple[str, ...]] = {
    True: (
        "Activities like this usually take a while, so the robot should not cut in quickly.",
        "The person is occupied, and a longer pause avoids an unwelcome interruption.",
    ),
    False: (
        "The person does not seem occupied, so a short pause is enough.",
        "Nothing suggests the person needs more time, so a brief delay is fine.",
    ),
}
_LOSE_REASONS: dict[bool, tuple[str, ...]] = {
    True: (
        "A person on the move can leave the camera's view within a few seconds.",
        "Someone who is walking may be gone before the next image is taken.",
    ),
    False: (
        "The person is likely to stay roughly where they are for that time.",
        "This activity keeps the person in one place, so they should still be there.",
    ),
}
_ACKS: tuple[str, ...] = (
    "Got it. Send me the situation and I will suggest how the robot should act.",
    "Understood. Describe the scene and I will propose a behaviour for the robot.",
)


def _check_probability(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be within [0, 1], got {value!r}")
    return float(value)


class StandInPolicy:
    """Seeded, thread-safe answer policy; :meth:`reply` maps a request body to content."""

    def __init__(
        self,
        seed: int = 0,
        noise: float = 0.15,
        format_noise: float = 0.1,
        off_set_rate: float = 0.0,
    ) -> None:
        self.noise = _check_probability("noise", noise)
        self.format_noise = _check_probability("format_noise", format_noise)
        self.off_set_rate = _check_probability("off_set_rate", off_set_rate)
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._tidy = TidyPolicy(self._rng)

    def reply(self, body: Mapping[str, Any]) -> str:
        """Assistant message content for a chat-completion request body."""
        with self._lock:
            return self._reply(body)

    def _reply(self, body: Mapping[str, Any]) -> str:
        text = last_user_text(body.get("messages"))
        response_format = body.get("response_format")
        noise = 0.0 if is_json_mode(response_format) else self.format_noise
        activity_match = _SECOND_STAGE_ACTIVITY.search(text)
        if activity_match is not None:
            obj = self._second_stage(text, classify_activity(activity_match.group(1)))
            return format_json(fit_schema(obj, response_format), self._rng, noise)
        if text.endswith("understood?"):
            return self._rng.choice(_ACKS)
        if "how the run ended:" in text and "before the run:" in text:  # onboard.llm.judge
            return json.dumps({"done": False, "reason": _NO_JUDGE})
        if is_goal_request(text):  # a scene skill's goal (runtime/testing/tidy_policy.py)
            return self._tidy.goal_reply(text, _relation_names(response_format))
        if is_tidy_request(text):  # the tidy skill (runtime/testing/tidy_policy.py)
            return self._tidy.reply(text, exact=is_json_mode(response_format))
        enum = constrained_enum(response_format)
        if enum is not None:
            return json.dumps(fit_schema(self._constrained(text, enum), response_format))
        return self._first_stage(text, noise)

    def intent(self, text: str) -> Intent:
        """Noised intent for a lower-cased first-stage message (consumes randomness)."""
        primary = primary_intent(parse_situation(text))
        if self._rng.random() < self.noise:
            return NOISE_ALTERNATIVE.get(primary, primary)
        return primary

    def _first_stage(self, text: str, format_noise: float) -> str:
        intent = self.intent(text)
        if self._rng.random() < self.off_set_rate:
            action = self._rng.choice(OFF_SET_ACTIONS)
            reason = render_reason("off-set", self._rng)
        else:
            action = render_intent(intent, self._rng)
            reason = render_reason(intent[-1], self._rng)
        return format_json({"action": action, "reason": reason}, self._rng, format_noise)

    def _constrained(self, text: str, enum: Sequence[str]) -> dict[str, object]:
        intent = self.intent(text)
        name = next((a for a in intent if a in enum), enum[0])
        reason = render_reason(name if name in _REASONS else intent[-1], self._rng)
        return {"action": name, "reason": reason}

    def _second_stage(self, text: str, activity: Activity) -> dict[str, object]:
        obj: dict[str, object]
        if "lose the person" in text or '"answer"' in text:
            moving = activity is Activity.MOVING
            reason = self._rng.choice(_LOSE_REASONS[moving])
            obj = {"answer": "yes" if moving else "no", "reason": reason}
        else:
            busy = activity is Activity.BUSY
            reason = self._rng.choice(_WAIT_TIME_REASONS[busy])
            obj = {"wait_time": 20.0 if busy else 2.0, "reason": reason}
        return obj
