"""The Extra Bot's verdict, as the stand-in gives it: whether the task is done, judged from
the scene after the run (its text: what rests on and in what, what the gripper holds), and
the SayCan step: the next call of its own plan for the scene as it is now.

What each task needs after the run: 1 a food held out; 2 the red block in the box; 3 the
goal picture's order stacked, its bottom on the table; 4 the blocks on the conveyor (y near
0) in the instruction's order from its end (the larger x); 5 the apple on the left plate
(the larger y), the lemon on the right one, the orange on neither; 6 a block not seen before
the run now on the table; 7 the duck in the box, the teddy not.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence

from onboard.testing.vlm_standin.matching import Action, plan_actions
from onboard.testing.vlm_standin.programs import FOODS, write
from onboard.testing.vlm_standin.seeing import View
from onboard.testing.vlm_standin.tasks import colour_order

__all__ = ["BELT_Y", "done", "saycan_step"]

#: the robot API's calls that act (the rest only look)
ACTIONS = frozenset(
    {"pick", "place", "put_in", "give_me", "open_drawer", "close_drawer", "move_to", "wait",
     "wait_until_at", "home"}
)  # fmt: skip
#: metres from the conveyor's middle line (y = 0) an object on it lies at most
BELT_Y = 0.06


def _in(view: View, name: str, container: str) -> bool:
    thing = view.named(name)
    return thing is not None and container in (thing.inside, thing.on)


def _where(view: View, name: str) -> str:
    thing = view.named(name)
    if thing is None:
        return "not seen"
    if view.held == name:
        return "in the gripper"
    if thing.inside:
        return f"in the {thing.inside}"
    return f"on the {thing.on}" if thing.on else "somewhere"


def done(
    task: int | None,
    instruction: str,
    after: View,
    before: View,
    goal: Sequence[str],
    ended: str,
) -> tuple[bool, str]:
    """Whether the task is done in ``after``, and why (or what is wrong)."""
    if task == 1:
        if after.held is not None and after.held.split(" ")[0] in FOODS:
            return True, f"the {after.held} is held out to the person"
        foods = [t.name for f in FOODS for t in before.with_label(f)] or ["food"]
        return (
            False,
            f"the {foods[0]} is not handed over: the gripper holds {after.held or 'nothing'}",
        )
    if task == 2:
        if _in(after, "red block", "box"):
            return True, "the red block is in the box"
        why = f"the red block is not in the box: it is {_where(after, 'red block')}"
        above = after.on_top_of("red block")
        if above:
            why += "; " + ", ".join(f"the {n}" for n in above) + " still on it (unstack first)"
        return False, why
    if task == 3:
        return _stacked(after, goal)
    if task == 4:
        return _belt(after, colour_order(instruction))
    if task == 5:
        return _plates(after)
    if task == 6:
        seen = set(before.names())
        out = [
            t.name
            for t in after.things
            if t.label.endswith("block") and t.name not in seen and t.inside is None
        ]
        if out and after.held not in out:
            return True, f"the {out[0]} came out of the drawer and lies on the table"
        still = [t.name for t in after.things if t.inside and "drawer" in t.inside]
        if still:
            return False, f"the {still[0]} is still in the drawer"
        return False, "no block came out of the drawer: open the drawer, then take the block out"
    if task == 7:
        if not _in(after, "duck", "box"):
            return False, f"the duck is not in the box: it is {_where(after, 'duck')}"
        if _in(after, "teddy", "box"):
            return False, "the teddy is in the box too; only the bird toy belongs there"
        return True, "the duck is in the box"
    if ended == "ok":
        return True, "the program ran to its end"
    return False, f"the program ended with {ended}"


def _stacked(after: View, goal: Sequence[str]) -> tuple[bool, str]:
    if len(goal) < 2:
        tall = max((after.on_top_of(t.name) for t in after.things), key=len, default=[])
        if len(tall) >= 2:
            return True, "the blocks are stacked"
        return False, "the blocks are not stacked"
    bottom = after.named(goal[0])
    if bottom is None or bottom.on not in (None, "table"):
        return False, f"the {goal[0]} is not on the table at the bottom of the stack"
    for lower, upper in itertools.pairwise(goal):
        thing = after.named(upper)
        if thing is None or thing.on != lower:
            return False, f"the {upper} is not on the {lower}: it is {_where(after, upper)}"
    return True, "the blocks are stacked as in the picture"


def _belt(after: View, order: Sequence[str]) -> tuple[bool, str]:
    on_belt = [t for t in after.things if t.position is not None and abs(t.position[1]) < BELT_Y]
    off = [b for b in order if b not in {t.name for t in on_belt}]
    if off:
        return False, f"the {off[0]} is not on the conveyor"
    found = [t.name for t in sorted(on_belt, key=lambda t: -(t.position or (0, 0, 0))[0])]
    found = [n for n in found if n in order]
    if found != list(order):
        words = ", ".join(n.split(" ")[0] for n in found)
        want = ", ".join(n.split(" ")[0] for n in order)
        return False, f"from the conveyor's end the blocks are {words}, not {want}"
    return True, "the blocks are in the order asked, from the conveyor's end"


def _plates(after: View) -> tuple[bool, str]:
    plates = [t for t in after.with_label("plate") if t.position is not None]
    if len(plates) < 2:
        return False, "I do not see both plates"
    left = max(plates, key=lambda t: (t.position or (0, 0, 0))[1]).name
    right = min(plates, key=lambda t: (t.position or (0, 0, 0))[1]).name
    if not _in(after, "apple", left):
        return False, f"the apple is not on the left plate: it is {_where(after, 'apple')}"
    if not _in(after, "lemon", right):
        return False, f"the lemon is not on the right plate: it is {_where(after, 'lemon')}"
    if any(_in(after, "orange", p.name) for p in plates):
        return False, "the orange is on a plate; it should have been left on the conveyor"
    return True, "the apple is on the left plate and the lemon on the right one"


def _parse_step(step: str) -> tuple[str, object]:
    """A listed step's call name and first argument: ``pick(red block)`` (the runtime's
    bare label), ``place([0.4, 0.2])``, or a quoted ``pick("red block")``."""
    match = re.fullmatch(r"(\w+)\((.*)\)", step.strip())
    if match is None:
        return step.strip(), None
    name, text = match.group(1), match.group(2).strip()
    if not text:
        return name, None
    try:
        return name, json.loads(text)
    except ValueError:
        return name, text


_API_OF = {
    "pick": ("pick",),
    "put": ("place", "put_in"),
    "give": ("give_me",),
    "open": ("open_drawer",),
    "close": ("close_drawer",),
    "home": ("home",),
    "wait": ("wait", "wait_until_at"),
    "move": ("move_to",),
}
#: metres from every object seen a point must be to be a free spot
FREE = 0.08


def saycan_step(
    task: int | None, instruction: str, scene: View, taken: Sequence[str], steps: Sequence[str]
) -> str:
    """The next step of the stand-in's own plan for the scene as it is now, one of
    ``steps``: its plan's actions read as the Inner Bot reads them, the first one not done
    yet matched to a listed step by the call's name and the object it names."""
    fallback = "done" if "done" in steps else steps[-1]
    taken_calls = [_parse_step(s) for s in taken]
    finished, _ = done(task, instruction, scene, scene, [], "ok")
    if task == 1:
        finished = any(name == "give_me" for name, _ in taken_calls)
    if task == 6:
        finished = any(name in ("place", "put_in") for name, _ in taken_calls)
    if finished:
        return fallback
    draft = write(task, scene, instruction, [], [])
    actions = plan_actions(draft.plan(), scene.names())
    if scene.held is not None:
        picked = [i for i, a in enumerate(actions) if a.kind == "pick" and a.thing == scene.held]
        # held but not in the plan: put down out of the way first
        aside = [Action("put", None, 0, "Place it on a free spot on the table.")]
        actions = actions[picked[0] + 1 :] if picked else aside
    listed = [(s, *_parse_step(s)) for s in steps]
    for action in actions:
        if action.kind == "open" and any(n == "open_drawer" for n, _ in taken_calls):
            continue
        options = [(s, arg) for s, name, arg in listed if name in _API_OF[action.kind]]
        if action.thing is not None:
            options = [o for o in options if o[1] in (action.thing, None)] or options
        elif action.kind == "put":
            points = [o for o in options if isinstance(o[1], list) and _free(scene, o[1])]
            options = points or options
        if options:
            return options[0][0]
    return fallback


def _free(scene: View, point: list[object]) -> bool:
    if len(point) < 2 or not all(isinstance(v, int | float) for v in point[:2]):
        return False
    x, y = float(point[0]), float(point[1])  # type: ignore[arg-type]
    return all(
        t.position is None or abs(t.position[0] - x) >= FREE or abs(t.position[1] - y) >= FREE
        for t in scene.things
    )
