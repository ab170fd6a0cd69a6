"""Build the arm and camera that robot.toml names; the driver modules load only when used."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from drivers.arm.base import Arm
from drivers.arm.safety import SafeArm
from drivers.camera.base import Camera
from runtime.errors import DriverError

if TYPE_CHECKING:
    from drivers.twin.world import Twin
    from runtime.config import RobotConfig

__all__ = ["Hardware", "hardware"]


@dataclass
class Hardware:
    arm: SafeArm | None
    camera: Camera | None
    twin: Twin | None  # the physics twin, when either is simulated


@contextmanager
def hardware(robot: RobotConfig) -> Iterator[Hardware]:
    """Connect the configured arm (always behind the safety limits) and camera; close both."""
    arm_config, camera_config = robot.drivers.arm, robot.drivers.camera
    with ExitStack() as stack:
        twin = None
        if "sim" in (getattr(arm_config, "kind", None), getattr(camera_config, "kind", None)):
            from drivers.twin.world import Twin

            scene = getattr(arm_config, "scene", None) if arm_config else None
            twin = stack.enter_context(Twin(robot.resolve(scene) if scene else None))
        arm = _arm(robot, twin)
        camera = _camera(robot, twin)
        for device in (arm, camera):
            if device is not None:
                device.connect()
                stack.callback(device.close)
        yield Hardware(arm, camera, twin)


def _arm(robot: RobotConfig, twin: Twin | None) -> SafeArm | None:
    config = robot.drivers.arm
    if config is None:
        return None
    arm: Arm
    forward = None
    if config.kind == "gcode":
        from drivers.arm.gcode import GcodeArm

        arm = GcodeArm(config)
    elif config.kind == "jaka":
        from drivers.arm.jaka import JakaArm

        arm = JakaArm(config)
    else:
        from drivers.arm.sim import SimArm

        if twin is None:
            raise DriverError("sim arm: no physics twin")
        arm, forward = SimArm(twin, config), twin.forward
    return SafeArm(arm, robot.safety, forward_kinematics=forward)


def _camera(robot: RobotConfig, twin: Twin | None) -> Camera | None:
    config = robot.drivers.camera
    if config is None:
        return None
    if config.kind == "realsense":
        from drivers.camera.realsense import RealSenseCamera

        playback = robot.resolve(config.playback) if config.playback else None
        return RealSenseCamera(config.model_copy(update={"playback": playback}))
    from drivers.camera.sim import SimCamera

    if twin is None:
        raise DriverError("sim camera: no physics twin")
    return SimCamera(twin, timeout=config.timeout)
