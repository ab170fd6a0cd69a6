"""``onboard actions list|add``: the bottom-up action set's candidates."""

from __future__ import annotations

import argparse

from onboard.base.errors import CandidateError
from onboard.config import RobotConfig

__all__ = ["add_candidate", "list_candidates"]


def list_candidates(robot: RobotConfig, skill: str | None) -> int:
    """Unmatched replies kept as candidates, with the situation each came from."""
    from onboard.grounding.candidates import CandidateStore

    found = CandidateStore(robot.recordings_dir / "candidates.jsonl").list(skill)
    if not found:
        print("no candidates")
    for c in found:
        status = f"registered as {c.registered_as!r}" if c.registered_as else "candidate"
        print(f"{c.id}  [{c.skill}] {c.reply!r}\n          situation: {c.situation}  ({status})")
    return 0


def add_candidate(robot: RobotConfig, args: argparse.Namespace) -> int:
    """Register a candidate reply as a new action, written into the skill's TOML."""
    from onboard.catalog import load_robot_skill
    from onboard.grounding.candidates import CandidateStore, add_action

    if robot.example:
        raise CandidateError(
            "the bundled example robot's skills are onboard's own: "
            "onboard init DIR writes a robot with skills to edit"
        )
    skill = load_robot_skill(robot, args.skill)
    store = CandidateStore(robot.recordings_dir / "candidates.jsonl")
    candidate = store.get(args.candidate)
    add_action(
        skill.path,
        args.name,
        candidate.reply,
        text=args.text or f"The robot is doing {args.name}.",
        stimuli=args.stimuli,
        command=args.command,
        validate=lambda p: load_robot_skill(robot, str(p)),
    )
    store.mark_registered(candidate, args.name)
    print(f"{skill.path}: added action {args.name!r} with reference {candidate.reply!r}")
    if skill.critic is not None:
        # the critic scores the actions it was trained on: a new one needs new data
        print(f"{skill.path}: its [critic] ({skill.critic.model}) has never seen {args.name!r}:"
              " rebuild it (python models/critics/build.py SKILL) or remove [critic];"
              " until then `onboard check` names the mismatch")  # fmt: skip
    return 0
