"""A JAKA-style controller on TCP, backed by any Arm: commands on one port, state on another.

``JakaServer(arm, port=0, status_port=0).start()`` listens on loopback; :attr:`address` and
:attr:`status_address` say where. Commands are the JSON objects of JAKA's TCP/IP protocol (see
:mod:`onboard.drivers.arm.jaka`); each is answered with its ``cmdName``, ``errorCode`` (``"0"``
success, ``"1"`` unknown or malformed command, ``"2"`` refused or failed) and ``errorMsg``.
Motions run in order on the backend arm in a worker thread and are answered when accepted;
``wait_complete`` is answered when they are done (or with the error of one that failed). The
status port pushes the state as JSON at ``status_hz``.

Hostile input is answered, never fatal: malformed JSON, a top-level value that is not an
object (an array's inner commands are not run), numbers that overflow a float, frames nested
past 32 or longer than 64 KB, a ``{`` left unfinished before the next command, a line break
inside a frame: each gets ``errorCode "1"`` (see :class:`~onboard.drivers.arm.jaka.JsonStream`,
one linear pass) and the connection reads on. More than :data:`MAX_WAITS` ``wait_complete``
outstanding on one connection are refused (``"2"``): each would hold a thread.

A command connection that drops stops the arm, as a lost link must.

Faults for tests: :meth:`fail_next`, :meth:`mute`, :meth:`inject_garbage`, :meth:`drop_clients`.
To inject one while a motion runs, wait until the controller has begun it:
``server.worker.wait_started(started + 1, timeout)``. ``stop_program`` latches the backend arm's
stop and is answered at once; the next motion accepted after it resumes the arm.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from onboard.base.errors import OnboardError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.jaka import BadFrame, Frame, JsonStream
from onboard.drivers.emulators import BackendWorker, Job

__all__ = ["MAX_WAITS", "JakaServer"]

log = logging.getLogger(__name__)

Reply = dict[str, Any]
_MOTIONS = ("joint_move", "end_move", "moveL")
MAX_WAITS = 8  # wait_complete answers outstanding per connection; more are refused


class _BadCommand(Exception):
    """A command the emulator answers with errorCode "1"."""


class JakaServer:
    """JAKA's TCP/IP protocol on ``host:port`` (commands) and ``host:status_port`` (state)."""

    def __init__(
        self,
        arm: Arm,
        *,
        host: str = "127.0.0.1",
        port: int = 10001,
        status_port: int = 10000,
        status_hz: float = 10.0,
        grip_output: tuple[int, int] = (1, 0),
        grip_close_value: int = 1,
        powered: bool = False,
    ) -> None:
        self.arm = arm
        self.host = host
        self._ports = (port, status_port)
        self.status_hz = status_hz
        self.grip_output = grip_output
        self.grip_close_value = grip_close_value
        self.worker = BackendWorker(arm)
        self.powered = powered
        self.enabled = powered
        self.received: deque[Reply] = deque(maxlen=1000)
        self.outputs: dict[tuple[int, int], int] = {}
        self._listeners: list[socket.socket] = []
        self._clients: set[socket.socket] = set()
        self._status_clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()
        self._running = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fail_next: dict[str, tuple[str, str]] = {}
        self._muted = False
        self._error = ""

    def __enter__(self) -> JakaServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` of the command port."""
        return self._bound(0)

    @property
    def status_address(self) -> tuple[str, int]:
        return self._bound(1)

    def _bound(self, i: int) -> tuple[str, int]:
        if len(self._listeners) < 2:
            raise RuntimeError("JakaServer: not started: call start() first")
        host, port = self._listeners[i].getsockname()[:2]
        return str(host), int(port)

    def start(self) -> JakaServer:
        for port, serve in zip(
            self._ports, (self._serve_commands, self._serve_status), strict=True
        ):
            listener = socket.create_server((self.host, port), reuse_port=False)
            self._listeners.append(listener)
            self._spawn(self._accept_loop, listener, serve)
        self._running.set()
        return self

    def close(self) -> None:
        self._running.clear()
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.drop_clients()
        self.worker.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        self._threads.clear()

    # -- faults ---------------------------------------------------------------------------

    def fail_next(self, cmd_name: str, message: str = "simulated fault", code: str = "2") -> None:
        """Answer the next ``cmd_name`` with ``errorCode=code`` instead of running it."""
        self._fail_next[cmd_name] = (code, message)

    def mute(self, on: bool = True) -> None:
        """Stop answering (and acting on) commands, as a hung controller would."""
        self._muted = on

    def inject_garbage(self, data: bytes = b'\x00\xfe#%&garbled]}{"@\xff}\n') -> None:
        """Write noise to every command connection now, as a flaky network would."""
        with self._clients_lock:
            clients = [c for c in self._clients if c not in self._status_clients]
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.sendall(data)

    def drop_clients(self) -> None:
        """Close every connection now (the arm stops, as for any dropped command link)."""
        with self._clients_lock:
            clients, self._clients = list(self._clients), set()
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self.worker.stop()

    # -- connections ----------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="jaka-emulator")
        thread.start()
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)

    def _accept_loop(self, listener: socket.socket, serve: Callable[[socket.socket], None]) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._clients_lock:
                self._clients.add(sock)
            self._spawn(serve, sock)

    def _serve_commands(self, sock: socket.socket) -> None:
        stream, lock = JsonStream(lines=True), threading.Lock()
        waits = threading.BoundedSemaphore(MAX_WAITS)
        while True:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            for frame in stream.frames(data):
                try:
                    self._dispatch(sock, lock, frame, waits)
                except Exception:  # a bad command must never kill the connection
                    log.exception("jaka emulator: %.200r failed", frame)
                    self._send(sock, lock, _reply("", "2", "the controller failed"))
        self._forget(sock)
        if self._running.is_set():
            self.worker.stop()  # a lost command link stops the arm

    def _serve_status(self, sock: socket.socket) -> None:
        period = 1.0 / self.status_hz
        with self._clients_lock:
            self._status_clients.add(sock)
        while self._running.is_set():
            try:
                sock.sendall(json.dumps(self._status()).encode())
            except OSError:
                break
            time.sleep(period)
        self._forget(sock)

    def _forget(self, sock: socket.socket) -> None:
        with self._clients_lock:
            self._clients.discard(sock)
            self._status_clients.discard(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def _send(self, sock: socket.socket, lock: threading.Lock, reply: Reply) -> None:
        with lock, contextlib.suppress(OSError):
            sock.sendall(json.dumps(reply).encode())

    def _dispatch(
        self,
        sock: socket.socket,
        lock: threading.Lock,
        frame: Frame,
        waits: threading.BoundedSemaphore,
    ) -> None:
        if self._muted:
            return
        if isinstance(frame, BadFrame):  # malformed, not an object, too big or too deep
            self._send(sock, lock, _reply("", "1", frame.reason))
            return
        command = frame
        self.received.append(command)
        name = str(command.get("cmdName", ""))

        def send(reply: Reply) -> None:
            self._send(sock, lock, reply)

        if name == "wait_complete":  # answered later, so this link stays free for stop
            if not waits.acquire(blocking=False):  # a flood must not spawn a thread each
                send(_reply(name, "2", f"more than {MAX_WAITS} wait_complete outstanding"))
                return

            def answer_when_done() -> None:
                try:
                    send(self._wait_complete())
                finally:
                    waits.release()

            self._spawn(answer_when_done)
        else:
            send(self._answer(name, command))

    # -- the protocol ---------------------------------------------------------------------

    def _answer(self, name: str, command: Reply) -> Reply:
        if name in self._fail_next:
            code, message = self._fail_next.pop(name)
            return _reply(name, code, message)
        handler = self._handlers().get(name)
        if handler is None:
            return _reply(name, "1", f"unknown cmdName {name!r}")
        try:
            return {**_reply(name), **handler(command)}
        except _BadCommand as exc:
            return _reply(name, "1", str(exc))
        except (OnboardError, ValueError) as exc:
            return _reply(name, "2", str(exc))

    def _handlers(self) -> dict[str, Callable[[Reply], Reply]]:
        return {
            "power_on": lambda c: self._set(powered=True),
            "power_off": lambda c: self._set(powered=False, enabled=False),
            "enable_robot": self._enable,
            "disable_robot": lambda c: self._set(enabled=False),
            "get_robot_state": lambda c: {
                "power": "powered_on" if self.powered else "powered_off",
                "enable": "robot_enabled" if self.enabled else "robot_disabled",
            },
            "joint_move": self._joint_move,
            "moveL": self._move_linear,
            "end_move": self._move_linear,
            "get_tcp_pos": lambda c: {"tcp_pos": _tcp(self.arm.state().pose)},
            "get_joint_pos": lambda c: {
                "joint_pos": [round(math.degrees(q), 4) for q in self.arm.state().joints]
            },
            "stop_program": lambda c: self._stop(),
            "set_digital_output": self._set_output,
        }

    def _set(self, **flags: bool) -> Reply:
        for key, value in flags.items():
            setattr(self, key, value)
        return {}

    def _enable(self, command: Reply) -> Reply:
        if not self.powered:
            raise ValueError("the robot is powered off: send power_on first")
        return self._set(enabled=True)

    def _stop(self) -> Reply:
        self.worker.stop()
        return {}

    def _ready(self) -> None:
        if not (self.powered and self.enabled):
            raise ValueError("the robot is not powered on and enabled: send power_on, enable_robot")

    def _joint_move(self, command: Reply) -> Reply:
        target = _numbers(command, "jointPosition")
        speed = _number(command, "speed", 30.0)
        relative = _number(command, "relFlag", 0.0) == 1
        self._ready()

        def job(arm: Arm) -> None:
            joints = [math.radians(q) for q in target]
            if relative:
                joints = [a + b for a, b in zip(arm.state().joints, joints, strict=False)]
            arm.move_joints(tuple(joints), math.radians(speed))

        return self._queue(job)

    def _move_linear(self, command: Reply) -> Reply:
        key = "endPosition" if command.get("cmdName") == "end_move" else "cartPosition"
        target = _numbers(command, key, length=6)
        # end_move's speed is a joint speed (deg/s); run it as a moderate tool speed
        speed = 100.0 if key == "endPosition" else _number(command, "speed", 100.0)
        relative = _number(command, "relFlag", 0.0) == 1

        def job(arm: Arm) -> None:
            goal = target
            if relative:
                goal = [a + b for a, b in zip(_tcp(arm.state().pose), target, strict=True)]
            pose = Pose(*(v / 1000.0 for v in goal[:3]), *(math.radians(a) for a in goal[3:6]))
            arm.move_to(pose, speed / 1000.0)

        self._ready()
        return self._queue(job)

    def _queue(self, job: Job) -> Reply:
        if not self.worker.submit(job, timeout=5.0):
            raise ValueError("the motion queue is full")
        return {}

    def _set_output(self, command: Reply) -> Reply:
        io_type = int(_number(command, "type", 0.0))
        index = int(_number(command, "index"))
        value = int(_number(command, "value"))
        self.outputs[(io_type, index)] = value
        if (io_type, index) == self.grip_output:
            close = value == self.grip_close_value
            self._queue(lambda arm: arm.grip(close))
        return {}

    def _wait_complete(self) -> Reply:
        while not self.worker.wait_idle(0.05):
            if not self._running.is_set():
                return _reply("wait_complete", "2", "the controller shut down")
        error = self.worker.take_error()
        if error:
            self._error = error
            return _reply("wait_complete", "2", error)
        return _reply("wait_complete")

    def _status(self) -> Reply:
        state = self.arm.state()
        status: Reply = {
            "len": 0,
            "errcode": "0x0" if not self._error else "0x1",
            "errmsg": self._error,
            "powered_on": int(self.powered),
            "enabled": self.enabled,
            "inpos": self.worker.idle and not state.moving,
            "joint_actual_position": [round(math.degrees(q), 4) for q in state.joints],
            "actual_position": _tcp(state.pose),
            "tio_dout": [self.outputs.get((1, i), 0) for i in range(8)],
            "emergency_stop": 0,
            "protective_stop": 0,
            "task_state": 4 if self.enabled else (2 if self.powered else 1),
        }
        status["len"] = len(json.dumps(status))
        return status


def _reply(name: str, code: str = "0", message: str = "") -> Reply:
    return {"cmdName": name, "errorCode": code, "errorMsg": message}


def _tcp(pose: Pose) -> list[float]:
    mm = [pose.x * 1000.0, pose.y * 1000.0, pose.z * 1000.0]
    deg = [math.degrees(a) for a in (pose.rx, pose.ry, pose.rz)]
    return [round(v, 4) for v in mm + deg]


def _number(command: Reply, key: str, default: float | None = None) -> float:
    value = command.get(key, default)
    try:
        number = float(value) if isinstance(value, int | float) else math.nan
    except OverflowError:  # an int too large for a float
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise _BadCommand(f"{key} must be a number, got {str(value)[:40]!r}")
    return number


def _numbers(command: Reply, key: str, length: int | None = None) -> list[float]:
    values = command.get(key)
    if not isinstance(values, list) or not values or (length and len(values) != length):
        size = f"{length} numbers" if length else "a list of numbers"
        raise _BadCommand(f"{key} must be {size}, got {values!r}")
    return [_number({key: v}, key) for v in values]
