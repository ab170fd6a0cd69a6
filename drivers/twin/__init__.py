"""The physics twin: a Franka Panda at a table with objects and an RGB-D camera (PyBullet).

Used by the sim arm and camera drivers, the detector's training data and the tests.
"""

from onboard.drivers.twin.panda import IKSolution
from onboard.drivers.twin.scene import SCENES, Scene, default_scene, load_scene
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
    "load_scene",
]
