"""The arm interface: SI units in the API (metres, radians, seconds); each driver converts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from onboard.drivers.rotations import quat_from_euler, quat_to_euler, slerp

__all__ = ["Arm", "ArmState", "Pose"]


@dataclass(frozen=True)
class Pose:
    """Tool pose in the robot base frame: position in metres, orientation as roll/pitch/yaw
    (radians, extrinsic XYZ, as JAKA's rx, ry, rz)."""

    x: float
    y: float
    z: float
    rx: float = 0.0
    ry: float = 0.0
    rz: float = 0.0

    def position(self) -> tuple[float, float, float]:
        return (self.x, self.y, self.z)

    def toward(self, goal: Pose, s: float) -> Pose:
        """The pose ``s`` (0..1) of the way to ``goal``: on the straight line between the
        positions, the orientation turning along the shorter arc (slerp)."""
        x, y, z = (a + (b - a) * s for a, b in zip(self.position(), goal.position(), strict=True))
        q0 = quat_from_euler(self.rx, self.ry, self.rz)
        q1 = quat_from_euler(goal.rx, goal.ry, goal.rz)
        return Pose(x, y, z, *quat_to_euler(slerp(q0, q1, s)))


@dataclass(frozen=True)
class ArmState:
    pose: Pose
    joints: tuple[float, ...] = ()
    gripper_closed: bool = False
    moving: bool = False
    #: stop() was called and resume() not yet: motion calls raise ArmError
    stopped: bool = False
    error: str | None = None
    #: what the driver last actually sent after safety clamping (for audit)
    last_command: str | None = None
    extra: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Arm(Protocol):
    """A robot arm. Motion calls block until the motion is done (or raise ArmError).

    ``stop()`` must work from any state and any thread, and a lost link stops the motion.
    A stop latches: the motion under way raises ArmError, and so does every motion call
    (``home``, ``move_to``, ``move_joints``, ``grip``) after it, until ``resume()``. So a stop
    that lands just before a motion starts is never lost, and only a caller that means to
    move again after a stop does so. ``connect``, ``reconnect`` and ``close`` leave the
    latch as it is. A driver whose controller lost its position (a stop that cannot keep it,
    a reboot, an alarm) refuses moves until ``home()``, with ``state().error`` naming
    ``home()``.
    """

    def connect(self) -> None: ...

    def close(self) -> None: ...

    def home(self) -> None: ...

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        """Linear move of the tool to ``pose``; ``speed`` in m/s (capped by the limits)."""

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        """Joint move; ``joints`` in radians, ``speed`` in rad/s."""

    def grip(self, close: bool) -> None:
        """Close (or open) the gripper, or switch suction on (or off)."""

    def stop(self) -> None:
        """Stop now and latch: motion calls raise ArmError until ``resume()``."""

    def resume(self) -> None:
        """Clear the stop latch, so that motion calls run again."""

    def state(self) -> ArmState: ...
