"""Settings of each arm driver, selected by ``kind`` under ``[drivers.arm]`` in robot.toml.

Kept apart from the drivers so that validating robot.toml imports neither pyserial nor
PyBullet. Every arm is wrapped in :class:`~onboard.drivers.arm.safety.SafeArm` with the limits of
``[drivers.arm.safety]``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "GCODE_DEFAULTS",
    "ArmConfig",
    "DhJoint",
    "GcodeArmConfig",
    "JakaArmConfig",
    "SimArmConfig",
    "So101ArmConfig",
]

Speed = Annotated[float, Field(gt=0)]


Dialect = Literal["marlin", "grbl"]

#: what each dialect uses when robot.toml leaves a key out
GCODE_DEFAULTS: dict[str, dict[str, Any]] = {
    # Marlin's default BAUDRATE (Configuration.h); M106/M107 (a fan output) exist in every
    # stock build, where M3/M5 need SPINDLE_FEATURE or LASER_FEATURE
    "marlin": {"baudrate": 250000, "grip_on": "M106 S255", "grip_off": "M107", "home": "G28"},
    # GRBL 1.1 runs at 115200; M3/M5 switch the spindle-enable output; $H homes (G28 only
    # goes to a stored position)
    "grbl": {"baudrate": 115200, "grip_on": "M3 S1000", "grip_off": "M5", "home": "$H"},
}

#: axis letters each dialect may name as rotational axes (Marlin 2.1: up to six more axes,
#: I J K U V W, or A B C when renamed; grblHAL: A B C; classic GRBL: none)
ROTARY_LETTERS = {"marlin": "ABCIJKUVW", "grbl": "ABC"}


class DhJoint(BaseModel):
    """``[[drivers.arm.joints]]``: one joint of a joint-space G-code arm, the firmware axis that
    drives it and its row of the arm's standard Denavit-Hartenberg table (link ``i`` is
    ``Rz(theta) Tz(d) Tx(a) Rx(alpha)``; the joint's value adds to ``theta`` when it turns,
    to ``d`` when it slides)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    axis: str = Field(pattern=r"^[A-Z]$", description="the firmware's letter for it: X, Y, A...")
    unit: Literal["deg", "mm"] = Field(
        default="deg", description="deg: it turns (revolute); mm: it slides (prismatic)"
    )
    a: float = Field(default=0.0, description="m: DH link length")
    alpha: float = Field(default=0.0, description="deg: DH link twist")
    d: float = Field(default=0.0, description="m: DH link offset")
    theta: float = Field(default=0.0, description="deg: DH joint angle at the axis's zero")
    min: float = Field(description="the lowest value the axis may take (deg or mm)")
    max: float = Field(description="the highest value the axis may take (deg or mm)")
    scale: float = Field(
        default=1.0,
        description="firmware units per joint unit: -1 when the axis counts the other way "
        "from the table's sense",
    )

    @model_validator(mode="after")
    def _ordered(self) -> DhJoint:
        if not self.min < self.max:
            raise ValueError(f"joint {self.axis}: min {self.min} must be below max {self.max}")
        if self.scale == 0 or not math.isfinite(self.scale):
            raise ValueError(f"joint {self.axis}: scale must be a non-zero number")
        return self


class GcodeArmConfig(BaseModel):
    """``[drivers.arm]`` with ``kind = "gcode"``: a desktop arm on a serial line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gcode"] = "gcode"
    dialect: Dialect = Field(default="marlin", description="the firmware: marlin or grbl")
    url: str = Field(description="/dev/ttyUSB0, socket://host:port, loop:// or a pty path")
    baudrate: Annotated[int, Field(gt=0)] | None = Field(
        default=None, description="None: the dialect's default (Marlin 250000, GRBL 115200)"
    )
    timeout: Annotated[float, Field(gt=0, description="seconds to wait for one answer")] = 2.0
    motion_timeout: Annotated[
        float, Field(gt=0, description="upper bound (s) for a homing or a motion, never extended")
    ] = 120.0
    silence_timeout: Annotated[
        float,
        Field(
            gt=0,
            description="s a controller that has sent keepalives (Marlin's echo:busy) may say "
            "nothing while a motion runs",
        ),
    ] = 10.0
    reach_tolerance: Annotated[
        float, Field(gt=0, description="m: a move the firmware reports ending farther raises")
    ] = 0.005
    joint_tolerance: Annotated[
        float, Field(gt=0, description="rad: a joint move reported ending farther raises")
    ] = 0.01
    in_flight: Annotated[int, Field(ge=1, le=32, description="lines awaiting ok at once")] = 4
    rx_buffer: Annotated[
        int, Field(ge=16, description="bytes of the controller's serial buffer (both: 128)")
    ] = 128
    feed_max: Annotated[float, Field(gt=0, description="mm/min")] = 12000.0
    default_feed: Annotated[float, Field(gt=0, description="mm/min when no speed is given")] = (
        3000.0
    )
    joint_feed_max: Annotated[float, Field(gt=0, description="deg/min")] = 6000.0
    joint_axes: str = Field(
        default="",
        pattern=r"^[A-Z]*$",
        description="letters of the rotational axes the machine has, one per joint; none: ''",
    )
    grip_on: str | None = Field(default=None, description="None: the dialect's (M106 S255; M3)")
    grip_off: str | None = Field(default=None, description="None: the dialect's (M107; M5)")
    grip_settle: Annotated[float, Field(ge=0, description="seconds to let the grip act")] = 0.5
    check_gripper: bool = Field(
        default=True, description="send grip_off at connect: an unknown command fails connect"
    )
    orientation: tuple[float, float, float] = Field(
        default=(0.0, 0.0, 0.0),
        description="rx, ry, rz (rad) reported by state(): the dialect has none",
    )
    home_command: str | None = Field(default=None, description="None: G28 (Marlin), $H (GRBL)")
    startup: tuple[str, ...] = ("G21", "G90")
    acceleration: bool = Field(
        default=True,
        description="set_acceleration writes M204 S (Marlin) or, where the cap is lower than "
        "the board's own value, $120-$122 (GRBL; the board's values are written back on close)",
    )
    boot_timeout: Annotated[
        float, Field(ge=0, description="seconds to wait for the boot banner after opening")
    ] = 5.0
    line_numbers: bool | None = Field(
        default=None,
        description="N<n> ... *<checksum> on every line, one in flight; None: on for Marlin "
        "(off for GRBL, which has no resend)",
    )
    unlock_on_connect: bool = Field(
        default=False, description="GRBL: send $X when it boots in alarm (else home() first)"
    )
    hold_timeout: Annotated[
        float, Field(gt=0, description="GRBL: seconds a feed hold may take to come to rest")
    ] = 5.0
    kinematics: Literal["cartesian", "joints"] = Field(
        default="cartesian",
        description="cartesian: G1 X Y Z is the tool's position (the firmware does the "
        "kinematics); joints: every axis is a joint of the arm ([[drivers.arm.joints]]) and "
        "onboard does the kinematics from their DH table",
    )
    joints: tuple[DhJoint, ...] = Field(
        default=(), description="kinematics = joints: the arm's joints, base first"
    )
    tool: tuple[float, float, float] = Field(
        default=(0.0, 0.0, 0.0), description="m: the tool point in the last joint's DH frame"
    )
    tool_rotation: tuple[float, float, float] = Field(
        default=(0.0, 0.0, 0.0),
        description="rad: the tool's frame turned from the last joint's (roll, pitch, yaw)",
    )
    dh: Literal["standard", "modified"] = Field(
        default="standard",
        description="the joints' DH convention: standard (distal) or modified (Craig's: a and "
        "alpha of the link before the joint)",
    )
    segment: Annotated[
        float, Field(gt=0, description="kinematics = joints: m between move_to's waypoints")
    ] = 0.005
    ik_tolerance: Annotated[
        float, Field(gt=0, description="kinematics = joints: m an IK answer may miss by")
    ] = 0.0005

    @field_validator("grip_on", "grip_off", "home_command", "startup")
    @classmethod
    def _one_line_each(cls, value: str | tuple[str, ...] | None) -> str | tuple[str, ...] | None:
        for line in (value,) if isinstance(value, str) else value or ():
            bad = next((c for c in line if ord(c) < 0x20 or ord(c) >= 0x7F), None)
            if bad is not None:
                raise ValueError(
                    f"{line!r} has the control character {bad!r}: give one G-code line of "
                    "printable ASCII (several lines go in startup, one each)"
                )
        return value

    @model_validator(mode="after")
    def _axes_the_dialect_has(self) -> GcodeArmConfig:
        if self.kinematics == "joints":
            self._joint_space_axes()
        elif self.joints:
            raise ValueError('joints: set kinematics = "joints" to drive the axes as joints')
        allowed = ROTARY_LETTERS[self.dialect]
        wrong = sorted(set(self.joint_axes) - set(allowed))
        if wrong:
            raise ValueError(
                f"joint_axes {self.joint_axes!r}: {self.dialect} has no axis {', '.join(wrong)}"
                f" (its rotational axes: {' '.join(allowed)})"
            )
        if len(set(self.joint_axes)) != len(self.joint_axes):
            raise ValueError(f"joint_axes {self.joint_axes!r} names an axis twice")
        if self.line_numbers and self.dialect != "marlin":
            raise ValueError("line_numbers: only Marlin checks line numbers and checksums")
        if self.dialect == "grbl":  # GRBL acts on these wherever they fall in a line
            for key in ("grip_on", "grip_off", "home_command", "startup"):
                value = getattr(self, key)
                for line in (value,) if isinstance(value, str) else value or ():
                    if set(line) & set("?!~"):
                        raise ValueError(
                            f"{key} {line!r}: GRBL takes '?', '!' and '~' as real-time "
                            "commands (status, feed hold, resume) wherever they are in a line"
                        )
        return self

    def _joint_space_axes(self) -> None:
        if not self.joints:
            raise ValueError(
                'kinematics = "joints" needs the arm\'s joints: one [[drivers.arm.joints]] '
                "table per axis, base first (axis, unit, a, alpha, d, theta, min, max)"
            )
        if self.joint_axes:
            raise ValueError(
                'kinematics = "joints": name the axes in [[drivers.arm.joints]], not in joint_axes'
            )
        letters = "".join(j.axis for j in self.joints)
        allowed = "XYZ" + ROTARY_LETTERS[self.dialect]
        wrong = sorted(set(letters) - set(allowed))
        if wrong:
            raise ValueError(
                f"joints: {self.dialect} has no axis {', '.join(wrong)} (its axes: "
                f"{' '.join(allowed)})"
            )
        if len(set(letters)) != len(letters):
            raise ValueError(f"joints: axes {letters!r} name an axis twice")

    @property
    def axis_letters(self) -> str:
        """Every axis the driver reads: X Y Z, then the others it drives, in order."""
        extra = "".join(j.axis for j in self.joints) if self.joints else self.joint_axes
        return "XYZ" + "".join(a for a in extra if a not in "XYZ")

    def default(self, key: str) -> Any:
        """A key of :data:`GCODE_DEFAULTS` for this dialect."""
        return GCODE_DEFAULTS[self.dialect][key]

    @property
    def numbered(self) -> bool:
        """Lines go out numbered and checksummed (``line_numbers``, or the dialect's default)."""
        return self.dialect == "marlin" if self.line_numbers is None else self.line_numbers

    @property
    def baud(self) -> int:
        return self.baudrate or int(self.default("baudrate"))

    @property
    def grip_codes(self) -> tuple[str, str]:
        """(close, open)."""
        return (self.grip_on or self.default("grip_on"), self.grip_off or self.default("grip_off"))

    @property
    def home(self) -> str:
        return self.home_command or str(self.default("home"))


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


class So101ArmConfig(BaseModel):
    """``kind = "so101"``: the SO-101 (or SO-100) arm, six Feetech STS3215 servos on one bus."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["so101"] = "so101"
    url: str = Field(description="/dev/ttyACM0 (the bus adapter), or a pty path")
    baudrate: Annotated[int, Field(gt=0)] = 1_000_000
    calibration: Path | None = Field(
        default=None,
        description="LeRobot's calibration JSON (ids, drive modes, offsets, ranges); None: "
        "ids 1-6 with no offset, +-120 degrees about each servo's middle",
    )
    zero_offsets: tuple[float, float, float, float, float] = Field(
        default=(0.0, 0.0, 0.0, 0.0, 0.0),
        description="rad: the kinematic angle of each joint at the middle of its calibrated "
        "range (0: the arm upright there)",
    )
    links: tuple[float, float, float, float] = Field(
        default=(0.1166, 0.116, 0.1349, 0.10),
        description="m: shoulder height, upper arm, forearm, wrist to tool point (approximate)",
    )
    timeout: Annotated[float, Field(gt=0, description="s for one servo's answer")] = 0.1
    motion_timeout: Annotated[float, Field(gt=0, description="s: upper bound of a motion")] = 30.0
    stall_timeout: Annotated[
        float, Field(gt=0, description="s a joint may make no progress past a motion's time")
    ] = 1.0
    joint_tolerance: Annotated[
        float, Field(gt=0, description="rad: a motion is done when every joint is this close")
    ] = 0.01
    speed: Speed = Field(default=0.05, description="tool speed, m/s, when none is given")
    max_speed: Speed = Field(default=0.25, description="m/s")
    joint_speed: Speed = Field(default=0.5, description="rad/s when none is given")
    max_joint_speed: Speed = Field(default=3.0, description="rad/s")
    waypoint_interval: Speed = Field(default=0.05, description="s between move_to waypoints")
    grip_timeout: Speed = Field(default=3.0, description="s for the jaw to settle")
    gripper_closed_at_min: bool = Field(
        default=True, description="the gripper's range_min is closed (LeRobot's 0)"
    )
    home_joints: tuple[float, float, float, float, float] | None = Field(
        default=None, description="rad, for home(); None: the tool 18 cm out, 10 cm up, down"
    )
    home_pose: tuple[float, float, float, float, float, float] = (0.18, 0.0, 0.10, 3.14159265, 0, 0)
    stop_mode: Literal["torque_off", "hold"] = Field(
        default="torque_off",
        description="stop(): torque off (the arm goes limp and sags) or hold where it is",
    )
    torque_on_connect: bool = True
    disable_on_close: bool = False


ArmConfig = Annotated[
    GcodeArmConfig | JakaArmConfig | SimArmConfig | So101ArmConfig, Field(discriminator="kind")
]
