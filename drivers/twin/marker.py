"""A calibration marker carried by the Panda's hand: a sphere held by a fixed constraint.

The sphere is a light dynamic body of its own (so it has its own segmentation id) tied to
the hand link by a ``JOINT_FIXED`` constraint: it follows the arm through physics, as a
marker taped to a real gripper would, instead of being teleported after each move. It
collides with nothing (collision group and mask 0): not the arm that carries it, not the
table, not the objects, so it can never push the arm off its path or knock a block over.
Teleporting the arm (:meth:`HandMarker.place`) teleports the marker with it, so the
constraint never has to drag it across the scene.
"""

from __future__ import annotations

from typing import Any

from onboard.drivers.rotations import Vec3
from onboard.drivers.twin.frames import Transform
from onboard.drivers.twin.scene import MarkerSpec

__all__ = ["MARKER_MASS", "HandMarker"]

MARKER_MASS = 0.01  # kg: light enough not to load the arm, heavy enough to solve stably
MAX_FORCE = 20.0  # newtons the constraint may apply


class HandMarker:
    """``spec``'s sphere on link ``hand`` of ``arm``, ``spec.offset`` from the ``tool`` link's
    frame (in that frame)."""

    def __init__(self, p: Any, spec: MarkerSpec, arm: int, hand: int, tool: int) -> None:
        self._p, self.spec, self._arm, self._hand = p, spec, arm, hand
        shape = p.createCollisionShape(p.GEOM_SPHERE, radius=spec.radius)
        visual = p.createVisualShape(p.GEOM_SPHERE, radius=spec.radius, rgbaColor=spec.color)
        self.body = int(p.createMultiBody(MARKER_MASS, shape, visual, (0.0, 0.0, -1.0)))
        p.setCollisionFilterGroupMask(self.body, -1, 0, 0)
        for link in range(-1, p.getNumJoints(arm)):
            p.setCollisionFilterPair(arm, self.body, link, -1, 0)
        # constraint frames are relative to each link's centre of mass; the tool link is
        # fixed to the hand, so the marker's place in the hand's frame is a constant
        hand_com = self._hand_com()
        state = p.getLinkState(arm, tool, computeForwardKinematics=True)
        tool_frame = Transform(tuple(state[4]), tuple(state[5]))
        self._in_hand = hand_com.inverse() @ tool_frame @ Transform(spec.offset)
        self.place()
        self.constraint = int(
            p.createConstraint(
                arm,
                hand,
                self.body,
                -1,
                p.JOINT_FIXED,
                (0, 0, 0),
                self._in_hand.position,
                (0, 0, 0),
                parentFrameOrientation=self._in_hand.rotation,
                childFrameOrientation=(0, 0, 0, 1),
            )
        )
        p.changeConstraint(self.constraint, maxForce=MAX_FORCE)

    def place(self) -> None:
        """Teleport the marker to where the hand holds it, at rest (after a joint reset)."""
        pose = self._hand_com() @ self._in_hand
        self._p.resetBasePositionAndOrientation(self.body, pose.position, pose.rotation)
        self._p.resetBaseVelocity(self.body, (0, 0, 0), (0, 0, 0))

    def position(self) -> Vec3:
        """The sphere's centre, world frame, where physics has it now."""
        position = self._p.getBasePositionAndOrientation(self.body)[0]
        return (float(position[0]), float(position[1]), float(position[2]))

    def _hand_com(self) -> Transform:
        state = self._p.getLinkState(self._arm, self._hand, computeForwardKinematics=True)
        return Transform(tuple(state[0]), tuple(state[1]))
