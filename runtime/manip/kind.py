"""The scene kind of skill: the table seen by the camera, replies read as arm actions with
arguments bound to the objects in view (runtime/loop/kind.py).

A reply is a dictionary ``{"action": ..., "object": ..., "target": ...}``. The action's words
map onto the skill's actions as Engage's do (the embedder and the skill's references); the
object and the target resolve against what is in view, and the skill's regions, through the
embedder (runtime/manip/resolve.py): "the ruby cube" finds the red block, or is refused.
Under constrained decoding the schema's enums are the actions, the objects in view and the
regions, so a reply names them exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onboard.grounding.mapping import ActionMapper
from onboard.llm import prompts
from onboard.llm.content import user_message
from onboard.llm.replies import parse_reply, reply_action
from onboard.llm.types import Message
from onboard.loop.kind import Attempt, Observation, Plan, Step
from onboard.loop.skill import Action, SceneSpec, Skill
from onboard.manip.observation import SceneObservation
from onboard.manip.resolve import ObjectResolver

__all__ = ["NONE", "SceneKind"]

#: what a reply writes for an argument that does not apply
NONE = "none"


class SceneKind:
    name = "scene"

    def __init__(self, skill: Skill, mapper: ActionMapper, resolver: ObjectResolver) -> None:
        """``mapper`` maps action words onto ``skill``'s actions (catalog.make_mapper)."""
        self.skill = skill
        self.scene = _scene(skill)
        self.mapper = mapper
        self.resolver = resolver

    # -- the prompt ------------------------------------------------------------------------

    def plan_messages(
        self,
        skill: Skill,
        step: Step,
        began: Observation,
        now: Observation,
        history: Sequence[Attempt],
        action_text: bool,
    ) -> list[Message]:
        robot = skill.goal
        if action_text:
            robot += " " + skill.actions[step.action].describe(dict(step.args))
        seen = now.situation() + self._regions_text(now)
        if history:
            seen += "\n" + prompts.refinement_note(history)
        messages = prompts.first_stage(skill, robot, seen)
        images = now.images() if skill.prompt.images else ()
        if images:
            messages[-1] = user_message(str(messages[-1]["content"]), images)
        return messages

    def _regions_text(self, now: Observation) -> str:
        """Which objects lie in which region: "Regions: left side (empty); middle: the
        yellow block." """
        parts = []
        for name, region in self.scene.regions.items():
            inside = [
                o.name
                for o in (now.scene.objects if isinstance(now, SceneObservation) else ())
                if region.contains(float(o.position[0]), float(o.position[1]))
            ]
            parts.append(f"{name}: the {', the '.join(inside)}" if inside else f"{name} (empty)")
        return "\nRegions: " + "; ".join(parts) + "." if parts else ""

    def plan_schema(self, skill: Skill, now: Observation) -> dict[str, Any] | None:
        names = _names(now)
        answer = {
            "action": {"type": "string", "enum": list(skill.actions)},
            "object": {"type": "string", "enum": [*names, NONE]},
            "target": {"type": "string", "enum": [*names, *self.scene.regions, NONE]},
        }
        return prompts.closed_schema(answer, prompts.reason_schema(skill))

    # -- the reply -------------------------------------------------------------------------

    def read_plan(self, text: str, now: Observation) -> Plan:
        parsed = parse_reply(text)
        words = reply_action(parsed)
        mapping = self.mapper.map(words)
        record: dict[str, Any] = {"mapping": mapping.to_record()}
        if len(mapping.actions) != 1:
            why = "matches no action" if not mapping.actions else "names several actions"
            return Plan([], record={**record, "refused": why}, reply=words)
        name = mapping.actions[0]
        args: dict[str, str] = {}
        resolutions = []
        for param in self.skill.actions[name].spec.params:
            phrase = parsed.get(param)
            if not isinstance(phrase, str) or not phrase.strip() or phrase.strip() == NONE:
                why = f"{name} needs its {param}; the reply gave none"
                return Plan([], record={**record, "refused": why}, reply=text.strip())
            regions = list(self.scene.regions) if param == "target" else []
            candidates = _names(now) + regions
            found = self.resolver.resolve(phrase, candidates)
            resolutions.append({"param": param, **found.to_record()})
            if found.name is None:
                why = f"{param} {phrase!r} is not in view: {found.why}"
                return Plan(
                    [], record={**record, "resolutions": resolutions, "refused": why},
                    reply=text.strip(),
                )  # fmt: skip
            args[param] = found.name
        step = Step(name, args)
        record.update(resolutions=resolutions, steps=[step.to_record()])
        return Plan([step], record=record, reply=words)

    # -- the driver ------------------------------------------------------------------------

    def command_args(self, action: Action, step: Step, now: Observation) -> dict[str, Any]:
        """Where the step's object and target are now, in the base frame: ``x, y, z`` of the
        object, ``tx, ty, top`` of the target (a region's centre on the table top)."""
        args: dict[str, Any] = dict(action.spec.args)
        scene = self.scene
        seen = now if isinstance(now, SceneObservation) else None
        name = step.args.get("object")
        if name is not None and seen is not None and (obj := seen.find(name)) is not None:
            x, y, z = (float(v) for v in obj.position)
            args.update(object=name, x=x, y=y, z=z, size=float(obj.size))
        target = step.args.get("target")
        if target is not None:
            if target in scene.regions:
                (tx, ty), top = scene.regions[target].center, scene.table
                args.update(target=target, tx=tx, ty=ty, top=top)
            elif seen is not None and (other := seen.find(target)) is not None:
                tx, ty, tz = (float(v) for v in other.position)
                args.update(target=target, tx=tx, ty=ty, top=tz + float(other.size) / 2)
        if action.spec.command == "arm.give" and scene.handover is not None:
            args.update(zip(("x", "y", "z"), scene.handover, strict=True))
        if action.spec.command == "arm.recover" and scene.safe is not None:
            (tx, ty), top = scene.regions[scene.safe].center, scene.table
            args.update(target=scene.safe, tx=tx, ty=ty, top=top)
        return args

    def changes(self, old: Observation, new: Observation) -> frozenset[str]:
        return frozenset()


def _names(now: Observation) -> list[str]:
    return now.names() if isinstance(now, SceneObservation) else []


def _scene(skill: Skill) -> SceneSpec:
    if skill.scene is None:  # the loader gives every scene skill one
        raise ValueError(f"skill {skill.name!r} has no [scene]")
    return skill.scene
