"""Sweep Floor: a dustpan arm and a broom arm sweep the yellow (target) cubes into the
trash_bin; green cubes are distractors that cost steps when swept.

Rules (RoCoBench's sweep task, symbolic): both arms MOVE in front of a cube on the table;
the broom arm SWEEPs it into the dustpan while the dustpan arm WAITs in front of the same
cube; the dustpan arm DUMPs every cube in the dustpan into the trash_bin. Reward 1 per
yellow cube reaching the bin; success when all are there. The first agent of the task file
holds the dustpan, the second the broom.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import permutations

from onboard.collab.envs.base import WAIT, TeamEnv
from onboard.collab.taskfile import PANELS, SweepLevel, TeamTask

__all__ = ["SweepFloor", "SweepState"]

TABLE, DUSTPAN, BIN = "table", "dustpan", "trash_bin"
WHERE = (TABLE, DUSTPAN, BIN)


@dataclass(frozen=True)
class SweepState:
    where: tuple[str, ...]  # per cube: table, dustpan or trash_bin
    panel: tuple[int, ...]  # per cube: its panel's index (where it lay on the table)
    at: tuple[int, ...]  # per agent: the cube index it is in front of, -1 for none


class SweepFloor(TeamEnv[SweepState]):
    def __init__(self, task: TeamTask, level: str) -> None:
        settings = task.level(level)
        assert isinstance(settings, SweepLevel)
        self.cubes: tuple[str, ...] = (
            *(f"yellow_cube{i}" for i in range(1, settings.yellow + 1)),
            *(f"green_cube{i}" for i in range(1, settings.green + 1)),
        )
        self.targets = frozenset(c for c in self.cubes if c.startswith("yellow"))
        self.pan_agent, self.broom_agent = task.agent_names
        super().__init__(task, level)

    def _grounded(self) -> Sequence[str]:
        return ["DUMP", *(f"{verb} {c}" for verb in ("MOVE", "SWEEP") for c in self.cubes)]

    def _initial(self, rng: random.Random) -> SweepState:
        panels = rng.sample(range(len(PANELS)), len(self.cubes))
        return SweepState((TABLE,) * len(self.cubes), tuple(panels), (-1,) * len(self.agents))

    def start_space(self) -> Sequence[SweepState]:
        table, nobody = (TABLE,) * len(self.cubes), (-1,) * len(self.agents)
        return [SweepState(table, panels, nobody)
                for panels in permutations(range(len(PANELS)), len(self.cubes))]  # fmt: skip

    def _slot(self, agent: str) -> int:
        return self.agents.index(agent)

    def _reason(
        self, state: SweepState, agent: str, action: str, chosen: Mapping[str, str]
    ) -> str | None:
        verb, _, cube = action.partition(" ")
        if verb == "DUMP":
            if agent != self.pan_agent:
                return f"only {self.pan_agent} holds the dustpan"
            if DUSTPAN not in state.where:
                return "the dustpan is empty"
            return None
        c = self.cubes.index(cube)
        if state.where[c] != TABLE:
            return f"{cube} is not on the table (it is in the {state.where[c]})"
        panel = PANELS[state.panel[c]]
        if panel not in self.reach[agent]:
            return f"{agent} cannot reach {cube} on {panel}"
        if verb == "MOVE":
            return None
        if agent != self.broom_agent:  # SWEEP
            return f"only {self.broom_agent} holds the broom"
        if state.at[self._slot(agent)] != c:
            return f"{agent} is not in front of {cube}: MOVE there first"
        if state.at[self._slot(self.pan_agent)] != c:
            return f"{self.pan_agent}'s dustpan is not in front of {cube}"
        if chosen.get(self.pan_agent, WAIT) != WAIT:
            return f"{self.pan_agent} must WAIT at {cube} while {agent} SWEEPs"
        return None

    def _possible(self, state: SweepState, agent: str, action: str) -> bool:
        verb, _, cube = action.partition(" ")
        if verb == "DUMP":
            return agent == self.pan_agent
        if verb == "SWEEP" and agent != self.broom_agent:
            return False
        return PANELS[state.panel[self.cubes.index(cube)]] in self.reach[agent]

    def _apply(self, state: SweepState, joint: Mapping[str, str]) -> tuple[SweepState, float]:
        where, at = list(state.where), list(state.at)
        reward = 0.0
        for agent, action in joint.items():
            verb, _, cube = action.partition(" ")
            slot = self._slot(agent)
            if verb == "MOVE":
                at[slot] = self.cubes.index(cube)
            elif verb == "SWEEP":
                where[self.cubes.index(cube)] = DUSTPAN
                at = [-1] * len(at)
            elif verb == "DUMP":
                for c, name in enumerate(self.cubes):
                    if where[c] == DUSTPAN:
                        where[c] = BIN
                        reward += name in self.targets
                at[slot] = -1  # the arm went to the bin
        return replace(state, where=tuple(where), at=tuple(at)), reward

    def _succeeded(self, state: SweepState) -> bool:
        return all(state.where[c] == BIN for c, n in enumerate(self.cubes) if n in self.targets)

    def _describe(self, state: SweepState) -> list[str]:
        lines = [f"Target cubes (into the trash_bin): {', '.join(sorted(self.targets))}."]
        for c, cube in enumerate(self.cubes):
            where = state.where[c]
            if where == TABLE:
                lines.append(f"{cube}: on the table at {PANELS[state.panel[c]]}")
            else:
                lines.append(f"{cube}: in the {where}")
        for agent, tool in ((self.pan_agent, "dustpan"), (self.broom_agent, "broom")):
            c = state.at[self._slot(agent)]
            front = self.cubes[c] if c >= 0 else "no cube"
            lines.append(f"{agent} (holding the {tool}): in front of {front}")
        return lines

    def _feature_names(self) -> Sequence[str]:
        names = []
        for cube in self.cubes:
            names += [f"{cube}_on_{w}" for w in WHERE] + [f"{cube}_panel"]
        for agent in self.agents:
            names += [f"{agent}_at_{cube}" for cube in self.cubes]
        return names

    def _features(self, state: SweepState) -> Sequence[float]:
        values: list[float] = []
        for c in range(len(self.cubes)):
            values += [float(state.where[c] == w) for w in WHERE]
            values.append(state.panel[c] / (len(PANELS) - 1))
        for slot in range(len(self.agents)):
            values += [float(state.at[slot] == c) for c in range(len(self.cubes))]
        return values

    def _target(self, state: SweepState) -> int:
        """The yellow cube to sweep next: the one both arms (else the dustpan, else the broom)
        are in front of, else the first on the table; -1 when none is left."""
        left = [
            c for c, n in enumerate(self.cubes) if n in self.targets and state.where[c] == TABLE
        ]
        pan, broom = state.at[self._slot(self.pan_agent)], state.at[self._slot(self.broom_agent)]
        for c in (pan if pan == broom else -1, pan, broom):
            if c in left:
                return c
        return left[0] if left else -1

    def _useful(self, state: SweepState, agent: str, chosen: Mapping[str, str]) -> list[str]:
        target = self._target(state)
        at = state.at[self._slot(agent)]
        pan_at = state.at[self._slot(self.pan_agent)]
        if agent == self.pan_agent:
            if target < 0:
                return ["DUMP"] if DUSTPAN in state.where else [WAIT]
            if at != target:
                return [f"MOVE {self.cubes[target]}"]
            return [WAIT]  # hold the dustpan at the cube for the sweep
        if target < 0:
            return [WAIT]
        cube = self.cubes[target]
        if at != target:
            return [f"MOVE {cube}"]
        if pan_at == target and chosen.get(self.pan_agent, WAIT) == WAIT:
            return [f"SWEEP {cube}"]
        return [WAIT]
