"""``onboard up``: load robot.toml, check the missions, start the local LLM server when
robot.toml asks for it (supervised: restarted with a back-off when it dies), connect the
drivers, then run the service until it is stopped. ``--check`` stops after the checks."""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, redirect_stdout
from pathlib import Path
from typing import Any

from onboard.base.errors import ConfigError, Problem
from onboard.base.urls import public_url, url_secrets
from onboard.config import RobotConfig
from onboard.service.api import require_token
from onboard.service.log import JsonLog
from onboard.service.mission import Mission, check_mission, mission_files
from onboard.service.notify import Notifier
from onboard.service.operator import operator
from onboard.service.service import Options, Service

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
    files = list(args.mission) if args.mission else mission_files(robot)
    queue = check_all(robot, robot_path, files)
    key = os.environ.get(robot.llm.api_key_env) if robot.llm.api_key_env else None
    settings = robot.service
    where = robot_path or robot.root / "robot.toml"
    token = require_token(settings, where) if settings.api else None
    log = JsonLog(secrets=[key, token, *url_secrets(robot.llm.base_url)])
    if args.check:
        log.event("checked", robot=robot.name, missions=[m.name for m in queue],
                  llm=public_url(args.llm or robot.llm.base_url))  # fmt: skip
        return 0
    notifier = Notifier()
    try:
        with ExitStack() as stack:
            llm = args.llm
            if (llm or robot.llm.base_url) == "local":
                llm = stack.enter_context(supervised_llm(log))
            _connect(robot, log)
            options = Options(llm=llm, clock=args.clock, once=args.once)
            service = Service(robot, queue, options, log, notifier)
            stack.enter_context(operator(service, llm or robot.llm.base_url, token, key, where))
            return service.run()
    finally:
        notifier.close()


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
    each step's episode connects them again, as ``onboard run`` does)."""
    drivers: dict[str, Any] = {"base": robot.drivers.robot.kind}
    arm, camera = robot.drivers.arm, robot.drivers.camera
    if arm is not None and camera is not None:
        from onboard.manip.session import scene_hardware

        with scene_hardware(robot):
            pass
        drivers |= {"arm": arm.kind, "camera": camera.kind}
    log.event("connected", robot=robot.name, **drivers)
