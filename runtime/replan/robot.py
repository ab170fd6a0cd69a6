"""The robot API and the sandbox's limits as robot.toml and the connected hardware give them:
one builder for ``onboard code run``, the code-task trials and the tests."""

from __future__ import annotations

import time

from onboard.config import CodeConfig, RobotConfig
from onboard.drivers.factory import Hardware
from onboard.grounding.mapping import Embeds
from onboard.manip.session import hand_eye_of
from onboard.perception.detector import Detector
from onboard.replan.api import RobotAPI
from onboard.replan.sandbox import Limits

__all__ = ["NEEDS", "code_limits", "robot_api"]

#: who needs robot.toml's [hand_eye], in its error
NEEDS = "generated code"


def code_limits(code: CodeConfig) -> Limits:
    """The sandbox's limits of ``[code]``."""
    return Limits(code.steps, code.memory_mb, code.cpu_seconds, code.wall_seconds)


def robot_api(
    robot: RobotConfig, found: Hardware, embedder: Embeds, detector: Detector
) -> RobotAPI:
    """The API over ``found``'s arm and camera. Time passes through the in-process twin
    (``twin.step``, its clock) when there is one, else on the wall clock."""
    if found.arm is None or found.camera is None:
        raise ValueError("the robot API needs an arm and a camera")
    twin = found.twin
    pause, now = (twin.step, lambda: twin.time) if twin else (time.sleep, time.monotonic)
    return RobotAPI(found.arm, found.camera, detector, hand_eye_of(robot, NEEDS),
                    embedder, pause, robot.code.handover, now=now,
                    hand_zone=robot.hand_zone)  # fmt: skip
