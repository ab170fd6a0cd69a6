"""A JAKA controller on TCP, backed by any Arm: commands on one port, the status stream on another.

``JakaServer(arm, port=0, status_port=0).start()`` listens on loopback; :attr:`address` and
:attr:`status_address` say where. Commands are the JSON objects of JAKA's TCP/IP protocol (see
:mod:`onboard.drivers.arm.jaka`). It behaves as the public sources show a real controller does
(each behaviour below names its source; facts are taken from them, no code):

- a command is answered when it is accepted, not when it is done: a motion is acknowledged at
  once and runs afterwards, in order, on the backend arm (a worker thread);
- the status port pushes the state (``inpos`` false while a motion runs or is queued, the
  positions, power, errors) at ``status_hz``, objects back to back with no separator;
- ``wait_complete`` acknowledges receipt only (``wait_complete="receipt"``, the default), or,
  as older firmware was used, answers when the motions are done (``"done"``);
- ``get_robot_state`` answers ``power``/``enable`` as words; after ``power_on`` the robot may
  take a while to report power (``power_up_polls``); ``enable_robot`` is refused until then;
- ``set_digital_output`` counts outputs from ``do_index_base`` (0 or 1: firmware differs);
- with ``status_fields_on_request=True`` the optional status fields (:data:`OPTIONAL_FIELDS`)
  are pushed only after ``setOptionalInfoConfig`` asks for each.

Replies carry ``errorCode`` (``"0"`` success, ``"1"`` unknown or malformed command, ``"2"``
refused or failed), ``errorMsg`` and ``cmdName``. Hostile input is answered, never fatal:
malformed JSON, a top-level value that is not an object, numbers that overflow a float, frames
nested past 32 or longer than 64 KB, a ``{`` left unfinished before the next command, a line
break inside a frame: each gets ``errorCode "1"`` (see
:class:`~onboard.drivers.arm.jaka.JsonStream`) and the connection reads on. Answers held back
(a blocking ``wait_complete``, the gripper's output) are bounded by :data:`MAX_WAITS` per
connection; more are refused (``"2"``): each holds a thread.

A command connection that drops stops the arm, as a lost link must.

Faults for tests: :meth:`fail_next` (also as the real controller was seen to fail, without
``cmdName``), :meth:`mute`, :meth:`inject_garbage`, :meth:`drop_clients`. To inject one while a
motion runs, wait until the controller has begun it: ``server.worker.wait_started(started + 1,
timeout)``. ``stop_program`` latches the backend arm's stop and is answered at once; the next
motion accepted after it resumes the arm.

Sources cited below:

- [doc] JAKA TCP/IP Control Protocol, https://www.jaka.com/docs/en/guide/tcpip.html
- [log] nkawa/JAKA_Zu5s_MQTT_Control, src/check_jkrc.py: replies of a real controller
  (firmware 1.5.14) recorded in its docstring
- [rs] Robot-Exp-Platform/libjaka-rs, src/types/robot_type.rs and examples/debug_log.md (a
  real controller's replies and ``get_data``)
- [feed] nkawa/JAKA_Zu5s_MQTT_Control, src/jaka_control/jkrc.py, jkrc_feedback.py and
  jaka_robot.py
- [armctl] MGross21/armctl, agnostic_controller/jaka/README.md (the port 10000 fields)
- [cs] a public C# client (namespace JAKA_TESTAPP, ``JakaRobot.FeedBacksControl``) that turns
  the status fields on with ``setOptionalInfoConfig``; JakaCobot/jaka_robot,
  jaka_robot_v2.2/src/jaka_driver/include/jaka_driver/JAKAZuRobot.h warns that
  OptionalInfoConfig.ini changes what the status carries
- [io] a public JAKA TCP client (``blinx_set_digital_output``: "DO 1..31, index 31 for the
  31st") and a public ROS hardware interface (``JakaHardwareInterface::jaka_tcp_setIo``,
  ``index = Addr - 1``): the two count outputs differently
- [old] a public Python client (``robotMoveWaitComplete``, "blocking move") that sends
  ``wait_complete`` after ``joint_move`` to block until the move ends
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

from onboard.base.errors import OnboardError
from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.jaka import BadFrame, Frame, JsonStream
from onboard.drivers.emulators import BackendWorker, Job

__all__ = ["MAX_WAITS", "OPTIONAL_FIELDS", "JakaServer", "WaitComplete"]

log = logging.getLogger(__name__)

Reply = dict[str, Any]
WaitComplete = Literal["receipt", "done"]
MAX_WAITS = 8  # answers held back per connection; more are refused
#: the fastest motion the emulator accepts: joint deg/s, tool mm/s. An emulator bound, not a
#: controller fact: far above what any driver sends (SafeArm caps it), far below 1e308
MAX_JOINT_SPEED = 360.0
MAX_LINEAR_SPEED = 5000.0
#: the status fields [cs] turns on one by one (section ATTROPTIONALDATA)
OPTIONAL_FIELDS = (
    "joint_actual_position",
    "actual_position",
    "powered_on",
    "enabled",
    "inpos",
    "task_mode",
    "protective_stop",
    "errmsg",
)
_HELD_BACK = ("wait_complete", "set_digital_output")  # commands whose answer may wait


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
        status_hz: float = 30.0,
        grip_output: tuple[int, int] = (1, 0),
        grip_close_value: int = 1,
        powered: bool = False,
        wait_complete: WaitComplete = "receipt",
        power_up_polls: int = 0,
        do_index_base: int = 0,
        status_fields_on_request: bool = False,
    ) -> None:
        """``grip_output`` is ``(type, n)`` with ``n`` counted from 0 whatever the
        ``do_index_base``; ``power_up_polls`` is how many ``get_robot_state`` answers after
        ``power_on`` still report the power off."""
        self.arm = arm
        self.host = host
        self._ports = (port, status_port)
        self.status_hz = status_hz  # [feed] measured about 30 ms between pushes
        self.grip_output = grip_output
        self.grip_close_value = grip_close_value
        self.wait_complete = wait_complete
        self.power_up_polls = power_up_polls
        self.do_index_base = do_index_base
        self.worker = BackendWorker(arm)
        self.powered = powered
        self.enabled = powered
        self.received: deque[Reply] = deque(maxlen=1000)
        self.outputs: dict[tuple[int, int], int] = {}
        self.fields_on: set[str] = set() if status_fields_on_request else set(OPTIONAL_FIELDS)
        self.pushes = 0
        self._power_pending: int | None = None  # get_robot_state answers left before power
        self._listeners: list[socket.socket] = []
        self._clients: set[socket.socket] = set()
        self._status_clients: set[socket.socket] = set()
        self._clients_lock = threading.Lock()
        self._running = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fail_next: dict[str, tuple[str, str, bool]] = {}
        self._muted = False
        self._error = ""
        self._unreported: list[str] = []  # motion errors no blocking wait_complete reported
        self._push_cond = threading.Condition()
        self._queued_pushes: deque[bytes] = deque()

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
        self._running.set()
        for port, serve in zip(self._ports, (self._serve_commands, self._add_status), strict=True):
            listener = socket.create_server((self.host, port), reuse_port=False)
            self._listeners.append(listener)
            self._spawn(self._accept_loop, listener, serve)
        self._spawn(self._broadcast_loop)
        return self

    def close(self) -> None:
        self._running.clear()
        with self._push_cond:
            self._push_cond.notify_all()
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

    def fail_next(
        self,
        cmd_name: str,
        message: str = "simulated fault",
        code: str = "2",
        *,
        named: bool = True,
    ) -> None:
        """Answer the next ``cmd_name`` with ``errorCode=code`` instead of running it; with
        ``named=False`` the answer has no ``cmdName``, as a real controller was seen to answer
        a failing call ([log]: ``{"errorCode": "1", "errorMsg": "Exception:function call
        failed"}``)."""
        self._fail_next[cmd_name] = (code, message, named)

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
            self._status_clients.clear()
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
            if not self._running.is_set():  # accepted as close() ran: it hung up the others
                self._forget(sock)
                return
            serve(sock)

    def _serve_commands(self, sock: socket.socket) -> None:
        self._spawn(self._read_commands, sock)

    def _read_commands(self, sock: socket.socket) -> None:
        stream, lock = _CommandStream(lines=True), threading.Lock()
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

    def _add_status(self, sock: socket.socket) -> None:
        with self._clients_lock:
            self._status_clients.add(sock)
        with self._push_cond:
            self._push_cond.notify_all()  # the new client gets a push at once

    def _forget(self, sock: socket.socket) -> None:
        with self._clients_lock:
            self._clients.discard(sock)
            self._status_clients.discard(sock)
        with contextlib.suppress(OSError):
            sock.close()

    def _send(self, sock: socket.socket, lock: threading.Lock, reply: Reply) -> None:
        # [log], [rs]: json with ", " and ": " separators, errorCode first, no line break
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

        held = name in _HELD_BACK
        if held and not waits.acquire(blocking=False):  # a flood must not spawn a thread each
            send(_reply(name, "2", f"more than {MAX_WAITS} answers outstanding"))
            return  # refused before it acts
        answer = self._answer(name, command)
        if not isinstance(answer, _Later):
            if held:
                waits.release()
            send(answer)
            return

        def answer_later() -> None:
            try:
                send(answer.wait())
            finally:
                waits.release()

        self._spawn(answer_later)  # so this connection stays free for stop_program

    # -- the protocol ---------------------------------------------------------------------

    def _answer(self, name: str, command: Reply) -> Reply | _Later:
        if name in self._fail_next:
            code, message, named = self._fail_next.pop(name)
            failed = _reply(name, code, message)
            if not named:
                del failed["cmdName"]
            return failed
        handler = self._handlers().get(name)
        if handler is None:
            return _reply(name, "1", f"unknown cmdName {name!r}")
        try:
            result = handler(command)
        except _BadCommand as exc:
            return _reply(name, "1", str(exc))
        except (OnboardError, ValueError) as exc:
            return _reply(name, "2", str(exc))
        if isinstance(result, _Later):
            return result
        return {**_reply(name), **result}

    def _handlers(self) -> dict[str, Callable[[Reply], Reply | _Later]]:
        return {
            "power_on": self._power_on,
            "power_off": lambda c: self._set(powered=False, enabled=False, _power_pending=None),
            "enable_robot": self._enable,
            "disable_robot": lambda c: self._set(enabled=False),
            "get_robot_state": self._robot_state,
            "joint_move": self._joint_move,
            "moveL": self._move_linear,
            "end_move": self._move_linear,
            "wait_complete": self._wait_complete,
            "get_tcp_pos": lambda c: {"tcp_pos": _tcp(self.arm.state().pose)},
            "get_joint_pos": lambda c: {
                "joint_pos": [round(math.degrees(q), 4) for q in self.arm.state().joints]
            },
            # [rs] debug_log.md: get_data answers the whole status on the command port
            "get_data": lambda c: self._status(),
            "stop_program": lambda c: self._stop(),
            "clear_error": lambda c: self._set(_error=""),
            "set_digital_output": self._set_output,
            "setOptionalInfoConfig": self._optional_info,
        }

    def _set(self, **flags: Any) -> Reply:
        for key, value in flags.items():
            setattr(self, key, value)
        return {}

    def _power_on(self, command: Reply) -> Reply:
        # [feed] jaka_robot.py polls get_robot_state for up to 30 s after power_on: the
        # controller answers at once and reports the power later
        if not self.powered and self._power_pending is None:
            self._power_pending = self.power_up_polls
            self._power_pending_check()
        return {}

    def _power_pending_check(self) -> None:
        if self._power_pending is not None and self._power_pending <= 0:
            self._power_pending = None
            self.powered = True

    def _robot_state(self, command: Reply) -> Reply:
        if self._power_pending is not None:
            self._power_pending -= 1
        state = {  # [feed] jkrc.py: ret["power"] == "powered_on", ret["enable"] == ...
            "power": "powered_on" if self.powered else "powered_off",
            "enable": "robot_enabled" if self.enabled else "robot_disabled",
        }
        self._power_pending_check()  # the next answer reports it
        return state

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
        target = _numbers(command, "jointPosition", length=len(self.arm.state().joints))
        speed = _speed(command, 30.0, MAX_JOINT_SPEED, "deg/s")
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
        speed = 100.0 if key == "endPosition" else _speed(command, 100.0, MAX_LINEAR_SPEED, "mm/s")
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
        """Accept a motion: answered now, run later ([doc]: "TCP/IP commands are executed
        asynchronously. The returned information only indicates that the controller has
        received the command")."""
        self._submit(job)
        return {}

    def _submit(self, job: Job) -> _Run:
        run = _Run(self, job)
        if not self.worker.submit(run, timeout=5.0):
            raise ValueError("the motion queue is full")
        self._error = ""  # [log]: a motion accepted after a failed one runs, no clear_error
        return run

    def _set_output(self, command: Reply) -> Reply | _Later:
        io_type = int(_number(command, "type", 0.0))
        index = int(_number(command, "index"))
        value = int(_number(command, "value"))
        n = index - self.do_index_base  # [io]: some firmware counts from 1, some from 0
        if n < 0:
            raise ValueError(f"no output {index}: outputs are numbered from {self.do_index_base}")
        if (io_type, n) != self.grip_output:
            self.outputs[(io_type, n)] = value
            return {}
        close = value == self.grip_close_value

        def grip(arm: Arm) -> None:
            self.outputs[(io_type, n)] = value
            arm.grip(close)

        # The twin's gripper is the device on this output: the answer waits until it has
        # acted, so that whoever set the output finds the gripper where it asked (a real
        # controller answers at once and the gripper takes its own time).
        return _Later(self, "set_digital_output", self._submit(grip))

    def _wait_complete(self, command: Reply) -> Reply | _Later:
        # [rs] robot_type.rs marks wait_complete DEPRECATED and [doc] says an answer means
        # received only; [old] sent it to block until a move ended, as older firmware did
        if self.wait_complete == "receipt":
            return {}
        return _Later(self, "wait_complete")

    def _optional_info(self, command: Reply) -> Reply:
        """[cs]: ``{"cmdName": "setOptionalInfoConfig", "section": "ATTROPTIONALDATA",
        "key": <field>, "value": 1}`` turns a status field on (0 off)."""
        section, key = command.get("section"), command.get("key")
        if section != "ATTROPTIONALDATA":
            raise ValueError(f"section {str(section)[:40]!r}: this emulator knows ATTROPTIONALDATA")
        if key not in OPTIONAL_FIELDS:
            raise ValueError(f"key {str(key)[:40]!r} is not an optional status field")
        if _number(command, "value") == 0:
            self.fields_on.discard(key)
        else:
            self.fields_on.add(key)
        return {}

    # -- the status stream ----------------------------------------------------------------

    def _status(self) -> Reply:
        """The state as pushed on the status port ([armctl], [rs] debug_log.md)."""
        state = self.arm.state()
        outputs = self.outputs
        status: Reply = {
            "len": 0,
            "errcode": "0x1" if self._error else "0x0",
            "errmsg": self._error,
            "joint_actual_position": [round(math.degrees(q), 4) for q in state.joints],
            "actual_position": _tcp(state.pose),
            "dout": [outputs.get((0, i), 0) for i in range(16)],
            "tio_dout": [outputs.get((1, i), 0) for i in range(8)],
            "task_state": 4 if self.enabled else (2 if self.powered else 1),
            "task_mode": 1,
            "enabled": self.enabled,
            "paused": False,
            "protective_stop": 0,
            "emergency_stop": 0,
            "powered_on": int(self.powered),
            "inpos": self.worker.idle and not state.moving,
        }
        for field in OPTIONAL_FIELDS:
            if field not in self.fields_on:
                del status[field]
        status["len"] = len(json.dumps(status))
        return status

    def _push_now(self) -> None:
        """Sample the state now and push it ahead of the periodic ones."""
        data = json.dumps(self._status()).encode()
        with self._push_cond:
            self._queued_pushes.append(data)
            self._push_cond.notify_all()

    def _broadcast_loop(self) -> None:
        period = 1.0 / self.status_hz
        while self._running.is_set():
            with self._push_cond:
                self._push_cond.wait_for(
                    lambda: bool(self._queued_pushes) or not self._running.is_set(), period
                )
                queued, self._queued_pushes = list(self._queued_pushes), deque()
            with self._clients_lock:
                clients = list(self._status_clients)
            if not clients or not self._running.is_set():
                continue
            for data in queued or [json.dumps(self._status()).encode()]:
                self.pushes += 1
                for sock in clients:
                    try:
                        sock.sendall(data)
                    except OSError:
                        self._forget(sock)


class _Run:
    """One accepted motion as the worker runs it: pushes the state as it begins, shows its
    error on the status stream, and says when it is done."""

    def __init__(self, server: JakaServer, job: Job) -> None:
        self.server = server
        self.job = job
        self.done = threading.Event()
        self.error: str | None = None

    def __call__(self, arm: Arm) -> None:
        # A real motion spans many push periods, so the status always shows it running; the
        # twin may finish one within a period, so a push is also sent as it begins.
        self.server._push_now()
        stops = self.server.worker.stops
        try:
            self.job(arm)
        except (OnboardError, ValueError) as exc:
            # cut short by this controller's stop (stop_program, a lost link) is no error;
            # anything else is, even with the arm latched (by another controller on the twin)
            if self.server.worker.stops == stops:
                self.error = self.server._error = str(exc)
                if self.server.wait_complete == "done":
                    self.server._unreported.append(self.error)
        finally:
            self.done.set()


class _Later:
    """An answer sent once one motion (``run``) or every queued one has been run."""

    def __init__(self, server: JakaServer, name: str, run: _Run | None = None) -> None:
        self.server = server
        self.name = name
        self.run = run

    def wait(self) -> Reply:
        server, run = self.server, self.run
        while True:
            if run is not None and run.done.wait(0.05):
                return _reply(self.name, "2", run.error) if run.error else _reply(self.name)
            if run is not None and server.worker.idle and not run.done.is_set():
                return _reply(self.name, "2", "dropped by stop_program before it ran")
            if run is None and server.worker.wait_idle(0.05):
                errors, server._unreported = server._unreported, []
                return _reply(self.name, "2", "; ".join(errors)) if errors else _reply(self.name)
            if not server._running.is_set():
                return _reply(self.name, "2", "the controller shut down")


def _reply(name: str, code: str = "0", message: str = "") -> Reply:
    return {"errorCode": code, "errorMsg": message, "cmdName": name}


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


def _speed(command: Reply, default: float, most: float, unit: str) -> float:
    speed = _number(command, "speed", default)
    if not 0 < speed <= most:
        raise _BadCommand(f"speed must be above 0 and at most {most:g} {unit}, got {speed:g}")
    return speed


class _CommandStream(JsonStream):
    """The command splitter, refusing an object that names a key twice: json.loads keeps the
    last ``cmdName`` of ``{"cmdName": "stop_program", "cmdName": "joint_move"}``, and which
    one a controller obeys is not a guess an emulator should make."""

    def _parse(self) -> Frame:
        raw = bytes(self._frame)
        frame = super()._parse()
        if isinstance(frame, BadFrame):
            return frame
        repeated = _repeated_key(raw)
        if repeated is not None:
            self.skipped += 1
            return BadFrame(f"key {repeated[:40]!r} given twice in one object")
        return frame


def _repeated_key(raw: bytes) -> str | None:
    """The first key an object of ``raw`` (valid JSON, nesting already bounded) repeats."""
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                repeated.append(key)
            seen.add(key)
        return dict(items)

    json.loads(raw, object_pairs_hook=pairs, parse_constant=float)
    return repeated[0] if repeated else None


def _numbers(command: Reply, key: str, length: int | None = None) -> list[float]:
    values = command.get(key)
    if not isinstance(values, list) or not values or (length and len(values) != length):
        size = f"{length} numbers" if length else "a list of numbers"
        raise _BadCommand(f"{key} must be {size}, got {values!r}")
    return [_number({key: v}, key) for v in values]
