"""Sort Cubes over a fleet, laid out and judged through the world's truth port (never a
controller's or the coordinator's view): :func:`lay_out` puts each cube in the first slot of
its start panel, as a person laying out the table would, and returns where they rest (what
the fleet is told); :func:`panels_now` is the judge, each cube's panel as physics has it.
"""

from __future__ import annotations

from onboard.collab.envs.sort import CUBES
from onboard.collab.twin_sort import CUBE, Panel
from onboard.drivers.emulators.truth_client import TruthClient
from onboard.evaluation.sort_twin import REST

__all__ = ["lay_out", "panels_now"]


def open_truth(host: str, port: int) -> TruthClient:
    """The judge's connection to the simulated world's truth port (the robot's side of a
    fleet never reads it: only this module, evaluation's judge, does)."""
    return TruthClient(host, port)


def lay_out(
    truth: TruthClient, panels: dict[str, Panel], start: dict[str, str]
) -> dict[str, tuple[float, float, float]]:
    """Each cube upright in the first slot of its ``start`` panel; where they rest."""
    where = {cube: panels[start[cube]].slot(0) for cube in CUBES}
    for cube, (x, y, z) in where.items():
        truth.move(cube, (x, y, z + 0.001), (0.0, 0.0, 0.0, 1.0))
    return where


def panels_now(truth: TruthClient, panels: dict[str, Panel]) -> dict[str, str | None]:
    """Each cube's panel in physics: the panel whose area holds its centre, resting on it
    (not held up, not fallen); None: on no panel."""
    objects = truth.truth().objects
    out: dict[str, str | None] = {}
    for cube in CUBES:
        x, y, z = objects[cube].world.position
        on = [p.name for p in panels.values()
              if p.holds(x, y) and abs(z - p.center[2] - CUBE / 2) < REST]  # fmt: skip
        out[cube] = on[0] if on else None
    return out
