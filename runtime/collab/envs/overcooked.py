"""Overcooked-AI (the ReAd paper's adaptation): two chefs cook one onion soup and serve it
within the step limit, on the package's own layouts and dynamics.

The dynamics are the ``overcooked`` package's raw MDP (``OvercookedGridworld`` stepped by
``get_state_transition``; its shaping-potential wrapper is not used). The package's layouts
order three-onion soups; the level's settings replace that with the seed's: one order of
``onions`` onions, a pot that holds that many (``max_num_ingredients``), ``cook_time`` steps
of cooking after an empty-handed chef INTERACTs with a filled pot (the package's "new
dynamics": a pot never starts by itself). A delivered soup of that order is the package's
sparse reward (20): reward 1 here, and success; a soup of other onions earns nothing.

Actions per chef: NORTH, SOUTH, EAST, WEST, INTERACT and WAIT (the seed's stay). A move
into a wall, counter or station turns the chef to face it without moving (the package's
rule); it is infeasible only when the chef faces it already. Chefs that walk into each
other both stay (the package's rule). The start is the layout's, the same every seed (as
in the seed paper): episodes differ only in what the chefs do.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from onboard.base.errors import MissingExtraError
from onboard.collab import kitchen
from onboard.collab.envs.base import WAIT, TeamEnv
from onboard.collab.kitchen import Chef, Kitchen
from onboard.collab.taskfile import OvercookedLevel, TeamTask

__all__ = ["CookState", "OvercookedAI"]


def _package() -> Any:
    try:
        import overcooked.mdp as mdp
    except ImportError as exc:
        raise MissingExtraError(
            "the Overcooked team tasks need the overcooked extra: "
            "pip install -c constraints.txt -e '.[overcooked]'"
        ) from exc
    return mdp


@dataclass(frozen=True)
class CookState:
    kitchen: Kitchen
    served: int  # soups of the order delivered


class OvercookedAI(TeamEnv[CookState]):
    def __init__(self, task: TeamTask, level: str) -> None:
        settings = task.level(level)
        assert isinstance(settings, OvercookedLevel)
        self._mdp_module = _package()
        self.order = {"ingredients": ["onion"] * settings.onions}
        self.config = {"start_all_orders": [self.order], "cook_time": settings.cook_time,
                       "max_num_ingredients": settings.onions}  # fmt: skip
        self.mdp = self._mdp_module.OvercookedGridworld.from_layout_name(level, **self.config)
        if self.mdp.num_players != len(task.agents):
            raise ValueError(f"layout {level} has {self.mdp.num_players} chefs")
        self.grid = tuple("".join(row) for row in self.mdp.terrain_mtx)
        self.counters = tuple((x, y) for y, row in enumerate(self.grid)
                              for x, c in enumerate(row) if c == "X")  # fmt: skip
        self.soup_onions, self.cook_time = settings.onions, settings.cook_time
        super().__init__(task, level)

    # -- raw <-> kitchen -----------------------------------------------------------------------

    def _kitchen(self, raw: Any) -> Kitchen:
        pots = set(self.mdp.get_pot_locations())
        chefs = []
        for name, p in zip(self.agents, raw.players, strict=True):
            obj = p.held_object
            held = "" if obj is None else obj.name
            soup = len(obj.ingredients) if held == "soup" else 0
            chefs.append(Chef(name, tuple(p.position), tuple(p.orientation), held, soup))
        in_pots, on_counters = [], []
        for pos, obj in raw.objects.items():
            if pos in pots and obj.name == "soup":
                in_pots.append((tuple(pos), len(obj.ingredients), obj._cooking_tick))
            else:
                onions = len(obj.ingredients) if obj.name == "soup" else 0
                on_counters.append((tuple(pos), obj.name, onions))
        return Kitchen(self.grid, tuple(chefs), tuple(sorted(in_pots)), tuple(sorted(on_counters)),
                       self.soup_onions, self.cook_time)  # fmt: skip

    def _soup(self, pos: tuple[int, int], onions: int, tick: int) -> dict[str, Any]:
        return {"name": "soup", "position": pos, "cooking_tick": tick, "cook_time": self.cook_time,
                "_ingredients": [{"name": "onion", "position": pos}] * onions}  # fmt: skip

    def _raw(self, k: Kitchen) -> Any:
        players = []
        for c in k.chefs:
            held: dict[str, Any] | None = None
            if c.held == "soup":
                held = self._soup(c.pos, c.soup, self.cook_time)
            elif c.held:
                held = {"name": c.held, "position": c.pos}
            players.append({"position": c.pos, "orientation": c.facing, "held_object": held})
        objects = [self._soup(p, n, t) for p, n, t in k.pots]
        objects += [self._soup(p, n, self.cook_time) if item == "soup" else
                    {"name": item, "position": p} for p, item, n in k.counters]  # fmt: skip
        state = {"players": players, "objects": objects, "bonus_orders": [],
                 "all_orders": [self.order], "timestep": 0}  # fmt: skip
        return self._mdp_module.OvercookedState.from_dict(state)

    # -- the task's rules ----------------------------------------------------------------------

    def _grounded(self) -> Sequence[str]:
        return [*kitchen.MOVES, kitchen.INTERACT, WAIT]

    def _initial(self, rng: random.Random) -> CookState:
        return CookState(self._kitchen(self.mdp.get_standard_start_state()), 0)

    def _reason(
        self, state: CookState, agent: str, action: str, chosen: Mapping[str, str]
    ) -> str | None:
        return kitchen.reason(state.kitchen, agent, action, chosen)

    def _apply(self, state: CookState, joint: Mapping[str, str]) -> tuple[CookState, float]:
        mdp = self._mdp_module
        # Recipe settings are class-level in the package: set this level's before each step
        mdp.Recipe.configure(self.mdp.recipe_config)
        actions = []
        for agent in self.agents:
            act = joint.get(agent, WAIT)
            if act in kitchen.DIRECTIONS:
                actions.append(kitchen.DIRECTIONS[act])
            else:
                actions.append(mdp.Action.INTERACT if act == kitchen.INTERACT else mdp.Action.STAY)
        raw, infos = self.mdp.get_state_transition(self._raw(state.kitchen), tuple(actions))
        delivered = sum(1 for r in infos["sparse_reward_by_agent"] if r > 0)
        return replace(state, kitchen=self._kitchen(raw), served=state.served + delivered), float(
            delivered
        )

    def _succeeded(self, state: CookState) -> bool:
        return state.served >= 1

    def _describe(self, state: CookState) -> list[str]:
        return kitchen.describe(state.kitchen)

    def _feature_names(self) -> Sequence[str]:
        names: list[str] = []
        for agent in self.agents:
            names += [f"{agent}_x", f"{agent}_y"]
            names += [f"{agent}_facing_{f}" for f in ("north", "south", "east", "west")]
            names += [f"{agent}_holds_{i}" for i in kitchen.ITEMS]
        for x, y in self.mdp.get_pot_locations():
            names += [f"pot_{x}_{y}_{f}" for f in ("onions", "cooking", "ready")]
        for x, y in self.counters:
            names += [f"counter_{x}_{y}_{i}" for i in kitchen.ITEMS]
        return names

    def _features(self, state: CookState) -> Sequence[float]:
        k = state.kitchen
        width, height = len(self.grid[0]) - 1, len(self.grid) - 1
        values: list[float] = []
        for c in k.chefs:
            values += [c.pos[0] / width, c.pos[1] / height]
            values += [float(c.facing == d) for d in kitchen.DIRECTIONS.values()]
            values += [float(c.held == i) for i in kitchen.ITEMS]
        for pos in self.mdp.get_pot_locations():
            onions, tick = k.pot(tuple(pos))
            values += [onions / self.soup_onions, float(0 <= tick < self.cook_time),
                       float(tick >= self.cook_time)]  # fmt: skip
        for pos in self.counters:
            item = k.item_on(pos)
            values += [float(item == i) for i in kitchen.ITEMS]
        return values

    def _useful(self, state: CookState, agent: str, chosen: Mapping[str, str]) -> list[str]:
        return kitchen.useful(state.kitchen, agent, chosen)
