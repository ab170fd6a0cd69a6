"""The e-stop: every input stops the arm from its own thread, never through the service's
loop, the planner or the LLM, and the stop latches until an explicit reset.

:class:`EStop` engages :data:`~onboard.drivers.arm.safety.STOP_LINE`, which calls
``stop()`` on every SafeArm connected in this process from the calling thread (the driver
latches the stop) and keeps the runtime from resuming them until :meth:`EStop.reset`.
Its inputs, each a daemon thread that calls :meth:`EStop.trigger`:

- the control API's ``POST /estop`` and the operator page's button (runtime/service/api.py:
  the request's own server thread);
- :class:`FileInput`: a file's presence (``touch /run/onboard/estop``);
- :class:`SerialInput`: a line on a serial port (an e-stop box, a microcontroller);
- :class:`GpioInput`: a GPIO-style level in a value file (Linux's sysfs
  ``/sys/class/gpio/gpioN/value``), pressed when it reads the active level.

Each is an :class:`Input`: ``start(estop)`` and ``close()``. The service holds no step
while the e-stop is engaged: a step about to start waits for the reset.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from onboard.drivers.arm.safety import STOP_LINE, StopLine
from onboard.service.log import JsonLog

__all__ = ["EStop", "FileInput", "GpioInput", "Input", "SerialInput"]

#: how often the file and GPIO inputs look (their part of the latency)
POLL = 0.005


@dataclass(frozen=True)
class Engaged:
    source: str  # which input: "api", "page", "file", "serial", "gpio"
    detail: str
    at: float  # time.time() of the first trigger


class EStop:
    """The service's e-stop. ``trigger`` may be called from any thread, any number of times;
    the first engages it, the rest are counted. ``reset`` releases it."""

    def __init__(self, log: JsonLog, line: StopLine = STOP_LINE) -> None:
        self.log, self.line = log, line
        self.engaged: Engaged | None = None
        self.triggers = 0
        self._lock = threading.Lock()
        self._on_reset: list[Callable[[], None]] = []

    def trigger(self, source: str, detail: str = "") -> bool:
        """Stop every arm now (this thread), latched; True if this engaged the e-stop."""
        stopped = self.line.engage(f"{source}: {detail}" if detail else source)
        with self._lock:  # the arms are stopped before anything else is done
            self.triggers += 1
            first = self.engaged is None
            if first:
                self.engaged = Engaged(source, detail, time.time())
        if first:
            self.log.event("estop", level="warning", source=source, detail=detail, arms=stopped)
        return first

    def reset(self, source: str) -> bool:
        """Release the e-stop (an operator's decision); False if it was not engaged. The arms
        stay where they stopped; the next command the runtime sends resumes them."""
        with self._lock:
            was, self.engaged = self.engaged, None
            callbacks = list(self._on_reset)
        self.line.release()
        if was is None:
            return False
        self.log.event("estop_reset", source=source, was=was.source)
        for callback in callbacks:
            callback()
        return True

    def on_reset(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._on_reset.append(callback)

    def status(self) -> dict[str, object]:
        engaged = self.engaged
        return {
            "engaged": engaged is not None,
            "source": engaged.source if engaged else None,
            "detail": engaged.detail if engaged else None,
            "since": engaged.at if engaged else None,
            "triggers": self.triggers,
            "arms": len(self.line.arms()),
        }


class Input(Protocol):
    """An e-stop input: a thread of its own that calls ``estop.trigger``."""

    def start(self, estop: EStop) -> None: ...

    def close(self) -> None: ...


class _Poller:
    """A daemon thread calling ``pressed()`` every POLL seconds; a press triggers once, and
    again only after a release (the e-stop latches anyway)."""

    source = ""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def pressed(self) -> str | None:
        raise NotImplementedError

    def start(self, estop: EStop) -> None:
        def watch() -> None:
            was = False
            while not self._done.is_set():
                detail = self.pressed()
                if detail is not None and not was:
                    estop.trigger(self.source, detail)
                was = detail is not None
                self._done.wait(POLL)

        self._thread = threading.Thread(target=watch, name=f"estop-{self.source}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


class FileInput(_Poller):
    """Pressed while ``path`` exists (``touch`` it to stop; removing it does not reset)."""

    source = "file"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def pressed(self) -> str | None:
        return str(self.path) if os.path.lexists(self.path) else None


class GpioInput(_Poller):
    """Pressed while the value file reads ``active`` ("0" for a normally-closed button wired
    to pull the line low: a cut wire stops the arm too)."""

    source = "gpio"

    def __init__(self, path: Path, active: str = "0") -> None:
        super().__init__()
        self.path, self.active = path, active

    def pressed(self) -> str | None:
        try:
            with open(self.path, "rb", buffering=0) as value:
                level = value.read(8).decode("ascii", "replace").strip()
        except OSError as exc:  # the input is gone: as unsafe as a press
            return f"{self.path}: {exc.strerror or exc}"
        return f"{self.path}={level}" if level == self.active else None


class SerialInput:
    """A line ``word`` (default ``STOP``) on the serial port ``port`` triggers the e-stop;
    a port that fails (unplugged) triggers it too."""

    source = "serial"

    def __init__(self, port: str, baudrate: int = 115200, word: str = "STOP") -> None:
        import serial

        self.port, self.word = port, word.encode()
        self._serial = serial.Serial(port, baudrate, timeout=0.2)
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, estop: EStop) -> None:
        def read() -> None:
            buffer = b""
            while not self._done.is_set():
                try:
                    buffer += self._serial.read(self._serial.in_waiting or 1)
                except Exception as exc:  # pyserial's SerialException, termios.error, OSError
                    if not self._done.is_set():
                        estop.trigger(self.source, f"{self.port}: {exc}")
                    return
                *lines, buffer = buffer.split(b"\n")
                if any(line.strip() == self.word for line in lines):
                    estop.trigger(self.source, f"{self.port}: {self.word.decode()}")

        self._thread = threading.Thread(target=read, name="estop-serial", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        self._serial.close()
