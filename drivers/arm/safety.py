"""Safety limits in front of any arm: every command is checked, clamped or refused, then sent.

``SafeArm(arm, limits)`` is itself an :class:`~onboard.drivers.arm.base.Arm`. It checks a command
against :class:`SafetyLimits` *before* it reaches the driver and keeps a record of what it
actually sent (``sent`` and ``state().last_command``), so an audit shows the clamped command,
not the requested one.

- ``mode = "clamp"``: a target outside the workspace box is moved onto its boundary, a target
  below the floor is raised to it, a speed above the limit is lowered to it.
- ``mode = "refuse"``: the same violations raise :class:`~onboard.base.errors.SafetyError`, one line
  naming the limit and the value; nothing is sent.

Joint moves are checked for joint speed and joint range; their tool position is checked only
when a ``forward_kinematics`` function is given (a joint target is never clamped, only refused).
Acceleration limits are handed to drivers that can apply them (:class:`SupportsAcceleration`).
``stop()`` and ``resume()`` pass straight through (the driver latches the stop) and are recorded.

Motion commands (``home``, ``move_to``, ``move_joints``, ``grip``) are rate-limited: at most
``max_motion_rate`` a second after a burst of ``motion_burst``; one beyond waits for its turn
(the rate is clamped whatever the mode), so a runaway program cannot flood a controller.

:data:`STOP_LINE` is the e-stop across every SafeArm connected in this process: ``engage()``
stops each from the caller's thread (and each one connected later, as it connects) and,
until ``release()``, ``resume()`` raises instead of clearing the driver's latch. The latch
that refuses motions stays the driver's; the line only keeps the runtime, which resumes
the arm before each command it sends, from clearing it.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from onboard.base.errors import ArmError, SafetyError
from onboard.drivers.arm.base import Arm, ArmState, Pose
from onboard.drivers.device import Device

__all__ = [
    "STOP_LINE",
    "Box",
    "SafeArm",
    "SafetyLimits",
    "Sent",
    "StopLine",
    "SupportsAcceleration",
]

Vec3 = tuple[float, float, float]
_AXES = ("x", "y", "z")


class Box(BaseModel):
    """An axis-aligned box in the robot base frame, metres."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: Vec3
    max: Vec3

    @model_validator(mode="after")
    def _ordered(self) -> Box:
        for axis, lo, hi in zip(_AXES, self.min, self.max, strict=True):
            if lo >= hi:
                raise ValueError(f"min.{axis} ({lo}) must be below max.{axis} ({hi})")
        return self

    def contains(self, p: Vec3) -> bool:
        return all(lo <= v <= hi for v, lo, hi in zip(p, self.min, self.max, strict=True))


class SafetyLimits(BaseModel):
    """The ``[drivers.arm.safety]`` table of robot.toml. SI units: m, m/s, rad, rad/s."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["clamp", "refuse"] = "refuse"
    workspace: Box = Box(min=(-0.6, -0.6, 0.0), max=(0.6, 0.6, 0.8))
    z_floor: float = Field(
        default=0.02, description="no tool below this height (m) outside pick zones"
    )
    pick_zones: tuple[Box, ...] = Field(
        default=(),
        description="boxes where the tool may go below z_floor (still inside the workspace)",
    )
    max_speed: Annotated[float, Field(gt=0, description="tool speed, m/s")] = 0.25
    default_speed: Annotated[float, Field(gt=0, description="m/s when a move names none")] = 0.1
    max_joint_speed: Annotated[float, Field(gt=0, description="rad/s")] = 1.0
    default_joint_speed: Annotated[float, Field(gt=0, description="rad/s")] = 0.5
    max_acceleration: Annotated[float, Field(gt=0, description="tool, m/s²")] = 1.0
    max_joint_acceleration: Annotated[float, Field(gt=0, description="rad/s²")] = 3.0
    max_motion_rate: Annotated[
        float, Field(gt=0, allow_inf_nan=False, description="motion commands a second")
    ] = 20.0
    motion_burst: Annotated[
        int, Field(ge=1, description="motion commands at once before the rate applies")
    ] = 20
    joint_min: tuple[float, ...] | None = Field(default=None, description="rad, one per joint")
    joint_max: tuple[float, ...] | None = Field(default=None, description="rad, one per joint")

    @model_validator(mode="after")
    def _consistent(self) -> SafetyLimits:
        if self.default_speed > self.max_speed:
            raise ValueError("default_speed must not exceed max_speed")
        if self.default_joint_speed > self.max_joint_speed:
            raise ValueError("default_joint_speed must not exceed max_joint_speed")
        if (self.joint_min is None) != (self.joint_max is None):
            raise ValueError("give both joint_min and joint_max, or neither")
        if self.joint_min is not None and self.joint_max is not None:
            if len(self.joint_min) != len(self.joint_max):
                raise ValueError("joint_min and joint_max must have the same length")
            if any(lo >= hi for lo, hi in zip(self.joint_min, self.joint_max, strict=True)):
                raise ValueError("each joint_min must be below its joint_max")
        return self


@runtime_checkable
class SupportsAcceleration(Protocol):
    """A driver that can cap its acceleration (G-code M204, JAKA's ``accel`` fields)."""

    def set_acceleration(self, linear: float, joint: float) -> None:
        """``linear`` in m/s², ``joint`` in rad/s²."""


@dataclass(frozen=True)
class Sent:
    """One command as SafeArm passed it on, after clamping; ``clamped`` names what changed."""

    op: str
    pose: Pose | None = None
    joints: tuple[float, ...] | None = None
    speed: float | None = None
    close: bool | None = None
    clamped: tuple[str, ...] = ()

    def __str__(self) -> str:
        parts = [self.op]
        if self.pose is not None:
            p = self.pose
            parts.append(
                f"x={p.x:.4f} y={p.y:.4f} z={p.z:.4f} rx={p.rx:.3f} ry={p.ry:.3f} rz={p.rz:.3f}"
            )
        if self.joints is not None:
            parts.append("q=[" + ", ".join(f"{q:.4f}" for q in self.joints) + "]")
        if self.speed is not None:
            parts.append(f"speed={self.speed:.4f}")
        if self.close is not None:
            parts.append(f"close={self.close}")
        if self.clamped:
            parts.append("clamped: " + "; ".join(self.clamped))
        return " ".join(parts)


class SafeArm(Device):
    """An :class:`Arm` that checks every command against ``limits`` before ``arm`` sees it."""

    def __init__(
        self,
        arm: Arm,
        limits: SafetyLimits,
        forward_kinematics: Callable[[tuple[float, ...]], Pose] | None = None,
        history: int = 1000,
    ) -> None:
        self.arm = arm
        self.limits = limits
        self.forward_kinematics = forward_kinematics
        #: what was passed on, newest last (the last ``history`` commands)
        self.sent: deque[Sent] = deque(maxlen=history)
        self._lock = threading.Lock()
        self._tokens = float(limits.motion_burst)
        self._refilled = time.monotonic()
        self._turn = threading.Lock()  # motion commands wait for their turn one at a time

    # -- Arm ------------------------------------------------------------------------------

    def connect(self) -> None:
        self.arm.connect()
        if isinstance(self.arm, SupportsAcceleration):
            self.arm.set_acceleration(
                self.limits.max_acceleration, self.limits.max_joint_acceleration
            )
        STOP_LINE.attach(self)

    def close(self) -> None:
        STOP_LINE.detach(self)
        self.arm.close()

    def home(self) -> None:
        self._record(self._throttle(Sent("home")))
        self.arm.home()

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        sent = self._throttle(self.check_move(pose, speed))
        self._record(sent)
        self.arm.move_to(sent.pose or pose, sent.speed)

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        sent = self._throttle(self.check_joints(joints, speed))
        self._record(sent)
        self.arm.move_joints(sent.joints or joints, sent.speed)

    def grip(self, close: bool) -> None:
        self._record(self._throttle(Sent("grip", close=close)))
        self.arm.grip(close)

    def stop(self) -> None:
        # No lock and no check: stop() must get through from any thread, at any time.
        self.arm.stop()
        self._record(Sent("stop"))

    def resume(self) -> None:
        """Clear the driver's stop latch (a deliberate decision to move again, so recorded);
        ArmError while :data:`STOP_LINE` is engaged."""
        STOP_LINE.check(self)
        self._record(Sent("resume"))
        self.arm.resume()

    def state(self) -> ArmState:
        state = self.arm.state()
        with self._lock:
            last = str(self.sent[-1]) if self.sent else None
        return replace(state, last_command=last or state.last_command)

    # -- checks ---------------------------------------------------------------------------

    def check_move(self, pose: Pose, speed: float | None) -> Sent:
        """The move_to that would be sent: clamped, or SafetyError in refuse mode."""
        _finite("move_to pose", (pose.x, pose.y, pose.z, pose.rx, pose.ry, pose.rz))
        notes: list[str] = []
        position = self._check_position(pose.position(), notes)
        speed = self._check_speed(speed, notes)
        target = replace(pose, x=position[0], y=position[1], z=position[2])
        return Sent("move_to", pose=target, speed=speed, clamped=tuple(notes))

    def check_joints(self, joints: tuple[float, ...], speed: float | None) -> Sent:
        """The move_joints that would be sent; a joint target is never clamped, only refused."""
        _finite("move_joints target", joints)
        notes: list[str] = []
        self._check_joint_range(joints)
        if self.forward_kinematics is not None:
            p = self.forward_kinematics(joints).position()
            self._check_position(p, [], may_clamp=False)
        joint_speed = self._check_joint_speed(speed, notes)
        return Sent("move_joints", joints=tuple(joints), speed=joint_speed, clamped=tuple(notes))

    def _check_position(self, p: Vec3, notes: list[str], *, may_clamp: bool = True) -> Vec3:
        lim = self.limits
        out = list(p)
        for i, axis in enumerate(_AXES):
            lo, hi = lim.workspace.min[i], lim.workspace.max[i]
            if not lo <= out[i] <= hi:
                bound, side = (lo, "min") if out[i] < lo else (hi, "max")
                self._violate(
                    f"{axis}={out[i]:.4f} m is outside the workspace ({side} {bound:.4f} m)",
                    f"workspace.{side}",
                    may_clamp,
                )
                notes.append(f"{axis} {out[i]:.4f} -> {bound:.4f}")
                out[i] = bound
        clamped = (out[0], out[1], out[2])
        if out[2] < lim.z_floor and not any(z.contains(clamped) for z in lim.pick_zones):
            self._violate(
                f"z={out[2]:.4f} m is below the floor z_floor={lim.z_floor:.4f} m "
                "outside every pick zone",
                "z_floor",
                may_clamp,
            )
            notes.append(f"z {out[2]:.4f} -> {lim.z_floor:.4f}")
            out[2] = lim.z_floor
        return (out[0], out[1], out[2])

    def _check_speed(self, speed: float | None, notes: list[str]) -> float:
        if speed is None:
            return self.limits.default_speed
        _finite("speed", (speed,))
        if speed <= 0:
            raise SafetyError(f"SafeArm: speed={speed} m/s must be positive")
        if speed > self.limits.max_speed:
            self._violate(
                f"speed={speed:.4f} m/s is above max_speed={self.limits.max_speed:.4f} m/s",
                "max_speed",
            )
            notes.append(f"speed {speed:.4f} -> {self.limits.max_speed:.4f}")
            return self.limits.max_speed
        return speed

    def _check_joint_speed(self, speed: float | None, notes: list[str]) -> float:
        lim = self.limits
        if speed is None:
            return lim.default_joint_speed
        _finite("joint speed", (speed,))
        if speed <= 0:
            raise SafetyError(f"SafeArm: joint speed={speed} rad/s must be positive")
        if speed > lim.max_joint_speed:
            self._violate(
                f"joint speed={speed:.4f} rad/s is above "
                f"max_joint_speed={lim.max_joint_speed:.4f} rad/s",
                "max_joint_speed",
            )
            notes.append(f"joint speed {speed:.4f} -> {lim.max_joint_speed:.4f}")
            return lim.max_joint_speed
        return speed

    def _check_joint_range(self, joints: tuple[float, ...]) -> None:
        lo, hi = self.limits.joint_min, self.limits.joint_max
        if lo is None or hi is None:
            return
        if len(joints) != len(lo):
            raise SafetyError(
                f"SafeArm: move_joints got {len(joints)} joints, the limits name {len(lo)}: "
                "send one value per joint"
            )
        for i, (q, a, b) in enumerate(zip(joints, lo, hi, strict=True)):
            if not a <= q <= b:
                raise SafetyError(
                    f"SafeArm: joint {i + 1}={q:.4f} rad is outside [{a:.4f}, {b:.4f}] rad "
                    "(joint_min/joint_max): choose a target inside the range"
                )

    def _violate(self, what: str, limit: str, may_clamp: bool = True) -> None:
        if self.limits.mode == "clamp" and may_clamp:
            return
        raise SafetyError(
            f"SafeArm: {what} (mode {self.limits.mode}): change the target, "
            f"or the [drivers.arm.safety] {limit} limit"
        )

    def _throttle(self, sent: Sent) -> Sent:
        """Wait for the command's turn under ``max_motion_rate`` (a token bucket)."""
        rate, burst = self.limits.max_motion_rate, self.limits.motion_burst
        with self._turn:
            now = time.monotonic()
            self._tokens = min(burst, self._tokens + (now - self._refilled) * rate)
            self._refilled = now
            wait = (1.0 - self._tokens) / rate if self._tokens < 1.0 else 0.0
            if wait > 0:
                time.sleep(wait)
                self._tokens, self._refilled = 1.0, time.monotonic()
            self._tokens -= 1.0
        if wait <= 0:
            return sent
        note = f"rate {rate:g}/s: waited {wait * 1000:.0f} ms"
        return replace(sent, clamped=(*sent.clamped, note))

    def _record(self, sent: Sent) -> None:
        with self._lock:
            self.sent.append(sent)


class StopLine:
    """The SafeArms connected in this process, and one stop across them all (the e-stop)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._arms: weakref.WeakSet[SafeArm] = weakref.WeakSet()
        #: why the line is engaged (None: it is not)
        self.reason: str | None = None

    @property
    def engaged(self) -> bool:
        return self.reason is not None

    def arms(self) -> list[SafeArm]:
        with self._lock:
            return list(self._arms)

    def attach(self, arm: SafeArm) -> None:
        """``arm`` connected: stopped at once while the line is engaged."""
        with self._lock:
            self._arms.add(arm)
            engaged = self.engaged
        if engaged:
            arm.stop()

    def detach(self, arm: SafeArm) -> None:
        with self._lock:
            self._arms.discard(arm)

    def engage(self, reason: str) -> int:
        """Stop every connected arm now, from this thread; they stay stopped (and so does
        every arm connected meanwhile) until :meth:`release`. Returns the arms stopped."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
            arms = list(self._arms)
        for arm in arms:
            arm.stop()
        return len(arms)

    def release(self) -> bool:
        """Let ``resume()`` clear the drivers' latches again; False if it was not engaged.
        Nothing moves: the next command the runtime sends resumes its arm."""
        with self._lock:
            was, self.reason = self.reason is not None, None
        return was

    def check(self, arm: SafeArm) -> None:
        reason = self.reason
        if reason is not None:
            arm.stop()  # a stop that raced this resume stays in force
            raise ArmError(f"the e-stop is engaged ({reason}): motion refused until it is reset")


#: the e-stop line of this process
STOP_LINE = StopLine()


def _finite(what: str, values: tuple[float, ...]) -> None:
    if not all(math.isfinite(v) for v in values):
        raise SafetyError(f"SafeArm: {what} holds a NaN or infinite value: {values}")
