"""Overcooked-AI's kitchen as plain data, its one-line rules for infeasible actions, its
text, and a greedy two-chef plan.

Pure Python with no simulator behind it, so the team stand-in may import it (the only module
of ``onboard.collab`` it imports; tests/test_layers.py holds that): the Overcooked team env
builds a :class:`Kitchen` from the package's raw state (and steps the raw env for the
dynamics), and the team stand-in builds one from the prompt's ``## State`` text. Both judge
feasibility and useful actions with the functions here, so the stand-in reads nothing but
text.

Coordinates are the package's: (x, y), x grows east, y grows south; terrain letters: ``X``
counter, ``O`` onion dispenser, ``D`` dish dispenser, ``P`` pot, ``S`` serving counter,
space floor.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "DIRECTIONS",
    "INTERACT",
    "MOVES",
    "WAIT",
    "Chef",
    "Kitchen",
    "describe",
    "parse",
    "reason",
    "useful",
]

Pos = tuple[int, int]
WAIT, INTERACT = "WAIT", "INTERACT"
#: move verb -> (dx, dy)
DIRECTIONS: dict[str, Pos] = {"NORTH": (0, -1), "SOUTH": (0, 1), "EAST": (1, 0), "WEST": (-1, 0)}
MOVES = tuple(DIRECTIONS)
FACING = {d: verb.lower() for verb, d in DIRECTIONS.items()}
NAMES = {"X": "counter", "O": "onion dispenser", "D": "dish dispenser", "P": "pot",
         "S": "serving counter", " ": "floor"}  # fmt: skip
ITEMS = ("onion", "dish", "soup")


@dataclass(frozen=True)
class Chef:
    name: str
    pos: Pos
    facing: Pos
    held: str  # "" (nothing), "onion", "dish" or "soup"
    soup: int = 0  # onions in a held soup


@dataclass(frozen=True)
class Kitchen:
    grid: tuple[str, ...]
    chefs: tuple[Chef, ...]
    pots: tuple[tuple[Pos, int, int], ...]  # (pot, onions, cooking tick: -1 not started)
    counters: tuple[tuple[Pos, str, int], ...]  # (counter, item, onions in a soup) per item
    soup_onions: int  # onions a soup takes
    cook_time: int

    def tile(self, pos: Pos) -> str:
        x, y = pos
        if 0 <= y < len(self.grid) and 0 <= x < len(self.grid[y]):
            return self.grid[y][x]
        return "X"

    def chef(self, name: str) -> Chef:
        return next(c for c in self.chefs if c.name == name)

    def pot(self, pos: Pos) -> tuple[int, int]:
        """(onions, tick) of the pot at ``pos``; (0, -1) when empty."""
        return next(((n, t) for p, n, t in self.pots if p == pos), (0, -1))

    def item_on(self, pos: Pos) -> str:
        return next((i for p, i, _ in self.counters if p == pos), "")

    def where(self, letter: str) -> list[Pos]:
        return [(x, y) for y, row in enumerate(self.grid) for x, c in enumerate(row) if c == letter]


def _add(a: Pos, b: Pos) -> Pos:
    return a[0] + b[0], a[1] + b[1]


def _at(pos: Pos) -> str:
    return f"({pos[0]},{pos[1]})"


def _pot_status(k: Kitchen, onions: int, tick: int) -> str:
    if tick < 0:
        return f"{onions} of {k.soup_onions} onions, not cooking"
    if tick >= k.cook_time:
        return f"soup of {onions} onions ready"
    return f"soup of {onions} onions cooking, {k.cook_time - tick} more steps"


# -- the rules: why an action is infeasible --------------------------------------------------


def reason(k: Kitchen, agent: str, action: str, chosen: Mapping[str, str]) -> str | None:
    """Why ``agent`` cannot do ``action`` (a move or INTERACT) now, one line; None if it can.
    A move into a wall, counter or station turns the chef to face it (the raw env's rule, how
    a chef faces what it will interact with), so it is infeasible only when the chef faces it
    already; ``chosen`` holds the earlier chefs' actions this step."""
    me = k.chef(agent)
    if action in DIRECTIONS:
        ahead = _add(me.pos, DIRECTIONS[action])
        kind = k.tile(ahead)
        if kind != " " and me.facing == DIRECTIONS[action]:
            name = NAMES.get(kind, "wall")
            return f"the {name} at {_at(ahead)} blocks {agent}, who already faces it"
        return None
    if action != INTERACT:
        return f"no action {action!r}"
    front = _add(me.pos, me.facing)
    kind, what = k.tile(front), f"the {NAMES.get(k.tile(front), 'wall')} at {_at(front)}"
    for other, act in chosen.items():
        if (
            other != agent
            and act == INTERACT
            and _add(k.chef(other).pos, k.chef(other).facing) == front
        ):
            return f"{other} interacts with {what} this step"
    held = me.held
    if kind == " ":
        return f"{agent} faces the floor at {_at(front)}: nothing to interact with"
    if kind == "X":
        item = k.item_on(front)
        if held and item:
            return f"{what} already holds a{'n' if item == 'onion' else ''} {item}"
        if not held and not item:
            return f"{what} is empty and {agent} holds nothing"
        return None
    if kind in "OD":
        return f"{agent} already holds a{'n' if held == 'onion' else ''} {held}" if held else None
    if kind == "S":
        return None if held == "soup" else f"only a soup can be served at {what}"
    if kind == "P":
        onions, tick = k.pot(front)
        if held == "":
            if tick >= 0 or onions == 0:
                return f"{what} has nothing to start cooking ({_pot_status(k, onions, tick)})"
            return None
        if held == "onion":
            if tick >= 0 or onions >= k.soup_onions:
                return f"{what} takes no more onions ({_pot_status(k, onions, tick)})"
            return None
        if held == "dish":
            return None if 0 <= k.cook_time <= tick else (
                f"{what} has no soup ready ({_pot_status(k, onions, tick)})")  # fmt: skip
        return f"{agent} already holds a soup: serve it"
    return f"{agent} faces a wall at {_at(front)}"


# -- the text ------------------------------------------------------------------------------


def describe(k: Kitchen) -> list[str]:
    lines = [
        "Kitchen map (x grows east, y grows south; X counter, O onion dispenser, "
        "D dish dispenser, P pot, S serving counter, blank floor):"
    ]
    lines += [f"row {y}: |{row}|" for y, row in enumerate(k.grid)]
    for letter in "ODPS":
        places = ", ".join(_at(p) for p in k.where(letter))
        lines.append(f"{NAMES[letter].capitalize()}s at: {places}")
    lines.append(f"A soup takes {k.soup_onions} onions and cooks {k.cook_time} steps after an "
                 "empty-handed chef INTERACTs with the pot.")  # fmt: skip
    for c in k.chefs:
        held = "nothing" if not c.held else f"a soup of {c.soup} onions" if c.held == "soup" else (
            f"a{'n' if c.held == 'onion' else ''} {c.held}")  # fmt: skip
        lines.append(f"{c.name}: at {_at(c.pos)}, facing {FACING[c.facing]} "
                     f"(towards {_at(_add(c.pos, c.facing))}), holding {held}")  # fmt: skip
    for pos in k.where("P"):
        onions, tick = k.pot(pos)
        lines.append(f"Pot {_at(pos)}: {'empty' if onions == 0 else _pot_status(k, onions, tick)}")
    counters = ", ".join(f"{item}{f' of {n} onions' if item == 'soup' else ''} at {_at(p)}"
                         for p, item, n in k.counters) or "none"  # fmt: skip
    lines.append(f"Items on counters: {counters}")
    return lines


_CHEF = re.compile(r"^(\w+): at \((\d+),(\d+)\), facing (north|south|east|west) .*holding "
                   r"(nothing|an? (onion|dish)|a soup of (\d+) onions)$")  # fmt: skip
_POT = re.compile(r"^Pot \((\d+),(\d+)\): (empty|(\d+) of \d+ onions, not cooking|soup of (\d+) "
                  r"onions (ready|cooking, (\d+) more steps))$")  # fmt: skip


def parse(text: str) -> Kitchen:
    """A Kitchen from :func:`describe`'s lines (other lines are skipped); ValueError when the
    text is not a kitchen."""
    grid: list[str] = []
    chefs: list[Chef] = []
    pots: list[tuple[Pos, int, int]] = []
    counters: list[tuple[Pos, str, int]] = []
    soup_onions = cook_time = 0
    pending: list[tuple[Pos, int, int]] = []  # cooking pots: tick needs the cook time
    for line in (raw.strip() for raw in text.splitlines()):
        if m := re.fullmatch(r"row \d+: \|(.*)\|", line):
            grid.append(m.group(1))
        elif m := re.match(r"A soup takes (\d+) onions and cooks (\d+) steps", line):
            soup_onions, cook_time = int(m.group(1)), int(m.group(2))
        elif m := _CHEF.match(line):
            held = m.group(6) or ("soup" if m.group(7) else "")
            facing = DIRECTIONS[m.group(4).upper()]
            chefs.append(Chef(m.group(1), (int(m.group(2)), int(m.group(3))), facing, held,
                              int(m.group(7) or 0)))  # fmt: skip
        elif m := _POT.match(line):
            pos = (int(m.group(1)), int(m.group(2)))
            if m.group(4):
                pots.append((pos, int(m.group(4)), -1))
            elif m.group(5):
                pending.append((pos, int(m.group(5)), int(m.group(7) or 0)))
        elif line.startswith("Items on counters: ") and not line.endswith("none"):
            for part in line.removeprefix("Items on counters: ").split(", "):
                m = re.fullmatch(r"(onion|dish|soup)(?: of (\d+) onions)? at \((\d+),(\d+)\)",
                                 part.strip())  # fmt: skip
                if m:
                    pos = (int(m.group(3)), int(m.group(4)))
                    counters.append((pos, m.group(1), int(m.group(2) or 0)))
    if not grid or not chefs or not soup_onions:
        raise ValueError("the state does not read as an Overcooked kitchen")
    for pos, onions, left in pending:
        pots.append((pos, onions, cook_time - left))
    return Kitchen(tuple(grid), tuple(chefs), tuple(sorted(pots)), tuple(sorted(counters)),
                   soup_onions, cook_time)  # fmt: skip


# -- the greedy plan -------------------------------------------------------------------------


def _region(k: Kitchen, start: Pos) -> dict[Pos, int]:
    """Floor tiles reachable from ``start`` (chefs ignored) -> distance."""
    seen = {start: 0}
    queue = deque([start])
    while queue:
        pos = queue.popleft()
        for d in DIRECTIONS.values():
            nxt = _add(pos, d)
            if nxt not in seen and k.tile(nxt) == " ":
                seen[nxt] = seen[pos] + 1
                queue.append(nxt)
    return seen


def _spots(k: Kitchen, region: Iterable[Pos], target: Pos) -> list[Pos]:
    return [p for p in region if abs(p[0] - target[0]) + abs(p[1] - target[1]) == 1]


def _reaches(k: Kitchen, chef: Chef, target: Pos) -> bool:
    return bool(_spots(k, _region(k, chef.pos), target))


def _route(k: Kitchen, me: Chef, target: Pos, blocked: set[Pos]) -> tuple[int, str]:
    """The fewest actions until ``me`` stands beside ``target`` facing it (a move into
    something that is not floor only turns the chef), avoiding ``blocked`` floor, and the
    first of them (INTERACT when it faces ``target`` already); (10**6, WAIT) when no way."""
    start = (me.pos, me.facing)
    first: dict[tuple[Pos, Pos], str] = {start: ""}
    queue = deque([(start, 0)])
    while queue:
        (pos, facing), cost = queue.popleft()
        if _add(pos, facing) == target and k.tile(pos) == " ":
            return cost, first[(pos, facing)] or INTERACT
        for verb, d in DIRECTIONS.items():
            ahead = _add(pos, d)
            if k.tile(ahead) == " ":
                if ahead in blocked:
                    continue
                nxt = (ahead, d)
            else:
                nxt = (pos, d)
            if nxt not in first:
                first[nxt] = first[(pos, facing)] or verb
                queue.append((nxt, cost + 1))
    return 10**6, WAIT


def _distance(k: Kitchen, chef: Chef, target: Pos) -> int:
    return _route(k, chef, target, set())[0]


def _step_to(k: Kitchen, me: Chef, target: Pos, blocked: set[Pos]) -> str:
    """The next action towards interacting with ``target``: a move or turn on a shortest
    route that avoids ``blocked`` floor, or INTERACT when facing it already; WAIT when the
    other chef blocks every route (let it pass)."""
    return _route(k, me, target, blocked)[1]


def _handoff(k: Kitchen, me: Chef, others: list[Chef]) -> Pos | None:
    """An empty counter both ``me`` and another chef reach (to pass an item on)."""
    mine = _region(k, me.pos)
    shared = [
        pos
        for pos in k.where("X")
        if not k.item_on(pos) and _spots(k, mine, pos) and any(_reaches(k, o, pos) for o in others)
    ]

    def cost(pos: Pos) -> tuple[int, int]:  # the giver's and the taker's ways, then the taker's
        taker = min(_distance(k, o, pos) for o in others)
        return _distance(k, me, pos) + taker, taker

    return min(shared, key=cost, default=None)


def _goal(k: Kitchen, me: Chef, chosen: Mapping[str, str]) -> tuple[Pos | None, bool]:
    """The tile ``me`` should interact with next and whether interacting there is useful now
    (False: go there and wait, e.g. a dish at a cooking pot); (None, False) to wait."""
    others = [c for c in k.chefs if c.name != me.name]
    pots = k.where("P")
    active = next((p for p in pots if k.pot(p)[0] > 0), None)
    if active is None:  # the first pot that a chef reaches
        active = next((p for p in pots if any(_reaches(k, c, p) for c in k.chefs)), pots[0])
    onions, tick = k.pot(active)
    cooking = tick >= 0
    reach_pot = _reaches(k, me, active)
    potters = [c for c in k.chefs if _reaches(k, c, active)]
    held_onions = sum(c.held == "onion" for c in k.chefs)
    loose = [p for p, item, _ in k.counters if item == "onion"]
    have = onions + held_onions + len(loose)
    dishes = sum(c.held == "dish" for c in k.chefs) + sum(i == "dish" for _, i, _ in k.counters)
    soups = sum(c.held == "soup" for c in k.chefs) + sum(i == "soup" for _, i, _ in k.counters)

    if me.held == "soup":
        serve = [s for s in k.where("S") if _reaches(k, me, s)]
        return (serve[0], True) if serve else (_handoff(k, me, others), True)
    if me.held == "dish":
        if not reach_pot:
            return _handoff(k, me, potters), True
        return active, cooking and tick >= k.cook_time
    if me.held == "onion":
        if cooking or onions >= k.soup_onions:
            return None, False
        return (active, True) if reach_pot else (_handoff(k, me, potters), True)
    # empty-handed
    if reach_pot and not cooking and onions >= k.soup_onions:
        return active, True  # start cooking
    if soups:
        return None, False
    if reach_pot:  # wait where an item another chef brings over will be put down
        for other in others:
            if other.held in ("onion", "dish") and not _reaches(k, other, active):
                spot = _handoff(k, other, [me])
                if spot is not None:
                    return spot, False
    if not cooking and (have < k.soup_onions or (reach_pot and loose)):
        if reach_pot and loose:
            return min(loose, key=lambda p: _distance(k, me, p)), True
        if have < k.soup_onions and _fetcher(k, me, "O", k.soup_onions - have):
            sources = [p for p in k.where("O") if _reaches(k, me, p)]
            if sources:
                return min(sources, key=lambda p: _distance(k, me, p)), True
    loose_dish = [p for p, i, _ in k.counters if i == "dish"]
    if reach_pot and loose_dish and (cooking or have >= k.soup_onions):
        return min(loose_dish, key=lambda p: _distance(k, me, p)), True
    if dishes == 0 and (cooking or have >= k.soup_onions) and _fetcher(k, me, "D", 1):
        sources = [p for p in k.where("D") if _reaches(k, me, p)]
        if sources:
            return min(sources, key=lambda p: _distance(k, me, p)), True
    return None, False


def _fetcher(k: Kitchen, me: Chef, letter: str, wanted: int) -> bool:
    """Whether ``me`` is among the ``wanted`` empty-handed chefs nearest a ``letter``
    station (ties by task-file order), so two chefs do not fetch one item."""
    free = [c for c in k.chefs if not c.held]
    ranked = sorted(free, key=lambda c: min((_distance(k, c, p) for p in k.where(letter)),
                                            default=10**6))  # fmt: skip
    ranked = [c for c in ranked if any(_reaches(k, c, p) for p in k.where(letter))]
    return me in ranked[:wanted]


def useful(k: Kitchen, agent: str, chosen: Mapping[str, str]) -> list[str]:
    """The greedy plan's next action for ``agent`` (after the earlier chefs' ``chosen``
    actions this step): one action, WAIT when the plan waits."""
    me = k.chef(agent)
    target, now = _goal(k, me, chosen)
    if target is None:
        return _make_way(k, me, chosen)
    step = _step_to(k, me, target, _taken(k, agent, chosen))
    if step == INTERACT and (not now or reason(k, agent, INTERACT, chosen) is not None):
        return [WAIT]
    if step in DIRECTIONS and reason(k, agent, step, chosen) is not None:
        return [WAIT]
    return [step]


def _taken(k: Kitchen, agent: str, chosen: Mapping[str, str]) -> set[Pos]:
    """The floor the other chefs stand on, and the floor the earlier chefs' ``chosen`` moves
    take them to this step."""
    taken = {c.pos for c in k.chefs if c.name != agent}
    for other, act in chosen.items():
        if other != agent and act in DIRECTIONS:
            ahead = _add(k.chef(other).pos, DIRECTIONS[act])
            if k.tile(ahead) == " ":
                taken.add(ahead)
    return taken


def _make_way(k: Kitchen, me: Chef, chosen: Mapping[str, str]) -> list[str]:
    """An idle chef standing where another chef must stand to interact steps aside (to the
    nearest floor that no one needs); else it WAITs."""
    needed: set[Pos] = set()
    for other in k.chefs:
        if other.name == me.name:
            continue
        target, _ = _goal(k, other, {})
        if target is not None:
            needed |= set(_spots(k, _region(k, other.pos), target))
    if me.pos not in needed:
        return [WAIT]
    taken = _taken(k, me.name, chosen)
    for verb, d in DIRECTIONS.items():
        nxt = _add(me.pos, d)
        if k.tile(nxt) == " " and nxt not in needed and nxt not in taken:
            return [verb]
    return [WAIT]
