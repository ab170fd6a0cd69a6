"""A serial controller on a pseudo-terminal: the plumbing every firmware emulator shares.

``PtyController(arm).start()`` opens a pty (:func:`open_pty`) and answers on its master side;
:attr:`path` (``/dev/pts/N``) is what a driver opens with ``serial.serial_for_url``. A subclass
is one firmware's behaviour; it fills in four hooks:

- :attr:`realtime` and :meth:`on_realtime`: bytes acted on the moment they are read, wherever
  they fall in a line, and never queued (GRBL's ``?``, ``!``, ``~`` and ctrl-x);
- :meth:`on_line`: a whole line, on the reader thread, before it is queued (an emergency
  parser acts here; returning False keeps the line out of the queue);
- :meth:`execute`: a queued line, in order, on the serve thread; returns the answer lines;
- :meth:`error_lines`: how the firmware words an error (used for faults too);
- :meth:`banner`: what the board prints when it boots (written at start and after a reset).

Blocking arm calls run on a :class:`~onboard.drivers.emulators.BackendWorker`, as a motion
planner does, so the reader stays free for real-time bytes.

Faults for tests: :meth:`inject_garbage`, :meth:`fail_next`, :meth:`mute`, :meth:`close_link`.
To inject one while a motion runs, wait until the controller has begun it:
``emulator.worker.wait_started(started + 1, timeout)``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import threading
import tty
from collections import deque
from typing import ClassVar

from onboard.drivers.arm.base import Arm
from onboard.drivers.emulators import BackendWorker, Job

__all__ = ["MAX_LINE", "TOO_LONG", "LineReader", "PtyController"]

log = logging.getLogger(__name__)

_POLL = 0.05
MAX_LINE = 256  # bytes: a longer line is answered with an error and skipped to its end
TOO_LONG = "\x00too long"  # what LineReader hands on for a line past its limit
_MAX_QUEUED = 64  # lines received and not yet executed; past this the reader waits


def open_pty() -> tuple[int, int]:
    """A new pty (master, slave). The master does not block: when a host closes the slave,
    ``select`` reports the master readable (a hangup), and if the host reopens the port before
    the read, a blocking read would wait for the host's next byte while the host waits for the
    board's banner. A non-blocking read raises ``BlockingIOError`` instead."""
    master, slave = os.openpty()
    os.set_blocking(master, False)
    return master, slave


class PtyController:
    """A firmware on a pty, driving ``arm``. Subclasses say how it answers."""

    #: bytes acted on when read (never part of a line); see :meth:`on_realtime`
    realtime: ClassVar[frozenset[int]] = frozenset()

    def __init__(self, arm: Arm, *, planner_size: int = 8, max_line: int = MAX_LINE) -> None:
        self.arm = arm
        self.max_line = max_line
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
        # bounded: a host that floods lines is held back by the pty, as a UART's buffer does
        self._lines: queue.Queue[str | None] = queue.Queue(maxsize=_MAX_QUEUED)
        self._write_lock = threading.Lock()
        self._running = threading.Event()
        self._threads: list[threading.Thread] = []
        self._fail_next: str | None = None
        self._muted = False
        self._reader = LineReader(max_line)

    # -- hooks ----------------------------------------------------------------------------

    def banner(self) -> list[str]:
        """Lines the board prints when it boots or resets."""
        return []

    def on_realtime(self, byte: int) -> None:
        """A byte of :attr:`realtime`, acted on at once (reader thread)."""

    def on_line(self, line: str) -> bool:
        """A whole line as read (reader thread); False keeps it out of the queue."""
        return True

    def execute(self, line: str) -> list[str]:
        """Run a queued line (serve thread); the lines to answer with."""
        raise NotImplementedError

    def error_lines(self, message: str) -> list[str]:
        """The answer to a line that failed with ``message``."""
        return [f"error:{message}"]

    # -- life -----------------------------------------------------------------------------

    def __enter__(self) -> PtyController:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> str:
        """The slave side to open: ``serial.serial_for_url(emulator.path, ...)``."""
        if not self._path:
            raise RuntimeError(f"{type(self).__name__}: not started: call start() first")
        return self._path

    def start(self) -> PtyController:
        self._master, self._slave = open_pty()
        self._wake = os.pipe()
        tty.setraw(self._slave)  # no echo, no line editing, until a driver configures it
        self._path = os.ttyname(self._slave)
        self._running.set()
        for target, name in ((self._read_loop, "pty-read"), (self._serve, "pty-serve")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.write_lines(self.banner())
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
        self.write(data)

    def fail_next(self, message: str = "simulated fault") -> None:
        """Answer the next queued line with :meth:`error_lines` instead of running it."""
        self._fail_next = message

    def mute(self, on: bool = True) -> None:
        """Stop answering (and acting on) anything, as a hung controller would; the lines
        that arrive meanwhile are still listed in :attr:`received`."""
        self._muted = on

    def close_link(self) -> None:
        """Drop the link: the pty goes away (nothing more is answered), then the arm stops."""
        self._shutdown()
        self.worker.stop()

    # -- for subclasses -------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Send bytes to the host; while its input is full, wait (until shutdown)."""
        with self._write_lock:
            view = memoryview(data)
            while view and self._master >= 0:
                try:
                    view = view[os.write(self._master, view) :]
                except BlockingIOError:
                    if not self._running.is_set():
                        return
                    with contextlib.suppress(OSError, ValueError):
                        select.select([], [self._master], [], _POLL)
                except OSError:
                    return

    def write_lines(self, lines: list[str]) -> None:
        if lines:
            self.write("".join(line + "\n" for line in lines).encode())

    def reply(self, lines: list[str]) -> None:
        """Answer one queued line."""
        self.lines_answered += 1  # before the write: the driver may answer it at once
        self.write_lines(lines)

    def queue_job(self, job: Job) -> None:
        """Hand a blocking arm call to the planner (blocks while the planner is full)."""
        while not self.worker.submit(job, timeout=_POLL):
            if not self._running.is_set():
                return

    def wait_idle(self) -> bool:
        """Wait until the planner is empty; False if the controller shut down first."""
        while not self.worker.wait_idle(_POLL):
            if not self._running.is_set():
                return False
        return True

    def discard_input(self) -> None:
        """Drop the line being read and every line queued (a reset clears its buffers)."""
        self._reader.clear()
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._lines.get_nowait()
                if item is None:  # keep the shutdown marker
                    self._lines.put_nowait(None)
                    return

    @property
    def running(self) -> bool:
        return self._running.is_set()

    # -- threads --------------------------------------------------------------------------

    def _shutdown(self) -> None:
        self._running.clear()
        with contextlib.suppress(queue.Full):
            self._lines.put_nowait(None)
        with contextlib.suppress(OSError):
            os.write(self._wake[1], b"x")
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        self._threads.clear()
        with self._write_lock:
            for fd in (self._master, self._slave):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._master = self._slave = -1

    def _read_loop(self) -> None:
        while self._running.is_set():
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], _POLL)
                if self._wake[0] in ready:
                    return
                chunk = os.read(self._master, 4096) if ready else b""
            except BlockingIOError:
                continue  # readable a moment ago (a hangup), not now: a host reopened the port
            except (OSError, ValueError):
                return
            start = 0
            for i, byte in enumerate(chunk):
                if byte in self.realtime:
                    self._feed(chunk[start:i])
                    start = i + 1
                    if not self._muted:
                        self.on_realtime(byte)
            self._feed(chunk[start:])

    def _feed(self, data: bytes) -> None:
        for line in self._reader.feed(data):
            if self._muted:  # a hung controller: the bytes arrive, nothing acts on them
                self.received.append(line)
                self.dropped += 1
            elif line == TOO_LONG or self.on_line(line):
                self._enqueue(line)

    def _enqueue(self, line: str) -> None:
        self.received.append(line)
        self.lines_received += 1
        self.max_unanswered = max(self.max_unanswered, self.lines_received - self.lines_answered)
        while self._running.is_set():
            with contextlib.suppress(queue.Full):
                self._lines.put(line, timeout=_POLL)
                return

    def _serve(self) -> None:
        while True:
            line = self._lines.get()
            if line is None or not self._running.is_set():
                return
            if self._muted:
                continue
            if self._fail_next is not None:
                message, self._fail_next = self._fail_next, None
                self.reply(self.error_lines(message))
                continue
            try:
                answer = self.execute(line)
            except Exception as exc:  # a bad line must never kill the controller
                log.exception("%s: %r failed", type(self).__name__, line)
                answer = self.error_lines(f"{type(exc).__name__}: {exc}")
            self.reply(answer)


class LineReader:
    """Splits the bytes read from the link into lines in one pass, holding at most
    ``max_line`` bytes: a longer line comes out once as :data:`TOO_LONG` and the rest of it is
    skipped. ``\\r`` ends a line as ``\\n`` does."""

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
        chunk = chunk.replace(b"\r", b"\n")
        *raws, self._buffer = (self._buffer + chunk).split(b"\n")
        lines = []
        for raw in raws:
            if self._discarding:  # the end of a line already answered as too long
                self._discarding = False
            elif len(raw) > self.max_line:
                lines.append(TOO_LONG)
            elif raw.strip():
                lines.append(raw.decode("ascii", errors="replace"))
        if len(self._buffer) > self.max_line and not self._discarding:
            lines.append(TOO_LONG)  # answered now; the rest of the line is skipped
            self._discarding = True
        if self._discarding:
            self._buffer = b""
        return lines
