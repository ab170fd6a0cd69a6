"""Make Sandwich: two arms, each reaching one side of the table, stack a recipe's foods on
the cutting_board in order.

Rules (RoCoBench's sandwich task, symbolic): all eight foods lie on the table, half on each
side (seeded); an arm PICKs a food from its side with an empty gripper, and PUTs the food it
holds on the cutting_board (the recipe's first food), on the stack's top food (the recipe's
next one), or back on the table on its own side. Only one arm PUTs per step. Stacking out of
the recipe's order is refused (RoCoBench's feedback "recipe says ..."). Reward 1 per food
stacked; success when the stack is the recipe.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from onboard.collab.envs.base import WAIT, TeamEnv
from onboard.collab.taskfile import FOODS, SandwichLevel, TeamTask

__all__ = ["MakeSandwich", "SandwichState"]

BOARD, TABLE = "cutting_board", "table"
SIDES = ("left", "right")
STACKED = "stack"


@dataclass(frozen=True)
class SandwichState:
    where: tuple[str, ...]  # per food (FOODS order): left, right, stack, or the holder's name
    stack: tuple[str, ...]  # bottom to top


class MakeSandwich(TeamEnv[SandwichState]):
    def __init__(self, task: TeamTask, level: str) -> None:
        settings = task.level(level)
        assert isinstance(settings, SandwichLevel)
        self.recipe: tuple[str, ...] = tuple(settings.recipe)
        super().__init__(task, level)
        # an agent's side: the first side in its reach (the task file gives one)
        self.side = {a: next(s for s in SIDES if s in self.reach[a]) for a in self.agents}

    def _grounded(self) -> Sequence[str]:
        puts = [f"PUT {f} {on}" for f in FOODS for on in (BOARD, TABLE, *FOODS) if on != f]
        return [*(f"PICK {f}" for f in FOODS), *puts]

    def _initial(self, rng: random.Random) -> SandwichState:
        left = set(rng.sample(FOODS, len(FOODS) // 2))
        return SandwichState(tuple("left" if f in left else "right" for f in FOODS), ())

    def start_space(self) -> Sequence[SandwichState]:
        return [SandwichState(tuple("left" if f in left else "right" for f in FOODS), ())
                for left in combinations(FOODS, len(FOODS) // 2)]  # fmt: skip

    def _where(self, state: SandwichState, food: str) -> str:
        return state.where[FOODS.index(food)]

    def holding(self, state: SandwichState, agent: str) -> str | None:
        return next((f for f, w in zip(FOODS, state.where, strict=True) if w == agent), None)

    def _reason(
        self, state: SandwichState, agent: str, action: str, chosen: Mapping[str, str]
    ) -> str | None:
        verb, *objects = action.split()
        held = self.holding(state, agent)
        if verb == "PICK":
            (food,) = objects
            where = self._where(state, food)
            if held is not None:
                return f"{agent} is already holding {held}"
            if where == STACKED:
                return f"{food} is already stacked"
            if where not in SIDES:
                return f"{food} is in {where}'s gripper"
            if where not in self.reach[agent]:
                return f"{agent} cannot reach {food}: it is on the {where} side"
            return None
        food, on = objects  # PUT
        if held != food:
            return f"{agent} is not holding {food}"
        put = next((a for a, act in chosen.items() if act.startswith("PUT ")), None)
        if put is not None:
            return f"only one robot can PUT at a time ({put} PUTs this step)"
        if on == TABLE:
            return None
        if food not in self.recipe:
            return f"{food} is not in the recipe"
        wanted = self.recipe.index(food)
        below = self.recipe[wanted - 1] if wanted > 0 else BOARD
        if on != below:
            return f"recipe says {food} goes on {below}"
        if len(state.stack) != wanted:
            return f"{below} is not on top of the stack" if wanted else "the cutting_board is taken"
        return None

    def _possible(self, state: SandwichState, agent: str, action: str) -> bool:
        verb, food, *on = action.split()
        where = self._where(state, food)
        if where != agent and where not in self.reach[agent]:
            return False  # stacked, or on the other side (a PUT on the table keeps the side)
        if verb == "PICK" or on == [TABLE]:
            return True
        if food not in self.recipe:
            return False
        wanted = self.recipe.index(food)
        return on == [self.recipe[wanted - 1] if wanted > 0 else BOARD]

    def _apply(self, state: SandwichState, joint: Mapping[str, str]) -> tuple[SandwichState, float]:
        where, stack = list(state.where), list(state.stack)
        reward = 0.0
        for agent, action in joint.items():
            verb, *objects = action.split()
            if verb == "PICK":
                where[FOODS.index(objects[0])] = agent
            elif verb == "PUT":
                food, on = objects
                if on == TABLE:
                    where[FOODS.index(food)] = self.side[agent]
                else:
                    where[FOODS.index(food)] = STACKED
                    stack.append(food)
                    reward += 1.0
        return SandwichState(tuple(where), tuple(stack)), reward

    def _succeeded(self, state: SandwichState) -> bool:
        return state.stack == self.recipe

    def _describe(self, state: SandwichState) -> list[str]:
        done = len(state.stack)
        lines = [
            f"Recipe (bottom to top): {', '.join(self.recipe)}.",
            f"Stack on the cutting_board (bottom to top): {', '.join(state.stack) or 'empty'}.",
            f"Next food to stack: {self.recipe[done] if done < len(self.recipe) else 'none'}.",
        ]
        for food in FOODS:
            where = self._where(state, food)
            if where in SIDES:
                lines.append(f"{food}: on the {where} side of the table")
            elif where == STACKED:
                lines.append(f"{food}: in the stack")
            else:
                lines.append(f"{food}: in {where}'s gripper")
        for agent in self.agents:
            held = self.holding(state, agent)
            grip = f"holding {held}" if held else "gripper empty"
            lines.append(f"{agent}: {grip}; reaches the {self.side[agent]} side")
        return lines

    def _feature_names(self) -> Sequence[str]:
        places = (*SIDES, *self.task.agent_names, STACKED)
        names = [f"{f}_{p}" for f in FOODS for p in places]
        names += [f"{f}_recipe_position" for f in FOODS]
        names += [f"{f}_is_next" for f in FOODS]
        return [*names, "stack_share"]

    def _features(self, state: SandwichState) -> Sequence[float]:
        places = (*SIDES, *self.agents, STACKED)
        values = [float(w == p) for w in state.where for p in places]
        values += [(self.recipe.index(f) + 1) / len(self.recipe) if f in self.recipe else 0.0
                   for f in FOODS]  # fmt: skip
        done = len(state.stack)
        following = self.recipe[done] if done < len(self.recipe) else None
        values += [float(f == following) for f in FOODS]
        return [*values, done / len(self.recipe)]

    def _useful(self, state: SandwichState, agent: str, chosen: Mapping[str, str]) -> list[str]:
        done = len(state.stack)
        if done == len(self.recipe):
            return [WAIT]
        remaining = self.recipe[done:]
        held = self.holding(state, agent)
        can_put = not any(a.startswith("PUT ") for a in chosen.values())
        if held is not None:
            if held == remaining[0]:
                return (
                    [f"PUT {held} {self.recipe[done - 1] if done else BOARD}"]
                    if can_put
                    else [WAIT]
                )
            needed_first = remaining[: remaining.index(held)] if held in remaining else remaining
            mine = [f for f in needed_first if self._where(state, f) == self.side[agent]]
            if mine and can_put:  # only this arm can fetch a food needed before the held one
                return [f"PUT {held} {TABLE}"]
            return [WAIT]
        for food in remaining:
            if self._where(state, food) == self.side[agent]:
                return [f"PICK {food}"]
        return [WAIT]
