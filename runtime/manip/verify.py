"""Did the step do what it should? The manipulation verifier (ReplanVLM's outer check), from
the camera and the detector only: it reads scene observations, never the physics twin.

After each step a fresh look must show its effect: a picked object lifted off where it lay;
a placed object on its target object, or inside its target region; a pushed object inside its
target region; a given object held out at the hand-over point. Effects established earlier
in the episode (the red block on the blue one) are *standing*: every later verification, and
the check before the skill's end step, looks for them again, so a block knocked off while the
next step was planned is noticed and the robot replans to put it back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from onboard.loop.engine import Verdict
from onboard.loop.kind import Observation, Step
from onboard.loop.skill import Skill
from onboard.manip.observation import SceneObservation

__all__ = ["HANDED", "Effect", "EffectVerify", "Effects", "Geometry", "SceneCheck"]

#: metres a picked object must rise above where it lay
LIFTED = 0.04
#: metres from the hand-over point a given object may be seen
HANDED = 0.06
#: metres a placed object's centre may be off its target's, across
ON_TOP = 0.03


@dataclass(frozen=True)
class Effect:
    """``subject`` is ``kind`` (on, in) ``other`` (an object, or a region)."""

    kind: str
    subject: str
    other: str

    def text(self) -> str:
        return (
            f"the {self.subject} {'is on the' if self.kind == 'on' else 'is in the'} {self.other}"
        )


class Effects:
    """What the episode has achieved so far, to be kept."""

    def __init__(self) -> None:
        self.standing: list[Effect] = []

    def add(self, effect: Effect) -> None:
        self.drop(effect.subject)
        self.standing.append(effect)

    def drop(self, subject: str) -> None:
        """``subject`` is being moved on purpose: what held of it no longer has to."""
        self.standing = [e for e in self.standing if e.subject != subject]


class Geometry:
    def __init__(self, skill: Skill) -> None:
        if skill.scene is None:
            raise ValueError(f"skill {skill.name!r} has no [scene]")
        self.scene = skill.scene

    def holds(self, effect: Effect, seen: SceneObservation) -> bool:
        subject = seen.find(effect.subject)
        if subject is None:
            return False
        x, y, z = (float(v) for v in subject.position)
        if effect.kind == "in":
            region = self.scene.regions[effect.other]
            return region.contains(x, y) and z < self.scene.table + 2 * float(subject.size)
        other = seen.find(effect.other)
        if other is None:
            return False
        if seen.scene.holds(effect.subject, "on", effect.other):  # the scene observer's relation
            return True
        # a partly hidden object's centre is estimated from what shows: allow for it
        ox, oy, oz = (float(v) for v in other.position)
        return math.hypot(x - ox, y - oy) < ON_TOP and z > oz + 0.3 * float(other.size)

    def lost(self, effects: Effects, seen: SceneObservation) -> str:
        """What no longer holds of the standing effects ("the red block is no longer on the
        blue block"); empty when all hold."""
        broken = [e for e in effects.standing if not self.holds(e, seen)]
        return "; ".join(e.text().replace(" is ", " is no longer ", 1) for e in broken)


class EffectVerify:
    """Implements :class:`~onboard.loop.engine.Verify` for scene skills."""

    name = "effect"

    def __init__(self, skill: Skill, effects: Effects) -> None:
        self.skill = skill
        self.effects = effects
        self._geometry = Geometry(skill)

    def verify(self, step: Step, before: Observation, after: Observation) -> Verdict:
        if not isinstance(before, SceneObservation) or not isinstance(after, SceneObservation):
            return Verdict(True)
        if after.scene.view is not None:  # the step's effect is unknown: the robot stops
            why = f"could not verify {step.text()}: the view is {after.scene.view}"
            return Verdict(False, why, 0.0, final=True)
        verdict = self._effect(step, before, after)
        if not verdict.ok:
            return verdict
        lost = self._geometry.lost(self.effects, after)
        if lost:
            return Verdict(False, f"{lost} (it was before {step.text()})", 0.0)
        return verdict

    def _effect(self, step: Step, before: SceneObservation, after: SceneObservation) -> Verdict:
        command = self.skill.actions[step.action].spec.command
        name = step.args.get("object")
        if command == "arm.pick" and name is not None:
            self.effects.drop(name)
            was, now = before.find(name), after.find(name)
            if was is None:
                return Verdict(True)
            if now is None:
                return Verdict(False, f"the {name} is not seen after the pick", 0.0)
            rise = float(now.position[2]) - float(was.position[2])
            if rise < LIFTED:
                return Verdict(False, f"the {name} is still on the table: the grasp missed", 0.0)
            return Verdict(True, score=1.0)
        target = step.args.get("target")
        held = before.holding
        if command == "arm.place" and held is not None and target is not None:
            kind = "in" if target in self._geometry.scene.regions else "on"
            effect = Effect(kind, held, target)
            if not self._geometry.holds(effect, after):
                return Verdict(
                    False, f"{effect.text().replace(' is ', ' is not ', 1)} after the place", 0.0
                )
            self.effects.add(effect)
            return Verdict(True, score=1.0)
        if command == "arm.push" and name is not None and target is not None:
            effect = Effect("in", name, target)
            if not self._geometry.holds(effect, after):
                return Verdict(False, f"the push left the {name} outside the {target}", 0.0)
            self.effects.add(effect)
            return Verdict(True, score=1.0)
        if command == "arm.give" and held is not None and self._geometry.scene.handover:
            seen = after.find(held)
            point = self._geometry.scene.handover
            if seen is None or math.dist([float(v) for v in seen.position], point) > HANDED:
                return Verdict(False, f"the {held} is not held out at the hand-over point", 0.0)
            return Verdict(True, score=1.0)
        return Verdict(True)


class SceneCheck:
    """Implements :class:`~onboard.loop.engine.Check` for scene skills: a step must be
    possible in what is seen now (the object in view, the gripper empty to pick, holding
    something to place or give), and the end step needs every standing effect to hold (the
    runner checks against a fresh look)."""

    name = "scene"

    def __init__(self, skill: Skill, effects: Effects) -> None:
        self.skill = skill
        self.effects = effects
        self._geometry = Geometry(skill)

    def check(self, steps: Sequence[Step], observation: Observation) -> Verdict:
        if not isinstance(observation, SceneObservation):
            return Verdict(True)
        holding = observation.holding
        for step in steps:
            command = self.skill.actions[step.action].spec.command
            name = step.args.get("object")
            if name is not None and observation.find(name) is None:
                return Verdict(False, f"no {name} is in view", 0.0)
            target = step.args.get("target")
            regions = self._geometry.scene.regions
            if target is not None and target not in regions and observation.find(target) is None:
                return Verdict(False, f"no {target} is in view", 0.0)
            if command in ("arm.pick", "arm.push") and holding is not None:
                return Verdict(
                    False, f"the gripper already holds the {holding}; place it first", 0.0
                )
            if command == "arm.pick" and name is not None:
                holding = name
            if command in ("arm.place", "arm.give") and holding is None:
                return Verdict(False, f"the gripper holds nothing to {step.action}", 0.0)
            if command == "arm.place":
                holding = None
            if step.action == self.skill.end:
                lost = self._geometry.lost(self.effects, observation)
                if lost:
                    return Verdict(False, f"not done: {lost}", 0.0)
        return Verdict(True, score=1.0)
