"""``onboard fleet world|controller|run|reset``: a fleet of controllers over Zenoh, each
owning one arm, and a coordinator running a team skill across them (docs/fleet.md).

- ``world``: the twin's scene with every arm behind its own JAKA controller on TCP and the
  truth port (the simulated hardware; prints one JSON line saying where each listens);
- ``controller AGENT``: one agent's controller: its arm over JAKA TCP behind the SafeArm
  limits of its reach, its actions from Zenoh, stopped and latched when the coordinator's
  heartbeat is lost;
- ``run TASK``: the coordinator: one episode of a team method (ReAd-S, ReAd-J, ... with the
  critic) whose joint actions run on the controllers' arms; the start laid out and the
  result judged through the world's truth port;
- ``reset AGENT...``: clear a latched stop (a deliberate decision to move again).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from onboard.base.errors import AgentLost, UsageError

__all__ = ["add_parsers", "controller_command", "reset_command", "run_command", "world_command"]

PERIOD, TIMEOUT = 0.1, 0.5  # seconds: the default heartbeat period and timeout


def _endpoint_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("--fleet", default="fleet", help="the fleet's name in key expressions "
                   "(%(default)s)")  # fmt: skip
    q.add_argument("--listen", action="append", default=[], metavar="tcp/HOST:PORT",
                   help="a Zenoh endpoint to listen on (repeatable)")  # fmt: skip
    q.add_argument("--connect", action="append", default=[], metavar="tcp/HOST:PORT",
                   help="a Zenoh endpoint to connect to (repeatable)")  # fmt: skip
    q.add_argument("--period", type=float, default=PERIOD, help="heartbeat period, s "
                   "(%(default)s)")  # fmt: skip
    q.add_argument("--timeout", type=float, default=TIMEOUT, help="heartbeat timeout, s: "
                   "silent longer is lost (%(default)s)")  # fmt: skip


def add_parsers(fleet: Any) -> None:
    """Add the ``fleet`` actions (main wires their functions)."""
    q = fleet.add_parser("world", help="the twin's arms, each behind its own JAKA TCP "
                         "controller, and the truth port", description="The simulated "
                         "hardware of a fleet: one physics twin, every arm of the scene behind "
                         "its own JAKA controller on loopback TCP, and the truth port for the "
                         "judge. Prints one JSON line: {\"arms\": {NAME: [host, port, "
                         "status_port]}, \"truth\": [host, port]}; stops on SIGTERM.")  # fmt: skip
    q.add_argument("--scene", default="sort_cubes", help="scene (%(default)s)")
    q = fleet.add_parser("controller", help="one agent's controller: its arm, actions over "
                         "Zenoh, stopped when the coordinator is lost")  # fmt: skip
    q.add_argument("agent", help="the agent (the task file's name; the scene's arm)")
    q.add_argument("--arm", required=True, metavar="HOST:PORT:STATUS_PORT",
                   help="the arm's JAKA controller: command and status ports")  # fmt: skip
    q.add_argument("--task", default="sort_cubes", help="the team task (%(default)s)")
    q.add_argument("--scene", default="sort_cubes", help="the scene the arm stands in "
                   "(%(default)s)")  # fmt: skip
    q.add_argument("--grip-settle", type=float, default=0.5, help="seconds a grip takes")
    _endpoint_args(q)
    q = fleet.add_parser("run", help="the coordinator: one team episode across the fleet")
    q.add_argument("task", help="the team task (sort_cubes)")
    q.add_argument("--level", help="the level (default: the task file's first)")
    q.add_argument("--method", help="read_s, read_j, ... (default: by the task's critic mode)")
    q.add_argument("--llm", default="standin", help="standin | control | local | URL")
    q.add_argument("--competence", type=float, help="the stand-in's competence")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--critics", type=Path, help="the folder critic paths are relative to")
    q.add_argument("--truth", required=True, metavar="HOST:PORT", help="the world's truth port:"
                   " lays out the start, judges the end")  # fmt: skip
    q.add_argument("--scene", default="sort_cubes", help="the scene (%(default)s)")
    q.add_argument("--ready-timeout", type=float, default=30.0, help="seconds to wait for every"
                   " agent's heartbeat (%(default)s)")  # fmt: skip
    q.add_argument("--record", type=Path, help="the episode's recording (default: none)")
    q.add_argument("--json", action="store_true", help="one JSON line")
    _endpoint_args(q)
    q = fleet.add_parser("reset", help="clear agents' latched stop")
    q.add_argument("agents", nargs="+")
    q.add_argument("--ready-timeout", type=float, default=30.0)
    _endpoint_args(q)


def _check_beat(args: argparse.Namespace) -> None:
    """A heartbeat period above 0 and a timeout of at least two periods (one late heartbeat
    is not a loss)."""
    if not args.period > 0 or not args.timeout >= 2 * args.period:  # nan too
        raise UsageError(f"--period {args.period} --timeout {args.timeout}: the period must be "
                         "above 0 and the timeout at least two periods")  # fmt: skip


def _hostport(text: str, flag: str, n: int) -> tuple[str, ...]:
    parts = text.rsplit(":", n - 1)
    if len(parts) != n or not all(p.isdigit() for p in parts[1:]) or not parts[0]:
        raise UsageError(f"{flag} {text!r}: expected HOST" + ":PORT" * (n - 1))
    return tuple(parts)


def world_command(args: argparse.Namespace) -> int:
    from onboard.drivers.emulators.arms_world import Arms, serve_arms
    from onboard.drivers.twin.scene import find_scene

    def ready(arms: Arms) -> None:
        print(json.dumps(arms.to_json()), flush=True)

    serve_arms(find_scene(args.scene), ready=ready)
    return 0


def controller_command(args: argparse.Namespace) -> int:
    from onboard.base.signals import on_stop_signals
    from onboard.drivers.arm.config import JakaArmConfig
    from onboard.drivers.arm.jaka import JakaArm
    from onboard.drivers.arm.safety import SafeArm
    from onboard.fleet.bus import open_bus
    from onboard.fleet.controller import Controller
    from onboard.fleet.member import place
    from onboard.fleet.wire import COORDINATOR, check_name

    check_name(args.fleet, "--fleet")
    _check_beat(args)
    if check_name(args.agent, "agent") == COORDINATOR:
        raise UsageError(f"agent {args.agent!r}: the coordinator's name in key expressions")
    placement = place(args.agent, args.task, args.scene)
    host, port, status = _hostport(args.arm, "--arm", 3)
    config = JakaArmConfig(host=host, port=int(port), status_port=int(status),
                           home_joints=placement.home, grip_settle=args.grip_settle)  # fmt: skip
    stop = threading.Event()
    with (
        open_bus(args.listen, args.connect) as bus,
        SafeArm(JakaArm(config), placement.limits) as arm,
        on_stop_signals(lambda _name: stop.set()),
    ):
        Controller(args.fleet, args.agent, arm, placement.frames, placement.panels, bus,
                   period=args.period, timeout=args.timeout).run(stop)  # fmt: skip
    return 0


def run_command(robot: Any, args: argparse.Namespace) -> int:
    from onboard.cli.task import _settings
    from onboard.collab.methods import method
    from onboard.collab.taskfile import SORT_TARGETS, find_team_task
    from onboard.collab.twin_sort import SceneFrames, scene_panels
    from onboard.drivers.twin.scene import find_scene, load_scene
    from onboard.evaluation.fleet_sort import lay_out, open_truth, panels_now
    from onboard.fleet.bus import open_bus
    from onboard.fleet.env import FleetSort
    from onboard.fleet.link import FleetLink
    from onboard.fleet.wire import check_name
    from onboard.loop.exitcodes import TABLE, ExitCode

    check_name(args.fleet, "--fleet")
    _check_beat(args)
    task = find_team_task(args.task)
    if task.env != "sort_cubes":
        raise UsageError(f"task {args.task!r}: a fleet runs sort_cubes only")
    level = args.level or next(iter(task.levels))
    task.level(level)
    name = args.method or ("read_s" if task.critic.mode == "sequential" else "read_j")
    method(name)  # an unknown method: one line before anything starts
    host, port = _hostport(args.truth, "--truth", 2)
    panels = scene_panels(SceneFrames(load_scene(find_scene(args.scene))))
    args.constrained = False
    settings = _settings(args, 1, None)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        bus = stack.enter_context(open_bus(args.listen, args.connect))
        link = FleetLink(bus, args.fleet, task.agent_names, period=args.period,
                         timeout=args.timeout, say=say).start()  # fmt: skip
        stack.callback(link.close)
        link.wait_ready(args.ready_timeout)
        truth = stack.enter_context(open_truth(host, int(port)))
        env = FleetSort(task, level, link, lambda start: lay_out(truth, panels, start))
        wall = time.perf_counter()
        try:
            episode = fleet_episode(robot, settings, env, name, record=args.record)
        except AgentLost as exc:
            stopped = [a for a in task.agent_names if a != exc.agent]
            say(f"fleet {args.fleet}: {exc.agent} lost at step {env.steps}: {exc}; "
                f"{', '.join(stopped)} stopped (task file: on_lost = stop)")  # fmt: skip
            if args.json:
                print(json.dumps({"lost": exc.agent, "step": env.steps, "error": str(exc),
                                  "stopped": stopped}))  # fmt: skip
            return ExitCode.INCOMPLETE
        wall = time.perf_counter() - wall
        physics = panels_now(truth, panels)
    on_target = all(physics[c] == t for c, t in SORT_TARGETS.items())
    success = episode.success and on_target
    figures = {**episode.to_json(), "fleet": args.fleet, "physics": physics,
               "on_target": on_target, "lost": dict(env.gone), "lost_at": dict(env.lost_at),
               "decisions": env.decisions,
               "wall_seconds": round(wall, 2)}  # fmt: skip
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    else:
        verdict = "succeeded" if episode.success else "did not succeed"
        mean = sum(env.decisions) / len(env.decisions) if env.decisions else 0.0
        print(f"{task.name} {level} by {name} ({episode.llm}) over fleet {args.fleet}: "
              f"{verdict} in {episode.steps} steps, NQ {episode.queries}, vetoes "
              f"{episode.vetoes}; decision to arm {mean * 1000:.1f} ms mean")  # fmt: skip
        where = ", ".join(f"{c} on {p}" for c, p in physics.items())
        print(f"the twin: {where} ({'every cube on its target' if on_target else 'NOT sorted'})")
        for agent, why in env.gone.items():
            print(f"lost: {agent} ({why})")
    code = ExitCode.SUCCESS if success else ExitCode.TASK_FAILED
    if not args.json:
        print(f"exit {int(code)}: {TABLE[code][0]}")
    return code


def fleet_episode(
    robot: Any, settings: Any, env: Any, method_name: str, record: Path | None = None
) -> Any:
    """One episode of ``method_name`` on ``env`` (a FleetSort: its steps on a fleet's arms),
    its LLM as ``settings`` say (EvalSettings), its critic the task file's; the Episode.
    AgentLost when an agent is lost and the task file says stop."""
    import tempfile

    from onboard.cli.task import Endpoints
    from onboard.collab.evaluate import Cell, Critics, env_seed, run_one
    from onboard.collab.methods import method

    task, level = env.task, env.level
    env.starts = "held_out"  # as onboard task run draws its start
    with (
        Endpoints(robot, settings) as llms,
        tempfile.TemporaryDirectory(prefix="onboard-critic-") as scratch,
    ):
        critic = None
        if method(method_name).critic is not None:
            critics = Critics(settings.critics_root, Path(scratch), settings.seed)
            critic = critics.get(task, level, "trained")
        with llms.open(Cell(task.name, level, method_name), task.name) as (llm, label, strict):
            return run_one(task, level, method_name, llm, label, critic,
                           seed=env_seed(settings.seed, task.name, level, 0), constrained=strict,
                           record=record, robot=robot, env=env)  # fmt: skip


def reset_command(args: argparse.Namespace) -> int:
    """Exit 0 when every agent was reset; 4 when one was not (its controller's error
    printed: the arm stopped again, latched)."""
    from onboard.fleet.bus import open_bus
    from onboard.fleet.link import FleetLink
    from onboard.fleet.wire import check_name
    from onboard.loop.exitcodes import ExitCode

    check_name(args.fleet, "--fleet")
    for agent in args.agents:
        check_name(agent, "agent")
    _check_beat(args)
    with open_bus(args.listen, args.connect) as bus:
        link = FleetLink(bus, args.fleet, args.agents, period=args.period, timeout=args.timeout)
        link.start()
        failed = False
        try:
            link.wait_ready(args.ready_timeout, latched_ok=True)
            for agent in args.agents:
                result = link.command(agent, "reset", "onboard fleet reset")
                print(f"{agent}: {'reset' if result.ok else result.error}")
                failed |= not result.ok
        finally:
            link.close()
    return ExitCode.INCOMPLETE if failed else ExitCode.SUCCESS
