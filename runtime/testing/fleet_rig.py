"""A fleet on loopback for tests and the bench: the world (``onboard fleet world``), one
controller process per agent (``onboard up`` with robot.toml's ``[fleet]``), and a TCP proxy
owned by the caller between a chosen controller and the coordinator's endpoint, which it can
cut and heal.

Every process's stdout is read on a thread; a controller's JSON log events are kept in
order, and :meth:`FleetRig.wait_event` waits for one (a bounded wait: a failure guard, never
the synchronisation itself).
"""

from __future__ import annotations

import contextlib
import functools
import json
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["FleetRig", "Proxy", "free_port", "member_toml"]

ONBOARD = Path(sys.executable).with_name("onboard")
AGENTS = ("Alice", "Bob", "Chad")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Proxy:
    """TCP on loopback from :attr:`port` to ``target``: :meth:`cut` drops every connection
    and refuses new ones (a partition), :meth:`heal` forwards again."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, name="proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._open.is_set():
                client.close()  # refused: the partition holds
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5.0)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> float:
        """Partition now; the wall time of the cut."""
        self._open.clear()
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        return time.time()

    def heal(self) -> None:
        self._open.set()

    def close(self) -> None:
        self.cut()
        with contextlib.suppress(OSError):  # on Linux close() alone leaves accept() blocked
            self._server.shutdown(socket.SHUT_RDWR)
        self._server.close()


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[str]
    events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)
    seen: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def follow(self, target: Callable[[IO[str]], None], stream: IO[str]) -> None:
        thread = threading.Thread(target=target, args=(stream,), daemon=True)
        thread.start()
        self.readers.append(thread)

    def drain(self, stream: IO[str]) -> None:
        for line in stream:
            self.errors.append(line)

    def read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.append(line)
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    self.events.put(record)


def _other_ready(controller_first: bool, event: dict[str, Any]) -> bool:
    """The service's ready after the controller's, or the controller's after the service's."""
    return ("agent" in event) != controller_first


def member_toml(
    agent: str,
    arm: Sequence[Any],
    fleet: str,
    connect: str,
    period: float,
    timeout: float,
    api_port: int | None = None,
) -> str:
    """The robot.toml of ``agent``'s controller: its arm (``[host, port, status_port]`` of
    its JAKA controller) and its ``[fleet]`` table; the control API on ``api_port``."""
    host, command, status = arm
    api = f"api = true\nport = {api_port}" if api_port is not None else "api = false"
    return f"""name = "{agent.lower()}"

[drivers.arm]
kind = "jaka"
host = "{host}"
port = {command}
status_port = {status}
grip_settle = 0.0

[service]
{api}

[fleet]
agent = "{agent}"
name = "{fleet}"
connect = ["{connect}"]
period = {period}
timeout = {timeout}
"""


class FleetRig:
    """The world and one controller per agent, each an ``onboard up`` process with a
    ``[fleet]`` table in its robot.toml; ``through``: the agent whose controller reaches the
    coordinator through :attr:`proxy`. The coordinator listens on :attr:`endpoint`;
    :attr:`truth` is the world's truth port (HOST:PORT)."""

    def __init__(
        self,
        fleet: str = "test",
        through: str | None = "Bob",
        period: float = 0.1,
        timeout: float = 0.5,
        agents: Sequence[str] = AGENTS,
        api: str | None = "Alice",
    ) -> None:
        self.fleet, self.period, self.timeout = fleet, period, timeout
        #: the agent whose ``onboard up`` serves the control API (on :attr:`api_url`)
        self.api_agent, self.api_port = api, free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.port = free_port()
        self.endpoint = f"tcp/127.0.0.1:{self.port}"
        self.proxy = Proxy(self.port)
        self.processes: dict[str, Process] = {}
        self.stack = contextlib.ExitStack()
        self.stack.callback(self.proxy.close)
        try:
            self._launch(fleet, through, period, timeout, agents)
        except BaseException:
            self.stack.close()
            raise

    def _launch(
        self, fleet: str, through: str | None, period: float, timeout: float, agents: Sequence[str]
    ) -> None:
        world = self._start("world", [str(ONBOARD), "fleet", "world"])
        arms = json.loads(self._first_line(world))
        self.truth = "{}:{}".format(*arms["truth"])
        self.folder = Path(tempfile.mkdtemp(prefix="fleet-rig-"))
        self.stack.callback(shutil.rmtree, self.folder, True)
        for agent in agents:
            port = self.proxy.port if agent == through else self.port
            api = self.api_port if agent == self.api_agent else None
            robot = self.folder / agent / "robot.toml"
            (robot.parent / "skills").mkdir(parents=True)
            connect = f"tcp/127.0.0.1:{port}"
            robot.write_text(member_toml(agent, arms["arms"][agent], fleet, connect, period,
                                         timeout, api))  # fmt: skip
            self._start(agent, [str(ONBOARD), "--robot", str(robot), "up"])
        for agent in agents:  # the controller's and the service's (its API is up), any order
            controller_first = "agent" in self.wait_event(agent, "ready", timeout=60.0)
            self.wait_event(agent, "ready", functools.partial(_other_ready, controller_first),
                            timeout=60.0)  # fmt: skip

    def _start(self, name: str, command: list[str]) -> Process:
        popen = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)  # fmt: skip
        process = Process(name, popen)
        self.processes[name] = process
        self.stack.callback(self._end, process)
        assert popen.stdout is not None and popen.stderr is not None
        process.follow(process.drain, popen.stderr)
        if name != "world":
            process.follow(process.read, popen.stdout)
        return process

    def _first_line(self, process: Process) -> str:
        assert process.popen.stdout is not None
        line = process.popen.stdout.readline()
        if not line:
            process.popen.wait(timeout=10.0)
            raise RuntimeError(f"{process.name} ended: {''.join(process.errors)}")
        process.follow(process.read, process.popen.stdout)
        return line

    @staticmethod
    def _end(process: Process) -> None:
        if process.popen.poll() is None:
            process.popen.terminate()
            try:
                process.popen.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
        for thread in process.readers:
            thread.join(timeout=5.0)  # at the pipes' end: the process is gone
        for stream in (process.popen.stdout, process.popen.stderr):
            if stream is not None:
                stream.close()

    def wait_event(
        self,
        agent: str,
        event: str,
        where: Callable[[dict[str, Any]], bool] = lambda _: True,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        """The next event ``event`` of ``agent``'s controller that ``where`` accepts (events
        before it are kept in :attr:`Process.seen`); AssertionError after ``timeout``."""
        process = self.processes[agent]
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                record = process.events.get(timeout=left)
            except queue.Empty:
                break
            process.seen.append(record)
            if record.get("event") == event and where(record):
                return record
        raise AssertionError(f"{agent}: no {event!r} event within {timeout} s; stderr: "
                             f"{''.join(process.errors)[-2000:]}")  # fmt: skip

    def drain(self, agent: str) -> list[dict[str, Any]]:
        """``agent``'s controller events logged since the last wait or drain, in order."""
        process, out = self.processes[agent], []
        while True:
            try:
                out.append(process.events.get_nowait())
            except queue.Empty:
                process.seen += out
                return out

    def args(self) -> list[str]:
        """The coordinator's endpoint options for ``onboard fleet run|reset``."""
        return ["--fleet", self.fleet, "--listen", self.endpoint, "--period", str(self.period),
                "--timeout", str(self.timeout)]  # fmt: skip

    def close(self) -> None:
        self.stack.close()

    def __enter__(self) -> FleetRig:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
