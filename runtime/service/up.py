"""``onboard up``: load robot.toml, check the missions, connect the drivers and make the arm
safe (first: a crash or a power cut may have left it moving), open the state database and
recover what the last run left (interrupted steps; their missions resumed or aborted), start
the local LLM server when robot.toml asks for it (supervised: restarted with a back-off when
it dies), start the fleet controller when robot.toml has a ``[fleet]`` table (the arm is then
the coordinator's: onboard.fleet.member), then run the service until it is stopped.
``--check`` stops after the checks."""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from onboard.base.errors import ArmError, ConfigError, Problem
from onboard.base.urls import public_url, url_secrets
from onboard.config import RobotConfig
from onboard.service.api import require_token
from onboard.service.log import JsonLog
from onboard.service.mission import Mission, check_mission, mission_files
from onboard.service.notify import Notifier
from onboard.service.operator import operator
from onboard.service.operator_call import OperatorCall, operator_url
from onboard.service.service import Options, Service
from onboard.service.store import Store, state_path

__all__ = ["BACKOFF", "check_all", "supervised_llm", "up_command"]

#: the local LLM server's restarts: 1, 2, 4 ... seconds, at most 30
BACKOFF = (1.0, 30.0)


def check_all(robot: RobotConfig, robot_path: Path | None, missions: list[Path]) -> list[Mission]:
    """robot.toml, its skills and drivers' settings (``onboard check``'s checks), then each
    mission against the robot; every problem at once, as a ConfigError."""
    from onboard.cli.check import check

    problems: list[Problem] = []
    try:
        with redirect_stdout(io.StringIO()):  # its report is for people; the log says "checked"
            check(robot_path)
    except ConfigError as exc:
        problems += exc.problems
    checked: list[Mission] = []
    for path in missions:
        try:
            checked.append(check_mission(robot, path, hardware=True))
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        raise ConfigError(problems)
    return checked


def up_command(robot: RobotConfig, robot_path: Path | None, args: argparse.Namespace) -> int:
    if getattr(args, "status", False):
        return status(robot)
    files = list(args.mission) if args.mission else mission_files(robot)
    queue = check_all(robot, robot_path, files)
    key = os.environ.get(robot.llm.api_key_env) if robot.llm.api_key_env else None
    settings = robot.service
    where = robot_path or robot.root / "robot.toml"
    token = require_token(settings, where) if settings.api else None
    call_url = operator_url(settings, where)
    log = JsonLog(secrets=[key, token, *url_secrets(robot.llm.base_url), *url_secrets(call_url)])
    if args.check:
        check_store(robot)
        log.event("checked", robot=robot.name, missions=[m.name for m in queue],
                  llm=public_url(args.llm or robot.llm.base_url),
                  state=str(state_path(robot)))  # fmt: skip
        return 0
    notifier = Notifier()
    try:
        with ExitStack() as stack:
            _connect(robot, log)
            store = stack.enter_context(closing(open_store(robot)))
            recover(store, log)
            llm = args.llm
            # a fleet member runs no missions (onboard check): it needs no LLM of its own
            if (llm or robot.llm.base_url) == "local" and robot.fleet is None:
                llm = stack.enter_context(supervised_llm(log))
            call = OperatorCall(call_url, log) if call_url else None
            if call is not None:
                stack.callback(call.join)
            if robot.fleet is not None:  # this arm is a fleet's agent: its controller runs
                from onboard.fleet.member import run_member

                stack.enter_context(run_member(robot, log))
            options = Options(llm=llm, clock=args.clock, once=args.once, call_operator=call)
            service = Service(robot, queue, options, log, notifier, store=store)
            stack.enter_context(operator(service, llm or robot.llm.base_url, token, key, where))
            code = service.run()
            store.stopped()
            return code
    finally:
        notifier.close()


def open_store(robot: RobotConfig) -> Store:
    """The robot's state database (made, with the recordings folder, when missing)."""
    path = state_path(robot)
    if robot.state is None and not path.parent.exists():
        path.parent.mkdir()  # the recordings folder, as a step would make it: one level
    return Store(path)


def check_store(robot: RobotConfig) -> None:
    """The state file can be used (opened and checked when it exists; else its folder is
    there, or is the recordings folder a start makes): nothing is written."""
    path = state_path(robot)
    if path.exists():
        with closing(Store(path)):
            return
    if robot.state is not None and not path.parent.is_dir():
        raise ConfigError([Problem(path, "", None, f"the service's state database cannot be "
                                   f"made: its folder {path.parent} does not exist")])  # fmt: skip


def status(robot: RobotConfig) -> int:
    """``onboard up --status``: each mission run, oldest first, and its step attempts."""
    path = state_path(robot)
    if not path.exists():
        print(f"{path}: no state yet (onboard up has not run here)")
        return 0
    with closing(Store(path)) as store:
        attempts = store.attempts()
        print(f"{path}")
        for run in store.missions():
            where = f" ({run['detail']})" if run["detail"] else ""
            held = f", held for the operator: {run['held']}" if run["held"] else ""
            round_ = f" round {run['round']}" if run["round"] > 1 else ""
            print(f"run {run['run']}: {run['mission']}{round_} {run['status']}{where}{held}")
            for a in (a for a in attempts if a.run == run["run"]):
                recording = f"  {Path(a.recording).name}" if a.recording else ""
                print(f"  {a.step} #{a.attempt}: {a.status}, {a.verdict or '-'}{recording}")
    return 0


def recover(store: Store, log: JsonLog) -> None:
    """What the last run left unfinished, made consistent and logged."""
    interrupted = store.recover()
    log.event("state", path=str(store.path), after_crash=store.after_crash,
              interrupted=len(interrupted))  # fmt: skip
    for found in interrupted:
        if found.step is not None:
            log.event("step_interrupted", level="warning", mission=found.mission, run=found.run,
                      step=found.step, attempt=found.attempt, recording=found.recording,
                      then=found.then)  # fmt: skip
        if found.then == "abort":
            log.event("mission_end", level="warning", mission=found.mission, run=found.run,
                      result="aborted", at_step=found.step, detail="interrupted")  # fmt: skip
        else:
            log.event("mission_interrupted", level="warning", mission=found.mission,
                      run=found.run, at_step=found.step, then="resume")  # fmt: skip


@contextmanager
def supervised_llm(log: JsonLog) -> Iterator[str]:
    from onboard.llm.local_server import local_server, server_pid

    def report(event: str, fields: dict[str, Any]) -> None:
        level = "info" if event == "llm_server_restarted" else "error"
        log.event(event, level=level, **fields)

    log.event("llm_server_starting")
    with local_server(report=report, restarts=None, backoff=BACKOFF) as url:
        log.event("llm_server_ready", url=url, pid=server_pid(url))
        try:
            yield url
        finally:
            log.event("llm_server_stopping", url=url)


def _connect(robot: RobotConfig, log: JsonLog) -> None:
    """The drivers robot.toml names answer (the arm and camera connected, then released:
    each step's episode connects them again, as ``onboard run`` does). The arm is stopped
    first: the last run may have died (kill -9, a power cut) with a motion under way, which
    an arm with its own controller goes on with (a Marlin board that does not reset when the
    port opens is stopped inside the driver's connect, before its handshake, which would
    otherwise wait behind the dead host's ``M400``). The stop is latched; a step's episode
    clears it when it moves the arm on purpose."""
    from onboard.drivers.factory import hardware

    drivers: dict[str, Any] = {"base": robot.drivers.robot.kind}
    arm, camera = robot.drivers.arm, robot.drivers.camera
    if arm is not None:
        with hardware(arm, camera, robot.safety, robot.root) as found:
            assert found.arm is not None
            found.arm.stop()
            try:
                state = found.arm.state()
            except ArmError as exc:  # stopped, and the reading of where it is failed: say so
                log.event("arm_safe", level="warning", arm=arm.kind, action="stop", error=str(exc))
            else:
                joints = [round(q, 4) for q in state.joints]
                log.event("arm_safe", arm=arm.kind, action="stop", stopped=state.stopped,
                          moving=state.moving, joints=joints)  # fmt: skip
        drivers["arm"] = arm.kind
    if camera is not None:
        drivers["camera"] = camera.kind
    log.event("connected", robot=robot.name, **drivers)
