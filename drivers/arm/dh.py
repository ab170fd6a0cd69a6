"""A serial arm's kinematics from its Denavit-Hartenberg table: forward kinematics, and
inverse kinematics by damped least squares.

Standard (distal) DH: link ``i`` is ``Rz(theta_i) Tz(d_i) Tx(a_i) Rx(alpha_i)``; modified
(proximal, Craig's: what Franka publishes for the Panda) is ``Rx(alpha_{i-1}) Tx(a_{i-1})
Rz(theta_i) Tz(d_i)``, the row holding ``a`` and ``alpha`` of the link before. A revolute
joint's variable adds to ``theta``, a prismatic joint's to ``d``. The tool point is ``tool``
(metres) in the last link's frame, and the tool's frame is that frame turned by
``tool_rotation`` (roll, pitch, yaw in radians, extrinsic XYZ). Joint variables are
radians (revolute) or metres (prismatic), as the Arm API's ``joints``.

:meth:`Chain.solve` iterates ``dq = J^T (J J^T + lambda^2 I)^-1 e`` on the position error
and the orientation error (a rotation vector, weighted ``orientation_weight`` metres per
radian), with Levenberg-Marquardt's damping (a step that does not lower the error is retried
more damped), clamping to the joint limits at every step and leaving out a joint pinned at
one; from the seed, then from the middle of the limits, then from ``restarts`` starts spread
over them, half of them with the base joint turned to face the target (the same starts every
time, so a refusal is reproducible). A target beyond the stretched-out arm is refused at
once; one within it that no start reaches takes all the starts (about 0.5 s for five joints
on a desktop core) to refuse. An arm with fewer than six joints cannot give
every orientation: for it the rotation about the target's tool axis is left free (position
and tool axis are five constraints), as a five-axis arm's user expects. It raises ArmError in
one line when no start converges within the limits.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from onboard.base.errors import ArmError
from onboard.drivers.arm.base import Pose
from onboard.drivers.rotations import matrix_to_rpy, rpy_to_matrix

__all__ = ["Chain", "Link"]

Matrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Link:
    """One DH row: metres and radians; ``prismatic``: the variable adds to ``d``."""

    a: float = 0.0
    alpha: float = 0.0
    d: float = 0.0
    theta: float = 0.0
    prismatic: bool = False
    modified: bool = False  # Craig's convention: a and alpha come before the joint

    def transform(self, q: float) -> Matrix:
        theta = self.theta + (0.0 if self.prismatic else q)
        d = self.d + (q if self.prismatic else 0.0)
        ct, st = math.cos(theta), math.sin(theta)
        ca, sa = math.cos(self.alpha), math.sin(self.alpha)
        if self.modified:
            return np.array(
                [
                    [ct, -st, 0.0, self.a],
                    [st * ca, ct * ca, -sa, -sa * d],
                    [st * sa, ct * sa, ca, ca * d],
                    [0.0, 0.0, 0.0, 1.0],
                ]
            )
        return np.array(
            [
                [ct, -st * ca, st * sa, self.a * ct],
                [st, ct * ca, -ct * sa, self.a * st],
                [0.0, sa, ca, d],
                [0.0, 0.0, 0.0, 1.0],
            ]
        )


@dataclass(frozen=True)
class Chain:
    """The arm: its links, the tool point in the last frame, and the joint limits."""

    links: tuple[Link, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    tool: tuple[float, float, float] = (0.0, 0.0, 0.0)
    tool_rotation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    name: str = "arm"
    orientation_weight: float = 0.1  # m per rad: 10 degrees weigh as much as 17 mm
    tolerance: float = 0.0005  # m (and tolerance / orientation_weight rad) to converge
    restarts: int = 24  # starts spread over the limits after the seed and the middle

    def __post_init__(self) -> None:
        if not len(self.links) == len(self.lower) == len(self.upper):
            raise ValueError("Chain: one lower and one upper limit per link")

    @property
    def size(self) -> int:
        return len(self.links)

    def frames(self, joints: Sequence[float] | Matrix) -> list[Matrix]:
        """The base frame, then each link's frame in the base frame, then the tool's."""
        frames = [np.eye(4)]
        for link, q in zip(self.links, joints, strict=True):
            frames.append(frames[-1] @ link.transform(float(q)))
        tool = frames[-1].copy()
        tool[:3, 3] = frames[-1][:3, :3] @ np.array(self.tool) + frames[-1][:3, 3]
        if any(self.tool_rotation):
            tool[:3, :3] = frames[-1][:3, :3] @ rpy_to_matrix(self.tool_rotation)
        frames.append(tool)
        return frames

    def forward(self, joints: Sequence[float]) -> Pose:
        """The tool's pose for ``joints``."""
        tool = self.frames(joints)[-1]
        x, y, z = (float(v) for v in tool[:3, 3])
        return Pose(x, y, z, *matrix_to_rpy(tool[:3, :3]))

    def within(self, joints: Sequence[float]) -> int | None:
        """The index of the first joint outside its limits, or None."""
        for i, (q, lo, hi) in enumerate(zip(joints, self.lower, self.upper, strict=True)):
            if not lo - 1e-9 <= q <= hi + 1e-9:
                return i
        return None

    def solve(self, pose: Pose, seed: Sequence[float] | None = None) -> tuple[float, ...]:
        """Joints within the limits that put the tool at ``pose``; ArmError if none found."""
        target = rpy_to_matrix((pose.rx, pose.ry, pose.rz))
        goal = np.array(pose.position())
        reach = sum(abs(link.a) + abs(link.d) for link in self.links) + math.hypot(*self.tool)
        reach += sum(
            max(abs(lo), abs(hi))
            for link, lo, hi in zip(self.links, self.lower, self.upper, strict=True)
            if link.prismatic
        )
        if float(np.linalg.norm(goal)) > reach:
            raise ArmError(
                f"{self.name}: ({pose.x:.3f}, {pose.y:.3f}, {pose.z:.3f}) m is out of reach: "
                f"{float(np.linalg.norm(goal)) - reach:.3f} m beyond the stretched-out arm "
                f"({reach:.3f} m from its base): nothing was sent"
            )
        lower, upper = np.array(self.lower), np.array(self.upper)
        middle = (lower + upper) / 2
        starts = [np.clip(np.array(seed, dtype=float), lower, upper)] if seed else []
        starts.append(middle)
        span = upper - lower
        spread = np.random.default_rng(0)  # fixed starts: a refusal is reproducible
        for _ in range(self.restarts // 2):  # each as drawn, then facing the target
            start = lower + span * spread.random(self.size)
            starts += [start, self._facing(start, goal)]
        closest = math.inf
        for start in starts:
            q, off = self._descend(start, goal, target, lower, upper)
            if off <= self.tolerance:
                return tuple(float(v) for v in q)
            closest = min(closest, off)
        raise ArmError(
            f"{self.name}: ({pose.x:.3f}, {pose.y:.3f}, {pose.z:.3f}) m is out of reach within "
            f"the joint limits (the closest solution is {closest * 1000:.1f} mm off, weighing "
            f"orientation {self.orientation_weight:g} m/rad): nothing was sent"
        )

    def _facing(self, q: Matrix, goal: Matrix) -> Matrix:
        """``q`` with the first joint (about the base's z axis in a standard table, and in a
        modified one whose first alpha is 0) turned so that the tool's azimuth is the goal's:
        restarts begin facing the target."""
        if self.links[0].prismatic or math.hypot(goal[0], goal[1]) < 1e-6:
            return q
        tool = self.frames(q)[-1][:3, 3]
        if math.hypot(tool[0], tool[1]) < 1e-6:
            return q
        turn = math.atan2(goal[1], goal[0]) - math.atan2(tool[1], tool[0])
        turned = q.copy()
        turned[0] = (q[0] + turn + math.pi) % (2 * math.pi) - math.pi
        return np.clip(turned, self.lower, self.upper)

    def _descend(
        self, q: Matrix, goal: Matrix, target: Matrix, lower: Matrix, upper: Matrix
    ) -> tuple[Matrix, float]:
        """Damped least squares from ``q``; the joints and the weighted error at the end."""
        w = self.orientation_weight
        free_roll = self.size < 6
        axis = target[:, 2]
        project = np.eye(3) - np.outer(axis, axis) if free_roll else np.eye(3)
        damping = 1e-3
        error, frames = self._error(q, goal, target, project)
        off = float(np.linalg.norm(error))
        history = [off]
        for _ in range(150):
            if off <= self.tolerance * 0.1 or damping > 1e3:
                break
            if len(history) > 15 and history[-15] - off < 1e-3 * self.tolerance:
                break  # stalled in a local minimum: the next start does better
            history.append(off)
            jacobian = self._jacobian(frames)
            jacobian[3:] = w * (project @ jacobian[3:])
            step = _dls(jacobian, error, damping)
            pinned = ((q <= lower) & (step < 0)) | ((q >= upper) & (step > 0))
            if pinned.any():  # a joint at its limit: solve with the others
                jacobian[:, pinned] = 0.0
                step = _dls(jacobian, error, damping)
            biggest = float(np.max(np.abs(step)))
            if biggest > 0.3:
                step *= 0.3 / biggest
            trial = np.clip(q + step, lower, upper)
            trial_error, trial_frames = self._error(trial, goal, target, project)
            trial_off = float(np.linalg.norm(trial_error))
            if trial_off < off:  # Levenberg-Marquardt: trust the model more
                q, error, frames, off = trial, trial_error, trial_frames, trial_off
                damping = max(damping / 3.0, 1e-6)
            else:
                damping *= 4.0
        return q, off

    def _error(
        self, q: Matrix, goal: Matrix, target: Matrix, project: Matrix
    ) -> tuple[Matrix, list[Matrix]]:
        frames = self.frames(q)
        tool = frames[-1]
        e_r = project @ _rotation_vector(target @ tool[:3, :3].T)
        return np.concatenate([goal - tool[:3, 3], self.orientation_weight * e_r]), frames

    def _jacobian(self, frames: list[Matrix]) -> Matrix:
        end = frames[-1][:3, 3]
        columns = []
        # a joint turns about its own frame's z (modified DH) or the frame before's (standard)
        axes = frames[1:-1] if self.links[0].modified else frames[:-2]
        for link, frame in zip(self.links, axes, strict=True):
            z, origin = frame[:3, 2], frame[:3, 3]
            if link.prismatic:
                columns.append(np.concatenate([z, np.zeros(3)]))
            else:
                columns.append(np.concatenate([np.cross(z, end - origin), z]))
        return np.array(columns).T


def _dls(jacobian: Matrix, error: Matrix, damping: float) -> Matrix:
    """The damped least-squares step ``J^T (J J^T + damping I)^-1 e``."""
    jjt = jacobian @ jacobian.T + damping * np.eye(len(error))
    return jacobian.T @ np.linalg.solve(jjt, error)


def _rotation_vector(r: Matrix) -> Matrix:
    """The axis times the angle of rotation ``r``."""
    cos = max(-1.0, min(1.0, (float(np.trace(r)) - 1.0) / 2.0))
    angle = math.acos(cos)
    if angle < 1e-9:
        return np.zeros(3)
    skew = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
    if math.pi - angle > 1e-4:
        return skew * (angle / (2.0 * math.sin(angle)))
    # near a half turn the skew part vanishes: the axis from the symmetric part
    i = int(np.argmax(np.diag(r)))
    column = (r[:, i] + np.eye(3)[:, i]) / math.sqrt(max(2.0 * (1.0 + r[i, i]), 1e-12))
    if float(np.dot(column, skew)) < 0:
        column = -column
    return column * angle
