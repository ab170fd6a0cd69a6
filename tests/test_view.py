"""A frame too dark or too blurred to trust is said so (runtime/perception/view.py), on the
twin's own renders: every shipped scene lit as shipped passes, the lights at an eighth are
too dark, a 5-pixel blur is too blurred, and a 3-pixel one (which the detector still reads)
passes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from onboard.drivers import twin as twin_package
from onboard.drivers.twin.camera import DEFAULT_LIGHT
from onboard.drivers.twin.world import Twin
from onboard.perception.view import view_problem

SCENES = sorted((Path(twin_package.__file__).parent / "scenes").glob("*.toml"))
DIM = replace(DEFAULT_LIGHT, ambient=0.08, diffuse=0.05, specular=0.0)


def box_blur(rgb: npt.NDArray[np.uint8], radius: int) -> npt.NDArray[np.uint8]:
    """A (2 radius + 1)-pixel box blur, rows then columns, edges repeated."""
    out = rgb.astype(np.float32)
    k = 2 * radius + 1
    for axis in (0, 1):
        pad = [(radius + 1, radius) if a == axis else (0, 0) for a in range(3)]
        summed = np.cumsum(np.pad(out, pad, mode="edge"), axis=axis)
        n = summed.shape[axis]
        out = (summed.take(range(k, n), axis=axis) - summed.take(range(0, n - k), axis=axis)) / k
    return out.clip(0, 255).astype(np.uint8)


@pytest.mark.parametrize("scene", SCENES, ids=[s.stem for s in SCENES])
def test_every_shipped_scene_lit_as_shipped_is_a_view_to_trust(scene: Path) -> None:
    with Twin(scene) as twin:
        rgb, _, _ = twin.render()
    assert view_problem(rgb) is None


def test_the_lights_down_or_a_blur_make_a_view_not_to_trust() -> None:
    with Twin("blocks") as twin:
        lit, _, _ = twin.render()
        twin.set_light(DIM)
        dark, _, _ = twin.render()
    assert (view_problem(dark) or "").startswith("too dark (brightness")
    assert (view_problem(box_blur(lit, 2)) or "").startswith("too blurred (sharpness")
    assert view_problem(box_blur(lit, 1)) is None
