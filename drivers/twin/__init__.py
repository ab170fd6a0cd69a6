"""The physics twin: a Franka Panda (or an SO-101) at a table with objects and an RGB-D
camera (PyBullet).

Used by the sim arm and camera drivers, the detector's training data and the tests. Scene
files load without PyBullet (``onboard check`` validates them); the names that need it are
imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from onboard.drivers.twin.scene import SCENES, Scene, default_scene, find_scene, load_scene

if TYPE_CHECKING:
    from onboard.drivers.twin.panda import IKSolution
    from onboard.drivers.twin.world import DT, Snapshot, StepGate, Twin

__all__ = [
    "DT",
    "SCENES",
    "IKSolution",
    "Scene",
    "Snapshot",
    "StepGate",
    "Twin",
    "default_scene",
    "find_scene",
    "load_scene",
]

_NEEDS_PYBULLET = {
    "IKSolution": "panda",
    "DT": "world",
    "Snapshot": "world",
    "StepGate": "world",
    "Twin": "world",
}


def __getattr__(name: str) -> object:
    if name in _NEEDS_PYBULLET:
        return getattr(import_module(f"{__name__}.{_NEEDS_PYBULLET[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
