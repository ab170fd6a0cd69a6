"""The stand-in's answer policy for the tidy skill (a documented rule policy, not a model).

It sees what a real model sees: the last user message of the plan request, which holds the
user's request (``The user asked: "..."``), the robot's current action text, the objects the
camera sees, one per line (``a red block at (0.42, 0.20, 0.02) m, on a blue block``), which
regions hold which objects (``Regions: left side (empty); middle: the yellow block.``), what
the gripper holds, and, on a re-ask, the refused proposals (``Note: refused so far: ...``).

Requests it understands (lower case):

==============================================  ===========================================
request                                         next step until done
==============================================  ===========================================
put / place / stack X on (top of) Y             pick X; place on Y; done when X is on Y
take / remove / lift X off Y                    pick X; place in an empty region; done
                                                when X is on neither Y nor anything raised
put / place / move X in / into / to REGION      pick X; place in REGION; done when X is there
push / slide / nudge X to / into / toward R     push X to R; done when X is in R
hand / give / pass (me) X                       pick X; give; done when holding it out
==============================================  ===========================================

A gripper holding something the request does not need first puts it down in an empty
region. The reply is ``{"action", "object", "target"}``, the action and the object in
everyday words ("pick up", "the red block") so the runtime's mapping and reference
resolution are exercised; under constrained decoding, the exact names the schema lists.

The episode's goal question (``Write the end state the request asks for``, asked once before
the first step: runtime/manip/goal.py) gets the same patterns' relation, and as mentions every
phrase after "the" (up to two words, cut at a preposition or "please") in the request's words;
a request none of the patterns fits gets no relation.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

__all__ = ["TidyPolicy", "TidyView", "is_goal_request", "is_tidy_request"]

_GOAL = re.compile(r'the user asked: "([^"]*)"')
_OBJECT = re.compile(
    r"^(?:a |an |the )?([a-z]+(?: [a-z]+)*?(?: \d+)?) at "
    r"\((-?[\d.]+), (-?[\d.]+), (-?[\d.]+)\) m(.*)$"
)
_ON = re.compile(r"\bon (?:a |an |the )?([a-z]+(?: [a-z]+)*?(?: \d+)?)(?:,|$)")
_HOLDS = re.compile(r"the robot holds the ([a-z ]+?\d*)\.")
_REGIONS = re.compile(r"regions: (.*?)\.(?:\n|$)")
_GIVING = "holding out what it holds"
#: metres: an object's centre above this is taken to rest on another object
RAISED = 0.035

_NAME = r"(?:the )?([a-z]+ [a-z]+)"
_REGIONS_NAMED = ("left side", "right side", "middle")
_REGION = rf"(?:the )?({'|'.join(_REGIONS_NAMED)})"
_STACK = re.compile(rf"(?:put|place|stack|set) {_NAME} on (?:top of )?{_NAME}")
_UNSTACK = re.compile(rf"(?:take|remove|lift) {_NAME} off {_NAME}")
_TO_REGION = re.compile(rf"(?:put|place|move) {_NAME} (?:in|into|to|on|onto) {_REGION}")
_PUSH = re.compile(rf"(?:push|slide|nudge) {_NAME} (?:to|into|toward|towards) {_REGION}")
_GIVE = re.compile(rf"(?:hand|give|pass) (?:me |over )?{_NAME}")

_SAY = {
    "pick": ("pick up", "grasp", "pick"),
    "place": ("place", "put down", "put"),
    "push": ("push", "slide"),
    "give": ("give", "hand over"),
    "done": ("done", "the task is complete"),
}


_GOAL_QUESTION = "write the end state the request asks for"
_ASKED = re.compile(r'the user asked a robot arm above a table: "([^"]*)"')
_MENTION = re.compile(r"\bthe ([a-z]+(?: [a-z]+)?)")
_CUT = {"on", "in", "to", "off", "into", "onto", "of", "please", "and", "from", "at", "toward"}


def is_tidy_request(text: str) -> bool:
    return _GOAL.search(text) is not None


def is_goal_request(text: str) -> bool:
    return _GOAL_QUESTION in text


@dataclass
class TidyView:
    """What the policy read from the request."""

    goal: str
    on: dict[str, str] = field(default_factory=dict)  # object -> what it rests on
    seen: list[str] = field(default_factory=list)
    #: objects whose centre is higher than one resting on the table (on something unseen)
    raised: set[str] = field(default_factory=set)
    regions: dict[str, list[str]] = field(default_factory=dict)
    holding: str | None = None
    giving: bool = False

    @classmethod
    def read(cls, text: str) -> TidyView:
        goal_match = _GOAL.search(text)
        view = cls(goal_match.group(1) if goal_match else "")
        for line in text.splitlines():
            found = _OBJECT.match(line.strip())
            if found is None:
                continue
            name = found.group(1)
            view.seen.append(name)
            if float(found.group(4)) > RAISED:
                view.raised.add(name)
            below = _ON.search(found.group(5))
            if below is not None:
                view.on[name] = below.group(1)
        held = _HOLDS.search(text)
        view.holding = held.group(1) if held else None
        regions = _REGIONS.search(text)
        for part in regions.group(1).split("; ") if regions else []:
            if ":" in part:
                region, inside = part.split(":", 1)
                view.regions[region.strip()] = [
                    o.strip().removeprefix("the ") for o in inside.split(",")
                ]
            else:
                view.regions[part.replace("(empty)", "").strip()] = []
        view.giving = _GIVING in text
        return view

    def empty_region(self) -> str:
        return next((r for r, inside in self.regions.items() if not inside), "left side")


class TidyPolicy:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def step(self, view: TidyView) -> dict[str, str]:
        """The next step as exact names: {"action", "object", "target"}."""
        goal = view.goal.lower()
        if (found := _GIVE.search(goal)) is not None:
            return self._give(view, found.group(1))
        if (found := _UNSTACK.search(goal)) is not None:
            x, y = found.groups()
            if view.holding == x:
                return _step("place", target=view.empty_region())
            if view.on.get(x) != y and x not in view.raised and view.holding is None:
                return _step("done")
            return self._pick(view, x)
        if (found := _STACK.search(goal)) is not None:
            x, y = found.groups()
            if view.holding == x:
                return _step("place", target=y)
            if view.on.get(x) == y and view.holding is None:
                return _step("done")
            return self._pick(view, x)
        if (found := _TO_REGION.search(goal)) is not None:
            x, region = found.groups()
            if view.holding == x:
                return _step("place", target=region)
            if x in view.regions.get(region, []) and view.holding is None:
                return _step("done")
            return self._pick(view, x)
        if (found := _PUSH.search(goal)) is not None:
            x, region = found.groups()
            if view.holding is not None:
                return _step("place", target=view.empty_region())
            if x in view.regions.get(region, []):
                return _step("done")
            return _step("push", x, region)
        return _step("done")

    def _pick(self, view: TidyView, name: str) -> dict[str, str]:
        if view.holding is not None and view.holding != name:
            return _step("place", target=view.empty_region())
        return _step("pick", name)

    def _give(self, view: TidyView, name: str) -> dict[str, str]:
        if view.giving:
            return _step("done")
        if view.holding == name:
            return _step("give")
        return self._pick(view, name)

    def goal_reply(self, text: str, allowed: set[str] | None = None) -> str:
        """The episode's goal as mentions and relations (runtime/manip/goal.py's question);
        ``allowed``: the names the schema lets a relation use (constrained decoding)."""
        asked = _ASKED.search(text)
        request = asked.group(1) if asked else ""
        mentions = []
        for found in _MENTION.finditer(request):
            words = found.group(1).split()
            if words[-1] in _CUT:
                words = words[:-1]
            if words and words[0] not in _CUT:
                mentions.append(" ".join(words))
        seen = sorted(allowed - {"none", *_REGIONS_NAMED}) if allowed else TidyView.read(text).seen

        def name(phrase: str) -> str:  # "the blue one" is the blue block in view
            return next((n for n in seen if n.split()[0] == phrase.split()[0]), phrase)

        relations = []
        request = request.lower()
        if (match := _GIVE.search(request)) is not None:
            relations = [_relation("given", name(match.group(1)))]
        elif (match := _UNSTACK.search(request)) is not None:
            relations = [_relation("off", *map(name, match.groups()))]
        elif (match := _STACK.search(request)) is not None:
            relations = [_relation("on", *map(name, match.groups()))]
        elif (match := _TO_REGION.search(request) or _PUSH.search(request)) is not None:
            relations = [_relation("in", name(match.group(1)), match.group(2))]
        known = allowed or {*seen, *_REGIONS_NAMED, "none"}  # nothing else is sayable
        relations = [r for r in relations if {r["object"], r["target"]} <= known]
        return json.dumps({"mentions": mentions, "relations": relations})

    def reply(self, text: str, exact: bool) -> str:
        """The reply content: exact names (constrained), or everyday words."""
        step = self.step(TidyView.read(text))
        if not exact:
            step["action"] = self.rng.choice(_SAY[step["action"]])
            for key in ("object", "target"):
                if step[key] != "none":
                    step[key] = f"the {step[key]}"
        return json.dumps(step)


def _relation(kind: str, obj: str, target: str = "none") -> dict[str, str]:
    return {"relation": kind, "object": obj, "target": target}


def _step(action: str, obj: str = "none", target: str = "none") -> dict[str, str]:
    return {"action": action, "object": obj, "target": target}
