"""``onboard graph``: a skill's state machine as a Mermaid diagram."""

from __future__ import annotations

from onboard.catalog import load_robot_skill
from onboard.config import RobotConfig
from onboard.loop.graph import mermaid

__all__ = ["graph"]


def graph(robot: RobotConfig, skill: str) -> int:
    print(mermaid(load_robot_skill(robot, skill)))
    return 0
