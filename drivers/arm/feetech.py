"""Feetech STS/SCS bus servos (the STS3215 of the SO-100 and SO-101 arms) over pyserial.

Written from Feetech's published protocol (the STS3215 memory table and the "communication
protocol" manual), not from its SDK: the SDK (``feetech-servo-sdk`` on PyPI) is a copy of the
vendor's C-style port handler with module-level state, no timeouts per transaction and no
error naming the port, so this is the protocol itself in one small module.

A packet is ``0xFF 0xFF id length instruction params... checksum``: ``length`` counts the
instruction, the params and the checksum; ``checksum = ~(id + length + instruction + sum of
params) & 0xFF``. A servo answers ``0xFF 0xFF id length error params... checksum`` (``error``:
status bits). Id 0xFE is the broadcast id: nobody answers it. Values are little-endian on the
STS series (the SCS series is big-endian: ``big_endian=True``).

Every failure is one line naming the port and the servo id (:class:`BusError`): no answer, a
reply cut short, a wrong checksum, a reply from another id, a servo's error bits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from onboard.base.errors import ArmError

__all__ = [
    "BROADCAST",
    "INST",
    "REG",
    "STEPS_PER_TURN",
    "BusError",
    "FeetechBus",
    "checksum",
    "packet",
    "parse_packets",
]

STEPS_PER_TURN = 4096
BROADCAST = 0xFE
HEADER = b"\xff\xff"

INST = {
    "PING": 0x01,
    "READ": 0x02,
    "WRITE": 0x03,
    "REG_WRITE": 0x04,
    "ACTION": 0x05,
    "SYNC_READ": 0x82,
    "SYNC_WRITE": 0x83,
}

#: the STS3215 memory table: name -> (address, bytes)
REG: dict[str, tuple[int, int]] = {
    "model": (3, 2),
    "id": (5, 1),
    "baud_rate": (6, 1),
    "min_position_limit": (9, 2),
    "max_position_limit": (11, 2),
    "homing_offset": (31, 2),  # sign-magnitude, bit 11 the sign
    "torque_enable": (40, 1),
    "acceleration": (41, 1),
    "goal_position": (42, 2),
    "goal_time": (44, 2),
    "goal_speed": (46, 2),
    "lock": (55, 1),
    "present_position": (56, 2),
    "present_speed": (58, 2),  # sign-magnitude, bit 15 the sign
    "present_load": (60, 2),
    "present_voltage": (62, 1),
    "present_temperature": (63, 1),
    "moving": (66, 1),
    "present_current": (69, 2),
}

#: the status byte's bits, as the manual names them
ERROR_BITS = {
    0x01: "input voltage",
    0x02: "angle limit",
    0x04: "overheat",
    0x08: "range",
    0x10: "checksum",
    0x20: "overload",
    0x40: "instruction",
}


class BusError(ArmError):
    """A bus transaction failed: one line naming the port and the servo id."""


def checksum(body: Iterable[int]) -> int:
    """``~(id + length + instruction/error + params) & 0xFF``."""
    return ~sum(body) & 0xFF


def packet(servo: int, instruction: int, params: Sequence[int] = ()) -> bytes:
    body = [servo, len(params) + 2, instruction, *params]
    return HEADER + bytes([*body, checksum(body)])


def parse_packets(buffer: bytearray) -> list[tuple[int, int, bytes] | str]:
    """Take the whole packets off the front of ``buffer``: (id, instruction or error, params),
    or a string saying what was wrong with one (it is dropped). Bytes before a header are
    noise and are dropped; a packet not yet complete stays in ``buffer``."""
    found: list[tuple[int, int, bytes] | str] = []
    while True:
        start = buffer.find(HEADER)
        if start < 0:
            del buffer[: max(0, len(buffer) - 1)]  # keep a last 0xFF: half a header
            return found
        del buffer[:start]
        while len(buffer) > 2 and buffer[2] == 0xFF:  # 0xFF 0xFF 0xFF: the header starts later
            del buffer[0]
        if len(buffer) < 4:
            return found
        length = buffer[3]
        if length < 2:
            found.append(f"a packet of length {length} (at least 2)")
            del buffer[:4]
            continue
        if len(buffer) < 4 + length:
            return found
        body = bytes(buffer[2 : 3 + length])
        received = buffer[3 + length]
        del buffer[: 4 + length]
        if checksum(body) != received:
            found.append(
                f"checksum 0x{received:02x} for servo {body[0]}, expected 0x{checksum(body):02x}"
            )
            continue
        found.append((body[0], body[2], body[3:]))


def encode(value: int, size: int, big_endian: bool = False) -> list[int]:
    raw = int(value).to_bytes(size, "big" if big_endian else "little", signed=False)
    return list(raw)


def decode(data: bytes, big_endian: bool = False) -> int:
    return int.from_bytes(data, "big" if big_endian else "little", signed=False)


def to_sign_magnitude(value: int, sign_bit: int) -> int:
    return (abs(value) & ((1 << sign_bit) - 1)) | ((1 << sign_bit) if value < 0 else 0)


def from_sign_magnitude(value: int, sign_bit: int) -> int:
    magnitude = value & ((1 << sign_bit) - 1)
    return -magnitude if value & (1 << sign_bit) else magnitude


class FeetechBus:
    """One serial bus of Feetech servos. Thread-safe: one transaction at a time."""

    def __init__(
        self,
        port: str,
        baudrate: int = 1_000_000,
        timeout: float = 0.1,
        *,
        big_endian: bool = False,
        retries: int = 1,
    ) -> None:
        self.port = port
        self.baudrate = baudrate
        self.timeout = timeout
        self.big_endian = big_endian
        self.retries = retries
        self._serial: Any = None
        self._lock: threading.RLock = threading.RLock()
        self._buffer = bytearray()
        self._pending: list[tuple[int, int, bytes] | str] = []  # parsed, not yet taken

    # -- life -----------------------------------------------------------------------------

    def open(self) -> None:
        import serial

        try:
            self._serial = serial.serial_for_url(
                self.port, baudrate=self.baudrate, timeout=0.01, write_timeout=self.timeout
            )
        except (serial.SerialException, OSError, ValueError) as exc:
            raise BusError(f"feetech bus {self.port}: cannot open it: {exc}") from exc
        self._buffer.clear()

    def close(self) -> None:
        with self._lock:
            if self._serial is not None:
                try:
                    self._serial.close()
                finally:
                    self._serial = None

    @property
    def lock(self) -> threading.RLock:
        """Held for one transaction; a caller holds it to make a check and a write one step."""
        return self._lock

    @property
    def is_open(self) -> bool:
        return self._serial is not None

    # -- instructions ---------------------------------------------------------------------

    def ping(self, servo: int) -> None:
        self._transact(servo, INST["PING"], (), 0)

    def read(self, servo: int, register: str) -> int:
        address, size = REG[register]
        data = self._transact(servo, INST["READ"], (address, size), size)
        return decode(data, self.big_endian)

    def write(self, servo: int, register: str, value: int) -> None:
        """Write one register; the broadcast id writes every servo and gets no answer."""
        address, size = REG[register]
        params = (address, *encode(value, size, self.big_endian))
        if servo == BROADCAST:
            self._send(packet(servo, INST["WRITE"], params))
        else:
            self._transact(servo, INST["WRITE"], params, 0)

    def sync_write(self, address: int, size: int, values: Mapping[int, Sequence[int]]) -> None:
        """Write ``size`` bytes at ``address`` of several servos in one packet (no answer);
        ``values`` maps a servo id to its register values, each ``size`` bytes long once
        encoded (pass them already as bytes lists)."""
        params: list[int] = [address, size]
        for servo, data in values.items():
            if len(data) != size:
                raise ValueError(f"sync_write: {len(data)} bytes for servo {servo}, not {size}")
            params += [servo, *data]
        self._send(packet(BROADCAST, INST["SYNC_WRITE"], params))

    def sync_read(self, register: str, servos: Sequence[int]) -> dict[int, int]:
        """One register of several servos: one request, one answer from each, in order."""
        address, size = REG[register]
        request = packet(BROADCAST, INST["SYNC_READ"], (address, size, *servos))
        with self._lock:
            for attempt in range(self.retries + 1):
                self._send(request)
                values: dict[int, int] = {}
                try:
                    for servo in servos:
                        values[servo] = decode(self._answer(servo, size), self.big_endian)
                    return values
                except BusError:
                    if attempt == self.retries:
                        raise
                    self._drain()
        raise AssertionError("unreachable")

    # -- plumbing -------------------------------------------------------------------------

    def _transact(self, servo: int, instruction: int, params: Sequence[int], size: int) -> bytes:
        with self._lock:
            for attempt in range(self.retries + 1):
                self._send(packet(servo, instruction, params))
                try:
                    return self._answer(servo, size)
                except BusError:
                    if attempt == self.retries:
                        raise
                    self._drain()
        raise AssertionError("unreachable")

    def _send(self, data: bytes) -> None:
        import serial

        with self._lock:
            if self._serial is None:
                raise BusError(f"feetech bus {self.port}: not open")
            try:
                self._serial.reset_input_buffer()
                self._buffer.clear()
                self._pending.clear()
                self._serial.write(data)
                self._serial.flush()
            except (serial.SerialException, OSError) as exc:
                raise BusError(f"feetech bus {self.port}: write failed: {exc}") from exc

    def _drain(self) -> None:
        """Let the rest of a garbled answer arrive, then forget it."""
        time.sleep(0.002)
        self._buffer.clear()
        self._pending.clear()
        if self._serial is not None:
            self._serial.reset_input_buffer()

    def _answer(self, servo: int, size: int) -> bytes:
        """The answer of ``servo`` with ``size`` bytes of params; BusError naming what was
        wrong."""
        import serial

        where = f"feetech bus {self.port}, servo {servo}"
        deadline = time.monotonic() + self.timeout
        problem = "no answer"
        while True:
            self._pending += parse_packets(self._buffer)
            if self._pending:
                item = self._pending.pop(0)
                if isinstance(item, str):
                    raise BusError(f"{where}: garbled answer ({item})")
                sender, status, data = item
                if sender != servo:
                    raise BusError(f"{where}: an answer from servo {sender} instead")
                if len(data) != size:
                    raise BusError(f"{where}: {len(data)} bytes of data, expected {size}")
                bits = [name for bit, name in ERROR_BITS.items() if status & bit]
                if bits:
                    raise BusError(f"{where}: the servo reports a {', '.join(bits)} error")
                return data
            if self._buffer:
                problem = f"an answer cut short ({bytes(self._buffer).hex(' ')})"
            if time.monotonic() > deadline:
                raise BusError(f"{where}: {problem} within {self.timeout * 1000:.0f} ms")
            try:
                chunk = self._serial.read(max(1, self._serial.in_waiting))
            except (serial.SerialException, OSError, TypeError, AttributeError) as exc:
                raise BusError(f"{where}: read failed: {exc}") from exc
            self._buffer += chunk
