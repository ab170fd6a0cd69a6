"""Where in a container to put something down: a free spot on its floor (a plate's top, a
box's bottom), clear of what already lies there and of its rim, as the camera sees it.

The points are what the depth camera sees inside the container's box (base frame): the
floor is their common low level, anything higher (an apple on the plate, the box's walls) is
in the way; floor not seen (hidden behind something) is not offered.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["free_spot"]

#: metres above the floor's level a point is something in the way
FLOOR_BAND = 0.008
#: metres between spots tried
GRID = 0.01
#: metres around a spot within which floor must be seen, and how many points of it
FLOOR_NEAR, FLOOR_POINTS = 0.015, 3
#: metres kept from the floor's edge and from what is in the way, beyond the object's radius
GAP = 0.01


def free_spot(
    points: npt.NDArray[np.float64], radius: float, centre: tuple[float, float]
) -> tuple[float, float, float]:
    """(x, y, floor height) where an object of ``radius`` m fits on the container's floor,
    the nearest to ``centre`` that is clear; the clearest one if none is; ``centre`` at the
    floor's level if no floor is seen."""
    floor_z = float(np.percentile(points[:, 2], 25)) if len(points) else 0.0
    floor = points[np.abs(points[:, 2] - floor_z) <= FLOOR_BAND][:, :2]
    if len(floor) < FLOOR_POINTS:
        return centre[0], centre[1], floor_z
    blocked = points[points[:, 2] > floor_z + FLOOR_BAND][:, :2]
    c = np.asarray(centre, dtype=np.float64)
    reach = float(np.percentile(np.linalg.norm(floor - c, axis=1), 95)) - radius - GAP
    steps = np.arange(-max(reach, 0.0), max(reach, 0.0) + 1e-9, GRID)
    spots = (
        (c + np.stack(np.meshgrid(steps, steps), axis=-1).reshape(-1, 2)) if len(steps) else c[None]
    )
    spots = spots[np.linalg.norm(spots - c, axis=1) <= max(reach, 0.0)]
    seen = np.array([np.sum(np.linalg.norm(floor - s, axis=1) <= FLOOR_NEAR) for s in spots])
    spots = spots[seen >= FLOOR_POINTS]
    if len(spots) == 0:
        return centre[0], centre[1], floor_z
    if len(blocked):
        clear = np.array([np.min(np.linalg.norm(blocked - s, axis=1)) for s in spots])
    else:
        clear = np.full(len(spots), np.inf)
    fits = clear >= radius + GAP
    if fits.any():
        best = spots[fits][np.argmin(np.linalg.norm(spots[fits] - c, axis=1))]
    else:
        best = spots[np.argmax(clear)]
    return float(best[0]), float(best[1]), floor_z
