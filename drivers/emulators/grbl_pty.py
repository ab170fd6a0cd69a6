"""A GRBL 1.1 controller (gnea/grbl 1.1h on an Arduino Uno) on a pseudo-terminal, backed by
any Arm.

Written from the firmware's behaviour, each rule naming the source it comes from (files of
github.com/gnea/grbl: ``grbl/*.c`` and ``doc/markdown/*.md``), so that a driver tested against
it meets what a real board does. ``GrblEmulator(arm).start()`` opens a pty; :attr:`path` is
what a driver opens with pyserial. The machine position is the backend's tool position in mm
(metres x 1000) less a machine origin (see ``machine_origin``); moves are ``move_to`` calls at
the block's feed (mm/min / 60000 m/s) on the backend's thread (:attr:`worker`), one per
planner block.

What a driver meets (each one is GRBL's, cited where it is done below):

- The board resets when the port is opened (the Arduino's DTR auto-reset), however soon after
  a close (an open is seen by the host's input flush, which pyserial does when it opens a
  port; a host that flushes its input later resets the board too): it forgets its
  position (machine position 0,0,0 where the tool is), prints ``\\r\\nGrbl 1.1h ['$' for
  help]`` and, with homing enabled ($22=1), starts in Alarm (``[MSG:'$H'|'$X' to unlock]``).
  Bytes sent before the banner are lost (the bootloader). ``auto_reset=False``: a native-USB
  board, silent until spoken to.
- Every line is answered ``ok`` or ``error:N`` (numbers only), in order; ``\\r`` and ``\\n``
  each end a line and an empty line is answered ``ok``, so ``\\r\\n`` gets two answers.
- ``?``, ``!``, ``~`` and ctrl-x are acted on when read, anywhere in a line, never queued.
- Motions are planned 15 blocks deep; ``ok`` comes when a block is planned and is held
  while the planner is full. The serial receive buffer holds 128 bytes: bytes that arrive
  while it is full and the main loop is stuck (planner full, dwell, hold) are dropped, as the
  firmware's receive interrupt drops them (``rx_overflow=False`` holds reading instead).
- Only ``G4 P<seconds>`` (or a line that changes spindle, coolant or offsets) waits for the
  motions: there is no M400, M114, M112, M204 or M410 (error:20).
- ``!`` holds (Hold:1, then Hold:0 once stopped; in Idle at once, Hold:0); no line is run
  while holding; ``~`` resumes the interrupted move to its target and the blocks after it.
  Ctrl-x during a motion (or a hold still slowing down) raises ALARM:3 and locks the machine;
  after a completed hold (Hold:0) it does not: the position is kept and the board is Idle.
  The line under way when a reset comes is answered ``ok`` (after the ALARM, before the
  banner); the lines behind it are dropped with the receive buffer. A reset stops the
  spindle and coolant: a gripper on those outputs opens.
- G-code is refused in Alarm and while jogging (error:9); ``$J=`` jogs; 0x85 cancels a jog
  and empties the planner without a reset.
- The spindle output is the PWM pin (a 328p with variable spindle): ``M3`` with S0 (the
  value after a reset) leaves it off; ``M3 S<$30>`` turns it fully on.
- ``?`` is not answered while homing (once, at its end) nor after a hard or soft limit
  alarm (ALARM:1, ALARM:2), which hears nothing but ctrl-x.

Not emulated: the safety door (0x84 is ignored), the spindle stop override (0x9E), laser mode
($32 is stored only), probing (G38.x answers error:20), the hard-limit switches (a backend
move that fails, e.g. out of reach, is reported as the machine hitting its end: ALARM:1, as
with $21=1), the 500 ms pause after an alarm message, acceleration ($120-$122 are stored; the
backend's own profile is used), and the EEPROM's survival across emulator instances.

Faults for tests: :meth:`inject_garbage`, :meth:`fail_next` (``fail_next("22")`` answers
``error:22``; a message that is not a number answers error:1, what line noise most often gets),
:meth:`mute`, :meth:`close_link`.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import math
import os
import select
import struct
import termios
import threading
import time
import tty
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.emulators.grbl_gcode import (
    COOLANT_FLOOD,
    COOLANT_MIST,
    MOTION_LINEAR,
    MOTION_NONE,
    MOTION_SEEK,
    NON_MODAL_DWELL,
    NON_MODAL_GO_HOME_0,
    NON_MODAL_GO_HOME_1,
    NON_MODAL_RESET_COORDINATE_OFFSET,
    NON_MODAL_SET_COORDINATE_DATA,
    NON_MODAL_SET_COORDINATE_OFFSET,
    NON_MODAL_SET_HOME_0,
    NON_MODAL_SET_HOME_1,
    PROGRAM_FLOW_PAUSED,
    PROGRAM_FLOW_RUNNING,
    SETTING_INDEX_G28,
    SETTING_INDEX_G30,
    SPINDLE_CW,
    SPINDLE_DISABLE,
    TOOL_LENGTH_OFFSET_AXIS,
    Block,
    LineFilter,
    ParserState,
    Status,
    arc_points,
    parse_block,
    read_float,
)
from onboard.drivers.emulators.pty_controller import PtyController, open_pty

__all__ = [
    "BANNER",
    "DEFAULT_SETTINGS",
    "PLANNER_BLOCKS",
    "RX_BUFFER_SIZE",
    "GrblEmulator",
]

log = logging.getLogger(__name__)

VERSION = "1.1h"  # gnea/grbl grbl/grbl.h GRBL_VERSION
BUILD = "20190830"  # gnea/grbl grbl/grbl.h GRBL_VERSION_BUILD
BANNER = f"Grbl {VERSION} ['$' for help]"  # gnea/grbl grbl/report.c report_init_message
#: gnea/grbl grbl/planner.h BLOCK_BUFFER_SIZE 16; the ring keeps one slot free
#: (planner.c plan_check_full_buffer), so 15 blocks, as $I reports (report.c report_build_info)
PLANNER_BLOCKS = 15
RX_BUFFER_SIZE = 128  # gnea/grbl grbl/serial.h
N_STARTUP_LINE = 2  # gnea/grbl grbl/config.h
DWELL_TIME_STEP = 0.05  # seconds (gnea/grbl grbl/config.h DWELL_TIME_STEP 50 ms)
MINIMUM_FEED_RATE = 1.0  # mm/min (gnea/grbl grbl/config.h)
MM_PER_INCH = 25.4

_POLL = 0.05  # seconds between checks of a wait nothing announces (shutdown)
_OPEN_POLL = 0.002  # seconds between looks at a closed port
_WORKER_JOBS = 64  # the backend worker's queue: the planner's blocks are bounded here

# machine states (gnea/grbl grbl/system.h STATE_*), named as the status report names them
IDLE, ALARM, CHECK, HOMING, CYCLE, HOLD, JOG, SLEEP = (
    "Idle",
    "Alarm",
    "Check",
    "Home",
    "Run",
    "Hold",
    "Jog",
    "Sleep",
)

# alarm codes (gnea/grbl grbl/system.h EXEC_ALARM_*, doc/csv/alarm_codes_en_US.csv)
ALARM_HARD_LIMIT, ALARM_SOFT_LIMIT, ALARM_ABORT_CYCLE = 1, 2, 3
ALARM_HOMING_FAIL_RESET, ALARM_HOMING_FAIL_APPROACH = 6, 9

# real-time bytes (gnea/grbl grbl/config.h CMD_*)
CMD_RESET, CMD_STATUS_REPORT, CMD_CYCLE_START, CMD_FEED_HOLD = 0x18, 0x3F, 0x7E, 0x21
CMD_SAFETY_DOOR, CMD_JOG_CANCEL = 0x84, 0x85
_REALTIME = frozenset({CMD_RESET, CMD_STATUS_REPORT, CMD_CYCLE_START, CMD_FEED_HOLD})

#: the generic defaults (gnea/grbl grbl/defaults.h DEFAULTS_GENERIC), by setting number;
#: axis settings ($100+, $110+, $120+, $130+) are filled in per axis
DEFAULT_SETTINGS: dict[int, float] = {
    0: 10,  # step pulse, us
    1: 25,  # step idle delay, ms
    2: 0,  # step port invert mask
    3: 0,  # direction port invert mask
    4: 0,  # step enable invert
    5: 0,  # limit pins invert
    6: 0,  # probe pin invert
    10: 1,  # status report mask: bit 0 MPos (else WPos), bit 1 buffer state
    11: 0.010,  # junction deviation, mm
    12: 0.002,  # arc tolerance, mm
    13: 0,  # report inches
    20: 0,  # soft limits
    21: 0,  # hard limits
    22: 0,  # homing cycle
    23: 0,  # homing direction invert mask
    24: 25.0,  # homing feed, mm/min
    25: 500.0,  # homing seek, mm/min
    26: 250,  # homing debounce, ms
    27: 1.0,  # homing pull-off, mm
    30: 1000.0,  # max spindle speed, RPM
    31: 0.0,  # min spindle speed, RPM
    32: 0,  # laser mode
}
_AXIS_DEFAULTS = {100: 250.0, 110: 500.0, 120: 10.0, 130: 200.0}  # steps/mm, mm/min, mm/s², mm
#: settings printed as integers (gnea/grbl grbl/report.c report_grbl_settings)
_INTEGER_SETTINGS = frozenset({0, 1, 2, 3, 4, 5, 6, 10, 13, 20, 21, 22, 23, 26, 32})
_FLAG_SETTINGS = frozenset({4, 5, 6, 13, 20, 21, 22, 32})
_ROTARY = {"A": "rx", "B": "ry", "C": "rz"}


def print_float(value: float, decimals: int) -> str:
    """``printFloat`` (gnea/grbl grbl/print.c): a sign for any negative value (so ``-0.000``),
    rounded half up on the magnitude."""
    scaled = int(abs(value) * 10**decimals + 0.5)
    digits = str(scaled).rjust(decimals + 1, "0")
    text = f"{digits[:-decimals]}.{digits[-decimals:]}" if decimals else digits
    return ("-" if value < 0 else "") + text


@dataclass
class _Block:
    """A planned line motion (gnea/grbl grbl/planner.c plan_buffer_line): machine mm."""

    target: list[float]
    programmed_rate: float  # mm/min
    rapid_rate: float  # the axes' $11x limit along the move, mm/min
    rapid: bool = False
    jog: bool = False  # jogs ignore the feed override (gnea/grbl grbl/jog.c)


class GrblEmulator(PtyController):
    """GRBL 1.1h on a pty, driving ``arm``. Options are the board's build and EEPROM:

    - ``auto_reset``: the board resets (and prints its banner) whenever the port is opened,
      as an Arduino's DTR line does; False: a native-USB board, silent until spoken to.
    - ``settings``: ``$N`` values over GRBL's defaults (the EEPROM), e.g. ``{22: 1}``.
    - ``grip_output``: the output wired to the backend's gripper: ``"spindle"`` (M3/M4 with an
      S above 0 close it, M5 opens), ``"flood"`` (M8/M9) or ``"mist"`` (M7/M9, which needs
      ``enable_m7``, a build option).
    - ``rotary_axes``: rotary axes as grblHAL has them (``"ABC"``: the tool's rx, ry, rz in
      degrees); GRBL 1.1 has none and answers A/B/C words error:20.
    - ``machine_origin``: the backend-frame point (mm) that is machine zero, fixed; None (the
      firmware): machine zero is where the tool is at power-up or port open, and ``$H`` sets
      the position to the homed one ($27 pull-off from the home switches).
    - ``rx_overflow``: drop bytes that overflow the 128-byte receive buffer (True), or hold
      reading (False).
    - ``boot_delay``: seconds the bootloader takes after the port opens before the banner;
      it ends early when the host flushes its input, as pyserial does when it opens a port,
      so that the banner is never lost to that flush.
    """

    def __init__(
        self,
        arm: Arm,
        *,
        auto_reset: bool = True,
        settings: Mapping[int, float] | None = None,
        grip_output: Literal["spindle", "flood", "mist"] = "spindle",
        enable_m7: bool = False,
        rotary_axes: str = "",
        machine_origin: tuple[float, float, float] | None = None,
        rx_overflow: bool = True,
        boot_delay: float = 1.0,
    ) -> None:
        super().__init__(arm, planner_size=_WORKER_JOBS)
        if grip_output == "mist" and not enable_m7:
            raise ValueError("grip_output='mist' needs enable_m7=True: M7 is a build option")
        if rotary_axes and rotary_axes not in ("A", "AB", "ABC", "B", "BC", "C", "AC"):
            raise ValueError(f"rotary_axes must be letters of 'ABC' in order, got {rotary_axes!r}")
        self.auto_reset = auto_reset
        self.grip_output = grip_output
        self.enable_m7 = enable_m7
        self.axes = "XYZ" + rotary_axes
        self.machine_origin = machine_origin
        self.rx_overflow = rx_overflow
        self.boot_delay = boot_delay
        n = len(self.axes)
        defaults = dict(DEFAULT_SETTINGS)
        for base, value in _AXIS_DEFAULTS.items():
            defaults.update({base + i: value for i in range(n)})
        self._defaults = dict(defaults)
        defaults.update(settings or {})
        #: the board's settings ($N), as ``$$`` prints them
        self.settings: dict[int, float] = defaults
        self._coords = [[0.0] * n for _ in range(8)]  # G54..G59, G28, G30 (the EEPROM)
        self._startup = [""] * N_STARTUP_LINE
        self._build_info = ""
        self._cond = threading.Condition(threading.RLock())
        self._connected = threading.Event()
        if not auto_reset:
            self._connected.set()
        self._origin = list(machine_origin) if machine_origin is not None else [0.0] * 3
        # the machine (gnea/grbl grbl/system.h system_t), guarded by _cond
        self._state = IDLE
        self._alarm: int | None = None
        self._hold_pending = False  # STEP_CONTROL_EXECUTE_HOLD: a hold slowing down
        self._hold_complete = False  # SUSPEND_HOLD_COMPLETE
        self._jog_cancel = False  # SUSPEND_JOG_CANCEL
        self._soft_limit = False
        self._critical = False  # a hard or soft limit alarm: only a reset is heard
        self._reset_pending = False  # EXEC_RESET: abort whatever the main loop is doing
        self._boot_pending = False  # the port was opened: a hardware reset
        self._alarm_pending: int | None = None
        self._sleep_pending = False
        self._status_deferred = False  # a '?' read while homing
        self._overrides = [100, 100, 100]  # feed, rapid, spindle (%)
        self._wco_counter = 0
        self._ovr_counter = 0
        self._spindle_on = False  # the spindle output (its PWM) is on
        self._spindle_rpm = 0.0
        self._spindle_cw = False
        self._coolant = 0  # the coolant outputs (COOLANT_FLOOD | COOLANT_MIST)
        self._grip_closed = False  # what the backend's gripper was last told
        self._muted_bytes = b""
        self._planner: deque[_Block] = deque()
        self._pl_position = [0.0] * n
        self._under_way: object | None = None  # the block (or homing) on the worker now
        self._homed: bool | None = None
        self._epoch = 0  # bumped by every stop: jobs of an older epoch do not run
        self._rx: deque[int] = deque()
        self._filter = LineFilter()
        self._main_blocked = False  # the main loop waits (planner full, dwell, hold, ...)
        self._gc = ParserState(axes=n)
        #: hardware resets (port opens) so far
        self.boots = 0
        #: bytes dropped because the receive buffer was full
        self.rx_dropped = 0

    # -- for tests ------------------------------------------------------------------------

    @property
    def state_name(self) -> str:
        """The state as a status report names it: Idle, Run, Hold:0, Hold:1, Jog, Alarm, ..."""
        with self._cond:
            return self._state_text()

    @property
    def alarm(self) -> int | None:
        """The alarm that put the board in Alarm (None when not in Alarm, or locked at boot)."""
        with self._cond:
            return self._alarm if self._state == ALARM else None

    @property
    def work_offset(self) -> tuple[float, ...]:
        """The WCO (mm): the active G54..G59 offset + G92 + the tool length offset on Z."""
        with self._cond:
            return tuple(self._gc.work_offset())

    @property
    def machine_position(self) -> tuple[float, ...]:
        """MPos in mm (degrees for rotary axes), as a status report gives it."""
        return tuple(self._machine_position())

    @property
    def connected(self) -> bool:
        """A host has the port open (always True without ``auto_reset``)."""
        return self._connected.is_set()

    @property
    def planned(self) -> int:
        """Blocks in the planner (the one under way included)."""
        with self._cond:
            return len(self._planner)

    def error_lines(self, message: str) -> list[str]:
        """GRBL 1.1 words an error as its number only (gnea/grbl grbl/report.c
        report_status_message)."""
        code = int(message) if message.strip().isdigit() else Status.EXPECTED_COMMAND_LETTER
        return [f"error:{code}"]

    # -- life -----------------------------------------------------------------------------

    def __enter__(self) -> GrblEmulator:
        return self.start()

    def start(self) -> GrblEmulator:
        self._master, self._slave = open_pty()
        self._wake = os.pipe()
        tty.setraw(self._slave)
        self._path = os.ttyname(self._slave)
        if self.auto_reset:
            # packet mode shows a host's input flush (pyserial flushes when it opens a port);
            # the slave is closed so that reading the master fails with EIO until a host opens it
            fcntl.ioctl(self._master, termios.TIOCPKT, struct.pack("i", 1))
            os.close(self._slave)
            self._slave = -1
        with self._cond:
            self._power_up()
            # power-up: whatever the backend was doing stops; the first job resumes it
            self._stop_motion(force=True)
        self._running.set()
        for target, name in ((self._read_loop, "grbl-rx"), (self._serve, "grbl-main")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def write(self, data: bytes) -> None:
        if self._connected.is_set():  # nobody listening: the bytes are lost, as on a wire
            super().write(data)

    def reply(self, lines: list[str]) -> None:
        self.lines_answered += 1
        self._send(lines)

    def discard_input(self) -> None:
        with self._cond:
            self._rx.clear()
            self._filter.clear()
            self._cond.notify_all()

    def _send(self, lines: list[str]) -> None:
        """GRBL ends every line it prints with ``\\r\\n`` (gnea/grbl grbl/report.c)."""
        if lines and not self._muted:
            self.write("".join(line + "\r\n" for line in lines).encode())

    def _shutdown(self) -> None:
        self._running.clear()
        with self._cond:
            self._cond.notify_all()
        super()._shutdown()

    # -- the serial receive interrupt (reader thread) ---------------------------------------

    def _read_loop(self) -> None:
        while self._running.is_set():
            if not self._connected.is_set():
                if not self._await_open():
                    return
                continue
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], _POLL)
                if self._wake[0] in ready:
                    return
                if not ready:
                    continue
                chunk = os.read(self._master, 4096)
            except BlockingIOError:
                continue  # a hangup, and the port reopened since: see open_pty
            except OSError as exc:
                if exc.errno == errno.EIO and self.auto_reset:  # the host closed the port
                    self._connected.clear()
                    continue
                return
            except ValueError:
                return
            if self.auto_reset:
                if chunk and chunk[0] & termios.TIOCPKT_FLUSHREAD:
                    # a host opened the port again before its close was seen (pyserial
                    # flushes its input on open): DTR resets the Arduino
                    self._hardware_reset()
                    continue
                if not chunk or chunk[0] != termios.TIOCPKT_DATA:
                    continue  # a packet-mode status (a flush of output): nothing to read
                chunk = chunk[1:]
            self._receive(chunk)

    def _await_open(self) -> bool:
        """Wait until a host opens the port, let the bootloader run, then boot. While nobody
        has the slave side open, reading the master fails with EIO. False on shutdown."""
        while self._running.is_set():
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], _OPEN_POLL)
                if self._wake[0] in ready:
                    return False
                packet = os.read(self._master, 4096) if ready else b""
            except BlockingIOError:
                continue  # a hangup, and the port reopened since: see open_pty
            except OSError as exc:
                if exc.errno != errno.EIO or self._pause(_OPEN_POLL):
                    return False
                continue
            except ValueError:
                return False
            flushed = bool(packet) and packet[0] & termios.TIOCPKT_FLUSHREAD
            if not flushed and not self._bootloader():
                continue  # closed again before the board came up
            self._connected.set()
            self._hardware_reset()
            return True
        return False

    def _bootloader(self) -> bool:
        """The port is open: wait ``boot_delay`` or until the host flushes its input, dropping
        what arrives meanwhile (the Arduino's bootloader eats it). False if it closed again."""
        deadline = time.monotonic() + self.boot_delay
        while (left := deadline - time.monotonic()) > 0:
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], left)
                if self._wake[0] in ready:
                    return True  # shutting down: the caller's loop ends
                if ready and os.read(self._master, 4096)[0] & termios.TIOCPKT_FLUSHREAD:
                    return True
            except BlockingIOError:
                continue  # a hangup, and the port reopened since: see open_pty
            except OSError:
                return False
            except (ValueError, IndexError):
                return True
        return True

    def _pause(self, seconds: float) -> bool:
        """Sleep, unless woken for shutdown (True)."""
        ready, _, _ = select.select([self._wake[0]], [], [], seconds)
        return bool(ready)

    def _receive(self, chunk: bytes) -> None:
        """``ISR(SERIAL_RX)`` (gnea/grbl grbl/serial.c): real-time bytes are picked off and
        acted on wherever they fall; other extended-ASCII bytes are thrown away; the rest goes
        into the receive buffer."""
        if self._muted:  # a hung board: the bytes arrive (listed in received), nothing acts
            self._muted_bytes += chunk
            *lines, self._muted_bytes = self._muted_bytes.split(b"\n")
            self.received.extend(x.decode("ascii", "replace").strip() for x in lines if x.strip())
            self.dropped += len(lines)
            return
        start = 0
        for i, byte in enumerate(chunk):
            if byte in _REALTIME or byte > 0x7F:
                self._push(chunk[start:i])
                start = i + 1
                self._realtime(byte)
        self._push(chunk[start:])

    def _push(self, data: bytes) -> None:
        if not data:
            return
        with self._cond:
            for byte in data:
                while len(self._rx) >= RX_BUFFER_SIZE and self._running.is_set():
                    if self.rx_overflow and self._main_blocked:
                        break  # gnea/grbl grbl/serial.c: "Write data to buffer unless it is full"
                    self._cond.wait(_POLL)
                if len(self._rx) < RX_BUFFER_SIZE:
                    self._rx.append(byte)
                else:
                    self.rx_dropped += 1
            self._cond.notify_all()

    def _realtime(self, byte: int) -> None:
        if byte == CMD_RESET:
            self._mc_reset()
            return
        report = None
        with self._cond:
            if self._critical:  # gnea/grbl grbl/protocol.c: the limit alarm loop hears only reset
                return
            if self._state == HOMING:  # gnea/grbl grbl/limits.c limits_go_home: no checks run
                self._status_deferred |= byte == CMD_STATUS_REPORT
                return
            if byte == CMD_STATUS_REPORT:
                report = self._status_report()
            elif byte == CMD_FEED_HOLD:
                self._feed_hold()
            elif byte == CMD_CYCLE_START:
                self._cycle_start()
            elif byte == CMD_JOG_CANCEL:
                if self._state == JOG:  # gnea/grbl grbl/serial.c: only a jog can be cancelled
                    self._feed_hold()
            elif 0x90 <= byte <= 0x97:
                self._motion_override(byte)
            elif 0x99 <= byte <= 0x9D:
                self._spindle_override(byte)
            elif byte == 0xA0 or (byte == 0xA1 and self.enable_m7):
                self._coolant_toggle(COOLANT_FLOOD if byte == 0xA0 else COOLANT_MIST)
            # 0x84 (safety door) and 0x9E (spindle stop) are not emulated; others are dropped
        if report is not None:
            self._send([report])

    def _motion_override(self, byte: int) -> None:
        """gnea/grbl grbl/protocol.c protocol_exec_rt_system: feed 10-200 %, rapid 100/50/25 %."""
        feed, rapid, _ = self._overrides
        feed = {0x90: 100, 0x91: feed + 10, 0x92: feed - 10, 0x93: feed + 1, 0x94: feed - 1}.get(
            byte, feed
        )
        rapid = {0x95: 100, 0x96: 50, 0x97: 25}.get(byte, rapid)
        feed = max(10, min(200, feed))
        if (feed, rapid) != tuple(self._overrides[:2]):
            self._overrides[:2] = [feed, rapid]
            self._ovr_counter = 0

    def _spindle_override(self, byte: int) -> None:
        speed = self._overrides[2]
        speed = {0x99: 100, 0x9A: speed + 10, 0x9B: speed - 10, 0x9C: speed + 1}.get(byte, speed)
        speed = max(10, min(200, speed - 1 if byte == 0x9D else speed))
        if speed != self._overrides[2]:
            self._overrides[2] = speed
            self._ovr_counter = 0
            if self._gc.modal.spindle != SPINDLE_DISABLE:
                self._spindle_set(self._gc.modal.spindle, self._gc.spindle_speed)

    def _coolant_toggle(self, bit: int) -> None:
        """gnea/grbl grbl/protocol.c: coolant overrides toggle in Idle, Run, Hold and Jog."""
        if self._state in (IDLE, CYCLE, HOLD, JOG):
            self._gc.modal.coolant ^= bit
            self._coolant_set(self._gc.modal.coolant)

    # -- the state machine (under _cond) --------------------------------------------------

    def _mc_reset(self) -> None:
        """``mc_reset`` (gnea/grbl grbl/motion_control.c), on ctrl-x: stop the spindle and
        coolant; kill the motion only if the machine is moving (Run, Home, Jog) or a hold is
        still slowing down (STEP_CONTROL_EXECUTE_HOLD), and raise ALARM:3 then (ALARM:6 when
        homing), as the position is likely lost. A reset after a completed hold (Hold:0)
        raises no alarm and keeps the position; the planner is emptied on re-initialising."""
        with self._cond:
            if self._reset_pending:
                return
            self._reset_pending = True
            if self._state in (CYCLE, HOMING, JOG) or self._hold_pending:
                if self._state == HOMING:
                    if self._alarm_pending is None:
                        self._alarm_pending = ALARM_HOMING_FAIL_RESET
                else:
                    self._alarm_pending = ALARM_ABORT_CYCLE
                self._stop_motion()
            self._spindle_set(SPINDLE_DISABLE, 0.0, force=True)
            self._coolant_set(0, force=True)
            self._cond.notify_all()

    def _hardware_reset(self) -> None:
        """The port was opened: the Arduino resets (DTR), every output drops, the steppers
        stop where they are; main() runs again (gnea/grbl grbl/main.c)."""
        with self._cond:
            self.boots += 1
            self._stop_motion(force=True)
            self._planner.clear()
            self._spindle_set(SPINDLE_DISABLE, 0.0, force=True)
            self._coolant_set(0, force=True)
            self._rx.clear()
            self._filter.clear()
            self._alarm_pending = None  # the MCU restarts: nothing of before is reported
            self._boot_pending = self._reset_pending = True
            self._cond.notify_all()

    def _stop_motion(self, force: bool = False) -> None:
        """Stop the backend's motion at its next step; queued jobs of the old epoch skip."""
        self._epoch += 1
        if force or self._under_way is not None:
            self.worker.stop()

    def _feed_hold(self) -> None:
        """gnea/grbl grbl/protocol.c protocol_exec_rt_system, EXEC_FEED_HOLD (and the jog
        cancel, EXEC_MOTION_CANCEL in Jog): ignored in Alarm and Check; in Run or Jog the
        motion slows to a stop (here: the backend stops at its next step); Idle holds at once
        (Hold:0). A jog is cancelled rather than held: it stops, the planner is emptied and
        the state goes back to Idle."""
        if self._state in (ALARM, CHECK, SLEEP):
            return
        if self._state in (CYCLE, JOG) and not self._jog_cancel:
            self._hold_pending = True
            self._jog_cancel = self._state == JOG
            self._stop_motion()
        if self._state == IDLE:
            self._hold_complete = True
        if self._state != JOG:
            self._state = HOLD
        if self._hold_pending and self._under_way is None:
            self._cycle_stop()
        self._cond.notify_all()

    def _cycle_start(self) -> None:
        """EXEC_CYCLE_START (gnea/grbl grbl/protocol.c): only from Idle or a completed hold;
        resumes the planner's blocks, the interrupted one first (run again to its target)."""
        if self._state == HOLD and self._hold_complete:
            self._hold_pending = self._hold_complete = False
            if self._planner:
                self._state = CYCLE
                for block in self._planner:
                    self._submit(block)
            else:
                self._state = IDLE
            self._cond.notify_all()

    def _cycle_stop(self) -> None:
        """EXEC_CYCLE_STOP (gnea/grbl grbl/protocol.c): the motion has stopped. A hold is
        then complete (Hold:0) and waits for ``~``; a jog cancel empties the planner; a cycle
        that ran out of blocks (or a hold for a soft limit) goes Idle."""
        if self._state not in (CYCLE, JOG, HOLD) or self._reset_pending:
            return
        if self._state == HOLD and not self._soft_limit and not self._jog_cancel:
            if self._hold_pending:
                self._hold_complete = True
            self._hold_pending = False
        else:
            if self._jog_cancel:
                self._hold_pending = False
                self._planner.clear()
                self._sync_positions()
            self._hold_complete = self._jog_cancel = False
            self._state = IDLE
        self._cond.notify_all()

    def _suspended(self) -> bool:
        """``sys.suspend`` or sleep: the main loop stops at its next check until resumed."""
        return self._state in (HOLD, SLEEP) or self._jog_cancel

    def _sync_positions(self) -> None:
        """gc_sync_position and plan_sync_position: the parser and planner start from where
        the machine is."""
        here = self._machine_position()
        self._gc.position = list(here)
        self._pl_position = list(here)

    # -- outputs --------------------------------------------------------------------------

    def _spindle_set(self, state: int, rpm: float, force: bool = False) -> None:
        """``spindle_set_state`` (gnea/grbl grbl/spindle_control.c, VARIABLE_SPINDLE on a
        328p): the spindle output is the PWM pin, off when the speed (times the override) is 0,
        so ``M3`` with no S (S0 after a reset) leaves it off; at or above $30 it is fully on."""
        if self._reset_pending and not force:
            return  # "Block during abort"
        rpm_max, rpm_min = self.settings[30], self.settings[31]
        if state == SPINDLE_DISABLE:
            on, speed = False, 0.0
        else:
            speed = rpm * self._overrides[2] / 100
            if rpm_min >= rpm_max or speed >= rpm_max:
                on, speed = True, rpm_max
            elif speed <= rpm_min:
                on, speed = speed != 0.0, (0.0 if speed == 0.0 else rpm_min)
            else:
                on = True
        self._spindle_on, self._spindle_rpm = on, speed
        self._spindle_cw = state == SPINDLE_CW
        self._ovr_counter = 0
        self._drive_gripper()

    def _coolant_set(self, mode: int, force: bool = False) -> None:
        """``coolant_set_state`` (gnea/grbl grbl/coolant_control.c)."""
        if self._reset_pending and not force:
            return
        self._coolant = mode
        self._ovr_counter = 0
        self._drive_gripper()

    def _drive_gripper(self) -> None:
        level = {
            "spindle": self._spindle_on,
            "flood": bool(self._coolant & COOLANT_FLOOD),
            "mist": bool(self._coolant & COOLANT_MIST),
        }[self.grip_output]
        if level != self._grip_closed:
            self._grip_closed = level

            def grip(arm: Arm) -> None:
                arm.grip(level)

            if not self.worker.submit(grip, timeout=_POLL):
                log.error("grbl emulator: the backend worker is full; the gripper was not moved")

    # -- backend jobs ---------------------------------------------------------------------

    def _submit(self, block: _Block) -> None:
        epoch = self._epoch

        def job(arm: Arm) -> None:
            self._run_block(arm, block, epoch)

        if not self.worker.submit(job, timeout=_POLL):
            log.error("grbl emulator: the backend worker is full; a block was not run")

    def _nominal_rate(self, block: _Block) -> float:
        """plan_compute_profile_nominal_speed (gnea/grbl grbl/planner.c), mm/min."""
        rate = block.programmed_rate
        if block.rapid:
            rate *= self._overrides[1] / 100
        else:
            if not block.jog:
                rate *= self._overrides[0] / 100
            rate = min(rate, block.rapid_rate)
        return max(rate, MINIMUM_FEED_RATE)

    def _run_block(self, arm: Arm, block: _Block, epoch: int) -> None:
        with self._cond:
            if epoch != self._epoch or not self._planner or self._planner[0] is not block:
                return
            self._under_way = block
            rate = self._nominal_rate(block)
            pose = self._pose_of(block.target, arm.state().pose)
        failure: Exception | None = None
        try:
            arm.move_to(pose, rate / 60_000.0)
        except Exception as exc:
            failure = exc
        with self._cond:
            self._under_way = None
            if failure is None and self._planner and self._planner[0] is block:
                self._planner.popleft()
            if failure is not None and epoch == self._epoch and not self._reset_pending:
                # not stopped by us: the backend could not get there. A machine that runs into
                # the end of its travel trips a limit switch: mc_reset + ALARM:1 (limits.c)
                log.warning("grbl emulator: a move failed (%s): ALARM:1", failure)
                self._mc_reset()
                self._alarm_pending = ALARM_HARD_LIMIT
            elif self._hold_pending or not self._planner:
                self._cycle_stop()
            self._cond.notify_all()

    def _home_job(self, epoch: int) -> Callable[[Arm], None]:
        def job(arm: Arm) -> None:
            with self._cond:
                if epoch != self._epoch:
                    return
                self._under_way = "homing"
            homed = True
            try:
                arm.home()
            except Exception as exc:
                log.warning("grbl emulator: homing failed (%s)", exc)
                homed = False
            with self._cond:
                self._under_way = None
                if epoch == self._epoch:
                    self._homed = homed
                self._cond.notify_all()

        return job

    # -- positions ------------------------------------------------------------------------

    def _machine_position(self) -> list[float]:
        pose = self.arm.state().pose
        position = [pose.x * 1000 - self._origin[0], pose.y * 1000 - self._origin[1]]
        position.append(pose.z * 1000 - self._origin[2])
        position += [math.degrees(getattr(pose, _ROTARY[a])) for a in self.axes[3:]]
        return position

    def _pose_of(self, target: list[float], here: Pose) -> Pose:
        rotation = {"rx": here.rx, "ry": here.ry, "rz": here.rz}
        for letter, degrees in zip(self.axes[3:], target[3:], strict=True):
            rotation[_ROTARY[letter]] = math.radians(degrees)
        x, y, z = ((target[i] + self._origin[i]) / 1000.0 for i in range(3))
        return Pose(x, y, z, **rotation)

    def _out_of_travel(self, target: list[float]) -> bool:
        """system_check_travel_limits (gnea/grbl grbl/system.c): machine space is
        [-$13x, 0] on every axis (homing sets the origin at the positive end)."""
        return any(value > 0 or value < -self.settings[130 + i] for i, value in enumerate(target))

    # -- the main loop (serve thread) -----------------------------------------------------

    def _serve(self) -> None:
        """protocol_main_loop (gnea/grbl grbl/protocol.c) and main()'s re-initialisation."""
        while self._running.is_set():
            line = None
            with self._cond:
                while self._running.is_set():
                    if self._reset_pending or self._alarm_pending is not None:
                        break
                    if self._sleep_pending or self._status_deferred:
                        break
                    line = self._take_line()
                    if line is not None:
                        break
                    self._cond.wait(_POLL)
                if not self._running.is_set():
                    return
                if line is None:
                    aborted = not self._rt_system()
                    if aborted:
                        self._reinit(power_up=self._boot_pending)
                    continue
            self._process(*line)

    def _take_line(self) -> tuple[str, bool] | None:
        """Read the receive buffer up to the end of a line (None: no whole line yet)."""
        got = None
        if self._rx:
            while self._rx and got is None:
                got = self._filter.feed(self._rx.popleft())
            self._cond.notify_all()  # room in the buffer
        return got

    def _rt_system(self) -> bool:
        """protocol_exec_rt_system's main-loop work: print a pending alarm (a hard or soft
        limit alarm then hears nothing but a reset, gnea/grbl grbl/protocol.c), a deferred
        status report, go to sleep. False once a reset is pending (sys.abort)."""
        if self._alarm_pending is not None:
            code, self._alarm_pending = self._alarm_pending, None
            self._state, self._alarm = ALARM, code
            self._send([f"ALARM:{code}"])
            if code in (ALARM_HARD_LIMIT, ALARM_SOFT_LIMIT):
                self._send(["[MSG:Reset to continue]"])
                self._critical = True
                if not self._boot_pending:
                    self._reset_pending = False  # "Disable any existing reset"
                while not self._reset_pending and self._running.is_set():
                    self._cond.wait(_POLL)
                self._critical = False
        if self._status_deferred and self._state != HOMING:
            self._status_deferred = False
            self._send([self._status_report()])
        if self._sleep_pending and not self._reset_pending:
            # gnea/grbl grbl/protocol.c protocol_exec_rt_suspend: sleep de-energizes and waits
            # for a reset
            self._sleep_pending = False
            self._spindle_set(SPINDLE_DISABLE, 0.0)
            self._coolant_set(0)
            self._state = SLEEP
            self._send(["[MSG:Sleeping]"])
        return not self._reset_pending

    def _wait(self, condition: Callable[[], bool] | None = None) -> bool:
        """protocol_execute_realtime in a loop: wait (and hold while suspended) until
        ``condition``; False on a reset (the caller winds up and the line is answered ok)."""
        self._main_blocked = True
        try:
            while self._running.is_set():
                if not self._rt_system():
                    return False
                if not self._suspended() and (condition is None or condition()):
                    return True
                self._cond.wait(_POLL)
            return False
        finally:
            self._main_blocked = False

    def _process(self, line: str, overflow: bool) -> None:
        self.lines_received += 1
        self.received.append(line)
        self.max_unanswered = max(self.max_unanswered, self.lines_received - self.lines_answered)
        with self._cond:
            boots = self.boots
            # the check at the end of a line: in a hold the line waits; a reset drops it
            if not self._wait():
                return
        if self._fail_next is not None:
            message, self._fail_next = self._fail_next, None
            self.reply(self.error_lines(message))
            return
        try:
            status = self._execute(line, overflow)
        except Exception:  # an emulator bug must not kill the board
            log.exception("grbl emulator: %r failed", line)
            status = Status.UNSUPPORTED_COMMAND
        if self.boots == boots:  # a line cut by a hardware reset is never answered
            self.reply(["ok"] if status == Status.OK else [f"error:{status}"])

    def _execute(self, line: str, overflow: bool) -> int:
        """gnea/grbl grbl/protocol.c protocol_main_loop: an overflowed line is error:11, an
        empty one ok, ``$`` lines are system commands; G-code is locked in Alarm and Jog."""
        if overflow:
            return Status.OVERFLOW
        if not line:
            return Status.OK
        if line[0] == "$":
            return self._system_command(line)
        with self._cond:
            if self._state in (ALARM, JOG):
                return Status.SYSTEM_GC_LOCK
        return self._gc_execute(line)

    # -- re-initialising (gnea/grbl grbl/main.c) ------------------------------------------

    def _power_up(self) -> None:
        """main() before its loop: position zero, Alarm if homing is enabled (HOMING_INIT_LOCK)."""
        self._state = ALARM if self.settings[22] else IDLE
        self._alarm = None
        if self.machine_origin is None:
            pose = self.arm.state().pose
            self._origin = [pose.x * 1000, pose.y * 1000, pose.z * 1000]

    def _reinit(self, power_up: bool) -> None:
        """main()'s loop (gnea/grbl grbl/main.c) after a reset: clear the system, the receive
        buffer, the parser (G92 and the tool offset go; G54-G59 and G28/G30 are kept), the
        planner; print the banner; Alarm stays Alarm (and Sleep becomes it); otherwise run
        the startup lines (gnea/grbl grbl/protocol.c protocol_main_loop)."""
        if power_up:
            self._power_up()
        prior = self._state
        self._overrides = [100, 100, 100]
        self._wco_counter = self._ovr_counter = 0
        self._hold_pending = self._hold_complete = self._jog_cancel = False
        self._soft_limit = self._critical = self._sleep_pending = self._status_deferred = False
        self._reset_pending = self._boot_pending = False
        self._alarm_pending = None
        self._rx.clear()
        self._filter.clear()
        self._gc = ParserState(axes=len(self.axes), coord_system=list(self._coords[0]))
        self._spindle_set(SPINDLE_DISABLE, 0.0)
        self._coolant_set(0)
        self._planner.clear()
        self._epoch += 1
        if self._under_way is not None:
            self.worker.stop()
        self._sync_positions()
        self._state = ALARM if prior in (ALARM, SLEEP) else IDLE
        self._cond.notify_all()
        self._send(["", BANNER])
        if self._state == ALARM:
            self._send(["[MSG:'$H'|'$X' to unlock]"])
        else:
            self._run_startup_lines()

    def _run_startup_lines(self) -> None:
        """system_execute_startup (gnea/grbl grbl/system.c): ``>line:ok`` for each one."""
        for line in self._startup:
            if line:
                status = self._gc_execute(line)
                self._send([f">{line}:" + ("ok" if status == Status.OK else f"error:{status}")])

    # -- $ commands (gnea/grbl grbl/system.c system_execute_line) -------------------------

    def _system_command(self, line: str) -> int:
        with self._cond:
            state = self._state
        second = line[1] if len(line) > 1 else ""
        if not second:
            self._send(["[HLP:$$ $# $G $I $N $x=val $Nx=line $J=line $SLP $C $X $H ~ ! ? ctrl-x]"])
            return Status.OK
        if second == "J":
            if state not in (IDLE, JOG):
                return Status.IDLE_ERROR
            if line[2:3] != "=":
                return Status.INVALID_STATEMENT
            return self._gc_execute(line, jog=True)
        if second in "$GCX":
            if len(line) > 2:
                return Status.INVALID_STATEMENT
            return self._simple_command(second, state)
        if state not in (IDLE, ALARM):
            return Status.IDLE_ERROR
        if second == "#":
            if len(line) > 2:
                return Status.INVALID_STATEMENT
            self._send(self._parameters())
            return Status.OK
        if second == "H":
            if not self.settings[22]:
                return Status.SETTING_DISABLED
            if len(line) > 2:  # HOMING_SINGLE_AXIS_COMMANDS is off by default
                return Status.INVALID_STATEMENT
            return self._home()
        if second == "S":
            if line != "$SLP":
                return Status.INVALID_STATEMENT
            with self._cond:
                self._sleep_pending = True  # after the ok (system_set_exec_state_flag)
            return Status.OK
        if second == "I":
            if len(line) == 2:
                self._send([f"[VER:{VERSION}.{BUILD}:{self._build_info}]", self._options()])
            elif line[2] != "=":
                return Status.INVALID_STATEMENT
            else:
                self._build_info = line[3:]
            return Status.OK
        if second == "R":
            if len(line) != 6 or not line.startswith("$RST=") or line[5] not in "$#*":
                return Status.INVALID_STATEMENT
            self._restore(line[5])
            self._send(["[MSG:Restoring defaults]"])
            self._mc_reset()  # "Force reset to ensure settings are initialized correctly"
            return Status.OK
        startup = second == "N"
        if startup:
            if len(line) == 2:
                self._send([f"$N{i}={text}" for i, text in enumerate(self._startup)])
                return Status.OK
            if state != IDLE:  # stored only when Idle: no motion from a startup line in Alarm
                return Status.IDLE_ERROR
        read = read_float(line, 2 if startup else 1)
        if read is None:
            return Status.BAD_NUMBER_FORMAT
        parameter, i = read
        if line[i : i + 1] != "=":
            return Status.INVALID_STATEMENT
        if startup:
            index = math.trunc(parameter)
            if not 0 <= index < N_STARTUP_LINE:  # the firmware would write past its table
                return Status.INVALID_STATEMENT
            status = self._gc_execute(line[i + 1 :])  # a startup line is run to check it
            if status == Status.OK:
                with self._cond:
                    self._wait(self._planner_empty)  # FORCE_BUFFER_SYNC_DURING_EEPROM_WRITE
                self._startup[index] = line[i + 1 :]
            return status
        read = read_float(line, i + 1)
        if read is None:
            return Status.BAD_NUMBER_FORMAT
        value, j = read
        if j != len(line) or parameter > 255:
            return Status.INVALID_STATEMENT
        return self._store_setting(math.trunc(parameter), value)

    def _simple_command(self, command: str, state: str) -> int:
        if command == "$":
            if state in (CYCLE, HOLD):  # "Block during cycle. Takes too long to print."
                return Status.IDLE_ERROR
            self._send(self._settings_report())
        elif command == "G":
            with self._cond:
                self._send([self._modes_report()])
        elif command == "C":
            if state == CHECK:  # leaving check mode resets the board
                self._mc_reset()
                self._send(["[MSG:Disabled]"])
            elif state != IDLE:
                return Status.IDLE_ERROR
            else:
                with self._cond:
                    self._state = CHECK
                self._send(["[MSG:Enabled]"])
        elif state == ALARM:  # $X: "Don't run startup script" after an unlock
            with self._cond:
                self._state, self._alarm = IDLE, None
            self._send(["[MSG:Caution: Unlocked]"])
        return Status.OK

    def _home(self) -> int:
        """$H: mc_homing_cycle (gnea/grbl grbl/motion_control.c): the backend homes; status
        reports wait until it is done. A reset meanwhile is ALARM:6; a backend that cannot home
        is taken as a switch never found, ALARM:9. Done: the position is the homed one (each
        axis $27 short of its switch: -$27, or $27-$13x for an axis homing negative, $23;
        gnea/grbl grbl/limits.c limits_go_home), then Idle and the startup lines."""
        with self._cond:
            self._state = HOMING
            self._homed = None
            epoch = self._epoch
        if not self.worker.submit(self._home_job(epoch), timeout=_POLL):
            log.error("grbl emulator: the backend worker is full; homing did not start")
        with self._cond:
            if not self._wait(lambda: self._homed is not None):
                return Status.OK  # reset during homing: ALARM:6 was printed; answered ok
            if not self._homed:
                self._mc_reset()
                self._alarm_pending = ALARM_HOMING_FAIL_APPROACH
                self._rt_system()
                return Status.OK
            if self.machine_origin is None:
                pose = self.arm.state().pose
                pulloff, mask = self.settings[27], int(self.settings[23])
                for i, tool in enumerate((pose.x, pose.y, pose.z)):
                    negative = mask >> i & 1
                    homed = pulloff - self.settings[130 + i] if negative else -pulloff
                    self._origin[i] = tool * 1000 - homed
            self._sync_positions()
            if self._status_deferred:
                self._status_deferred = False
                self._send([self._status_report()])
            self._state, self._alarm = IDLE, None
        self._run_startup_lines()
        return Status.OK

    def _store_setting(self, number: int, value: float) -> int:
        """settings_store_global_setting (gnea/grbl grbl/settings.c)."""
        if value < 0:
            return Status.NEGATIVE_VALUE
        n = len(self.axes)
        if number >= 100:
            if not any(base <= number < base + n for base in (100, 110, 120, 130)):
                return Status.INVALID_STATEMENT
            self.settings[number] = value
            return Status.OK
        if number not in DEFAULT_SETTINGS:
            return Status.INVALID_STATEMENT
        integer = math.trunc(value)
        if number == 0 and integer < 3:
            return Status.SETTING_STEP_PULSE_MIN
        if number == 20 and integer and not self.settings[22]:
            return Status.SOFT_LIMIT_ERROR  # soft limits need homing
        if number in _FLAG_SETTINGS:
            self.settings[number] = 1 if integer else 0
        elif number in _INTEGER_SETTINGS:
            self.settings[number] = integer & 0xFF
        else:
            self.settings[number] = value
        if number == 22 and not integer:
            self.settings[20] = 0  # "Force disable soft-limits"
        if number == 13:
            with self._cond:
                self._wco_counter = 0  # system_flag_wco_change
        return Status.OK

    def _restore(self, what: str) -> None:
        """$RST=$ (settings), $RST=# (offsets), $RST=* (all): settings_restore."""
        if what in "$*":
            self.settings.clear()
            self.settings.update(self._defaults)
        if what in "#*":
            self._coords = [[0.0] * len(self.axes) for _ in range(8)]
        if what == "*":
            self._startup = [""] * N_STARTUP_LINE
            self._build_info = ""

    # -- G-code: step 4 of gc_execute_line (gnea/grbl grbl/gcode.c) -----------------------

    def _gc_execute(self, line: str, jog: bool = False) -> int:
        with self._cond:  # waits inside release it
            block = parse_block(
                line, self._gc, self._coords, axes=self.axes, enable_m7=self.enable_m7, jog=jog
            )
            if isinstance(block, int):
                return block
            if jog:
                return self._jog(block)
            return self._gc_run(block)

    def _gc_run(self, block: Block) -> int:
        gc = self._gc
        gc.line_number = block.line_number
        gc.modal.feed_mode = block.modal.feed_mode
        gc.feed_rate = block.feed
        if gc.spindle_speed != block.spindle_speed:
            if gc.modal.spindle != SPINDLE_DISABLE:
                self._spindle_sync(gc.modal.spindle, block.spindle_speed)
            gc.spindle_speed = block.spindle_speed
        gc.tool = block.tool
        if gc.modal.spindle != block.modal.spindle:
            self._spindle_sync(block.modal.spindle, gc.spindle_speed)
            gc.modal.spindle = block.modal.spindle
        if gc.modal.coolant != block.modal.coolant:
            self._coolant_sync(block.modal.coolant)
            gc.modal.coolant = block.modal.coolant
        if block.non_modal == NON_MODAL_DWELL:
            self._dwell(block.dwell)
        gc.modal.plane = block.modal.plane
        gc.modal.units = block.modal.units
        if block.sets_tool_length:
            gc.modal.tool_length = block.modal.tool_length
            offset = block.target[TOOL_LENGTH_OFFSET_AXIS] if gc.modal.tool_length else 0.0
            if gc.tool_length_offset != offset:
                gc.tool_length_offset = offset
                self._wco_change()
        if gc.modal.coord_select != block.modal.coord_select:
            gc.modal.coord_select = block.modal.coord_select
            gc.coord_system = list(block.block_coord_system)
            self._wco_change()
        gc.modal.distance = block.modal.distance
        self._non_modal(block)
        gc.modal.motion = block.modal.motion
        if block.moves and self._motion(block):
            gc.position = list(block.target)
        return self._program_flow(block)

    def _non_modal(self, block: Block) -> None:
        gc = self._gc
        if block.non_modal == NON_MODAL_SET_COORDINATE_DATA:
            self._write_coords(block.coord_index, block.ijk)
            if gc.modal.coord_select == block.coord_index:
                gc.coord_system = list(block.ijk)
                self._wco_change()
        elif block.non_modal in (NON_MODAL_GO_HOME_0, NON_MODAL_GO_HOME_1):
            # G28/G30: a rapid to the intermediate point (if given), then to the stored one;
            # a move, not homing (gnea/grbl grbl/gcode.c)
            if block.axis_command and not self._mc_line(block.target, 0.0, rapid=True):
                return
            self._mc_line(block.ijk, 0.0, rapid=True)
            gc.position = list(block.ijk)
        elif block.non_modal == NON_MODAL_SET_HOME_0:
            self._write_coords(SETTING_INDEX_G28, gc.position)
        elif block.non_modal == NON_MODAL_SET_HOME_1:
            self._write_coords(SETTING_INDEX_G30, gc.position)
        elif block.non_modal == NON_MODAL_SET_COORDINATE_OFFSET:
            gc.coord_offset = list(block.target)
            self._wco_change()
        elif block.non_modal == NON_MODAL_RESET_COORDINATE_OFFSET:
            gc.coord_offset = [0.0] * len(self.axes)
            self._wco_change()

    def _motion(self, block: Block) -> bool:
        """Step 20: G0 at the rapid rate, G1 at F, G2/G3 as segments (mc_arc); False if cut
        short by a reset."""
        motion = block.modal.motion
        inverse = block.modal.feed_mode == 1
        if motion == MOTION_SEEK:
            return self._mc_line(block.target, 0.0, rapid=True)
        if motion == MOTION_LINEAR:
            return self._mc_line(block.target, block.feed, inverse=inverse)
        points = arc_points(
            self._gc.position,
            block.target,
            block.ijk,
            block.radius,
            block.plane_axes,
            block.clockwise,
            self.settings[12],
        )
        feed = block.feed * len(points) if inverse and len(points) > 1 else block.feed
        inverse = inverse and len(points) == 1  # segments run at an absolute feed (mc_arc)
        return all(self._mc_line(point, feed, inverse=inverse) for point in points)

    def _program_flow(self, block: Block) -> int:
        """Step 21: M0 pauses (a feed hold; the ok comes after ``~``), M2/M30 end the program:
        some modes go back to their defaults, spindle and coolant stop, ``[MSG:Pgm End]``."""
        gc = self._gc
        flow = block.modal.program_flow
        if flow == PROGRAM_FLOW_RUNNING:
            return Status.OK
        with self._cond:
            self._wait(self._planner_empty)
            if flow == PROGRAM_FLOW_PAUSED:
                if self._state != CHECK:
                    self._feed_hold()
                    self._wait()
                return Status.OK
            gc.modal.motion, gc.modal.plane, gc.modal.distance = MOTION_LINEAR, 0, 0
            gc.modal.feed_mode = gc.modal.coord_select = 0
            gc.modal.spindle, gc.modal.coolant = SPINDLE_DISABLE, 0
            self._overrides = [100, 100, 100]
            if self._state != CHECK:
                gc.coord_system = list(self._coords[0])
                self._wco_counter = 0
                self._spindle_set(SPINDLE_DISABLE, 0.0)
                self._coolant_set(0)
        self._send(["[MSG:Pgm End]"])
        return Status.OK

    def _jog(self, block: Block) -> int:
        """gnea/grbl grbl/jog.c jog_execute: a target out of travel (soft limits on) is
        error:15 and nothing moves; otherwise it is planned and the state becomes Jog."""
        if self.settings[20] and self._out_of_travel(block.target):
            return Status.TRAVEL_EXCEEDED
        if self._mc_line(block.target, block.feed, jog=True):
            self._gc.position = list(block.target)
        return Status.OK

    def _spindle_sync(self, state: int, rpm: float) -> None:
        """spindle_sync: the planner empties first, then the output changes (not in Check)."""
        with self._cond:
            if self._state != CHECK and self._wait(self._planner_empty):
                self._spindle_set(state, rpm)

    def _coolant_sync(self, mode: int) -> None:
        with self._cond:
            if self._state != CHECK and self._wait(self._planner_empty):
                self._coolant_set(mode)

    def _wco_change(self) -> None:
        """system_flag_wco_change: waits for the planner (FORCE_BUFFER_SYNC_DURING_WCO_CHANGE),
        and the next status report carries WCO."""
        with self._cond:
            self._wait(self._planner_empty)
            self._wco_counter = 0

    def _write_coords(self, index: int, data: list[float]) -> None:
        """settings_write_coord_data: waits for the planner
        (FORCE_BUFFER_SYNC_DURING_EEPROM_WRITE), then writes, even after a reset."""
        with self._cond:
            self._wait(self._planner_empty)
            self._coords[index] = list(data)

    def _planner_empty(self) -> bool:
        """protocol_buffer_synchronize's condition: no block left and not in a cycle."""
        return not self._planner and self._state != CYCLE

    def _dwell(self, seconds: float) -> None:
        """mc_dwell (gnea/grbl grbl/motion_control.c): in Check nothing; otherwise the planner
        empties (so ``G4 P0`` answers once every motion is done), then P seconds in steps of
        50 ms (delay_sec), paused while held."""
        with self._cond:
            if self._state == CHECK or not self._wait(self._planner_empty):
                return
            left = math.ceil(seconds / DWELL_TIME_STEP) * DWELL_TIME_STEP
            while left > 0:
                if not self._wait():
                    return
                began = time.monotonic()
                self._main_blocked = True
                self._cond.wait(min(left, _POLL))
                self._main_blocked = False
                left -= time.monotonic() - began

    def _mc_line(
        self,
        target: list[float],
        feed: float,
        *,
        rapid: bool = False,
        jog: bool = False,
        inverse: bool = False,
    ) -> bool:
        """mc_line (gnea/grbl grbl/motion_control.c): soft limits, then wait for room in the
        planner and plan the block (plan_buffer_line: a move shorter than a step is dropped;
        the rate is capped by $110-$112 along the move). False if cut short by a reset."""
        with self._cond:
            if self.settings[20] and not jog and self._out_of_travel(target):
                self._soft_limit_alarm()
                return False
            if self._state == CHECK:
                return True
            if not self._wait(lambda: len(self._planner) < PLANNER_BLOCKS):
                return False
            start = self._pl_position
            steps = [self.settings[100 + i] for i in range(len(target))]
            if all(
                _lround(t * s) == _lround(p * s)
                for t, p, s in zip(target, start, steps, strict=True)
            ):
                return True  # PLAN_EMPTY_BLOCK
            delta = [t - p for t, p in zip(target, start, strict=True)]
            millimeters = math.sqrt(sum(d * d for d in delta))
            rapid_rate = min(
                self.settings[110 + i] * millimeters / abs(d) for i, d in enumerate(delta) if d
            )
            programmed = feed * millimeters if inverse else feed
            if rapid:
                programmed = rapid_rate
            block = _Block(list(target), programmed, rapid_rate, rapid=rapid, jog=jog)
            self._pl_position = list(target)
            self._planner.append(block)
            if self._state == IDLE:  # the auto cycle start (or jog_execute)
                self._state = JOG if jog else CYCLE
            if self._state in (CYCLE, JOG):
                self._submit(block)
            return True

    def _soft_limit_alarm(self) -> None:
        """limits_soft_check (gnea/grbl grbl/limits.c): a running cycle is held to a stop
        (position kept), then mc_reset and ALARM:2, which hears only a reset."""
        self._soft_limit = True
        if self._state == CYCLE:
            self._feed_hold()
            if not self._wait(lambda: self._state == IDLE):
                return
        self._mc_reset()
        self._alarm_pending = ALARM_SOFT_LIMIT
        self._rt_system()

    # -- reports (gnea/grbl grbl/report.c) ------------------------------------------------

    def _state_text(self) -> str:
        if self._state == HOLD:
            if self._jog_cancel:
                return JOG
            return "Hold:0" if self._hold_complete else "Hold:1"
        return self._state

    def _coord(self, values: list[float]) -> str:
        """printFloat_CoordValue for each axis: mm with 3 decimals, or inches ($13) with 4."""
        inches = bool(self.settings[13])
        return ",".join(
            print_float(v / MM_PER_INCH, 4) if inches and i < 3 else print_float(v, 3)
            for i, v in enumerate(values)
        )

    def _rate(self, value: float) -> str:
        """printFloat_RateValue: mm/min with no decimal, or in/min with 1."""
        if self.settings[13]:
            return print_float(value / MM_PER_INCH, 1)
        return print_float(value, 0)

    def _status_report(self) -> str:
        """report_realtime_status: state, MPos or WPos ($10 bit 0), Bf ($10 bit 1), FS; WCO
        when it changed and every 10th report (30th when busy), Ov the report after it and
        every 10th (20th), with A: the outputs that are on."""
        position = self._machine_position()
        wco = self._gc.work_offset()
        mask = int(self.settings[10])
        if mask & 1:
            fields = [self._state_text(), "MPos:" + self._coord(position)]
        else:
            work = [p - w for p, w in zip(position, wco, strict=True)]
            fields = [self._state_text(), "WPos:" + self._coord(work)]
        if mask & 2:
            fields.append(
                f"Bf:{PLANNER_BLOCKS - len(self._planner)},{RX_BUFFER_SIZE - len(self._rx)}"
            )
        running = self._under_way if isinstance(self._under_way, _Block) else None
        rate = self._nominal_rate(running) if running and not self._hold_complete else 0.0
        fields.append(f"FS:{self._rate(rate)},{print_float(self._spindle_rpm, 0)}")
        busy = self._state in (HOMING, CYCLE, HOLD, JOG)
        if self._wco_counter > 0:
            self._wco_counter -= 1
        else:
            self._wco_counter = (30 if busy else 10) - 1
            if self._ovr_counter == 0:
                self._ovr_counter = 1
            fields.append("WCO:" + self._coord(wco))
        if self._ovr_counter > 0:
            self._ovr_counter -= 1
        else:
            self._ovr_counter = (20 if busy else 10) - 1
            fields.append("Ov:" + ",".join(str(v) for v in self._overrides))
            outputs = ("S" if self._spindle_cw else "C") if self._spindle_on else ""
            outputs += "F" if self._coolant & COOLANT_FLOOD else ""
            outputs += "M" if self.enable_m7 and self._coolant & COOLANT_MIST else ""
            if outputs:
                fields.append("A:" + outputs)
        return "<" + "|".join(fields) + ">"

    def _settings_report(self) -> list[str]:
        """report_grbl_settings: ``$N=value`` in the firmware's order."""
        numbers = sorted(DEFAULT_SETTINGS)
        for base in (100, 110, 120, 130):
            numbers += [base + i for i in range(len(self.axes))]
        lines = []
        for number in numbers:
            value = self.settings[number]
            if number in _INTEGER_SETTINGS:
                text = str(int(value))
            else:
                text = print_float(value, 0 if number in (30, 31) else 3)
            lines.append(f"${number}={text}")
        return lines

    def _parameters(self) -> list[str]:
        """report_ngc_parameters ($#): G54-G59, G28, G30, G92, TLO, PRB (never probed)."""
        with self._cond:
            names = [f"G{54 + i}" for i in range(6)] + ["G28", "G30"]
            lines = [
                f"[{name}:{self._coord(c)}]" for name, c in zip(names, self._coords, strict=True)
            ]
            lines.append(f"[G92:{self._coord(self._gc.coord_offset)}]")
            lines.append(f"[TLO:{self._coord([self._gc.tool_length_offset])}]")
            lines.append(f"[PRB:{self._coord([0.0] * len(self.axes))}:0]")
        return lines

    def _modes_report(self) -> str:
        """report_gcode_modes ($G)."""
        modal = self._gc.modal
        motion = modal.motion if modal.motion != MOTION_NONE else 80
        words = [
            f"G{motion}",
            f"G{54 + modal.coord_select}",
            f"G{17 + modal.plane}",
            f"G{21 - modal.units}",
            f"G{90 + modal.distance}",
            f"G{94 - modal.feed_mode}",
            {SPINDLE_CW: "M3", SPINDLE_DISABLE: "M5"}.get(modal.spindle, "M4"),
        ]
        if self.enable_m7 and modal.coolant:
            words += ["M7"] * bool(modal.coolant & COOLANT_MIST)
            words += ["M8"] * bool(modal.coolant & COOLANT_FLOOD)
        else:
            words.append("M8" if modal.coolant else "M9")
        words += [f"T{self._gc.tool}", f"F{self._rate(self._gc.feed_rate)}"]
        words.append(f"S{print_float(self._gc.spindle_speed, 0)}")
        return "[GC:" + " ".join(words) + "]"

    def _options(self) -> str:
        """report_build_info's [OPT:]: V (variable spindle), M (M7), blocks, RX bytes."""
        return f"[OPT:V{'M' if self.enable_m7 else ''},{PLANNER_BLOCKS},{RX_BUFFER_SIZE}]"


def _lround(value: float) -> int:
    """C's lround: half away from zero."""
    return int(math.copysign(math.floor(abs(value) + 0.5), value))
