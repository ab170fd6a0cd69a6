"""The arm of the physics twin: the Arm interface over a simulated Franka Panda.

Motions step the twin's physics in the calling thread (as fast as the CPU allows, or in
real time with ``realtime = true``) and block until the arm has settled, as a real
controller's blocking calls do. ``stop()`` may come from any thread: it aborts the motion
before the next physics step, the arm holds where it is and the motion raises ArmError. The
stop latches (``close()`` stops too): later motion calls raise before moving until
``resume()``. ``state()`` reads the twin's snapshot, so it never waits for the motion loop.

In a scene of several arms (``[[arms]]``), ``SimArm(twin, config, arm="Bob")`` drives the arm
named Bob (poses in its own base frame); None drives the first arm. A motion steps the whole
twin, so the other arms hold where they are meanwhile (one arm moves at a time).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated

from pydantic import Field

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import ArmState, Pose
from onboard.drivers.arm.config import SimArmConfig
from onboard.drivers.device import Device
from onboard.drivers.rotations import quat_angle, slerp
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.world import DT, Twin

__all__ = ["SimArm", "SimArmConfig"]

Speed = Annotated[float, Field(gt=0)]
STILL = 0.01  # rad/s: a joint slower than this is still
STILL_WINDOW = 48  # physics steps (0.2 s): a joint's average speed over them counts too


class SimArm(Device):
    """Implements :class:`~onboard.drivers.arm.base.Arm` over the physics twin
    (:class:`~onboard.drivers.twin.Twin`)."""

    def __init__(
        self, twin: Twin, config: SimArmConfig | None = None, arm: str | None = None
    ) -> None:
        self.twin = twin
        #: the twin's arm this driver moves (None: the first)
        self.arm = arm
        if arm is not None:
            twin.arm_spec(arm)  # KeyError naming the scene's arms
        self.config = config or SimArmConfig()
        self._stop = threading.Event()
        self._connected = False
        self._moving = False
        self._error: str | None = None
        self._last_command: str | None = None
        self._wall_start = 0.0
        self._sim_start = 0.0

    @classmethod
    def from_config(cls, config: SimArmConfig) -> SimArm:
        """A SimArm over a new twin of ``config.scene`` (close it with ``arm.twin.close()``)."""
        return cls(Twin(config.scene), config)

    def connect(self) -> None:
        self._connected = True
        self.twin.set_joint_targets(
            self.twin.joints(self.arm), self.config.max_joint_speed, self.arm
        )

    def close(self) -> None:
        self.stop()
        self._connected = False

    def home(self) -> None:
        self.move_joints(self.twin.arm_spec(self.arm).home)

    def move_to(self, pose: Pose, speed: float | None = None) -> None:
        """Linear move of the tool to ``pose`` (base frame) at ``speed`` m/s."""
        with self._motion(f"move_to({_fmt_pose(pose)}, speed={speed})"):
            velocity = self._speed(speed, self.config.speed, self.config.max_speed)
            final = self.twin.solve_ik(pose, arm=self.arm)
            if final.residual > self.config.ik_tolerance:
                raise ArmError(
                    f"sim arm: {_fmt_pose(pose)} is out of reach "
                    f"(IK misses it by {final.residual * 1000:.0f} mm); choose a closer pose"
                )
            start = Transform.from_pose(self.twin.ee_pose(self.arm))
            goal = Transform.from_pose(pose)
            distance = math.dist(start.position, goal.position)
            turn = quat_angle(start.rotation, goal.rotation)
            steps = max(1, math.ceil(max(distance / velocity, turn / self.config.turn_speed) / DT))
            seed: Sequence[float] = self.twin.joints(self.arm)
            for i in range(1, steps + 1):
                seed = self._track(_interpolate(start, goal, i / steps), seed)
            self._settle(lambda: math.dist(self.twin.ee_pose(self.arm).position(), goal.position))

    def move_joints(self, joints: tuple[float, ...], speed: float | None = None) -> None:
        """Joint move to ``joints`` (radians) at ``speed`` rad/s for the joint moving most."""
        with self._motion(f"move_joints({_fmt_joints(joints)}, speed={speed})"):
            velocity = self._speed(speed, self.config.joint_speed, self.config.max_joint_speed)
            self._check_joints(joints)
            start = self.twin.joints(self.arm)
            largest = max(abs(b - a) for a, b in zip(start, joints, strict=True))
            steps = max(1, math.ceil(largest / velocity / DT))
            for i in range(1, steps + 1):
                s = i / steps
                waypoint = [a + (b - a) * s for a, b in zip(start, joints, strict=True)]
                self._step_towards(waypoint)
            self._settle(
                lambda: max(
                    abs(a - b) for a, b in zip(self.twin.joints(self.arm), joints, strict=True)
                )
            )

    def grip(self, close: bool) -> None:
        """Close the fingers with the scene's force (or open them); blocks until they stop."""
        with self._motion(f"grip({'close' if close else 'open'})"):
            self.twin.grip(close, self.arm)
            still = 0
            for _ in range(math.ceil(self.config.grip_timeout / DT)):
                self._check_stop()
                self._step()
                still = still + 1 if not self.twin.gripper_moving(self.arm) else 0
                if still >= 12:
                    break

    def stop(self) -> None:
        """Abort the current motion before the next physics step (from any thread), and
        refuse motions until :meth:`resume`."""
        self._stop.set()

    def resume(self) -> None:
        """Clear the stop latch: motion calls run again."""
        self._stop.clear()

    def wait_stopped(self, timeout: float) -> bool:
        """Wait until the stop latch is set (by a stop from any thread); False on timeout."""
        return self._stop.wait(timeout)

    def state(self) -> ArmState:
        now = self.twin.snapshot_of(self.arm)
        return ArmState(
            pose=now.ee_pose,
            joints=now.joints,
            gripper_closed=now.gripper_closed,
            moving=self._moving,
            stopped=self._stop.is_set(),
            error=self._error,
            last_command=self._last_command,
            extra={
                "gripper_width": now.gripper_width,
                "holding": 0.0 if now.held is None else 1.0,
                "sim_time": now.time,
                "step": float(now.step),
            },
        )

    # internals

    @contextmanager
    def _motion(self, command: str) -> Iterator[None]:
        if not self._connected:
            raise ArmError("sim arm: not connected: call connect() first")
        if self._stop.is_set():
            self._error = f"sim arm: stopped by stop(): call resume() before {command}"
            raise ArmError(self._error)
        self._moving, self._error, self._last_command = True, None, command
        self._wall_start, self._sim_start = time.monotonic(), self.twin.time
        try:
            yield
        except ArmError as exc:
            self._error = str(exc)
            self.twin.set_joint_targets(
                self.twin.joints(self.arm), self.config.max_joint_speed, self.arm
            )
            raise
        finally:
            self._moving = False

    def _track(self, waypoint: Pose, seed: Sequence[float]) -> tuple[float, ...]:
        """One physics step towards the joints that put the tool at ``waypoint``."""
        solution = self.twin.solve_ik(waypoint, seed, self.arm)
        if solution.residual > self.config.ik_tolerance:
            raise ArmError(
                f"sim arm: the path leaves the workspace at {_fmt_pose(waypoint)} "
                f"(IK misses by {solution.residual * 1000:.0f} mm); move in smaller steps"
            )
        self._step_towards(solution.joints)
        return solution.joints

    def _step_towards(self, joints: Sequence[float]) -> None:
        self._check_stop()
        self.twin.set_joint_targets(joints, self.config.max_joint_speed, self.arm)
        self._step()

    def _settle(self, error: Callable[[], float]) -> None:
        """Step until ``error()`` is within tolerance and the joints are still: each slower
        than STILL as the engine reports it, or on average over the last STILL_WINDOW. A
        joint pressed against a constraint (the wrist of a hand holding a drawer's handle,
        the grasp's weld against its motor) can turn to and fro a fraction of a milliradian
        every few steps for ever; by its reported velocity alone the arm then never settles,
        and whether a push ends in such a cycle turns on a tenth of a millimetre in where
        the handle was seen."""
        window: deque[tuple[float, ...]] = deque(maxlen=STILL_WINDOW + 1)
        for _ in range(math.ceil(self.config.settle_timeout / DT)):
            window.append(self.twin.joints(self.arm))
            still = max(abs(v) for v in self.twin.joint_velocities(self.arm)) < STILL
            if not still and len(window) == window.maxlen:
                moved = max(abs(a - b) for a, b in zip(window[-1], window[0], strict=True))
                still = moved < STILL * STILL_WINDOW * DT
            if still and error() <= self.config.reach_tolerance:
                return
            self._check_stop()
            self._step()
        raise ArmError(
            f"sim arm: did not settle at the goal within {self.config.settle_timeout:.1f} s "
            f"({error() * 1000:.1f} mm off); is the path blocked?"
        )

    def _step(self) -> None:
        self.twin.step()
        if self.config.realtime:
            ahead = (self.twin.time - self._sim_start) - (time.monotonic() - self._wall_start)
            if ahead > 0:
                time.sleep(ahead)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise ArmError("sim arm: motion stopped by stop(); call resume() to move again")

    def _check_joints(self, joints: Sequence[float]) -> None:
        lower, upper = self.twin.joint_limits(self.arm)
        if len(joints) != len(lower):
            raise ArmError(f"sim arm: expected {len(lower)} joint angles, got {len(joints)}")
        for i, (q, lo, hi) in enumerate(zip(joints, lower, upper, strict=True), start=1):
            if not lo <= q <= hi:
                raise ArmError(f"sim arm: joint {i} = {q:.3f} rad is outside [{lo:.3f}, {hi:.3f}]")

    @staticmethod
    def _speed(asked: float | None, default: float, limit: float) -> float:
        if asked is None:
            return default
        if not asked > 0:
            raise ArmError(f"sim arm: speed must be positive, got {asked}")
        return min(asked, limit)


def _interpolate(start: Transform, goal: Transform, s: float) -> Pose:
    x, y, z = (a + (b - a) * s for a, b in zip(start.position, goal.position, strict=True))
    return Transform((x, y, z), slerp(start.rotation, goal.rotation, s)).to_pose()


def _fmt_pose(pose: Pose) -> str:
    return (
        f"Pose(x={pose.x:.3f}, y={pose.y:.3f}, z={pose.z:.3f}, "
        f"rx={pose.rx:.3f}, ry={pose.ry:.3f}, rz={pose.rz:.3f})"
    )


def _fmt_joints(joints: Sequence[float]) -> str:
    return "(" + ", ".join(f"{q:.3f}" for q in joints) + ")"
