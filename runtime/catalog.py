"""Find a robot's skills and build their mappers, importing no more than ``check`` needs."""

from __future__ import annotations

from pathlib import Path

from onboard.collab.names import TEAM_COMMANDS
from onboard.config import RobotConfig
from onboard.grounding.embedder import Embedder, shared_embedder
from onboard.grounding.mapping import ActionMapper, Cues, Lexicon
from onboard.hri.world import SimRobot
from onboard.loop.skill import OBSERVED_FIELDS, Action, Skill, load_skill
from onboard.manip.commands import ARM_COMMANDS
from onboard.replan.names import CODE_COMMANDS

__all__ = ["load_robot_skill", "make_mapper"]


def load_robot_skill(robot: RobotConfig, name_or_path: str) -> Skill:
    """A skill by name (``engage``) from the skills folder, or by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = robot.skills_dir / f"{name_or_path}.toml"
    commands = {
        "person": SimRobot.COMMANDS,
        "scene": ARM_COMMANDS,
        "code": CODE_COMMANDS,
        "team": TEAM_COMMANDS,
    }
    return load_skill(path, robot.drivers.robot.perception, commands)


def _text(action: Action) -> str:
    """An action's text as one more reference, its observed fields in general words."""
    text = action.describe({field: "the activity" for field in OBSERVED_FIELDS})
    return text.replace('"', "")


def make_mapper(robot: RobotConfig, skill: Skill, embedder: Embedder | None = None) -> ActionMapper:
    """The mapper over the skill's references plus the replies registered bottom-up."""
    embedder = embedder or shared_embedder(robot.embedder_dir, threads=robot.models.threads)
    references = {name: [*a.spec.references, _text(a)] for name, a in skill.actions.items()}
    settings = robot.mapping
    lexicon = None
    if settings.second_stage == "lexicon":
        lexicon = Lexicon(
            {name: Cues(**a.spec.lexicon.model_dump()) for name, a in skill.actions.items()}
        )
    return ActionMapper(
        embedder,
        references,
        settings.threshold,
        settings.margin,
        reject=skill.reject,
        ambiguity=settings.ambiguity,
        near_tie=settings.near_tie,
        lexicon=lexicon,
        shortlist=settings.shortlist,
        lexicon_threshold=settings.lexicon_threshold,
        top_k=settings.top_k,
        embed_references=embedder.embed_references,
    )
