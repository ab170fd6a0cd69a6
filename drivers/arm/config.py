"""Settings of each arm driver, selected by ``kind`` under ``[drivers.arm]`` in robot.toml.

Kept apart from the drivers so that validating robot.toml imports neither pyserial nor
PyBullet. Every arm is wrapped in :class:`~onboard.drivers.arm.safety.SafeArm` with the limits of
``[drivers.arm.safety]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ArmConfig", "GcodeArmConfig", "JakaArmConfig", "SimArmConfig"]

Speed = Annotated[float, Field(gt=0)]


class GcodeArmConfig(BaseModel):
    """``[drivers.arm]`` with ``kind = "gcode"``: a desktop arm on a serial line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gcode"] = "gcode"
    url: str = Field(description="/dev/ttyUSB0, socket://host:port, loop:// or a pty path")
    baudrate: Annotated[int, Field(gt=0)] = 115200
    timeout: Annotated[float, Field(gt=0, description="seconds to wait for one answer")] = 2.0
    motion_timeout: Annotated[
        float, Field(gt=0, description="upper bound (s) for a homing or a queued motion")
    ] = 120.0
    in_flight: Annotated[int, Field(ge=1, le=32, description="lines awaiting ok at once")] = 4
    feed_max: Annotated[float, Field(gt=0, description="mm/min")] = 12000.0
    default_feed: Annotated[float, Field(gt=0, description="mm/min when no speed is given")] = (
        3000.0
    )
    joint_feed_max: Annotated[float, Field(gt=0, description="deg/min")] = 6000.0
    joint_axes: str = Field(
        default="ABCUVWIJK", pattern=r"^[A-Z]+$", description="one letter per joint"
    )
    grip_on: str = Field(default="M3", description="close the gripper / suction on, e.g. M1000")
    grip_off: str = Field(default="M5", description="open the gripper / suction off, e.g. M1001")
    grip_settle: Annotated[float, Field(ge=0, description="seconds to let the grip act")] = 0.5
    orientation: tuple[float, float, float] = Field(
        default=(0.0, 0.0, 0.0),
        description="rx, ry, rz (rad) reported by state(): the dialect has none",
    )
    home_command: str = "G28"
    estop: str = "M112"
    estop_resume: str | None = Field(
        default=None, description="sent before the next command, e.g. M999"
    )
    startup: tuple[str, ...] = ("G21", "G90")
    error_then_ok: bool = Field(
        default=False,
        description="Marlin: 'Error:<msg>' is followed by 'ok'; GRBL: 'error:<msg>' replaces it",
    )
    acceleration: str | None = Field(default="M204 S{mm_s2:.0f}", description="None: not supported")
    boot_wait: Annotated[float, Field(ge=0, description="seconds the board needs after open")] = 0.0


class JakaArmConfig(BaseModel):
    """``[drivers.arm]`` with ``kind = "jaka"``: a JAKA cobot on the network."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["jaka"] = "jaka"
    host: str
    port: Annotated[int, Field(ge=0, le=65535)] = 10001
    status_port: Annotated[int, Field(ge=0, le=65535)] | None = Field(
        default=10000, description="None: no status stream, state() asks"
    )
    timeout: Annotated[float, Field(gt=0, description="seconds to wait for one answer")] = 2.0
    motion_timeout: Annotated[float, Field(gt=0, description="upper bound for a motion")] = 120.0
    power_on: bool = Field(default=True, description="power on and enable the robot on connect")
    disable_on_close: bool = False
    default_speed: Annotated[float, Field(gt=0, description="m/s")] = 0.1
    default_joint_speed: Annotated[float, Field(gt=0, description="rad/s")] = 0.5
    accel: Annotated[float, Field(gt=0, description="m/s²")] = 0.5
    joint_accel: Annotated[float, Field(gt=0, description="rad/s²")] = 1.5
    home_joints: tuple[float, ...] | None = Field(default=None, description="radians, for home()")
    grip_io_type: Annotated[int, Field(ge=0, le=6, description="0 cabinet, 1 tool, 2 ext")] = 1
    grip_index: Annotated[int, Field(ge=0, description="the gripper's output, 0 = the first")] = 0
    grip_index_base: Literal[0, 1] = Field(
        default=0,
        description="the index set_digital_output gives the first output: firmware differs",
    )
    grip_close_value: Literal[0, 1] = 1
    grip_settle: Annotated[float, Field(ge=0, description="seconds to let the grip act")] = 0.5
    status_max_age: Annotated[float, Field(gt=0, description="seconds a status push is used")] = 0.5
    completion: Literal["inpos", "poll", "wait_complete"] = Field(
        default="inpos",
        description="how a motion's end is seen: inpos on the status stream (polls where the "
        "stream has none), polled positions, or wait_complete (firmware where it blocks)",
    )
    power_on_timeout: Annotated[
        float, Field(gt=0, description="seconds to wait for get_robot_state to show power/enable")
    ] = 30.0
    poll_interval: Annotated[
        float, Field(gt=0, description="seconds between get_robot_state or position polls")
    ] = 0.05
    reach_tolerance: Annotated[
        float, Field(gt=0, description="m: a move that ends farther from its target raises")
    ] = 0.005
    joint_tolerance: Annotated[
        float, Field(gt=0, description="rad: a joint move that ends farther raises")
    ] = 0.01
    request_status_fields: bool = Field(
        default=False,
        description="on connect, ask the controller to push inpos and the positions on the "
        "status port (setOptionalInfoConfig; a persistent controller setting)",
    )


class SimArmConfig(BaseModel):
    """``kind = "sim"``: the Panda of the physics twin built from ``scene``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sim"] = "sim"
    scene: Path | None = Field(
        default=None,
        description="scene file, or a shipped scene's name (calibration); None = tabletop",
    )
    speed: Speed = Field(default=0.15, description="default tool speed, m/s")
    max_speed: Speed = Field(default=0.5, description="m/s; faster requests are capped")
    turn_speed: Speed = Field(default=1.5, description="tool rotation during move_to, rad/s")
    joint_speed: Speed = Field(default=1.0, description="default joint speed, rad/s")
    max_joint_speed: Speed = Field(default=2.0, description="rad/s")
    ik_tolerance: Speed = Field(default=0.01, description="metres an IK answer may miss by")
    reach_tolerance: Speed = Field(default=0.002, description="metres: settled at the goal")
    settle_timeout: Speed = Field(default=2.0, description="simulated seconds to settle")
    grip_timeout: Speed = Field(default=1.5, description="simulated seconds to close or open")
    realtime: bool = Field(default=False, description="sleep so that sim time follows the wall")


ArmConfig = Annotated[GcodeArmConfig | JakaArmConfig | SimArmConfig, Field(discriminator="kind")]
