"""The line protocol under every G-code dialect: send lines, match each answer to its line.

A :class:`SerialLink` owns the pyserial port and a reader thread. Lines go out in order and
wait in a FIFO for their answer; at most ``in_flight`` lines, and at most ``rx_buffer`` bytes
(the controller's serial buffer: GRBL and Marlin drop what overflows it), are unanswered at
once. What each line read from the controller *is* (an ``ok``, an error, a status report, a
keepalive...) is the dialect's call, through ``classify``; the link acts on the verdict the
same way for every firmware:

- ``OK`` answers the oldest line; ``ERROR`` answers it with an error (GRBL's ``error:N``);
  ``ERROR_THEN_OK`` marks it failed and waits for its ``ok`` (Marlin's ``Error:``, and its
  ``echo:Unknown command``); ``RESEND`` writes the line again at once (Marlin, with line
  numbers; see below);
- ``INFO`` is attached to the oldest line (a position, settings, capabilities), and so is
  ``NOISE`` (Marlin's ``echo:`` lines, e.g. ``echo:Home XYZ first``);
- ``KEEPALIVE`` (Marlin's ``echo:busy: processing``) restarts the wait of the line awaited;
- ``STATUS`` goes to the dialect's ``on_status`` (GRBL's ``<Idle|MPos:...>``);
- ``ALARM``, ``HALTED`` and ``BOOT`` fail every line awaited: after an alarm, a kill or a
  reset the controller will never answer them; ``on_alarm`` and ``on_boot`` are then told.

A resend: Marlin 2.1 answers a bad line ``Error:...``, ``Resend: N``, ``ok``; some 2.0.x
builds send no ``ok`` after ``Resend: N``. Which one came cannot be told from the order of
what follows, so at ``Resend: N`` the link writes ``resync`` (``M114``, unnumbered) and then
line N again, and drops every ``ok`` heard before the ``resync`` line's report: the ``ok``
after ``Resend:``, where there is one. The ``resync`` line's own ``ok`` is its answer; line
N's comes after it.

A line with no answer in time raises :class:`ArmTimeout` and the link is out of step until it
is reopened (or the controller resets: a ``BOOT`` puts it back in step).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import serial

from onboard.base.errors import ArmError, ArmTimeout, LinkLost

__all__ = ["Heard", "Kind", "Pending", "SerialLink", "checksum"]

log = logging.getLogger(__name__)

_POLL = 0.05  # seconds: the reader's read timeout, so close() is prompt
_MAX_LINE = 4096  # bytes: a longer "line" is noise
_RESEND_LIMIT = 3

try:  # pyserial's flush() (tcdrain) raises termios.error, not OSError, on a vanished port
    from termios import error as _TermiosError
except ImportError:  # pragma: no cover - not POSIX

    class _TermiosError(Exception):  # type: ignore[no-redef]
        pass


#: what a failing port raises
PORT_ERRORS: tuple[type[Exception], ...] = (serial.SerialException, OSError, _TermiosError)
_OPEN_ERRORS: tuple[type[Exception], ...] = (*PORT_ERRORS, ValueError)
_READ_ERRORS: tuple[type[Exception], ...] = (*PORT_ERRORS, TypeError, AttributeError)


class Kind(enum.Enum):
    OK = enum.auto()
    ERROR = enum.auto()
    ERROR_THEN_OK = enum.auto()
    RESEND = enum.auto()
    INFO = enum.auto()
    KEEPALIVE = enum.auto()
    STATUS = enum.auto()
    ALARM = enum.auto()
    HALTED = enum.auto()
    BOOT = enum.auto()
    NOISE = enum.auto()
    GARBAGE = enum.auto()


class Heard(NamedTuple):
    """What a line from the controller is, and its text (an error's message, a line number)."""

    kind: Kind
    text: str = ""


@dataclass
class Pending:
    line: str
    wire: bytes
    number: int | None = None
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    info: list[str] = field(default_factory=list)
    retries: int = 0
    #: the resync line written at a resend (its answer is nobody's)
    internal: bool = False


def checksum(text: str) -> int:
    """The RepRap/Marlin line checksum: the XOR of every byte before the ``*``."""
    value = 0
    for byte in text.encode("ascii", errors="replace"):
        value ^= byte
    return value


class SerialLink:
    """A G-code controller's serial line, with lines matched to their answers in order."""

    def __init__(
        self,
        *,
        url: str,
        baudrate: int,
        in_flight: int,
        rx_buffer: int,
        classify: Callable[[str], Heard],
        on_status: Callable[[str], None] = lambda _text: None,
        on_alarm: Callable[[str], None] = lambda _text: None,
        on_boot: Callable[[], None] = lambda: None,
        on_answer: Callable[[str], None] = lambda _line: None,
        resync: str | None = None,
        port: serial.SerialBase | None = None,
        name: str = "GcodeArm",
    ) -> None:
        self.url = url
        self.baudrate = baudrate
        self.in_flight = in_flight
        self.rx_buffer = rx_buffer
        self.classify = classify
        self.on_status = on_status
        self.on_alarm = on_alarm
        self.on_boot = on_boot
        #: told each line answered ``ok`` (reader thread), before its waiter is woken
        self.on_answer = on_answer
        self.resync = resync
        self.name = name
        self._port = port
        self._write_lock = threading.Lock()
        self._room = threading.Condition()
        self._fifo: deque[Pending] = deque()
        self._bytes = 0  # bytes of the lines in the FIFO
        self._reader: threading.Thread | None = None
        self._running = threading.Event()
        self._boots = threading.Condition()
        self.boots = 0
        self.lost: str | None = None
        self.halted: str | None = None
        self.alarm: str | None = None
        self.desync: str | None = None
        self._ignoring = False  # after abandon(): stray answers are expected until a boot
        self._swallowing = False  # after a resend: oks are dropped until the resync's report
        self._number: int | None = None  # the last line number sent, when numbering
        self.last_heard = 0.0
        self.last_written: str | None = None
        self.garbage_lines = 0
        self.stray_answers = 0
        self.keepalives = 0

    # -- the port -------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._running.is_set()

    def open(self) -> None:
        """Open the port and start reading. Input already buffered is kept: a boot banner
        may be in it."""
        try:
            if self._port is None:
                self._port = serial.serial_for_url(
                    self.url, baudrate=self.baudrate, timeout=_POLL, write_timeout=2.0
                )
            elif not self._port.is_open:
                self._port.open()
            self._port.timeout = _POLL  # the reader polls, so close() is prompt
        except _OPEN_ERRORS as exc:
            raise LinkLost(
                f"{self.name}: cannot open {self.url!r}: {exc}; check the cable and the url "
                "in [drivers.arm]"
            ) from exc
        self.lost = self.halted = self.alarm = self.desync = None
        with self._boots:
            self.boots = 0  # boots seen since this open
        self._ignoring = self._swallowing = False
        self._number = None
        with self._room:
            self._fifo.clear()
            self._bytes = 0
        self._running.set()
        self._reader = threading.Thread(
            target=self._read_loop, args=(self._port,), name="gcode-reader", daemon=True
        )
        self._reader.start()

    def close(self) -> None:
        self._running.clear()
        port = self._port
        if port is not None and port.is_open and hasattr(port, "cancel_read"):
            with contextlib.suppress(OSError, serial.SerialException):
                port.cancel_read()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2.0)
        self._reader = None
        if port is not None:
            with contextlib.suppress(*PORT_ERRORS):
                port.close()
        self.fail_all("the port was closed")

    # -- sending --------------------------------------------------------------------------

    def number_lines_from(self, number: int | None) -> None:
        """Number every later line ``N<n> ... *<checksum>`` from ``number + 1`` (the line
        number a ``M110 N<number>`` set); None: send lines bare."""
        self._number = number

    def send(
        self,
        line: str,
        timeout: float,
        guard: Callable[[], None] | None = None,
        window: int | None = None,
    ) -> Pending:
        """Write ``line`` once there is room for it (at most ``window`` lines awaiting an
        answer with it, if fewer than ``in_flight``); ``guard`` runs under the write lock just
        before the write and may raise to refuse it (the stop latch)."""
        pending = Pending(line, b"")
        self.check()
        # room first, outside the write lock, so a stop's bytes are never held behind it
        size = len(self._wire(line, self._number))
        self._wait_for_room(size, timeout, line, min(self.in_flight, window or self.in_flight))
        with self._write_lock:  # numbered lines reach the wire in number order
            self.check()
            if guard is not None:
                guard()
            if self._number is not None:
                self._number += 1
                pending.number = self._number
            pending.wire = self._wire(line, pending.number)
            self._append_and_write(pending)
        return pending

    def urgent(self, line: str) -> Pending:
        """Write ``line`` now, past the window (a stop); it still takes its answer in turn."""
        pending = Pending(line, (line + "\n").encode())
        with self._write_lock:
            self.check()
            self._append_and_write(pending)
        return pending

    def write_now(self, data: bytes) -> bool:
        """Write bytes that are not a line (GRBL's real-time ``?``, ``!``, ctrl-x) at once;
        False if the link is down."""
        port = self._port
        if self.lost is not None or port is None or not port.is_open:
            return False
        try:
            with self._write_lock:
                port.write(data)
                port.flush()
        except PORT_ERRORS as exc:
            self._link_lost(f"write failed: {exc}")
            return False
        return True

    def _wire(self, line: str, number: int | None) -> bytes:
        if number is None:
            return (line + "\n").encode()
        text = f"N{number} {line}"
        return f"{text}*{checksum(text)}\n".encode()

    def _wait_for_room(self, size: int, timeout: float, line: str, in_flight: int) -> None:
        def room() -> bool:
            if not self._fifo:
                return True  # one line always goes, however long
            return len(self._fifo) < in_flight and self._bytes + size <= self.rx_buffer

        with self._room:
            if not self._room.wait_for(lambda: room() or not self._running.is_set(), timeout):
                self.desync = line
                raise ArmTimeout(
                    f"{self.name}: no room to send {line!r} within {timeout:.1f} s: the "
                    "controller stopped answering; call reconnect()"
                )
        self.check()

    def _append_and_write(self, pending: Pending) -> None:
        port = self._port
        if port is None:
            raise ArmError(f"{self.name}: not connected: call connect() first")
        with self._room:
            self._fifo.append(pending)
            self._bytes += len(pending.wire)
        try:
            port.write(pending.wire)
        except PORT_ERRORS as exc:
            self._link_lost(f"write failed: {exc}")
            self.check()
        self.last_written = pending.line

    # -- waiting --------------------------------------------------------------------------

    def wait(
        self,
        pending: Pending,
        timeout: float,
        *,
        deadline: float | None = None,
        silence: float | None = None,
    ) -> list[str]:
        """Wait for ``pending``'s answer: at most ``timeout`` s without a word from the
        controller (anything it says restarts it), or ``silence`` s instead once it has sent
        a keepalive on this link; never past ``deadline`` (a ``time.monotonic()`` value),
        whatever it says. Returns the report lines that came with it."""
        start = time.monotonic()
        while not pending.done.wait(_POLL):
            now = time.monotonic()
            if deadline is not None and now > deadline:
                self.desync = pending.line
                raise ArmTimeout(f"{self.name}: {pending.line!r} was not done in time")
            quiet = silence if silence is not None and self.keepalives else timeout
            if now - max(start, self.last_heard) > quiet:
                self.desync = pending.line
                raise ArmTimeout(f"{self.name}: no answer to {pending.line!r} within {quiet:.1f} s")
        if self.lost is not None or self.halted is not None:
            self.check()  # LinkLost, or the halt, rather than what it did to this line
        if pending.error is not None:
            if pending.error == self.alarm:
                raise ArmError(
                    f"{self.name}: {self.alarm} while {pending.line!r} ran: home() before the "
                    "next motion"
                )
            raise ArmError(f"{self.name}: the controller refused {pending.line!r}: {pending.error}")
        return pending.info

    def wait_boot(self, since: int, timeout: float) -> bool:
        """Wait until the controller has booted more than ``since`` times (see :attr:`boots`)."""
        with self._boots:
            return self._boots.wait_for(lambda: self.boots > since, timeout)

    def abandon(self, reason: str) -> None:
        """Fail every line awaited now; their answers, if any come, are dropped until the
        controller next boots (a reset will follow)."""
        self._ignoring = True
        self.fail_all(reason)

    def fail_all(self, reason: str) -> None:
        with self._room:
            waiting, self._fifo = list(self._fifo), deque()
            self._bytes = 0
            self._room.notify_all()
        for pending in waiting:
            pending.error = pending.error or reason
            pending.done.set()

    def check(self) -> None:
        """Raise what stops the link taking lines: lost, halted, closed, out of step."""
        if self.lost is not None:
            raise LinkLost(
                f"{self.name}: the link to {self.url!r} is lost ({self.lost}); the arm is "
                "taken as stopped: call reconnect()"
            )
        if self.halted is not None:
            raise ArmError(f"{self.name}: the controller is halted ({self.halted})")
        if self._port is None or not self._running.is_set():
            raise ArmError(f"{self.name}: not connected: call connect() first")
        if self.desync is not None:
            raise ArmTimeout(
                f"{self.name}: {self.desync!r} was never answered, so answers may be out of "
                "step: call reconnect()"
            )

    # -- the reader thread ----------------------------------------------------------------

    def _read_loop(self, port: serial.SerialBase) -> None:
        buffer = b""
        while self._running.is_set():
            try:
                chunk = port.read(max(1, port.in_waiting))
            except _READ_ERRORS as exc:
                if self._running.is_set():
                    self._link_lost(f"read failed: {exc}")
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            if len(buffer) > _MAX_LINE:  # noise without an end of line
                lines.append(buffer)
                buffer = b""
            for raw in lines:
                line = raw.decode("ascii", errors="replace").strip()
                if line:
                    self._on_line(line)

    def _on_line(self, line: str) -> None:
        heard = self.classify(line)
        kind = heard.kind
        if kind is not Kind.GARBAGE:
            self.last_heard = time.monotonic()
        if kind in (Kind.OK, Kind.ERROR):
            self._answer(line, heard.text if kind is Kind.ERROR else None)
        elif kind is Kind.RESEND:
            self._resend(heard.text)
        elif kind in (Kind.ERROR_THEN_OK, Kind.INFO, Kind.NOISE):
            with self._room:
                head = self._fifo[0] if self._fifo else None
            if kind is Kind.NOISE:
                log.debug("%s: %s", self.name, line)
            if head is None:
                if kind is not Kind.NOISE:
                    log.debug("%s: %s with no line awaiting it: %r", self.name, kind.name, line)
            elif kind is Kind.ERROR_THEN_OK:
                head.error = head.error or heard.text
            else:
                head.info.append(line)
                if kind is Kind.INFO and head.internal:
                    self._swallowing = False  # the resync's report: oks count again
        elif kind is Kind.KEEPALIVE:
            self.keepalives += 1
        elif kind is Kind.STATUS:
            self.on_status(heard.text)
        elif kind is Kind.ALARM:
            self.alarm = heard.text
            log.error("%s: %s", self.name, heard.text)
            self.fail_all(heard.text)
            self.on_alarm(heard.text)
        elif kind is Kind.HALTED:
            self.halted = heard.text
            log.error("%s: %s", self.name, heard.text)
            self.fail_all(heard.text)
        elif kind is Kind.BOOT:
            self._ignoring = self._swallowing = False
            self.fail_all("the controller restarted")
            self.on_boot()
            with self._boots:
                self.boots += 1
                self._boots.notify_all()
        else:
            self.garbage_lines += 1
            log.warning("%s: skipped an unreadable line from the controller: %r", self.name, line)

    def _answer(self, line: str, error: str | None) -> None:
        with self._room:
            if error is None and self._swallowing:
                return  # the ok Marlin 2.1 sends after Resend: (see the module docstring)
            head = self._fifo[0] if self._fifo else None
            if head is None:
                if not self._ignoring:
                    self.stray_answers += 1
                    log.warning("%s: an answer with no line awaiting it: %r", self.name, line)
                return
        if error is None and not head.internal:
            # before the line leaves the window: what on_answer writes (a second stop) is on
            # the wire before any line a sender or its caller writes once this one is answered
            self.on_answer(head.line)
        with self._room:
            if self._fifo and self._fifo[0] is head:  # not failed meanwhile (fail_all)
                self._fifo.popleft()
                self._bytes -= len(head.wire)
                self._room.notify_all()
        if error is not None:
            head.error = error or "error"
        head.done.set()

    def _resend(self, text: str) -> None:
        """``Resend: N``: write the resync line and line N again now, if N is the line in
        flight and it has not been asked for too often; else fail it (out of step)."""
        number = int(text) if text.isdigit() else None
        with self._room:
            head = next((p for p in self._fifo if p.number is not None), None)
            if head is None or head.number != number or head.retries >= _RESEND_LIMIT:
                self.desync = f"Resend: {text}"
                log.error("%s: cannot resend line %s (awaiting %r)", self.name, text, head)
                again = None
            else:
                head.retries += 1
                head.error = None
                again = Pending(self.resync or "", f"{self.resync}\n".encode(), internal=True)
                if self.resync:
                    self._fifo.insert(self._fifo.index(head), again)
                    self._bytes += len(again.wire)
                    self._swallowing = True
        if again is None:
            self.fail_all(f"the controller asked to resend line {text}, which is not in flight")
            return
        assert head is not None
        # not under the write lock: a sender may hold it while it waits for this line's
        # room; with line numbers only this line is in flight, so nothing interleaves
        log.warning("%s: resending line %s: %r", self.name, head.number, head.line)
        port = self._port
        try:
            if port is None:
                raise OSError("not connected")
            port.write((again.wire if self.resync else b"") + head.wire)
        except PORT_ERRORS as exc:
            self._link_lost(f"write failed: {exc}")

    def _link_lost(self, reason: str) -> None:
        if self.lost is None:
            self.lost = reason
            log.error("%s: link to %s lost: %s", self.name, self.url, reason)
        self.fail_all(reason)
