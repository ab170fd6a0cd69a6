"""What ``onboard check``, ``onboard run`` and ``onboard actions add`` do."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.config import RobotConfig, load_robot
from runtime.errors import ConfigError, Problem

if TYPE_CHECKING:
    from runtime.skill import Skill

__all__ = ["add_candidate", "check", "llm_endpoint", "run"]


def check(robot_path: Path) -> int:
    """Validate robot.toml, every skill and every scenario; one line per problem."""
    from runtime.catalog import load_robot_skill
    from runtime.scenario import load_scenario

    robot = load_robot(robot_path)
    problems: list[Problem] = []
    skills, scenarios = [], []
    for path in sorted(robot.skills_dir.glob("*.toml")):
        try:
            skills.append(load_robot_skill(robot, str(path)))
        except ConfigError as exc:
            problems += exc.problems
    for path in sorted((robot.skills_dir / "scenarios").glob("*.toml")):
        try:
            scenarios.append(load_scenario(path))
        except ConfigError as exc:
            problems += exc.problems
    if not robot.embedder_dir.joinpath("model.onnx").exists():
        problems.append(
            Problem(robot_path, "models.embedder", None, f"no model.onnx in {robot.embedder_dir}")
        )
    if problems:
        raise ConfigError(problems)
    print(f"{robot_path}: robot {robot.name!r}, llm {robot.llm.base_url} ({robot.llm.decoding}), "
          f"clock {robot.clock}, driver {robot.drivers.robot.kind}")  # fmt: skip
    for skill in skills:
        print(f"  skill {skill.name}: {len(skill.actions)} actions, start {skill.start!r}, "
              f"end {skill.end!r}  ({skill.path})")  # fmt: skip
    print(f"  {len(scenarios)} scenarios: {', '.join(s.name for s in scenarios)}")
    _warn_ambiguous(robot, skills)
    print("ok")
    return 0


def _warn_ambiguous(robot: RobotConfig, skills: Sequence[Skill]) -> None:
    from runtime.catalog import make_mapper

    for skill in skills:
        for a, b, ra, rb, cos in make_mapper(robot, skill).ambiguities():
            line = skill.line_of("actions", a, "references")
            print(f"  warning: {skill.path}:{line}: [{skill.name}] references of {a!r} and "
                  f"{b!r} are close (cos {cos:.2f}): {ra!r} ~ {rb!r}")  # fmt: skip


@contextmanager
def llm_endpoint(robot: RobotConfig, choice: str | None) -> Iterator[tuple[str, bool]]:
    """The base URL to use, and whether it is the stand-in; starts local servers as needed."""
    choice = choice or robot.llm.base_url
    if choice == "local":
        from runtime.local_llm import local_server

        with local_server() as url:
            yield url, False
    elif choice == "standin":
        from runtime.standin import StandInServer

        with StandInServer(seed=robot.eval.seed, noise=robot.eval.standin_noise) as server:
            yield server.base_url, True
    else:
        yield choice.rstrip("/"), False


def run(robot: RobotConfig, args: argparse.Namespace) -> int:
    """One headless episode on the simulated robot, recorded."""
    from runtime.exitcodes import TABLE
    from runtime.llm import ChatClient
    from runtime.recorder import Recorder
    from runtime.scenario import load_scenario
    from runtime.session import (
        EpisodeOptions,
        HttpAsk,
        episode_exit_code,
        judge,
        load_robot_skill,
        make_mapper,
        run_episode,
    )

    skill = load_robot_skill(robot, args.skill)
    scenario = load_scenario(args.scenario)
    mapper = make_mapper(robot, skill)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = args.record or robot.recordings_dir / f"{skill.name}-{scenario.name}-{stamp}.jsonl"
    clock = args.clock or robot.clock
    with llm_endpoint(robot, args.llm) as (url, standin):
        constrained = robot.llm.decoding == "constrained" and not standin
        mode = "constrained" if constrained else "free"
        print(f"onboard: {skill.name} on {scenario.name}, LLM {url} ({mode}), {clock} clock")
        latency = robot.eval.standin_latency if standin and clock == "virtual" else None
        options = EpisodeOptions(
            clock, constrained=constrained, latency=latency, handle_signals=True
        )
        with ChatClient(robot.llm, base_url=url) as client, Recorder(path) as recorder:
            ask = HttpAsk(client)
            outcome = run_episode(robot, skill, scenario, ask, mapper, recorder, options)
    success, reason = judge(outcome, scenario)
    sequence = " -> ".join(f"{a}@{t:.1f}s" for t, a in outcome.actions)
    print(f"actions: {sequence}")
    print(f"said: {outcome.phrase!r}" if outcome.phrase else "said nothing")
    print(f"{'success' if success else 'failure'}: {reason}")
    print(f"recorded: {path}  (onboard replay {path})")
    code = episode_exit_code(outcome, success)
    print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def add_candidate(robot: RobotConfig, args: argparse.Namespace) -> int:
    """Register a candidate reply as a new action, written into the skill's TOML."""
    from runtime.candidates import CandidateStore, add_action
    from runtime.catalog import load_robot_skill

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
    return 0
