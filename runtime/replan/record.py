"""The header of a code episode's recording (format 3, ``skill_kind = "code"``): robot.toml,
the code skill it ran (its TOML, which a replay loads), the task, the options and the model
files it ran with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from onboard import bundled
from onboard.config import RobotConfig
from onboard.loop.recording import SkillText, build_header
from onboard.loop.skill import Skill
from onboard.replan.names import API_NAMES

__all__ = ["code_header"]


def code_header(
    robot: RobotConfig,
    task: Mapping[str, Any],
    options: Mapping[str, Any],
    skill: Skill | None = None,
) -> dict[str, Any]:
    """``task``: at least the instruction (and the task's number, name and scene when it is
    one of the code tasks); ``options``: the method, the model, the seed, ...; ``skill``: the
    code skill the episode runs (None: the shipped skills/code.toml)."""
    if skill is None:
        path = bundled.skills_dir() / "code.toml"
        text = SkillText(name="code", toml=path.read_text(encoding="utf-8"), file=str(path))
    else:
        text = SkillText(name=skill.name, toml=skill.source, file=str(skill.path))
    return build_header(
        robot,
        text,
        "code",
        options={**options, "api": list(API_NAMES)},
        models={
            "detector": bundled.detector_dir() / "model.onnx",
            "embedder": bundled.embedder_dir() / "model.onnx",
        },
        task=dict(task),
    )
