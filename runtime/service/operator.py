"""What ``onboard up`` starts beside the loop, each on threads of its own: the e-stop's
inputs, the heartbeats, the control API and operator page; all closed when it stops."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from onboard.base.errors import ConfigError, Problem
from onboard.service.estop import FileInput, GpioInput, Input, SerialInput
from onboard.service.heartbeat import Heartbeats
from onboard.service.service import Service
from onboard.service.settings import EStopConfig

__all__ = ["estop_inputs", "operator"]


def estop_inputs(config: EStopConfig, root: Path, where: Path | None = None) -> list[Input]:
    """The inputs robot.toml's ``[service.estop]`` names (relative paths from ``root``);
    ``where``: robot.toml, for the error."""
    where = where or root / "robot.toml"
    inputs: list[Input] = []
    if config.file is not None:
        inputs.append(FileInput(config.file if config.file.is_absolute() else root / config.file))
    if config.gpio is not None:
        inputs.append(GpioInput(config.gpio, config.gpio_active))
    if config.serial is not None:
        try:
            inputs.append(SerialInput(config.serial, config.baudrate, config.word))
        except Exception as exc:  # pyserial's SerialException (an OSError's message)
            why = f"the e-stop's serial port cannot be opened: {exc}"
            raise ConfigError([Problem(where, "service.estop.serial", None, why)]) from exc
    return inputs


@contextmanager
def operator(
    service: Service,
    llm: str | None,
    token: str | None,
    api_key: str | None = None,
    where: Path | None = None,
) -> Iterator[str | None]:
    """Start the e-stop inputs, the heartbeats and (``[service] api``) the control API;
    yields the API's URL (None without it). ``where``: robot.toml, for errors."""
    robot, log = service.robot, service.log
    where = where or robot.root / "robot.toml"
    with ExitStack() as stack:
        inputs = estop_inputs(robot.service.estop, robot.root, where)
        for source in inputs:
            stack.callback(source.close)
            source.start(service.estop)
        in_step = lambda: service._in_step  # noqa: E731
        beats = Heartbeats(log, lambda: service.loop_beat, in_step, llm, api_key,
                           loop_ended=lambda: service.loop_ended)  # fmt: skip
        beats.start()
        stack.callback(beats.close)
        url = None
        if robot.service.api:
            from onboard.service.api import ApiServer, make_app

            try:
                server = ApiServer(make_app(service, token, beats), robot.service.host,
                                   robot.service.port)  # fmt: skip
            except ImportError as exc:
                why = f"{exc}; or set api = false"
                raise ConfigError([Problem(where, "service.api", None, why)]) from exc
            try:
                server.start()
            except OSError as exc:
                why = f"the control API cannot listen on {server.url}: {exc.strerror or exc}"
                raise ConfigError([Problem(where, "service.port", None, why)]) from exc
            stack.callback(server.close)
            url = server.url
        names = ["api", *(getattr(source, "source", "?") for source in inputs)]
        log.event("operator", api=url, token=token is not None, estop=names)
        yield url
