"""An SO-101's Feetech servo bus on a pty: six STS3215 servos answering the published protocol.

``So101Emulator().start()`` opens a pty; :attr:`~So101Emulator.path` is what
``So101ArmConfig(url=...)`` opens. Behind the bus is a model of the arm (:class:`ServoModel`):

- by default a kinematic one (:class:`Kinematic`): each servo moves its position toward its
  goal at its goal speed (steps/s; 0 is the fastest, 3000), in wall time, as the real servo's
  own loop does, and stops where it is when its torque goes off (no gravity: a real arm sags);
  :meth:`~So101Emulator.tool_pose` is the tool's pose from onboard's kinematics;
- or the physics twin's SO-101 (``So101Emulator(model=TwinServos(twin))``,
  :mod:`~onboard.drivers.emulators.so101_twin`): the goals written drive the twin's joints,
  the positions read back are the twin's, torque off lets the twin's arm fall limp, and the
  twin's camera sees what the arm does.

Either way each servo keeps its goal inside its position limit registers.

The memory table, little-endian: model, id, position limits, homing offset (present =
raw - offset), torque enable, goal position, time and speed, lock, present position, speed,
moving. PING, READ, WRITE, SYNC_WRITE and SYNC_READ are answered (nothing answers the
broadcast id, except each servo named in a SYNC_READ, in order); a packet with a wrong
checksum is ignored, as a servo ignores it.

Faults for tests: :meth:`garble_next` (the next answer goes out with a wrong checksum),
:meth:`unplug` (a servo stops answering); :meth:`hold_object` puts something between the
jaws, so closing stalls against it.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
import tty
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from onboard.drivers.arm.base import Pose
from onboard.drivers.arm.feetech import INST, REG, checksum, decode, encode, parse_packets
from onboard.drivers.arm.so101_kinematics import (
    DEFAULT_CALIBRATION,
    JOINTS,
    LINKS,
    MOTORS,
    Links,
    MotorCalibration,
    forward,
)
from onboard.drivers.emulators.pty_controller import open_pty

__all__ = ["Kinematic", "Servo", "ServoModel", "So101Emulator"]

MAX_SPEED = 3000.0  # steps/s
STS3215 = 777  # the model number an STS3215 reports


@dataclass
class Servo:
    id: int
    raw: float = 2048.0  # the encoder, before the homing offset
    memory: bytearray = field(default_factory=lambda: bytearray(70))
    moved_at: float = field(default_factory=time.monotonic)
    unplugged: bool = False
    #: an object in the way: the servo cannot go below this raw position (a jaw closing on it)
    blocked_below: float | None = None

    def __post_init__(self) -> None:
        self.put("model", STS3215)
        self.put("id", self.id)
        self.put("max_position_limit", 4095)
        self.put("goal_position", round(self.raw))
        self.put("lock", 1)

    def get(self, name: str) -> int:
        address, size = REG[name]
        return decode(bytes(self.memory[address : address + size]))

    def put(self, name: str, value: int) -> None:
        address, size = REG[name]
        self.memory[address : address + size] = bytes(encode(value, size))

    def offset(self) -> int:
        raw = self.get("homing_offset")
        return -(raw & 0x7FF) if raw & 0x800 else raw & 0x7FF

    def advance(self, now: float) -> None:
        """Move toward the goal for the time since the last call."""
        dt, self.moved_at = now - self.moved_at, now
        if not self.get("torque_enable"):
            self.put("moving", 0)
            return
        goal = self.goal() + self.offset()
        step = self.speed() * dt
        gap = goal - self.raw
        self.raw = goal if abs(gap) <= step else self.raw + math_copysign(step, gap)
        if self.blocked_below is not None and self.raw < self.blocked_below:
            self.raw = self.blocked_below  # stalled against it: it pushes, it does not move
        self.put("moving", int(self.raw != goal and self.raw != self.blocked_below))

    def present(self) -> int:
        return round(self.raw - self.offset()) % 4096

    def goal(self) -> int:
        """The goal position (after the offset), kept inside the position limits."""
        lo, hi = self.get("min_position_limit"), self.get("max_position_limit")
        return min(max(self.get("goal_position"), lo), hi)

    def speed(self) -> float:
        """Steps/s the servo moves at toward its goal (0 written: the fastest)."""
        return min(self.get("goal_speed") & 0x7FFF or MAX_SPEED, MAX_SPEED)


class ServoModel(Protocol):
    """What moves behind the servos. :meth:`standing` says where the arm stands (the five
    joints in radians and the gripper's opening, 0 closed to 1 open), or None to stand where
    the emulator is told; :meth:`open` and :meth:`close` bracket the bus's life;
    :meth:`advance` brings each servo's ``raw`` position up to ``now`` (before every packet
    is answered); :meth:`command` hears each servo whose registers a packet wrote."""

    def standing(
        self, calibration: Mapping[str, MotorCalibration]
    ) -> tuple[tuple[float, ...], float] | None: ...

    def open(self) -> None: ...

    def advance(self, servos: Mapping[int, Servo], now: float) -> None: ...

    def command(self, servo: Servo) -> None: ...

    def close(self) -> None: ...


class Kinematic:
    """Each servo moves toward its goal at its speed in wall time; nothing else moves it."""

    def standing(
        self, calibration: Mapping[str, MotorCalibration]
    ) -> tuple[tuple[float, ...], float] | None:
        return None

    def open(self) -> None:
        pass

    def advance(self, servos: Mapping[int, Servo], now: float) -> None:
        for servo in servos.values():
            servo.advance(now)

    def command(self, servo: Servo) -> None:
        pass

    def close(self) -> None:
        pass


def math_copysign(magnitude: float, sign: float) -> float:
    return magnitude if sign >= 0 else -magnitude


class So101Emulator:
    """Six servos of an SO-101 on a pty, as ``calibration`` names them (ids, offsets)."""

    def __init__(
        self,
        calibration: dict[str, MotorCalibration] | None = None,
        links: Links = LINKS,
        start_joints: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0, 0.0),
        model: ServoModel | None = None,
    ) -> None:
        """``model``: what moves behind the servos (None: :class:`Kinematic`, standing at
        ``start_joints``; a :class:`~onboard.drivers.emulators.so101_twin.TwinServos`: the
        twin's arm, where it stands)."""
        self.calibration = calibration or dict(DEFAULT_CALIBRATION)
        self.links = links
        self.model: ServoModel = model or Kinematic()
        stands = self.model.standing(self.calibration)
        start_joints, gripper = stands if stands is not None else (start_joints, 1.0)
        self.servos: dict[int, Servo] = {}
        for i, name in enumerate(MOTORS):
            cal = self.calibration[name]
            q = start_joints[i] if i < len(start_joints) else 0.0
            steps = (
                cal.to_steps(q)
                if name != "gripper"
                else round(cal.range_min + gripper * (cal.range_max - cal.range_min))
            )
            servo = Servo(cal.id, raw=float(steps + cal.homing_offset))
            offset = cal.homing_offset
            servo.put("homing_offset", (abs(offset) & 0x7FF) | (0x800 if offset < 0 else 0))
            servo.put("min_position_limit", cal.range_min)
            servo.put("max_position_limit", cal.range_max)
            servo.put("goal_position", steps)
            if stands is not None:  # the model's arm holds where it stands: torque is on
                servo.put("torque_enable", 1)
            self.servos[cal.id] = servo
        self.packets = 0
        self._lock = threading.Lock()
        self._garble = 0
        self._master = self._slave = -1
        self._wake = (-1, -1)
        self._path = ""
        self._thread: threading.Thread | None = None
        self._running = threading.Event()

    # -- life -----------------------------------------------------------------------------

    def __enter__(self) -> So101Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> str:
        if not self._path:
            raise RuntimeError("So101Emulator: not started: call start() first")
        return self._path

    def start(self) -> So101Emulator:
        self._master, self._slave = open_pty()
        tty.setraw(self._slave)
        self._path = os.ttyname(self._slave)
        self._wake = os.pipe()
        self._running.set()
        self.model.open()
        self._thread = threading.Thread(target=self._loop, name="feetech-bus", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if not self._running.is_set():
            return
        self._running.clear()
        with contextlib.suppress(OSError):
            os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.model.close()
        for fd in (self._master, self._slave, *self._wake):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the model --------------------------------------------------------------------------

    def joints(self) -> tuple[float, ...]:
        """The five arm joints (radians from the middle of each calibrated range)."""
        with self._lock:
            self._advance()
            return tuple(
                self.calibration[name].to_radians(self.servos[self.calibration[name].id].present())
                for name in JOINTS
            )

    def tool_pose(self) -> Pose:
        return forward(self.joints(), self.links)

    def servo(self, name: str) -> Servo:
        return self.servos[self.calibration[name].id]

    def torque(self) -> dict[str, bool]:
        with self._lock:
            return {name: bool(self.servo(name).get("torque_enable")) for name in MOTORS}

    # -- faults ---------------------------------------------------------------------------

    def garble_next(self, count: int = 1) -> None:
        """Send the next ``count`` answers with a wrong checksum."""
        with self._lock:
            self._garble = count

    def unplug(self, name: str, unplugged: bool = True) -> None:
        """The servo of motor ``name`` stops answering (a loose cable)."""
        with self._lock:
            self.servo(name).unplugged = unplugged

    def hold_object(self, opening: float | None) -> None:
        """An object between the jaws: closing stops at ``opening`` (0 closed, 1 open, of
        the gripper's calibrated range, closed at its range_min); None takes it away."""
        if not isinstance(self.model, Kinematic):
            raise RuntimeError("hold_object: the twin's arm grips the twin's own objects")
        cal = self.calibration["gripper"]
        with self._lock:
            servo = self.servo("gripper")
            servo.blocked_below = (
                None
                if opening is None
                else cal.range_min + opening * (cal.range_max - cal.range_min) + cal.homing_offset
            )

    # -- the bus ----------------------------------------------------------------------------

    def _advance(self) -> None:
        self.model.advance(self.servos, time.monotonic())

    def _loop(self) -> None:
        buffer = bytearray()
        while self._running.is_set():
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], 0.05)
                if self._wake[0] in ready:
                    return
                chunk = os.read(self._master, 4096) if ready else b""
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                return
            buffer += chunk
            for item in parse_packets(buffer):
                if isinstance(item, str):
                    continue  # a servo ignores a packet with a wrong checksum
                with self._lock:
                    self.packets += 1
                    self._advance()
                    answer = self._handle(*item)
                if answer:
                    self._write(answer)

    def _reply(self, servo: Servo, data: bytes = b"") -> bytes:
        if servo.unplugged:
            return b""
        body = [servo.id, len(data) + 2, 0, *data]
        check = checksum(body)
        if self._garble:
            self._garble -= 1
            check ^= 0x5A
        return b"\xff\xff" + bytes([*body, check])

    def _handle(self, target: int, instruction: int, params: bytes) -> bytes:
        if instruction == INST["SYNC_WRITE"]:
            address, size = params[0], params[1]
            rest = params[2:]
            for i in range(0, len(rest) - size, size + 1):
                servo = self.servos.get(rest[i])
                if servo is not None and not servo.unplugged:
                    self._store(servo, address, rest[i + 1 : i + 1 + size])
            return b""
        if instruction == INST["SYNC_READ"]:
            address, size = params[0], params[1]
            out = b""
            for sid in params[2:]:
                servo = self.servos.get(sid)
                if servo is not None:
                    out += self._reply(servo, self._load(servo, address, size))
            return out
        targets = list(self.servos.values()) if target == 0xFE else [self.servos.get(target)]
        answer = b""
        for servo in targets:
            if servo is None or servo.unplugged:
                continue
            if instruction == INST["WRITE"]:
                self._store(servo, params[0], params[1:])
                data = b""
            elif instruction == INST["READ"]:
                data = self._load(servo, params[0], params[1])
            elif instruction == INST["PING"]:
                data = b""
            else:
                continue
            if target != 0xFE:
                answer += self._reply(servo, data)
        return answer

    def _store(self, servo: Servo, address: int, data: bytes) -> None:
        torque_was = servo.get("torque_enable")
        servo.memory[address : address + len(data)] = data
        if torque_was and not servo.get("torque_enable"):
            servo.put("goal_position", servo.present())  # a limp servo's goal is where it is
        servo.put("present_position", servo.present())
        self.model.command(servo)

    def _load(self, servo: Servo, address: int, size: int) -> bytes:
        servo.put("present_position", servo.present())
        return bytes(servo.memory[address : address + size])

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and self._running.is_set():
            try:
                view = view[os.write(self._master, view) :]
            except BlockingIOError:
                select.select([], [self._master], [], 0.05)
            except OSError:
                return
