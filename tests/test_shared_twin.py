"""``onboard sim serve`` puts three controllers on one twin arm: a client that is not onboard's
must be able to move it (issue 31, item 4).

The JAKA client here is written from JAKA's TCP/IP protocol page, not with onboard's driver:
JSON commands on the command port, each answered with ``errorCode``; the state pushed on the
status port as JSON objects back to back. It does what a user's first script does: power on,
enable, one ``end_move``, then read the position. The G-code boards' boots (the GRBL board
boots when the emulators start) latched the shared arm's stop, and the JAKA side never
resumed it: every reply said success and the arm never moved; the failure was swallowed as a
stop. Waits are for the answer or the pushed state, bounded by ``BOUND``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import serial
from arm_harness import BLOCKS, BOUND, require, wait_until

from onboard.drivers.emulators.serve import Served, serve


class JsonSocket:
    """One TCP connection carrying JSON objects back to back (JAKA's framing)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=BOUND)
        self.buffer = ""
        self.decoder = json.JSONDecoder()

    def close(self) -> None:
        self.sock.close()

    def send(self, command: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(command).encode())

    def next(self) -> dict[str, Any]:
        while True:
            text = self.buffer.lstrip()
            if text:
                try:
                    value, end = self.decoder.raw_decode(text)
                except json.JSONDecodeError:
                    pass  # not all of it has come yet
                else:
                    self.buffer = text[end:]
                    assert isinstance(value, dict), value
                    return value
            chunk = self.sock.recv(65536)
            require(bool(chunk), "the controller sent more")
            self.buffer += chunk.decode()

    def ask(self, name: str, **fields: Any) -> dict[str, Any]:
        self.send({"cmdName": name, **fields})
        reply = self.next()
        assert reply.get("errorCode") == "0", reply
        return reply


@contextlib.contextmanager
def sim_serve() -> Iterator[Served]:
    """``onboard sim serve`` (every service, the G-code boards too) in a thread."""
    stop, ready = threading.Event(), threading.Event()
    served: list[Served] = []

    def on_ready(where: Served) -> None:
        served.append(where)
        ready.set()

    thread = threading.Thread(
        target=serve,
        args=(BLOCKS,),
        kwargs={
            "jaka_port": 0,
            "status_port": 0,
            "camera_port": 0,
            "truth_port": 0,
            "stop": stop,
            "say": lambda _line: None,
            "ready": on_ready,
        },
        daemon=True,
    )
    thread.start()
    try:
        require(ready.wait(BOUND), "sim serve listens")
        yield served[0]
    finally:
        stop.set()
        thread.join(BOUND)


@dataclass
class Raw:
    """A raw JAKA client's command and status connections, and where sim serve listens."""

    commands: JsonSocket
    status: JsonSocket
    served: Served


@pytest.fixture
def jaka() -> Iterator[Raw]:
    """A raw client of sim serve's JAKA controller, powered on and enabled."""
    with sim_serve() as served:
        commands, status = JsonSocket(served.jaka), JsonSocket(served.status)
        try:
            commands.ask("power_on")
            for _ in range(100):  # the controller reports the power a few polls later
                if commands.ask("get_robot_state")["power"] == "powered_on":
                    break
            commands.ask("enable_robot")
            yield Raw(commands, status, served)
        finally:
            commands.close()
            status.close()


def tcp(commands: JsonSocket) -> list[float]:
    return [float(v) for v in commands.ask("get_tcp_pos")["tcp_pos"]]


def test_a_raw_clients_first_move_runs(jaka: Raw) -> None:
    commands = jaka.commands
    start = tcp(commands)
    target = [*start[:2], start[2] - 30.0, *start[3:]]
    commands.ask("end_move", endPosition=target)
    wait_until(lambda: abs(tcp(commands)[2] - target[2]) < 2.0, "the tool went 30 mm down")


def test_a_raw_clients_failed_move_shows_on_the_status_stream(jaka: Raw) -> None:
    commands, status = jaka.commands, jaka.status
    start = tcp(commands)
    commands.ask("end_move", endPosition=[3000.0, *start[1:]])  # 3 m away: out of reach

    def failed() -> bool:
        return status.next().get("errcode") != "0x0"

    wait_until(failed, "the status stream shows the motion error")
    pushed = status.next()
    assert pushed["errcode"] != "0x0" and "reach" in pushed["errmsg"], pushed


# -- the G-code boards, with raw clients written from the firmwares' documented protocols --------


class Board:
    """A raw serial client: lines out, the board's lines (without line ends) in."""

    def __init__(self, path: str) -> None:
        self.port = serial.serial_for_url(path, timeout=BOUND)

    def close(self) -> None:
        self.port.close()

    def line(self) -> str:
        raw = self.port.readline()
        require(raw.endswith(b"\n"), "the board printed a line")
        return raw.decode("ascii", errors="replace").strip()

    def until(self, last: str) -> list[str]:
        lines = [self.line()]
        while not lines[-1].startswith(last):
            lines.append(self.line())
        return lines

    def command(self, text: str) -> list[str]:
        """Send a line; what the board printed up to its ``ok`` (an error fails the test)."""
        self.port.write(text.encode() + b"\n")
        lines = self.until("ok")
        assert not any(x.lower().startswith("error") for x in lines), (text, lines)
        return lines


def test_raw_gcode_clients_move_the_shared_twin(jaka: Raw) -> None:
    """Marlin (reprap.org G-code: ``G28``, ``G1``, ``M400``; ``start`` at boot) and GRBL 1.1
    (its interface.md: the banner, ``$H``, ``G1``, ``G4 P0``), each after a JAKA move: every
    board's first motion runs on the arm the others also drive."""
    commands, served = jaka.commands, jaka.served
    start = tcp(commands)
    commands.ask("end_move", endPosition=[*start[:2], start[2] - 20.0, *start[3:]])
    wait_until(lambda: abs(tcp(commands)[2] - (start[2] - 20.0)) < 2.0, "JAKA moved the tool")
    assert served.marlin and served.grbl
    marlin = Board(served.marlin)
    try:
        marlin.until("start")  # the board reset when the port opened
        marlin.command("M110 N0")
        marlin.command("G28")
        x, y, z = tcp(commands)[:3]
        marlin.command(f"G1 X{x:.2f} Y{y:.2f} Z{z - 30:.2f} F3000")
        marlin.command("M400")
        assert abs(tcp(commands)[2] - (z - 30)) < 2.0, "Marlin's first move did not run"
    finally:
        marlin.close()
    grbl = Board(served.grbl)
    try:
        grbl.until("Grbl 1.1")  # homing enabled: it boots in alarm
        grbl.command("$H")
        x, y, z = tcp(commands)[:3]
        grbl.command(f"G1 X{x:.3f} Y{y:.3f} Z{z - 30:.3f} F3000")  # machine zero: the base
        grbl.command("G4 P0")
        assert abs(tcp(commands)[2] - (z - 30)) < 2.0, "GRBL's first move did not run"
    finally:
        grbl.close()
