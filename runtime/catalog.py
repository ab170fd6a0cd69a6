"""Find a robot's skills and build their mappers, importing no more than ``check`` needs."""

from __future__ import annotations

from pathlib import Path

from onboard.config import RobotConfig
from onboard.grounding.embedder import Embedder
from onboard.grounding.mapping import ActionMapper
from onboard.hri.world import SimRobot
from onboard.loop.skill import Skill, load_skill

__all__ = ["load_robot_skill", "make_mapper"]


def load_robot_skill(robot: RobotConfig, name_or_path: str) -> Skill:
    """A skill by name (``engage``) from the skills folder, or by path."""
    path = Path(name_or_path)
    if not path.suffix:
        path = robot.skills_dir / f"{name_or_path}.toml"
    return load_skill(path, robot.drivers.robot.perception, SimRobot.COMMANDS)


def make_mapper(robot: RobotConfig, skill: Skill, embedder: Embedder | None = None) -> ActionMapper:
    """The mapper over the skill's references plus the replies registered bottom-up."""
    embedder = embedder or Embedder(robot.embedder_dir, threads=robot.models.threads)
    references = {name: list(a.spec.references) for name, a in skill.actions.items()}
    return ActionMapper(
        embedder,
        references,
        robot.mapping.threshold,
        robot.mapping.margin,
        reject=skill.reject,
        ambiguity=robot.mapping.ambiguity,
        near_tie=robot.mapping.near_tie,
    )
