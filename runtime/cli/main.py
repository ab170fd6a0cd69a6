"""The ``onboard`` command. Imports are lazy so ``onboard check`` starts fast.

The command scheme: a verb means one thing whatever it acts on. ``check`` validates and
moves nothing; ``run`` runs one episode; ``eval`` runs many and prints tables; ``replay``
re-runs a recording offline. Skills (HRI and manipulation alike) take the verbs directly
(``onboard run engage``); other kinds of work are nouns that take the same verbs
(``onboard code check FILE`` for generated code, ``onboard task run TASK`` for multi-robot
tasks, as those parts land). :data:`GROUPS` is the grouped listing ``onboard --help`` prints
and docs/commands.md repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from onboard.base.errors import ConfigError, OnboardError, UsageError
from onboard.base.signals import Terminated, stop_signal_arrived, terminate_raises
from onboard.base.terminal import shown
from onboard.cli.arm_profiles import PROFILES
from onboard.loop.exitcodes import ExitCode, for_error

if TYPE_CHECKING:
    from onboard.config import RobotConfig

__all__ = ["GROUPS", "main", "reported"]

#: ``onboard --help``, grouped: (group, [(command, what it does)]); every command is in one.
GROUPS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "skills (HRI and manipulation)",
        [
            ("run", "run one episode of a skill headless, recorded"),
            ("eval", "run a skill's scenarios N times on the virtual clock; print the tables"),
            ("graph", "print a skill's state machine as a Mermaid diagram"),
            ("map", "map a free-text reply onto a skill's actions"),
            ("actions", "the bottom-up action set: list candidates, add one as an action"),
        ],
    ),
    (
        "any recording",
        [
            ("replay", "re-run a recorded episode offline and compare"),
            ("export", "convert a recording: JSON lines to MCAP (Foxglove) and back"),
        ],
    ),
    (
        "generated code (ReplanVLM)",
        [("code", "check, run (on the twin) or document the robot API of generated programs")],
    ),
    (
        "multi-robot tasks (ReAd)",
        [
            ("task", "run a team task's episode, evaluate SR / ES / NQ, or run it on twin arms"),
            ("critic", "check a critic and its card against its task; collect its data; train one"),
        ],
    ),
    (
        "this robot",
        [
            ("check", "validate robot.toml and every skill, scenario and scene it uses"),
            ("up", "run the robot headless as a service: missions until stopped (systemd)"),
            ("calibrate", "hand-eye calibration from a marker held by the arm"),
            ("init", "write a new robot to edit: DIR/robot.toml and the shipped skills"),
        ],
    ),
    (
        "simulation and test doubles",
        [
            ("sim", "sim serve: the physics twin behind the JAKA TCP and G-code protocols"),
            ("fleet", "a fleet over Zenoh: the twin's arms, controllers, a team coordinator"),
            ("standin", "serve the stand-in LLM (a documented rule policy) on loopback"),
        ],
    ),
]


def _grouped_help() -> str:
    width = max(len(name) for _, commands in GROUPS for name, _ in commands)
    lines = ["commands:"]
    for title, commands in GROUPS:
        lines.append(f"  {title}:")
        lines += [f"    {name:<{width}}  {summary}" for name, summary in commands]
    lines.append(
        "\n`onboard COMMAND --help` for a command's options; exit codes: docs/exit-codes.md."
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the return value is an :class:`ExitCode` (docs/exit-codes.md)."""
    return reported(lambda: _dispatch(argv))


def reported(command: Callable[[], int]) -> int:
    """Run ``command`` as ``onboard`` runs every command: an error it raises becomes one line
    on stderr and its exit code; SIGTERM while it runs exits 143, SIGINT 130, also when a
    library swallowed or replaced the exception the signal raised."""
    with terminate_raises():  # first: SIGTERM while starting up exits 143, not by the signal
        raised: str | None = None
        try:
            code = command()
        except Terminated:
            raised = "SIGTERM"
        except KeyboardInterrupt:
            raised = "SIGINT"
        except Exception as exc:
            if stop_signal_arrived() is None:  # else a library replaced what a signal raised
                code = _error_code(exc)
        arrived = stop_signal_arrived() or raised
    if arrived == "SIGTERM":
        print("onboard: stopped by SIGTERM", file=sys.stderr)
        return ExitCode.SIGTERM
    if arrived == "SIGINT":
        print("onboard: interrupted", file=sys.stderr)
        return ExitCode.SIGINT
    return code


def _dispatch(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)  # a bad command line exits 2 (ExitCode.INPUT_ERROR)
    code: int = args.func(args)
    return code


def _error_code(exc: Exception) -> int:
    """Report ``exc`` on stderr; the exit code it means."""
    if isinstance(exc, ConfigError):
        for problem in exc.problems:
            print(f"onboard: error: {shown(problem)}", file=sys.stderr)
        return ExitCode.INPUT_ERROR
    if isinstance(exc, OnboardError):
        print(f"onboard: error: {shown(exc)}", file=sys.stderr)
        return for_error(exc)
    if isinstance(exc, BrokenPipeError):
        _drop_stdout()
        return ExitCode.OUTPUT_CLOSED
    traceback.print_exception(exc)
    print("onboard: internal error (a bug in onboard; the traceback above is for its report)",
          file=sys.stderr)  # fmt: skip
    return ExitCode.INTERNAL_ERROR


def _drop_stdout() -> None:
    """The reader of stdout went away (``onboard check | head``): what is left to print, and
    Python's flush at exit, go nowhere instead of raising again. (A unix tool would die of
    SIGPIPE; Python ignores that signal and raises BrokenPipeError instead.)"""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file: nothing will flush at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onboard",
        description="A lean runtime that makes LLM-planned robot skills safe, fast and testable.",
        epilog=_grouped_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--robot", type=Path, help="robot.toml path (default: ./robot.toml)")
    # commands are listed by the grouped epilog; `add` gives each its own --help description
    sub = parser.add_subparsers(required=True, metavar="COMMAND")
    summaries = {name: summary for _, commands in GROUPS for name, summary in commands}

    def add(name: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, description=summaries[name])

    p = add("check")
    p.set_defaults(func=_check)

    p = add("graph")
    p.add_argument("skill")
    p.set_defaults(func=_graph)

    p = add("map")
    p.add_argument("skill")
    p.add_argument("reply")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_map)

    p = add("actions")
    actions = p.add_subparsers(required=True, metavar="ACTION")
    q = actions.add_parser("list", help="unmatched replies kept as candidates")
    q.add_argument("--skill")
    q.set_defaults(func=_actions_list)
    q = actions.add_parser("add", help="register a candidate as a new action of a skill")
    q.add_argument("skill")
    q.add_argument("candidate", help="candidate id (a prefix will do)")
    q.add_argument("--name", required=True)
    q.add_argument("--text", help="action text (default: 'The robot is doing NAME.')")
    q.add_argument("--stimuli", default="2-A", choices=["1-activity", "1-gaze", "2-A", "2-B"])
    q.add_argument("--command", default="none", help="driver command the action runs")
    q.set_defaults(func=_actions_add)

    p = add("run")
    p.add_argument("skill")
    p.add_argument("--scenario", type=Path, default=Path("person-object"), help="file or name")
    p.add_argument("--llm", help="URL, 'local' or 'standin' (default: robot.toml)")
    p.add_argument("--clock", choices=["wall", "virtual"], help="default: robot.toml")
    p.add_argument("--record", type=Path, help="recording path (default: recordings/...)")
    p.add_argument("--goal", help='scene skills: the request ("put the red block on the blue one")')
    p.add_argument("--scene", help="scene skills on the sim arm: a shipped scene or a file")
    _team_options(p)
    p.set_defaults(func=_run)

    p = add("eval")
    p.add_argument("skill")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--scenario", type=Path, action="append", dest="scenarios")
    p.add_argument("--goals", type=Path, help="scene skills: a goal file (default: the "
                   "shipped skills/tasks/SKILL.toml)")  # fmt: skip
    p.add_argument("--no-action-text", action="store_true")
    p.add_argument("--no-second-stage", action="store_true")
    p.add_argument("--llm", help="URL, 'local', or 'random' (a control: random choices within"
                   " the schema); default: the stand-in on loopback")  # fmt: skip
    p.add_argument("--critic", help="'none' (the skill's [critic] off) or another critic model"
                   " (alone, without the skill's members); default: the skill's own")  # fmt: skip
    p.add_argument("--latency", type=float, help="virtual seconds per LLM reply")
    p.add_argument("--seed", type=int)
    p.add_argument("--record", type=Path, help="write every episode under this folder")
    p.add_argument("--json", action="store_true")
    _team_options(p)
    p.set_defaults(func=_eval)

    p = add("replay")
    p.add_argument("recording", type=Path)
    p.add_argument("--scene", help="scene recordings: the twin scene that stands in for the "
                   "hardware it was recorded on (default: the scene its task names)")  # fmt: skip
    p.set_defaults(func=_replay)

    p = add("export")
    p.add_argument("recording", type=Path)
    form = p.add_mutually_exclusive_group(required=True)
    form.add_argument("--mcap", action="store_true", help="JSON lines (and images) to MCAP")
    form.add_argument("--jsonl", action="store_true", help="MCAP to JSON lines and images")
    p.add_argument("--output", "-o", type=Path, help="where to write (default: the recording's "
                   "name with .mcap or .jsonl)")  # fmt: skip
    p.set_defaults(func=_export)

    p = add("sim")
    sim = p.add_subparsers(required=True, metavar="ACTION")
    q = sim.add_parser(
        "serve",
        help="JAKA (TCP), Marlin and GRBL (pty) emulators, the camera and the truth port on "
        "one twin",
        description="One physics twin behind the JAKA TCP and G-code (pty) emulators, with "
        "frames of its camera and its ground truth on TCP. Port 0 picks a free port.",
    )
    q.add_argument("--scene", type=Path, help="scene file (default: the tabletop scene)")
    q.add_argument(
        "--jaka-host", default="127.0.0.1", help="the host every TCP port listens on (%(default)s)"
    )
    q.add_argument("--jaka-port", type=int, default=10001, help="JAKA commands (%(default)s)")
    q.add_argument(
        "--status-port", type=int, default=10000, help="JAKA status stream (%(default)s)"
    )
    q.add_argument(
        "--camera-port",
        type=int,
        default=10002,
        help='frames of the twin, rendered on request, for [drivers.camera] kind = "sim-serve" '
        "(%(default)s; protocol: drivers/camera/frame_wire.py)",
    )
    q.add_argument(
        "--truth-port",
        type=int,
        default=10003,
        help='ground truth for judges, never the robot: JSON lines {"get": "truth"} and '
        '{"move": NAME, "position": [x, y, z]} (%(default)s; drivers/emulators/truth_server.py)',
    )
    q.add_argument(
        "--no-gcode",
        action="store_true",
        help="no G-code ptys (Marlin, GRBL, Marlin in joint space)",
    )
    q.add_argument(
        "--no-so101",
        action="store_true",
        help="no SO-101 servo bus on a Panda scene (a pty; its arm is a kinematic model, not "
        "the twin's); on an SO-101 scene (--scene so101_blocks) the bus drives the twin's arm",
    )
    q.set_defaults(func=_sim_serve)

    p = add("code")
    code = p.add_subparsers(required=True, metavar="ACTION")
    q = code.add_parser(
        "check",
        help="refuse a program outside the sandbox's allow-list: FILE:LINE: refused: REASON",
        description="Check a generated program against the sandbox's allow-list; exit 1 and"
        " print FILE:LINE: refused: REASON per problem, exit 0 when it is accepted.",
    )
    q.add_argument("file", type=Path)
    q.set_defaults(func=_code_check)
    q = code.add_parser(
        "run",
        help="run an accepted program in the sandbox, on the arm robot.toml names",
        description="Run an accepted program in the sandbox's child process; it reaches the"
        " robot only through the robot API. A limit (steps, memory, CPU, wall time) ends it"
        " with a named reason and the arm stopped.",
    )
    q.add_argument("file", type=Path)
    q.add_argument("--scene", help="sim arm: the twin scene to run in")
    q.add_argument("--yes", action="store_true", help="confirm a run on a real arm up front")
    q.add_argument("--json", action="store_true", help="print the run's result as JSON")
    q.set_defaults(func=_code_run)
    q = code.add_parser("api", help="print the robot API's documentation (as prompts get it)")
    q.set_defaults(func=_code_api)
    from onboard.cli.code_eval import add_parsers as add_code_eval

    add_code_eval(code)
    code.choices["do"].set_defaults(func=_code_do)
    code.choices["eval"].set_defaults(func=_code_eval)

    p = add("task")
    task = p.add_subparsers(required=True, metavar="ACTION")
    from onboard.cli.task import add_parsers as add_task

    add_task(task)
    from onboard.cli.task_twin import add_parser as add_task_twin

    add_task_twin(task)
    task.choices["run"].set_defaults(func=_task_run)
    task.choices["eval"].set_defaults(func=_task_eval)
    task.choices["twin"].set_defaults(func=_task_twin)

    p = add("fleet")
    fleet = p.add_subparsers(required=True, metavar="ACTION")
    from onboard.cli.fleet import add_parsers as add_fleet

    add_fleet(fleet)
    fleet.choices["world"].set_defaults(func=_fleet_world)
    fleet.choices["controller"].set_defaults(func=_fleet_controller)
    fleet.choices["run"].set_defaults(func=_fleet_run)
    fleet.choices["reset"].set_defaults(func=_fleet_reset)

    p = add("critic")
    critic = p.add_subparsers(required=True, metavar="ACTION")
    from onboard.cli.critic import add_parsers as add_critic

    add_critic(critic)
    critic.choices["check"].set_defaults(func=_critic_check)
    critic.choices["collect"].set_defaults(func=_critic_collect)
    critic.choices["train"].set_defaults(func=_critic_train)

    p = add("calibrate")
    p.add_argument("--low", type=float, nargs=3, default=[0.35, -0.15, 0.15], metavar="M")
    p.add_argument("--high", type=float, nargs=3, default=[0.55, 0.15, 0.35], metavar="M")
    p.add_argument("--steps", type=int, default=3, help="grid points per axis")
    p.add_argument("--color", type=int, nargs=3, default=[255, 0, 255], metavar="RGB")
    p.add_argument("--offset", type=float, nargs=3, default=[0.0, 0.0, 0.05], metavar="M",
                   help="marker offset from the tool point, tool frame")  # fmt: skip
    p.add_argument("--radius", type=float, default=0.02, help="marker radius, m")
    p.add_argument("--write", action="store_true", help="write [hand_eye] into robot.toml")
    p.add_argument("--scene", help="sim arm: the scene to calibrate in (the marker's: calibration)")
    p.set_defaults(func=_calibrate)

    p = add("standin")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8089)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--noise", type=float, default=0.15)
    p.set_defaults(func=_standin)

    p = add("up")
    p.add_argument("--check", action="store_true", help="validate robot.toml, the drivers' "
                   "settings and the missions, then exit 0 or 2; nothing moves")  # fmt: skip
    p.add_argument("--mission", type=Path, action="append", help="a mission file to run "
                   "(repeatable; default: every file in skills/missions/)")  # fmt: skip
    p.add_argument("--llm", help="URL, 'local' or 'standin' for every step (default: robot.toml)")
    p.add_argument("--clock", choices=["wall", "virtual"], help="person and scene steps' clock "
                   "(default: robot.toml)")  # fmt: skip
    p.add_argument("--once", action="store_true", help="exit when the missions are done "
                   "(0: every step succeeded, 1: one failed), not when stopped")  # fmt: skip
    p.add_argument("--metrics", type=int, metavar="PORT", help="serve Prometheus metrics of "
                   "each episode at http://127.0.0.1:PORT/metrics (the metrics extra; default: "
                   "robot.toml's [service] metrics)")  # fmt: skip
    p.add_argument("--foxglove", type=int, metavar="PORT", help="serve each episode live to "
                   "Foxglove at ws://127.0.0.1:PORT (the live extra; default: robot.toml's "
                   "[service] foxglove)")  # fmt: skip
    p.add_argument("--ros2", metavar="ENDPOINT", help="publish joint and skill states as a ROS 2 "
                   "node on rmw_zenoh would, to the Zenoh router at tcp/HOST:PORT (the ros2 "
                   "extra; docs/ros2.md; default: robot.toml's [service] ros2)")  # fmt: skip
    p.add_argument("--ros2-domain", type=int, metavar="ID", help="the ROS domain id (default: "
                   "robot.toml's [service] ros2_domain, else $ROS_DOMAIN_ID, else 0)")  # fmt: skip
    p.add_argument("--status", action="store_true", help="print the state's missions and "
                   "steps (queue, verdicts, recordings), then exit; nothing moves")  # fmt: skip
    p.set_defaults(func=_up)

    p = add("init")
    p.add_argument("folder", type=Path)
    p.add_argument("--name", help="the robot's name (default: the folder's name)")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.add_argument(
        "--arm",
        choices=sorted(PROFILES),
        help="add this kind of arm's [drivers.arm] and [safety], settings to check marked",
    )
    p.set_defaults(func=_init)
    return parser


NO_ROBOT = (
    "onboard: no robot.toml here; using the bundled example robot "
    "(onboard init DIR writes one to edit)"
)


def _robot_path(args: argparse.Namespace) -> Path | None:
    """``--robot``, else ./robot.toml, else None: the bundled example robot (noted once)."""
    if args.robot is not None or Path("robot.toml").exists():
        return args.robot or Path("robot.toml")
    if not getattr(args, "noted", False):
        print(NO_ROBOT, file=sys.stderr)
        args.noted = True
    return None


def _robot(args: argparse.Namespace) -> RobotConfig:
    from onboard.config import load_example_robot, load_robot

    path = _robot_path(args)
    return load_robot(path) if path is not None else load_example_robot()


def _check(args: argparse.Namespace) -> int:
    from onboard.cli.check import check

    return check(_robot_path(args))


def _graph(args: argparse.Namespace) -> int:
    from onboard.cli.graph import graph

    return graph(_robot(args), args.skill)


def _map(args: argparse.Namespace) -> int:
    from onboard.cli.map import map_reply

    return map_reply(_robot(args), args.skill, args.reply, args.json)


def _actions_list(args: argparse.Namespace) -> int:
    from onboard.cli.actions import list_candidates

    return list_candidates(_robot(args), args.skill)


def _actions_add(args: argparse.Namespace) -> int:
    from onboard.cli.actions import add_candidate

    return add_candidate(_robot(args), args)


def _run(args: argparse.Namespace) -> int:
    from onboard.cli.run import run

    return run(_robot(args), args)


def _eval(args: argparse.Namespace) -> int:
    from onboard.cli.eval import evaluate_command

    return evaluate_command(_robot(args), args)


def _replay(args: argparse.Namespace) -> int:
    from onboard.cli.replay import replay_command

    return replay_command(args.recording, args.scene)


def _export(args: argparse.Namespace) -> int:
    from onboard.cli.export import export_command

    return export_command(args.recording, "mcap" if args.mcap else "jsonl", args.output)


def _code_check(args: argparse.Namespace) -> int:
    from onboard.cli.code_check import check_command

    return check_command(args.file)


def _code_run(args: argparse.Namespace) -> int:
    from onboard.cli.code_run import run_command

    return run_command(_robot(args), args)


def _code_do(args: argparse.Namespace) -> int:
    from onboard.cli.code_eval import do_command

    return do_command(_robot(args), args)


def _code_eval(args: argparse.Namespace) -> int:
    from onboard.cli.code_eval import eval_command

    return eval_command(_robot(args), args)


def _code_api(args: argparse.Namespace) -> int:
    from onboard.cli.code_run import api_command

    return api_command()


def _team_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", help="team skills: a task name in tasks/ (sweep_floor) or a file")
    p.add_argument("--level", help="team skills: the task level (default: the task file's first)")
    p.add_argument("--method", help="team skills: a team method (default: read_s or read_j)")


def _task_run(args: argparse.Namespace) -> int:
    from onboard.cli.task import run_command

    return run_command(_robot(args), args)


def _task_eval(args: argparse.Namespace) -> int:
    from onboard.cli.task import eval_command

    return eval_command(_robot(args), args)


def _task_twin(args: argparse.Namespace) -> int:
    from onboard.cli.task_twin import twin_command

    return twin_command(args, _robot(args) if args.method else None)


def _fleet_world(args: argparse.Namespace) -> int:
    from onboard.cli.fleet import world_command

    return world_command(args)


def _fleet_controller(args: argparse.Namespace) -> int:
    from onboard.cli.fleet import controller_command

    return controller_command(args)


def _fleet_run(args: argparse.Namespace) -> int:
    from onboard.cli.fleet import run_command

    return run_command(_robot(args), args)


def _fleet_reset(args: argparse.Namespace) -> int:
    from onboard.cli.fleet import reset_command

    return reset_command(args)


def _critic_check(args: argparse.Namespace) -> int:
    from onboard.cli.critic import check_command

    return check_command(args.file, args.task, _robot(args))


def _critic_collect(args: argparse.Namespace) -> int:
    from onboard.cli.critic import collect_command

    return collect_command(_robot(args), args)


def _critic_train(args: argparse.Namespace) -> int:
    from onboard.cli.critic import train_command

    return train_command(args)


def _sim_serve(args: argparse.Namespace) -> int:
    from onboard.base.listen import check_listen
    from onboard.drivers.twin.scene import find_scene, load_scene

    ports = {
        "--jaka-port": args.jaka_port,
        "--status-port": args.status_port,
        "--camera-port": args.camera_port,
        "--truth-port": args.truth_port,
    }
    if args.scene is not None:
        arms = load_scene(find_scene(args.scene)).arm_specs()
        if next(iter(arms.values())).model == "so101":  # no JAKA emulator: its ports stay free
            del ports["--jaka-port"], ports["--status-port"]
    check_listen("sim serve", args.jaka_host, ports)  # before the twin loads pybullet
    from onboard.drivers.emulators.serve import serve

    serve(args.scene, args.jaka_host, args.jaka_port, args.status_port, gcode=not args.no_gcode,
          so101=not args.no_so101, camera_port=args.camera_port,
          truth_port=args.truth_port)  # fmt: skip
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from onboard.bundled import example_robot
    from onboard.cli.calibrate import calibrate_command

    robot = _robot(args)
    if args.scene:
        robot = robot.with_arm_scene(args.scene)
    return calibrate_command(robot, _robot_path(args) or example_robot(), args)


def _standin(args: argparse.Namespace) -> int:
    from onboard.base.listen import check_listen
    from onboard.testing.standin_server import main as serve

    if not 0 <= args.noise <= 1:  # nan too
        raise UsageError(f"--noise {args.noise}: must be within 0 to 1")
    check_listen("standin", args.host, {"--port": args.port})
    return serve(["--host", args.host, "--port", str(args.port), "--seed", str(args.seed),
                  "--noise", str(args.noise)])  # fmt: skip


def _up(args: argparse.Namespace) -> int:
    from onboard.loop.recorder import subscribe_every
    from onboard.service.up import up_command

    robot = _robot(args)
    serves = robot.service
    with contextlib.ExitStack() as watched:
        metrics_port, name = _flag_or_toml(args.metrics, "--metrics", serves.metrics, "metrics")
        if metrics_port is not None:
            from onboard.loop.metrics import RecordMetrics, serve

            metrics = RecordMetrics()
            server = serve(metrics.registry, metrics_port, name=name)
            watched.callback(server.server_close)
            watched.callback(server.shutdown)
            print(f"onboard: metrics on http://127.0.0.1:{server.server_port}/metrics", flush=True)
            watched.enter_context(subscribe_every(metrics.episode))
        live_port, name = _flag_or_toml(args.foxglove, "--foxglove", serves.foxglove, "foxglove")
        if live_port is not None:
            from onboard.loop.live import LiveView

            live = watched.enter_context(LiveView(live_port, name=name))
            print(f"onboard: Foxglove live view on {live.url}", flush=True)
            watched.enter_context(subscribe_every(live.episode))
        endpoint = args.ros2 if args.ros2 is not None else serves.ros2
        if endpoint is not None:
            from onboard.fleet.ros2 import JOINTS_TOPIC, STATE_TOPIC, Ros2Bridge

            domain = _ros_domain(args.ros2_domain, serves.ros2_domain)
            bridge = watched.enter_context(Ros2Bridge(endpoint, domain=domain))
            print(f"onboard: ROS 2 (rmw_zenoh, domain {bridge.domain}) to {bridge.endpoint}: "
                  f"{JOINTS_TOPIC}, {STATE_TOPIC}", flush=True)  # fmt: skip
            watched.enter_context(subscribe_every(bridge.episode))
        return up_command(robot, _robot_path(args), args)


def _flag_or_toml(
    flag: int | None, flag_name: str, toml: int | None, key: str
) -> tuple[int | None, str]:
    """The command line's port, else robot.toml's ``[service]`` one, and where it came from
    (for an error naming it)."""
    if flag is not None:
        return flag, flag_name
    return toml, f"[service] {key}"


def _ros_domain(flag: int | None, toml: int | None) -> int:
    """``--ros2-domain``, else robot.toml's ``[service] ros2_domain``, else ``ROS_DOMAIN_ID``
    as ROS 2 reads it, else 0."""
    if flag is not None:
        return int(flag)
    if toml is not None:
        return toml
    text = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not text:
        return 0
    if not text.isdigit():
        raise UsageError(f"ROS_DOMAIN_ID={text!r}: a ROS domain id is a number, 0 to 232")
    return int(text)


def _init(args: argparse.Namespace) -> int:
    from onboard.cli.init import init

    return init(args.folder, args.name, args.force, arm=args.arm)
