"""A Marlin/GRBL-style G-code controller on a pseudo-terminal, backed by any Arm.

``GcodePtyEmulator(arm).start()`` opens a pty with ``os.openpty`` and answers on its master
side; :attr:`path` (``/dev/pts/N``) is what a driver opens with ``serial.serial_for_url``. It
speaks the dialect described in :mod:`onboard.drivers.arm.gcode`: moves are queued in a planner of
``planner_size`` entries and answered ``ok`` when queued (the answer is held while the planner
is full), ``M400`` is answered when every queued motion is done, ``M112`` is acted on when it
arrives and is not answered. A motion the backend could not do is reported as ``error:`` on
the next ``M400``. Errors are GRBL-style (``error:<msg>`` instead of ``ok``), or Marlin-style
with ``error_then_ok`` (``Error:<msg>`` and then ``ok``).

Hostile input is answered ``error:``, as GRBL does: a word whose number is not a plain finite
decimal (``X1e9``, ``X nan``) or is out of :data:`~onboard.drivers.arm.gcode.WORD_LIMITS`
(``M204 S-1``), a line longer than :data:`MAX_LINE` bytes, a dwell past :data:`MAX_DWELL`.
A ``G4`` dwell waits in the planner and ends at once on ``M112``, ``M410`` or ctrl-x
(0x18), which are acted on when read, however busy the planner is.

Faults for tests: :meth:`inject_garbage`, :meth:`fail_next`, :meth:`mute`, :meth:`close_link`.
To inject one while a motion runs, wait until the controller has begun it:
``emulator.worker.wait_started(started + 1, timeout)``. ``M112`` latches the backend arm's stop;
the next motion received after it resumes the arm (``M999`` is accepted and does nothing).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import queue
import re
import select
import threading
import tty
from collections import deque
from dataclasses import replace

from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.gcode import word_range
from onboard.drivers.emulators import BackendWorker, Job

__all__ = [
    "MAX_DWELL",
    "MAX_LINE",
    "TOO_LONG",
    "GcodePtyEmulator",
    "LineReader",
    "normalize",
    "parse_line",
]

log = logging.getLogger(__name__)

_WORD = re.compile(r"([A-Z])\s*([^A-Z\s]*)")
_DECIMAL = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")
_EXPONENT = re.compile(r"\d\.?E[-+]?\d")
_POLL = 0.05
MAX_LINE = 256  # bytes: a longer line is answered error: and skipped to its end
MAX_DWELL = 600.0  # seconds: a longer G4 is refused
_REALTIME_RESET = 0x18  # GRBL's ctrl-x: stop at once, on any byte boundary
TOO_LONG = "\x00too long"  # what LineReader hands on for a line past MAX_LINE


class _BadWord(ValueError):
    """A word whose number is not a plain, finite decimal in range."""


class GcodePtyEmulator:
    """A G-code controller on a pty, driving ``arm``."""

    def __init__(
        self,
        arm: Arm,
        *,
        grip_on: str = "M3",
        grip_off: str = "M5",
        joint_axes: str = "ABCUVWIJK",
        estop: str = "M112",
        planner_size: int = 8,
        orientation: tuple[float, float, float] | None = None,
        error_then_ok: bool = False,
    ) -> None:
        self.arm = arm
        self.grip_on = normalize(grip_on)
        self.grip_off = normalize(grip_off)
        self.joint_axes = joint_axes
        self.estop = normalize(estop)
        self.orientation = orientation
        self.error_then_ok = error_then_ok
        self.worker = BackendWorker(arm, capacity=planner_size)
        self.received: deque[str] = deque(maxlen=1000)
        self.lines_received = 0
        self.lines_answered = 0
        self.max_unanswered = 0
        self.dropped = 0
        self._master = -1
        self._slave = -1
        self._wake = (-1, -1)
        self._closed = False
        self._path = ""
        self._lines: queue.Queue[tuple[int, str] | None] = queue.Queue()
        self._estops = 0
        self._write_lock = threading.Lock()
        self._running = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fail_next: str | None = None
        self._muted = False
        self._acceleration = 0.0

    def __enter__(self) -> GcodePtyEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> str:
        """The slave side to open: ``serial.serial_for_url(emulator.path, ...)``."""
        if not self._path:
            raise RuntimeError("GcodePtyEmulator: not started: call start() first")
        return self._path

    def start(self) -> GcodePtyEmulator:
        self._master, self._slave = os.openpty()
        self._wake = os.pipe()
        tty.setraw(self._slave)  # no echo, no line editing, until a driver configures it
        self._path = os.ttyname(self._slave)
        self._running.set()
        for target, name in ((self._read_loop, "gcode-pty-read"), (self._serve, "gcode-pty")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def close(self) -> None:
        """Stop answering, stop the arm, close the pty."""
        if self._closed:
            return
        self._closed = True
        self._shutdown()
        self.worker.stop()
        self.worker.close()
        for fd in self._wake:
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- faults ---------------------------------------------------------------------------

    def inject_garbage(self, data: bytes = b"\x00\xfe#%&garbled*line@\xff\n") -> None:
        """Write a line of noise to the driver now, as a flaky cable would."""
        self._write(data)

    def fail_next(self, message: str = "Printer halted: simulated fault") -> None:
        """Answer the next command with ``error:<message>`` instead of running it."""
        self._fail_next = message

    def mute(self, on: bool = True) -> None:
        """Stop answering (and acting on) anything, as a hung controller would."""
        self._muted = on

    def close_link(self) -> None:
        """Drop the link: the pty goes away (nothing more is answered), then the arm stops."""
        self._shutdown()
        self.worker.stop()

    def _shutdown(self) -> None:
        self._running.clear()
        self._lines.put(None)
        with contextlib.suppress(OSError):
            os.write(self._wake[1], b"x")
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        self._threads.clear()
        self._close_fds()

    # -- the pty --------------------------------------------------------------------------

    def _close_fds(self) -> None:
        with self._write_lock:
            for fd in (self._master, self._slave):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._master = self._slave = -1

    def _write(self, data: bytes) -> None:
        with self._write_lock:
            if self._master >= 0:
                with contextlib.suppress(OSError):
                    os.write(self._master, data)

    def _reply(self, *lines: str) -> None:
        if self.error_then_ok and lines and lines[-1].startswith("error:"):
            lines = (*lines[:-1], "Error:" + lines[-1][len("error:") :], "ok")
        self.lines_answered += 1  # before the write: the driver may answer it at once
        self._write("".join(line + "\n" for line in lines).encode())

    def _read_loop(self) -> None:
        reader = LineReader()
        while self._running.is_set():
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], _POLL)
                if self._wake[0] in ready:
                    return
                chunk = os.read(self._master, 4096) if ready else b""
            except (OSError, ValueError):
                return
            # ctrl-x is acted on where it is read, never queued: the lines before it are
            # cancelled, a line it cuts is dropped (as GRBL's soft reset clears its buffer)
            for n, part in enumerate(chunk.split(bytes([_REALTIME_RESET]))):
                if n:
                    reader.clear()
                    self._halt()
                for line in reader.feed(part):
                    if line == TOO_LONG:
                        self._enqueue(TOO_LONG)
                    else:
                        self._on_line(line)

    def _on_line(self, raw: str) -> None:
        line = normalize(raw)
        if not line:
            return
        if self._muted:
            self.dropped += 1
            return
        self.received.append(line)
        head = line.split()[0]
        estop = line == self.estop or head == self.estop
        if estop or head == "M410":  # the emergency parser: acted on at once
            self._halt()
            if estop:  # never queued nor answered; M410 is answered in turn
                return
        self._enqueue(line)

    def _halt(self) -> None:
        """Stop now: lines received before are cancelled, not run; a dwell ends."""
        self._estops += 1
        self.worker.stop()

    def _enqueue(self, line: str) -> None:
        self.lines_received += 1
        self.max_unanswered = max(self.max_unanswered, self.lines_received - self.lines_answered)
        self._lines.put((self._estops, line))

    def _serve(self) -> None:
        while True:
            item = self._lines.get()
            if item is None or not self._running.is_set():
                return
            estops, line = item
            if self._muted:
                continue
            if estops != self._estops and _is_motion(line, self):
                self._reply("ok")  # cancelled by M112: answered, not run
                continue
            if self._fail_next is not None:
                message, self._fail_next = self._fail_next, None
                self._reply(f"error:{message}")
                continue
            try:
                self._reply(*self._execute(line))
            except Exception as exc:  # a bad line must never kill the controller
                log.exception("gcode emulator: %r failed", line)
                self._reply(f"error:{type(exc).__name__}: {exc}")

    # -- the dialect ----------------------------------------------------------------------

    def _execute(self, line: str) -> list[str]:
        if line == TOO_LONG:
            return [f"error:line longer than {MAX_LINE} bytes"]
        try:
            head, words = parse_line(line)
        except _BadWord as exc:
            return [f"error:{exc}"]
        if line in (self.grip_on, self.grip_off):
            return self._queue(_grip(line == self.grip_on))
        if head in ("G0", "G00", "G1", "G01"):
            return self._move(words)
        if head == "G28":
            return self._queue(_home)
        if head == "G4":
            seconds = words.get("S", words.get("P", 0.0) / 1000.0)
            if seconds > MAX_DWELL:
                return [f"error:G4 dwell {seconds:g} s is longer than {MAX_DWELL:g} s"]
            return self._queue(lambda arm: self._dwell(seconds))
        if head in ("G21", "G90", "M999", "M17", "M84", "M410"):
            return ["ok"]
        if head == "M204":
            self._acceleration = words.get("S", words.get("P", self._acceleration))
            return ["ok"]
        if head == "M400":
            return self._sync()
        if head == "M114":
            return [self._position(), "ok"]
        if head in ("G20", "G91"):
            return [f"error:{head} is not supported: send G21 and G90 (mm, absolute)"]
        return [f"error:Unknown command: {line}"]

    def _dwell(self, seconds: float) -> None:
        self.worker.dwell(seconds)  # ended early by M112, M410 or ctrl-x

    def _queue(self, job: Job) -> list[str]:
        self.worker.submit(job)
        return ["ok"]

    def _move(self, words: dict[str, float]) -> list[str]:
        joints = {a: words[a] for a in self.joint_axes if a in words}
        cartesian = {a: words[a] for a in "XYZ" if a in words}
        feed = words.get("F")
        if joints and cartesian:
            return ["error:a move names both X/Y/Z and joint axes: send them apart"]
        if joints:
            return self._queue(_joint_move(joints, self.joint_axes, feed))
        if not cartesian:
            return ["ok"]  # a feed-only line
        return self._queue(_linear_move(cartesian, feed, self.orientation))

    def _sync(self) -> list[str]:
        while not self.worker.wait_idle(_POLL):
            if not self._running.is_set():
                return []
        error = self.worker.take_error()
        return [f"error:{error}"] if error else ["ok"]

    def _position(self) -> str:
        state = self.arm.state()
        p = state.pose
        text = f"X:{p.x * 1000:.3f} Y:{p.y * 1000:.3f} Z:{p.z * 1000:.3f}"
        for axis, q in zip(self.joint_axes, state.joints, strict=False):
            text += f" {axis}:{math.degrees(q):.3f}"
        return text + " Count X:0 Y:0 Z:0"


class LineReader:
    """Splits the bytes read from the link into lines in one pass, holding at most
    :data:`MAX_LINE` bytes: a longer line comes out once as :data:`TOO_LONG` and the rest of
    it is skipped. ``\\r`` ends a line as ``\\n`` does; ctrl-x bytes are dropped (the reader
    acts on them first)."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self.max_line = max_line
        self._buffer = b""
        self._discarding = False

    @property
    def pending(self) -> int:
        """Bytes held for the line under way (at most ``max_line`` between feeds)."""
        return len(self._buffer)

    def clear(self) -> None:
        """Drop the line under way (a reset)."""
        self._buffer, self._discarding = b"", False

    def feed(self, chunk: bytes) -> list[str]:
        chunk = chunk.replace(bytes([_REALTIME_RESET]), b"").replace(b"\r", b"\n")
        *raws, self._buffer = (self._buffer + chunk).split(b"\n")
        lines = []
        for raw in raws:
            if self._discarding:  # the end of a line already answered as too long
                self._discarding = False
            elif len(raw) > self.max_line:
                lines.append(TOO_LONG)
            else:
                lines.append(raw.decode("ascii", errors="replace"))
        if len(self._buffer) > self.max_line and not self._discarding:
            lines.append(TOO_LONG)  # answered now; the rest of the line is skipped
            self._discarding = True
        if self._discarding:
            self._buffer = b""
        return lines


def parse_line(line: str) -> tuple[str, dict[str, float]]:
    """A normalised line -> its head (``G1``) and words; raises ValueError for a bad word."""
    head = line.split()[0]
    return head, _words(line[len(head) :])


def _words(text: str) -> dict[str, float]:
    """``" X10 Y-2.5 F600"`` -> ``{"X": 10.0, ...}``; a word whose number is not a plain
    finite decimal (an exponent, nan, inf, nothing), is out of range or repeated raises
    _BadWord."""
    if _EXPONENT.search(text):
        raise _BadWord("a number in exponent form: write plain decimals")
    if _WORD.sub("", text).strip():
        raise _BadWord(f"not a G-code word: {text.strip()[:40]!r}")
    words: dict[str, float] = {}
    for letter, raw in _WORD.findall(text):
        if not _DECIMAL.fullmatch(raw):
            raise _BadWord(f"{letter} needs a plain decimal number, got {raw[:20]!r}")
        value = float(raw)
        low, high = word_range(letter)
        if not (math.isfinite(value) and low <= value <= high):
            raise _BadWord(f"{letter}{raw[:20]} is out of range [{low:g}, {high:g}]")
        if letter in words:  # as GRBL: X0X10 is not X10
            raise _BadWord(f"{letter} is given twice")
        words[letter] = value
    return words


def _is_motion(line: str, emulator: GcodePtyEmulator) -> bool:
    head = line.split()[0]
    grips = (emulator.grip_on, emulator.grip_off)
    return head in ("G0", "G00", "G1", "G01", "G28", "G4") or line in grips


def normalize(line: str) -> str:
    """Upper case, comments (``;`` and ``( )``) and line numbers/checksums removed."""
    line = line.split(";", 1)[0]
    line = re.sub(r"\(.*?\)", "", line)
    line = line.split("*", 1)[0]
    line = re.sub(r"^\s*N\d+\s+", "", line.upper())
    return " ".join(line.split())


def _home(arm: Arm) -> None:
    arm.home()


def _grip(close: bool) -> Job:
    def job(arm: Arm) -> None:
        arm.grip(close)

    return job


def _linear_move(
    target_mm: dict[str, float],
    feed: float | None,
    orientation: tuple[float, float, float] | None,
) -> Job:
    def job(arm: Arm) -> None:
        here = arm.state().pose
        pose = replace(here, **{axis.lower(): value / 1000.0 for axis, value in target_mm.items()})
        if orientation is not None:
            pose = Pose(pose.x, pose.y, pose.z, *orientation)
        arm.move_to(pose, None if feed is None else feed / 60_000.0)

    return job


def _joint_move(target_deg: dict[str, float], axes: str, feed: float | None) -> Job:
    def job(arm: Arm) -> None:
        joints = list(arm.state().joints)
        for i, axis in enumerate(axes[: len(joints)]):
            if axis in target_deg:
                joints[i] = math.radians(target_deg[axis])
        arm.move_joints(tuple(joints), None if feed is None else math.radians(feed / 60.0))

    return job
