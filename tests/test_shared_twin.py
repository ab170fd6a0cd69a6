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
from typing import Any

import pytest
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


@pytest.fixture
def jaka() -> Iterator[tuple[JsonSocket, JsonSocket]]:
    """A raw client's command and status connections, powered on and enabled."""
    with sim_serve() as served:
        commands, status = JsonSocket(served.jaka), JsonSocket(served.status)
        try:
            commands.ask("power_on")
            for _ in range(100):  # the controller reports the power a few polls later
                if commands.ask("get_robot_state")["power"] == "powered_on":
                    break
            commands.ask("enable_robot")
            yield commands, status
        finally:
            commands.close()
            status.close()


def tcp(commands: JsonSocket) -> list[float]:
    return [float(v) for v in commands.ask("get_tcp_pos")["tcp_pos"]]


def test_a_raw_clients_first_move_runs(jaka: tuple[JsonSocket, JsonSocket]) -> None:
    commands, _ = jaka
    start = tcp(commands)
    target = [*start[:2], start[2] - 30.0, *start[3:]]
    commands.ask("end_move", endPosition=target)
    wait_until(lambda: abs(tcp(commands)[2] - target[2]) < 2.0, "the tool went 30 mm down")


def test_a_raw_clients_failed_move_shows_on_the_status_stream(
    jaka: tuple[JsonSocket, JsonSocket],
) -> None:
    commands, status = jaka
    start = tcp(commands)
    commands.ask("end_move", endPosition=[3000.0, *start[1:]])  # 3 m away: out of reach

    def failed() -> bool:
        return status.next().get("errcode") != "0x0"

    wait_until(failed, "the status stream shows the motion error")
    pushed = status.next()
    assert pushed["errcode"] != "0x0" and "reach" in pushed["errmsg"], pushed
