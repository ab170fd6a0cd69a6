"""``onboard map``: map a free-text reply onto a skill's actions, clause by clause."""

from __future__ import annotations

import json

from onboard.catalog import load_robot_skill, make_mapper
from onboard.config import RobotConfig

__all__ = ["map_reply"]


def map_reply(robot: RobotConfig, skill: str, reply: str, as_json: bool) -> int:
    """0 when the reply maps onto actions, 1 for no match."""
    result = make_mapper(robot, load_robot_skill(robot, skill)).map(reply)
    if as_json:
        print(json.dumps(result.to_record(), indent=2))
        return 0 if result.matched else 1
    for clause in result.clauses:
        verdict = clause.action or f"no match: {clause.refused or 'refused'}"
        words = "" if clause.reading is None else f", lexicon: {clause.reading.action}"
        print(f"  {clause.clause!r}: {verdict} (score {clause.score:.3f}, "
              f"runner-up {clause.runner_up} {clause.runner_up_score:.3f}{words})")  # fmt: skip
    print(" -> ".join(result.actions) if result.matched else "no match")
    return 0 if result.matched else 1
