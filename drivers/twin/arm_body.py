"""What the twin's arms share: joint reads, limits, forward and inverse kinematics on a
kinematic shadow copy, the two-finger pinch test, and the weld that ties a pinched object
to the hand. :class:`~onboard.drivers.twin.panda.Panda` and
:class:`~onboard.drivers.twin.so101.So101Body` add their own build, motors and fingers.

A subclass sets the class attributes (the joint and link indices) and, in ``__init__``,
``_p`` (the scene's client), ``body``, ``base``, ``lower``/``upper`` and the shadow
(``_shadow``, ``_shadow_body``), then calls :meth:`_hold_nothing`.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from onboard.drivers.rotations import quat_angle
from onboard.drivers.twin.frames import Transform

__all__ = ["ArmBody", "IKSolution", "urdf_file"]

#: newtons both fingers must press with before a weld
GRIP_MIN_FORCE = 1.0


@dataclass(frozen=True)
class IKSolution:
    """Joint angles for a pose, with the forward-kinematics check of how well they reach it."""

    joints: tuple[float, ...]
    residual: float  # metres between the reached and the asked position
    angle: float  # radians between the reached and the asked orientation


class ArmBody:
    ARM: ClassVar[tuple[int, ...]]  # the arm's joints
    HAND: ClassVar[int]  # the link a weld attaches to
    TCP: ClassVar[int]  # the tool point's link
    FINGERS: ClassVar[tuple[int, int]]  # the two links that pinch
    WELD_FORCE: ClassVar[float]  # newtons the weld holds with

    _p: Any
    body: int
    base: Transform
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    _shadow: Any
    _shadow_body: int

    def _hold_nothing(self) -> None:
        self.closed = False
        self._weld: int | None = None
        self.held: int | None = None
        self.held_link = -1  # the link of ``held`` the weld attaches to (-1: its base)

    def close(self) -> None:
        self._shadow.disconnect()

    # joints

    def joints(self) -> tuple[float, ...]:
        return tuple(float(s[0]) for s in self._p.getJointStates(self.body, self.ARM))

    def joint_states(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Positions and velocities of the arm's joints, in one query."""
        states = self._p.getJointStates(self.body, self.ARM)
        return tuple(float(s[0]) for s in states), tuple(float(s[1]) for s in states)

    def clamp(self, joints: Sequence[float]) -> tuple[float, ...]:
        return tuple(
            min(max(q, lo), hi) for q, lo, hi in zip(joints, self.lower, self.upper, strict=True)
        )

    # kinematics (poses in the arm's base frame)

    def tcp(self) -> Transform:
        state = self._p.getLinkState(self.body, self.TCP, computeForwardKinematics=True)
        return self.base.inverse() @ Transform(tuple(state[4]), tuple(state[5]))

    def forward(self, joints: Sequence[float]) -> Transform:
        s = self._shadow
        for j, q in zip(self.ARM, joints, strict=True):
            s.resetJointState(self._shadow_body, j, q)
        state = s.getLinkState(self._shadow_body, self.TCP, computeForwardKinematics=True)
        return Transform(tuple(state[4]), tuple(state[5]))

    def _refine(
        self, target: Transform, seed: Sequence[float], tries: int, iterations: int, **extra: Any
    ) -> IKSolution:
        """PyBullet's damped least squares on the shadow from ``seed``, clamped to the limits
        and solved again from the clamped answer, up to ``tries`` times; the best by
        position, then orientation (``extra``: the solver's null-space arguments)."""
        joints = self.clamp(seed)
        best = IKSolution(joints, float("inf"), float("inf"))
        for _ in range(tries):
            self.forward(joints)  # the solver starts from the shadow's joints
            full = self._shadow.calculateInverseKinematics(
                self._shadow_body,
                self.TCP,
                target.position,
                target.rotation,
                maxNumIterations=iterations,
                residualThreshold=1e-6,
                **extra,
            )
            joints = self.clamp(full[: len(self.ARM)])
            reached = self.forward(joints)
            found = IKSolution(
                joints,
                math.dist(reached.position, target.position),
                quat_angle(reached.rotation, target.rotation),
            )
            if found.residual + 0.05 * found.angle < best.residual + 0.05 * best.angle:
                best = found
            if found.residual < 1e-4 and found.angle < 1e-3:
                break
        return best

    # grasping

    def pinched(self, candidates: Collection[tuple[int, int]]) -> tuple[int, int] | None:
        """The candidate (body, link) both fingers press on, if any."""
        pressed = []
        for finger in self.FINGERS:
            contacts = self._p.getContactPoints(bodyA=self.body, linkIndexA=finger)
            pressed.append(
                {
                    (c[2], c[4])
                    for c in contacts
                    if c[9] >= GRIP_MIN_FORCE and (c[2], c[4]) in candidates
                }
            )
        both = pressed[0] & pressed[1]
        return min(both) if both else None

    def weld(self, body: int, link: int = -1) -> None:
        """Fix ``body`` (its ``link``; -1: its base) to the hand where it is now."""
        hand = self._p.getLinkState(self.body, self.HAND)
        if link < 0:
            obj = self._p.getBasePositionAndOrientation(body)
        else:
            obj = self._p.getLinkState(body, link)[:2]  # its centre of mass, as the base's
        # constraint frames are relative to each link's centre of mass
        rel = Transform(tuple(hand[0]), tuple(hand[1])).inverse() @ Transform(
            tuple(obj[0]), tuple(obj[1])
        )
        self._weld = int(
            self._p.createConstraint(
                self.body,
                self.HAND,
                body,
                link,
                self._p.JOINT_FIXED,
                (0, 0, 0),
                rel.position,
                (0, 0, 0),
                parentFrameOrientation=rel.rotation,
                childFrameOrientation=(0, 0, 0, 1),
            )
        )
        self._p.changeConstraint(self._weld, maxForce=self.WELD_FORCE)
        self.held, self.held_link = body, link

    def release(self) -> None:
        if self._weld is not None:
            self._p.removeConstraint(self._weld)
        self._weld = None
        self.held, self.held_link = None, -1


def urdf_file(text: str, name: str) -> str:
    """``text`` written once to the temporary folder as ``onboard-twin-NAME-DIGEST.urdf``
    (atomically: processes may start side by side); its path."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"onboard-twin-{name}-{digest}.urdf"
    if not path.exists():
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        partial.replace(path)
    return str(path)
