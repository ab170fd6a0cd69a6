"""Sort Cubes: three arms along seven panels put each cube on its target panel, handing cubes
over through the panels two arms share.

Rules (RoCoBench's sort task, symbolic): ``PICK <cube> PLACE <panel>`` moves a cube in one
step; the arm must reach both the cube's panel and the place panel (its ``reach`` in the
task file); two arms cannot move the same cube in one step; a panel holds any number of
cubes. The reward is the change in the number of cubes on their targets (1 when one
arrives, -1 when one is taken off); success when all three are on target. The level sets the
start's total distance to the targets (seeded among the starts in the level's range).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onboard.collab.envs.base import WAIT, TeamEnv
from onboard.collab.taskfile import PANELS, SORT_TARGETS, SortLevel, TeamTask, sort_starts

__all__ = ["SortCubes", "SortState"]

CUBES: tuple[str, ...] = tuple(SORT_TARGETS)
TARGET = tuple(PANELS.index(SORT_TARGETS[c]) for c in CUBES)


@dataclass(frozen=True)
class SortState:
    panel: tuple[int, ...]  # per cube (CUBES order): its panel's index


class SortCubes(TeamEnv[SortState]):
    def __init__(self, task: TeamTask, level: str) -> None:
        settings = task.level(level)
        assert isinstance(settings, SortLevel)
        self.start_places = sort_starts(*settings.distance)
        super().__init__(task, level)
        self.panels = {a: sorted(PANELS.index(p) for p in self.reach[a]) for a in self.agents}

    def _grounded(self) -> Sequence[str]:
        return [f"PICK {c} PLACE {p}" for c in CUBES for p in PANELS]

    def _initial(self, rng: random.Random) -> SortState:
        start = rng.choice(self.start_places)
        return SortState(tuple(PANELS.index(start[c]) for c in CUBES))

    def start_space(self) -> Sequence[SortState]:
        return [SortState(tuple(PANELS.index(s[c]) for c in CUBES)) for s in self.start_places]

    def _reason(
        self, state: SortState, agent: str, action: str, chosen: Mapping[str, str]
    ) -> str | None:
        _, cube, _, place = action.split()
        at = PANELS[state.panel[CUBES.index(cube)]]
        if at not in self.reach[agent]:
            return f"{agent} cannot reach {cube} on {at}"
        if place not in self.reach[agent]:
            return f"{agent} cannot reach {place}"
        if place == at:
            return f"{cube} is already on {place}"
        other = next((a for a, act in chosen.items() if act.split()[1:2] == [cube]), None)
        if other is not None:
            return f"{other} is moving {cube} this step"
        return None

    def _possible(self, state: SortState, agent: str, action: str) -> bool:
        return action.split()[3] in self.reach[agent]  # cubes move; a PLACE panel does not

    def _on_target(self, state: SortState) -> int:
        return sum(p == t for p, t in zip(state.panel, TARGET, strict=True))

    def _apply(self, state: SortState, joint: Mapping[str, str]) -> tuple[SortState, float]:
        panel = list(state.panel)
        for action in joint.values():
            if action != WAIT:
                _, cube, _, place = action.split()
                panel[CUBES.index(cube)] = PANELS.index(place)
        after = SortState(tuple(panel))
        return after, float(self._on_target(after) - self._on_target(state))

    def _succeeded(self, state: SortState) -> bool:
        return self._on_target(state) == len(CUBES)

    def _describe(self, state: SortState) -> list[str]:
        lines = [f"{c}: on {PANELS[p]} (target {PANELS[t]})"
                 for c, p, t in zip(CUBES, state.panel, TARGET, strict=True)]  # fmt: skip
        for agent in self.agents:
            lines.append(f"{agent}: reaches {', '.join(PANELS[i] for i in self.panels[agent])}")
        return lines

    def _feature_names(self) -> Sequence[str]:
        names = [f"{c}_on_{p}" for c in CUBES for p in PANELS]
        return [*names, *(f"{c}_distance" for c in CUBES)]

    def _features(self, state: SortState) -> Sequence[float]:
        values = [float(p == i) for p in state.panel for i in range(len(PANELS))]
        span = len(PANELS) - 1
        return [*values, *(abs(p - t) / span for p, t in zip(state.panel, TARGET, strict=True))]

    def _gain(self, agent: str, p: int, t: int) -> tuple[int, int]:
        """(how much closer ``agent`` can bring a cube on panel ``p`` to ``t``, the place)."""
        reach = self.panels[agent]
        if p == t or p not in reach:
            return 0, p
        place = t if t in reach else (max(reach) if t > p else min(reach))
        return abs(p - t) - abs(place - t), place

    def _useful(self, state: SortState, agent: str, chosen: Mapping[str, str]) -> list[str]:
        """Moves that bring a cube closer to its target (onto it if this arm reaches it, else
        to its reach's end toward it): first the cubes no later arm can move closer, then the
        farthest from their targets (the longest chains of hand-offs), then the largest gain."""
        taken = {act.split()[1] for act in chosen.values() if act != WAIT}
        later = self.agents[self.agents.index(agent) + 1 :]
        moves: list[tuple[bool, int, int, str]] = []
        for cube, p, t in zip(CUBES, state.panel, TARGET, strict=True):
            gain, place = self._gain(agent, p, t)
            if gain <= 0 or cube in taken:
                continue
            shared = any(self._gain(other, p, t)[0] > 0 for other in later)
            moves.append((shared, -abs(p - t), -gain, f"PICK {cube} PLACE {PANELS[place]}"))
        return [m[-1] for m in sorted(moves)] or [WAIT]
