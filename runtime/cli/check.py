"""``onboard check``: validate every kind of file the robot uses, each with its own checks.

robot.toml (its schema), the skills (the DSL's load-time checks against this robot's
perception and commands), the scenarios, the twin's scene files (the shipped ones and the
one ``[drivers.arm]`` names), the multi-robot task files (the shipped ``tasks/`` and the
robot folder's ``tasks/``, against their simulators) and the embedder model. Every
problem is one line naming file, key and line; nothing moves.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from onboard.base.errors import ConfigError, Problem
from onboard.base.terminal import shown
from onboard.base.tomlfile import line_in
from onboard.base.urls import public_url
from onboard.config import RobotConfig, load_example_robot, load_robot

if TYPE_CHECKING:
    from onboard.collab.taskfile import TeamTask
    from onboard.hri.scenario import Scenario
    from onboard.loop.skill import Skill, SkillCriticSpec

__all__ = ["check"]


def check(robot_path: Path | None) -> int:
    """Validate robot.toml, skills, scenarios, scenes and the model; one line per problem.

    ``None``: the bundled example robot (no robot.toml was found) and the shipped skills.
    """
    from onboard.bundled import example_robot
    from onboard.catalog import load_robot_skill
    from onboard.collab.taskfile import load_team_task
    from onboard.drivers.twin.scene import load_scene
    from onboard.fleet.member import check_member
    from onboard.hri.scenario import HELD_OUT, load_scenario, scenario_files
    from onboard.llm.structured import resolve
    from onboard.service.mission import check_mission, mission_files

    robot = load_robot(robot_path) if robot_path is not None else load_example_robot()
    robot_path = robot_path if robot_path is not None else example_robot()
    problems: list[Problem] = []
    if not robot.skills_dir.is_dir():  # nothing to check is not "ok"
        line = line_in(robot_path, "skills")
        what = "does not exist" if not robot.skills_dir.exists() else "is not a folder"
        problems.append(Problem(robot_path, "skills", line, f"{robot.skills_dir} {what}"))
    if not robot.recordings_dir.parent.is_dir():  # run creates the folder, not its parents
        line = line_in(robot_path, "recordings")
        what = f"{robot.recordings_dir}: its folder {robot.recordings_dir.parent} does not exist"
        problems.append(Problem(robot_path, "recordings", line, what))
    skills: list[Skill] = []
    scenarios: list[tuple[bool, Scenario]] = []
    for path in sorted(robot.skills_dir.glob("*.toml")):
        try:
            skills.append(load_robot_skill(robot, str(path)))
        except ConfigError as exc:
            problems += exc.problems
    problems += [p for skill in skills if (p := _critic_problem(skill)) is not None]
    for path in scenario_files(robot.skills_dir / "scenarios"):
        try:
            scenarios.append((path.parent.name == HELD_OUT, load_scenario(path)))
        except ConfigError as exc:
            problems += exc.problems
    scenes = []
    for path in _scene_files(robot):
        try:
            load_scene(path)
            scenes.append(path)
        except ConfigError as exc:
            problems += exc.problems
    tasks: list[TeamTask] = []
    for path in _task_files(robot):
        try:
            tasks.append(load_team_task(path))
        except ConfigError as exc:
            problems += exc.problems
    missions = []
    for path in mission_files(robot):
        try:
            missions.append(check_mission(robot, path))
        except ConfigError as exc:
            problems += exc.problems
    critic_notes, critic_problems = _team_critics(tasks)
    problems += critic_problems
    problems += check_member(robot, robot_path, [m.path for m in missions])
    if not robot.embedder_dir.joinpath("model.onnx").exists():
        problems.append(
            Problem(robot_path, "models.embedder", None, f"no model.onnx in {robot.embedder_dir}")
        )
    if problems:
        raise ConfigError(problems)
    decoding: str = robot.llm.decoding
    if decoding == "constrained":
        form = resolve(robot.llm.structured_output, local=robot.llm.base_url == "local")
        decoding += f", {form} form"
    print(f"{robot_path}: robot {robot.name!r}, llm {public_url(robot.llm.base_url)} ({decoding}), "
          f"clock {robot.clock}; {_drivers(robot)}")  # fmt: skip
    for skill in skills:
        print(f"  skill {shown(skill.name)}: {len(skill.actions)} actions, start {skill.start!r}, "
              f"end {skill.end!r}  ({skill.path})")  # fmt: skip
        if skill.critic is not None:
            c = skill.critic
            print(f"    critic {c.model} (WAIT = {c.wait!r}, {_critic_rule(c, skill.end)})")
        missing = [] if skill.kind != "scene" else [
            key for key, value in (("[drivers.arm]", robot.drivers.arm),
                                   ("[drivers.camera]", robot.drivers.camera),
                                   ("[hand_eye]", robot.hand_eye)) if value is None
        ]  # fmt: skip
        if missing:
            print(f"    note: {skill.name} is a scene skill: to run it, robot.toml needs "
                  f"{', '.join(missing)} (onboard calibrate --write gives [hand_eye])")  # fmt: skip
    own = [shown(s.name) for held_out, s in scenarios if not held_out]
    held = [shown(s.name) for held_out, s in scenarios if held_out]
    print(f"  {len(own)} scenarios: {', '.join(own)}")
    if held:
        print(f"  {len(held)} held-out scenarios: {', '.join(held)}")
    print(f"  {len(scenes)} scenes: {', '.join(shown(p.stem) for p in scenes)}")
    print(
        f"  {len(tasks)} team tasks: "
        + ", ".join(
            f"{shown(t.name)} ({len(t.agents)} agents, {len(t.levels)} levels)" for t in tasks
        )
    )
    print(
        f"  {len(missions)} missions: "
        + ", ".join(f"{shown(m.name or '')} ({len(m.steps)} steps)" for m in missions)
    )
    if (member := robot.fleet) is not None:
        ends = [f"{e} (listen)" for e in member.listen] + list(member.connect)
        print(f"  fleet {member.name}: agent {member.agent} of {member.task} in the scene "
              f"{member.scene}, over {', '.join(ends)} (onboard up runs its "
              "controller)")  # fmt: skip
    for note in critic_notes:
        print(f"    note: {shown(note)}")
    _warn_ambiguous(robot, skills)
    print("ok")
    return 0


def _team_critics(tasks: list[TeamTask]) -> tuple[list[str], list[Problem]]:
    """Each team task level's critic (the task file's ``[critic] model``): a missing one is a
    note (ReAd's methods need it, the baselines do not); one whose card does not fit the
    level's agents, actions or features is a problem."""
    from onboard.base.errors import CriticError
    from onboard.collab.card import card_path, check_card, load_card
    from onboard.collab.envs import make_env

    notes, problems = [], []
    for task in tasks:
        missing = []
        for level in task.levels:
            model = task.critic_file(level)
            if not model.is_file():
                missing.append(level)
                continue
            try:
                card = load_card(card_path(model))
                env = make_env(task, level)
            except CriticError as exc:
                problems.append(Problem(task.path, "critic.model", None, str(exc)))
                continue
            except ImportError:  # a simulator behind an extra (overcooked): not checked here
                continue
            found = check_card(card, card.task, card.level, env.vocabulary, env.feature_names,
                               env.agents, env.reach)  # fmt: skip
            if found:
                why = f"{model}: does not fit level {level}: {found[0]}"
                problems.append(Problem(task.path, "critic.model", None, why))
        if missing:
            levels = ", ".join(missing)
            notes.append(f"{task.name}: no critic for level(s) {levels} (ReAd's methods need "
                         "one: onboard critic collect, onboard critic train)")  # fmt: skip
    return notes, problems


def _critic_problem(skill: Skill) -> Problem | None:
    """The skill's ``[critic]`` model: there, with its card, matching the skill."""
    from onboard.base.errors import CriticError
    from onboard.hri.critic import critic_model_path, load_skill_critic

    if skill.critic is None:
        return None
    for key, model in [("model", skill.critic.model),
                       *(("members", m) for m in skill.critic.members)]:  # fmt: skip
        try:
            load_skill_critic(critic_model_path(model), skill, skill.critic.wait)
        except CriticError as exc:
            return Problem(skill.path, f"critic.{key}", skill.line_of("critic", key), str(exc))
    return None


def _scene_files(robot: RobotConfig) -> list[Path]:
    """The twin's shipped scenes, and the scene robot.toml's arm is built from."""
    from onboard.drivers.twin.scene import SCENES, find_scene

    found = sorted(SCENES.glob("*.toml"))
    named = getattr(robot.drivers.arm, "scene", None)
    if named is not None:  # a file, or a shipped scene's name
        path = find_scene(named, robot.root)
        if path.resolve() not in {p.resolve() for p in found}:
            found.append(path)
    return found


def _task_files(robot: RobotConfig) -> list[Path]:
    """The shipped team task files, and those of the robot folder's ``tasks/``."""
    from onboard.collab.taskfile import shipped_tasks_dir, team_task_files

    found = team_task_files(shipped_tasks_dir())
    known = {p.resolve() for p in found}
    found += [p for p in team_task_files(robot.root / "tasks") if p.resolve() not in known]
    return found


def _warn_ambiguous(robot: RobotConfig, skills: Sequence[Skill]) -> None:
    from onboard.catalog import make_mapper
    from onboard.grounding.embedder import Embedder

    embedder = Embedder(robot.embedder_dir, threads=robot.models.threads)
    for skill in skills:
        if skill.kind == "code":  # a reply is a program, mapped onto nothing
            continue
        for a, b, ra, rb, cos in make_mapper(robot, skill, embedder).ambiguities():
            line = skill.line_of("actions", a, "references")
            print(f"  warning: {skill.path}:{line}: [{skill.name}] references of {a!r} and "
                  f"{b!r} are close (cos {cos:.2f}): {ra!r} ~ {rb!r}")  # fmt: skip


def _drivers(robot: RobotConfig) -> str:
    """Which driver each part of the robot has: ``[drivers.robot]`` (the base, head and
    speaker the person skills drive), ``[drivers.arm]`` and ``[drivers.camera]``."""
    arm, camera = robot.drivers.arm, robot.drivers.camera
    if arm is None:
        arm_text = "none"
    elif arm.kind == "sim":
        scene = Path(arm.scene).stem if arm.scene else "tabletop"
        arm_text = f"sim (the twin, scene {shown(scene)})"
    elif arm.kind == "gcode":
        arm_text = f"gcode {arm.dialect} at {shown(arm.url)}"
    elif arm.kind == "jaka":
        arm_text = f"jaka at {shown(arm.host)}:{arm.port}"
    else:
        arm_text = f"{arm.kind} at {shown(arm.url)}"
    if camera is None:
        camera_text = "none"
    elif camera.kind == "sim":
        camera_text = "sim (the twin's)"
    elif camera.kind == "sim-serve":
        camera_text = f"sim-serve at {shown(camera.host)}:{camera.port}"
    else:
        camera_text = "realsense" + (f" {shown(camera.serial)}" if camera.serial else "")
    return f"person skills: {robot.drivers.robot.kind}; arm: {arm_text}; camera: {camera_text}"


def _critic_rule(c: SkillCriticSpec, end: str) -> str:
    """The critic's rule and thresholds, as `onboard check` lists them."""
    if c.rule == "joint":
        return f"rule joint, epsilon {c.epsilon:+g}"
    parts = [f"rule readiness: {end!r} from {c.epsilon:+g}",
             "holding back never refused" if c.ready is None
             else f"holding back refused from {c.ready:+g}"]  # fmt: skip
    if c.members:
        parts.append(f"lowest of {len(c.members) + 1} critics")
    if c.looking_away == "never":
        parts.append("never to a person looking away")
    elif c.looking_away is not None:
        parts.append(f"to a person looking away from {c.looking_away:+g}")
    if c.look_held is not None:
        parts.append(f"after a busy reading a look held {c.look_held:g} s")
    if c.attend is not None:
        parts.append(f"{c.attend!r} draws a look")
    if c.answer_within is not None:
        parts.append(f"unanswered after {c.answer_within:g} s reads busy")
    return ", ".join(parts)
