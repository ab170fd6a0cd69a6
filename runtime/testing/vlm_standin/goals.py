"""The stand-in's goal reader: the request's clauses of the form "<verb> the X into/onto the
Y" (and "pick up / hold the X") as relations over the objects of the scene's text, as a model
reading the question would write them. A phrase that names nothing seen (by name, or by a
label only one object has) gives no relation, so such a request is left to the Extra Bot.
It plants no errors: the goal reader is onboard's, not the seed's.
"""

from __future__ import annotations

import re

from onboard.testing.vlm_standin.seeing import View

__all__ = ["read_goal"]

_CLAUSES = re.compile(r"[.;:,!?]| and ")
_STOP = {"into", "in", "inside", "onto", "on", "as", "that", "from", "to", "of", "at", "with"}
_PLACE = re.compile(
    r"\bthe (?P<x>[a-z ]+?) (?P<how>into|inside|in|onto|on top of|on) the (?P<y>[a-z ]+)$"
)
_HOLD = re.compile(r"\b(?:pick up|lift|hold|grab) the (?P<x>[a-z ]+)$")
_KIND = {"into": "in", "inside": "in", "in": "in", "onto": "on", "on top of": "on", "on": "on"}


def _mentions(clause: str) -> list[object]:
    """The phrases after each "the", up to a preposition ("the plate on the left": "plate")."""
    words, found = clause.split(), list[object]()
    for i, word in enumerate(words):
        if word != "the":
            continue
        phrase = []
        for w in words[i + 1 :]:
            if w in _STOP or w == "the":
                break
            phrase.append(w)
        if phrase:
            found.append(" ".join(phrase))
    return found


def _name(phrase: str, view: View) -> str | None:
    if view.named(phrase) is not None:
        return phrase
    labelled = view.with_label(phrase)
    return labelled[0].name if len(labelled) == 1 else None


def read_goal(instruction: str, view: View) -> dict[str, list[object]]:
    """``{"mentions": [...], "relations": [...]}`` for ``instruction`` in ``view``."""
    mentions: list[object] = []
    relations: list[object] = []
    for clause in _CLAUSES.split(instruction.lower()):
        clause = clause.strip()
        mentions += _mentions(clause)
        if (found := _PLACE.search(clause)) is not None:
            x, y = _name(found["x"], view), _name(found["y"], view)
            if x is not None and y is not None:
                kind = _KIND[found["how"]]
                relations.append({"relation": kind, "object": x, "target": y})
        elif (found := _HOLD.search(clause)) is not None:
            x = _name(found["x"], view)
            if x is not None:
                relations.append({"relation": "held", "object": x, "target": "none"})
    return {"mentions": mentions, "relations": relations}
