"""``onboard init DIR``: a new robot to edit, from the bundled example.

Writes ``DIR/robot.toml`` (the commented example robot that runs when no robot.toml is
found, with the robot's name) and copies the shipped skills into ``DIR/skills``
(``engage.toml``, ``scenarios/*.toml``, ``scenarios/heldout/*.toml``). Nothing is
overwritten without ``--force``: an existing file is one error line naming it, and nothing
is written. ``--arm KIND`` adds that kind of arm's ``[drivers.arm]`` and ``[safety]``
(:mod:`onboard.cli.arm_profiles`), the settings to check marked ``check this``.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path
from typing import TextIO

import tomlkit

from onboard import bundled
from onboard.base.errors import ConfigError, Problem
from onboard.cli.arm_profiles import PROFILES
from onboard.config import load_robot
from onboard.hri.scenario import HELD_OUT, scenario_files

__all__ = ["init"]


def init(
    folder: Path,
    name: str | None,
    force: bool,
    out: TextIO | None = None,
    arm: str | None = None,
) -> int:
    """Write ``folder/robot.toml`` (with ``arm``'s profile) and ``folder/skills``; 0, or
    ConfigError naming a file."""
    out = out or sys.stdout
    robot_toml = folder / "robot.toml"
    name = folder.resolve().name if name is None else name
    if not name.strip():
        raise ConfigError([Problem(robot_toml, "name", None, "--name must not be empty")])
    if folder.exists() and not folder.is_dir():
        raise ConfigError([Problem(folder, "", None, "exists and is not a folder")])
    shipped = bundled.skills_dir()
    skills = [p.relative_to(shipped) for p in sorted(shipped.glob("*.toml"))]
    skills += [p.relative_to(shipped) for p in scenario_files(shipped / "scenarios")]
    targets = [robot_toml, *(folder / "skills" / p for p in skills)]
    if not force:
        for target in targets:
            if target.exists():
                message = "exists already: onboard init --force overwrites it"
                raise ConfigError([Problem(target, "", None, message)])
    document = tomlkit.parse(bundled.example_robot().read_text(encoding="utf-8"))
    document["name"] = name
    text = tomlkit.dumps(document)
    if arm is not None:
        text += "\n" + PROFILES[arm]
    try:
        (folder / "skills" / "scenarios" / HELD_OUT).mkdir(parents=True, exist_ok=True)
        robot_toml.write_text(text, encoding="utf-8")
        for path in skills:
            shutil.copyfile(shipped / path, folder / "skills" / path)
    except OSError as exc:
        raise ConfigError([Problem(folder, "", None, f"cannot write: {exc}")]) from exc
    load_robot(robot_toml)  # what it wrote validates
    print(f"onboard init: robot {name!r} in {folder}", file=out)
    for target in targets:
        print(f"  wrote {target}", file=out)
    where = shlex.quote(str(folder))
    if arm is not None:
        marked = sum("check this" in line for line in PROFILES[arm].splitlines())
        print(
            f"  arm {arm}: check the {marked} lines marked 'check this' in {robot_toml} "
            f"(docs/arms.md#{arm}: configure, home, calibrate, recover from a stop)",
            file=out,
        )
    print(f"next: cd {where} && onboard check && onboard run engage --llm standin", file=out)
    return 0
