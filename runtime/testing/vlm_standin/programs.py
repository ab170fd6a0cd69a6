"""The stand-in VLM's Decision replies: a plan and a program per task, written from templates
in the spirit of the hand-written solutions (``skills/tasks/code/task1..7.py``) and filled
with what it saw, with the planted errors written in.

A :class:`Draft` keeps the plan's steps and the program's lines, each line tagged with the
step it does (or with none: helpers, perception), so a ``mismatch`` can leave out one
action step's lines and nothing else.

What the stand-in knows of the workcell beyond the image, as the hand-written solutions do:
free spots on the table, where the conveyor starts and ends and the spots beside it, and
where on the table a block taken out of the drawer goes.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from onboard.testing.vlm_standin.seeing import View
from onboard.testing.vlm_standin.tasks import colour_order

__all__ = ["FOODS", "Draft", "write"]

FOODS = ("apple", "banana", "orange", "lemon")
#: free spots on the table, robot base frame (as skills/tasks/code/task2.py)
SPOTS = "[[0.36, -0.3], [0.55, -0.3], [0.34, 0.05], [0.55, 0.05]]"
#: the conveyor: where blocks are put on it, its end stop, the spots beside it (task4.py)
BELT_START, BELT_END, ASIDE = (0.26, 0.0), (0.56, 0.0), ((0.34, 0.2), (0.44, 0.2), (0.54, 0.2))
#: where a block taken out of the drawer is put (task6.py)
OUT_OF_DRAWER = "[0.35, -0.08]"

_FREE_SPOT = f"""SPOTS = {SPOTS}


def free_spot(taken):
    for spot in SPOTS:
        clear = True
        for name in detect():
            x, y, z = where(name)
            if abs(x - spot[0]) < 0.08 and abs(y - spot[1]) < 0.08:
                clear = False
        if clear and spot not in taken:
            return spot
    return SPOTS[len(taken) % len(SPOTS)]


taken = []"""

# what is stacked on a block is looked up when the program runs (a name the robot gives a
# block may differ from the one the image suggests: "yellow block 2"), top first
_TOP_OF = """

def top_of(name):
    base = where(name)
    top = None
    for other in detect():
        x, y, z = where(other)
        if other != name and abs(x - base[0]) < 0.03 and abs(y - base[1]) < 0.03:
            if z > base[2] + 0.01 and (top is None or z > where(top)[2]):
                top = other
    return top
"""


@dataclass
class Draft:
    steps: list[tuple[str, bool]] = field(default_factory=list)  # (text, is an action)
    lines: list[tuple[str, int | None]] = field(default_factory=list)

    def step(self, text: str, *lines: str, action: bool = True) -> int:
        self.steps.append((text, action))
        k = len(self.steps) - 1
        self.add(k, *lines)
        return k

    def add(self, k: int | None, *lines: str) -> None:
        for chunk in lines:
            self.lines += [(line, k) for line in chunk.split("\n")]

    def code(self, *lines: str) -> None:
        self.add(None, *lines)

    def droppable(self) -> list[int]:
        """The action steps whose lines can be left out with the program still parsing."""
        return [
            k
            for k, (_, action) in enumerate(self.steps)
            if action and any(t == k for _, t in self.lines) and _parses(self.program(k))
        ]

    def program(self, drop: int | None = None) -> str:
        return "\n".join(line for line, k in self.lines if drop is None or k != drop) + "\n"

    def plan(self) -> list[str]:
        return [text for text, _ in self.steps]

    def reply(self, drop: int | None = None, fenced: bool = True) -> str:
        plan = "\n".join(f"{i}. {text}" for i, text in enumerate(self.plan(), 1))
        code = self.program(drop)
        body = f"```python\n{code}```" if fenced else code
        return f"PLAN:\n{plan}\nCODE:\n{body}"


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def _q(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _look(view: View, more: str = "") -> str:
    return f"Look at the table: I see {view.listing()}{more}."


def write(
    task: int | None, view: View, instruction: str, planted: Sequence[str], goal: Sequence[str]
) -> Draft:
    """The draft for ``task`` (None: not one of the seven) from what was seen, with the
    planted kinds that change the plan (``unstack``, ``wrong_fruit``, ``no_open_drawer``)
    written in; ``goal``: the blocks' order bottom to top read from a goal picture."""
    if task == 1:
        return _hungry(view)
    if task == 2:
        return _tower(view, "unstack" in planted)
    if task == 3:
        return _picture(view, goal)
    if task == 4:
        return _belt_order(view, instruction)
    if task == 5:
        return _belt_fruit(view, "wrong_fruit" in planted)
    if task == 6:
        return _drawer(view, "no_open_drawer" in planted)
    if task == 7:
        return _bird(view)
    draft = Draft()
    draft.step(_look(view), "names = detect()", 'print("seen:", names)', action=False)
    return draft


def _hungry(view: View) -> Draft:
    draft = Draft()
    foods = [t.name for f in FOODS for t in view.with_label(f)]
    if foods:
        food = foods[0]
        draft.step(_look(view, f"; the {food} can be eaten"), "names = detect()", action=False)
        draft.code(f'print("food:", {_q(food)})')
        draft.step(f"Pick up the {food}.", f"pick({_q(food)})")
    else:
        draft.step(
            _look(view, "; none of it looks like food: find something to eat"),
            "detect()",
            'food = find("something to eat")',
            'print("food:", food)',
            action=False,
        )
        draft.step("Pick up the food.", "pick(food)")
    draft.step("Hand it to the person.", "give_me()")
    return draft


def _stack_words(view: View, bottom: str) -> str:
    above = view.on_top_of(bottom)
    if not above:
        return ""
    pairs = zip([bottom, *above], above, strict=False)
    return "; " + ", ".join(f"the {upper} is on the {lower}" for lower, upper in pairs)


def _clear(draft: Draft, names: Sequence[tuple[str, str | None]]) -> None:
    """Take each block (top first) off the stack on its base (None: the block itself,
    from what it stands on) to a free spot."""
    if names and not any(line.startswith("SPOTS") for line, _ in draft.lines):
        draft.code(_FREE_SPOT + _TOP_OF)
    for name, base in names:
        call = f"pick(top_of({_q(base)}))" if base is not None else f"pick({_q(name)})"
        draft.step(f"Take the {name} off the stack: pick it up.", call)
        draft.step(
            "Place it on a free spot on the table.",
            "spot = free_spot(taken)",
            "place(spot)",
            "taken.append(spot)",
        )


def _tower(view: View, unstack: bool) -> Draft:
    draft = Draft()
    red = "red block"
    box = next((t.name for t in view.with_label("box")), "box")
    if unstack:  # the seed's error: the red block grabbed with the stack still on it
        draft.step(_look(view), "detect()", action=False)
    else:
        draft.step(_look(view, _stack_words(view, red)), "detect()", action=False)
        _clear(draft, [(name, red) for name in reversed(view.on_top_of(red))])
    draft.step(f"Pick up the {red}.", f"pick({_q(red)})")
    draft.step(f"Put it into the {box}.", f"put_in({_q(box)})")
    draft.step("Go home.", "home()")
    return draft


def _picture(view: View, goal: Sequence[str]) -> Draft:
    blocks = [t.name for t in view.things if t.label.endswith("block")]
    order = [b for b in goal if b in blocks] or sorted(blocks)[:3]
    draft = Draft()
    if len(goal) >= 2:
        words = ", ".join(f"the {b}" for b in goal[1:-1])
        read = f"the {goal[0]} at the bottom" + (f", {words} on it" if words else "")
        read += f", the {goal[-1]} on top"
    else:
        read = "I cannot see the picture's order; I stack " + ", ".join(order)
    draft.step(f"Read the picture: {read}. {_look(view)}", "detect()", action=False)
    kept = _kept(view, order)
    clear: list[tuple[str, str | None]] = []

    def take_off(base: str) -> None:
        done = {name for name, _ in clear}
        clear.extend((a, base) for a in reversed(view.on_top_of(base)) if a not in done)

    if kept:
        take_off(order[kept - 1])
    for name in order[kept:]:
        take_off(name)
    # the bottom block standing on another goes to the table first
    moved = {name for name, _ in clear}
    if order and not kept and view.named(order[0]) is not None and order[0] not in moved:
        clear.append((order[0], None))
    _clear(draft, clear)
    for i in range(max(kept, 1), len(order)):
        draft.step(f"Pick up the {order[i]}.", f"pick({_q(order[i])})")
        draft.step(f"Place it on the {order[i - 1]}.", f"place({_q(order[i - 1])})")
    draft.step("Go home.", "home()")
    if order:
        draft.code(f'print("stacked:", objects_on({_q(order[0])}))')
    return draft


def _kept(view: View, order: Sequence[str]) -> int:
    """How many of ``order`` stand right already: the bottom one on the table, then each on
    the one before."""
    if not order or not _rests_on_table(view, order[0]):
        return 0
    kept = 1
    while kept < len(order) and (t := view.named(order[kept])) and t.on == order[kept - 1]:
        kept += 1
    return kept


def _rests_on_table(view: View, name: str) -> bool:
    thing = view.named(name)
    return thing is not None and thing.on in (None, "table") and thing.inside is None


def _belt_order(view: View, instruction: str) -> Draft:
    seen = [t.name for t in view.things if t.label.endswith("block")]
    order = [b for b in colour_order(instruction) if b in seen] or seen
    draft = Draft()
    draft.step(_look(view), "detect()", action=False)
    end_x, end_y = BELT_END
    draft.step(
        "Wait until the blocks have come to the conveyor's end and stopped.",
        *(f"wait_until_at({_q(b)}, {end_x - 0.04}, {end_y}, 0.05, 20.0)" for b in order),
        "wait(2.0)",
    )
    for name, (x, y) in zip(order, ASIDE, strict=False):
        draft.step(f"Pick up the {name}.", f"pick({_q(name)})")
        draft.step("Place it aside on the table.", f"place([{x}, {y}])")
    for i, name in enumerate(order):
        draft.step(f"Pick up the {name}.", f"pick({_q(name)})")
        draft.step(
            "Put it on the conveyor at its start.", f"place([{BELT_START[0]}, {BELT_START[1]}])"
        )
        draft.step(
            "Wait until it has queued at the end.",
            f"wait_until_at({_q(name)}, {round(end_x - 0.04 * i, 3)}, {end_y}, 0.02, 20.0)",
        )
    draft.step("Go home.", "home()")
    return draft


def _belt_fruit(view: View, wrong: bool) -> Draft:
    first = "orange" if wrong else "apple"  # the seed's error: the wrong fruit
    draft = Draft()
    draft.step("Wait for the fruit to ride to the conveyor's end.", "wait(8.0)")
    plates = " and the two plates" if len(view.with_label("plate")) >= 2 else ""
    fruit = ", ".join(f"the {t.name}" for f in FOODS for t in view.with_label(f)) or "no fruit"
    draft.step(
        f"Look at the conveyor: I see {fruit}{plates}; the left plate is the one to the "
        "robot's left.",
        "names = detect()",
        'plates = [n for n in names if n.startswith("plate")]',
        "left = plates[0]",
        "right = plates[0]",
        "for plate in plates:",
        "    if where(plate)[1] > where(left)[1]:",
        "        left = plate",
        "    if where(plate)[1] < where(right)[1]:",
        "        right = plate",
        'print("left:", left, "right:", right)',
        action=False,
    )
    draft.code("moved = []", "for attempt in range(4):", "    for name in detect():")
    draft.code(f"        if name.startswith({_q(first)}) and {_q(first)} not in moved:")
    draft.step(f"Pick up the {first}.", "            pick(name)")
    draft.step("Put it onto the left plate.", "            put_in(left)")
    draft.code(f"            moved.append({_q(first)})")
    draft.code('        elif name.startswith("lemon") and "lemon" not in moved:')
    draft.step("Pick up the lemon.", "            pick(name)")
    draft.step("Put it onto the right plate.", "            put_in(right)")
    draft.code('            moved.append("lemon")', 'print("moved:", moved)')
    draft.step("Go home.", "home()")
    return draft


def _drawer(view: View, no_open: bool) -> Draft:
    draft = Draft()
    drawer = next((t.name for t in view.with_label("drawer")), "drawer")
    inside = [t.name for t in view.things if t.inside == drawer and t.label.endswith("block")]
    if inside:  # the drawer stands open and the block shows
        block = inside[0]
        draft.step(_look(view, f"; the {block} is in the open {drawer}"), "detect()", action=False)
        draft.step(f"Pick up the {block}.", f"pick({_q(block)})")
    elif no_open:  # the seed's error: the block taken from the drawer without opening it
        draft.step(_look(view), "detect()", action=False)
        draft.step(
            "Find the block in the drawer.",
            'block = find("the block in the drawer")',
            'print("the block:", block)',
            action=False,
        )
        draft.step("Pick it up.", "pick(block)")
    else:
        draft.step(
            _look(view, f"; the {drawer} is closed, the block in it is hidden"),
            "before = detect()",
            action=False,
        )
        draft.step(f"Open the {drawer}.", f"open_drawer({_q(drawer)})")
        draft.step(
            "Look again: the block that appeared is the one from the drawer.",
            "after = detect()",
            'found = [n for n in after if n not in before and n.endswith("block")]',
            'print("in the drawer:", found)',
            action=False,
        )
        draft.step("Pick up that block.", "pick(found[0])")
    draft.step("Place it on the table, in front of the drawer.", f"place({OUT_OF_DRAWER})")
    draft.step("Go home.", "home()")
    return draft


def _bird(view: View) -> Draft:
    draft = Draft()
    box = next((t.name for t in view.with_label("box")), "box")
    ducks = [t.name for t in view.with_label("duck")]
    if ducks:
        bird = ducks[0]
        draft.step(_look(view, f"; the {bird} looks like a bird"), "detect()", action=False)
        draft.step(f"Pick up the {bird}.", f"pick({_q(bird)})")
    else:
        draft.step(
            _look(view, "; I find the toy that looks like a bird"),
            "detect()",
            'bird = find("a toy bird")',
            'print("the bird:", bird)',
            action=False,
        )
        draft.step("Pick up the bird.", "pick(bird)")
    draft.step(f"Put it into the {box}.", f"put_in({_q(box)})")
    draft.step("Go home.", "home()")
    return draft
