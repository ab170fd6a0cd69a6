"""Build the arm and camera robot.toml names; the driver modules load only when used.

It takes the drivers' own settings (``[drivers.arm]``, ``[drivers.camera]``, ``[safety]``)
and the folder their relative paths start from, not the whole robot.toml, so the drivers
need nothing from the runtime above them.

A camera must watch the world its arm moves: ``kind = "sim"`` builds a twin in this process,
which only the ``sim`` arm moves, and ``kind = "sim-serve"`` watches the twin of ``onboard sim
serve``, which only an arm driven through sim serve (JAKA, G-code) moves. Any other pairing of
a simulated camera is refused before anything is built.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onboard.base.errors import DriverError
from onboard.drivers.arm.base import Arm
from onboard.drivers.arm.config import ArmConfig
from onboard.drivers.arm.safety import SafeArm, SafetyLimits
from onboard.drivers.camera.base import Camera
from onboard.drivers.camera.config import CameraConfig

if TYPE_CHECKING:
    from onboard.drivers.twin.world import Twin

__all__ = ["Hardware", "hardware"]


@dataclass
class Hardware:
    arm: SafeArm | None
    camera: Camera | None
    twin: Twin | None  # the physics twin in this process, when the arm or camera is "sim"


@contextmanager
def hardware(
    arm: ArmConfig | None, camera: CameraConfig | None, safety: SafetyLimits, root: Path
) -> Iterator[Hardware]:
    """Connect the configured arm (always behind ``safety``) and camera; close both.

    Relative paths in the settings (a scene, a playback recording) start from ``root``,
    the folder that holds robot.toml; a scene may also be a shipped scene's name.
    """
    _check_pairing(arm, camera)
    with ExitStack() as stack:
        twin = None
        if "sim" in (getattr(arm, "kind", None), getattr(camera, "kind", None)):
            from onboard.drivers.twin.scene import find_scene
            from onboard.drivers.twin.world import Twin

            scene = getattr(arm, "scene", None) if arm else None
            twin = stack.enter_context(Twin(find_scene(scene, root) if scene else None))
        safe_arm = _arm(arm, safety, twin, root)
        cam = _camera(camera, root, twin)
        for device in (safe_arm, cam):
            if device is not None:
                device.connect()
                stack.callback(device.close)
        yield Hardware(safe_arm, cam, twin)


def _check_pairing(arm: ArmConfig | None, camera: CameraConfig | None) -> None:
    """Refuse a simulated camera that would watch another world than the arm's."""
    if arm is None or camera is None:
        return
    if camera.kind == "sim" and arm.kind != "sim":
        raise DriverError(
            f'[drivers.camera] kind = "sim" with a {arm.kind} arm: the sim camera would watch '
            "its own twin, not the arm's; to see what the arm moves, run `onboard sim serve` "
            'and set kind = "sim-serve" (host, port: its --camera-port)'
        )
    if camera.kind == "sim-serve" and arm.kind == "sim":
        raise DriverError(
            '[drivers.camera] kind = "sim-serve" with the sim arm: the served camera watches '
            "sim serve's twin, not this arm's; set the camera's kind = \"sim\", or drive sim "
            'serve\'s arm (kind = "jaka", host and port: its --jaka-port)'
        )


def _resolve(root: Path, path: Path) -> Path:
    return path if path.is_absolute() else root / path


def _arm(
    config: ArmConfig | None, safety: SafetyLimits, twin: Twin | None, root: Path
) -> SafeArm | None:
    if config is None:
        return None
    arm: Arm
    forward = None
    if config.kind == "gcode":
        from onboard.drivers.arm.gcode import GcodeArm

        gcode = GcodeArm(config)
        arm = gcode
        if gcode.joint_space is not None:  # joint moves are checked against the workspace
            forward = gcode.forward
    elif config.kind == "jaka":
        from onboard.drivers.arm.jaka import JakaArm

        arm = JakaArm(config)
    elif config.kind == "so101":
        from onboard.drivers.arm.so101 import So101Arm

        so101 = So101Arm(config, root)  # a relative calibration path starts at robot.toml
        arm, forward = so101, so101.forward
    else:
        from onboard.drivers.arm.twin_arm import SimArm

        if twin is None:
            raise DriverError("sim arm: no physics twin")
        arm, forward = SimArm(twin, config), twin.forward
    return SafeArm(arm, safety, forward_kinematics=forward)


def _camera(config: CameraConfig | None, root: Path, twin: Twin | None) -> Camera | None:
    if config is None:
        return None
    if config.kind == "realsense":
        from onboard.drivers.camera.realsense import RealSenseCamera

        playback = _resolve(root, config.playback) if config.playback else None
        return RealSenseCamera(config.model_copy(update={"playback": playback}))
    if config.kind == "sim-serve":
        from onboard.drivers.camera.served_camera import ServedCamera

        return ServedCamera(config)
    from onboard.drivers.camera.twin_camera import SimCamera

    if twin is None:
        raise DriverError("sim camera: no physics twin")
    return SimCamera(twin, timeout=config.timeout)
