"""A Marlin 2.1 controller on a pseudo-terminal, written from the firmware's source.

``MarlinEmulator(arm).start()`` opens a pty; :attr:`path` is what a driver opens. It behaves as
a stock build of MarlinFirmware/Marlin bugfix-2.1.x does on a serial link (every behaviour
below names the source it follows; paths are in that repository):

- **Boot.** With ``auto_reset`` (an Arduino whose DTR resets it), opening the port reboots the
  board: the command queue, the line number, the known position and the outputs are gone, and
  it prints ``start``, `` External Reset``, ``Marlin bugfix-2.1.x`` and its ``echo:`` lines
  (Marlin/src/MarlinCore.cpp ``setup``). A reopen is another boot. Without ``auto_reset`` (a
  native-USB board) it says nothing until spoken to.
- **Reading.** Lines are read from the serial buffer into a command queue of ``bufsize`` (4)
  entries, in ``idle()`` as well as between commands, i.e. also while a command waits
  (Marlin/src/MarlinCore.cpp ``manage_inactivity``: ``queue.get_available_commands()``). Line
  numbers and checksums are checked when a line is read, not when it runs, so
  ``Error:...``/``Resend: N``/``ok`` may come before the ``ok`` of a command still running
  (Marlin/src/gcode/queue.cpp ``GCodeQueue::get_serial_commands``, ``gcode_line_error``,
  ``flush_and_request_resend``). A line error empties the serial buffer (the lines sent after
  the bad one are lost too).
  Within :meth:`busy` nothing is read (a test's board that takes no line, so the host's
  window fills in full).
- **The first move.** A move planned into an empty planner waits (``delay_before_delivering``,
  BLOCK_DELAY_FOR_1ST_MOVE: 100 ms in ``Planner::get_current_block``) until three moves are
  planned or the delay is over. Here the delay ends at the host's next line, or when the
  board synchronizes (M400, G4, G28...), instead of after 100 ms: a host answers an ``ok``
  well within that, and so a stop sent at a move's ``ok`` (onboard's driver sends ``M410``
  again then) is ordered before the move by events, not by how loaded the machine is. A host
  that sends one move and then nothing sees it start at its next line.
- **Answers.** ``ok`` when a command is done; a move is done when it is in the planner of
  ``block_buffer_size`` (16) blocks, so its ``ok`` is held while the planner is full
  (Marlin/src/gcode/gcode.cpp ``GcodeSuite::process_parsed_command``: ``queue.ok_to_send()``
  after the handler). Unknown commands: ``echo:Unknown command: "M3"`` then ``ok``
  (Marlin/src/gcode/parser.cpp ``GCodeParser::unknown_command_warning``).
- **Waiting.** ``M400``, ``G4``, ``G28`` and a move waiting for the planner print
  ``echo:busy: processing`` every ``keepalive`` seconds (Marlin/src/gcode/gcode.cpp
  ``GcodeSuite::host_keepalive``).
- **Stops.** ``M112`` kills (``echo:M112 Shutdown``, ``Error:Printer halted. kill() called!``,
  then nothing until a reset: Marlin/src/MarlinCore.cpp ``kill``, ``minkill``); ``M410`` empties
  the planner, not the command queue (Marlin/src/module/motion.cpp ``quickstop_stepper``,
  Marlin/src/module/planner.cpp ``Planner::quick_stop``): a move the board had read before it
  (in the command queue, or waiting for room in the planner) is planned once the stop's second
  is over (``quickstop_stepper`` synchronizes, and ``Planner::busy`` counts
  ``cleaning_buffer_counter``), and runs. Without ``emergency_parser`` both are
  acted on when the line is *read* if it starts with ``M`` (no line number), and in order
  otherwise (queue.cpp "Process critical commands early"); with it, the moment the line ends,
  whatever the board is doing (Marlin/src/feature/e_parser.cpp ``EmergencyParser::update``,
  Marlin/src/module/temperature.cpp ``Temperature::task``).

The position Marlin reports is the one it *believes* (the last planned target), and after a
reset it believes it is at its home position wherever the tool really is; moves before ``G28``
are therefore made relative to where the tool was at boot. The backend :class:`Arm` runs the
planned blocks on a :class:`~onboard.drivers.emulators.BackendWorker`; a backend failure is
reported as Marlin reports a fault it cannot recover from alone (``stop()``: the board ignores
moves until ``M999``).

Faults for tests (from :class:`PtyController`): :meth:`inject_garbage`, :meth:`fail_next`
(answered ``Error:<msg>`` then ``ok``), :meth:`mute`, :meth:`close_link`; and :meth:`reset`
(the reset button).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import math
import os
import re
import select
import struct
import threading
import time
import tty
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.emulators import Job
from onboard.drivers.emulators.pty_controller import PtyController, open_pty

__all__ = ["MarlinEmulator", "print_float", "strtof_value"]

log = logging.getLogger(__name__)

_POLL = 0.005  # seconds: how often a waiting loop runs idle(); the open/close poll
_MAX_RX_LINES = 4096  # a host that floods is held back by the pty past this many unread lines

# -- strings the host reads: Marlin/src/core/language.h ------------------------------------------
STR_OK = "ok"
STR_RESEND = "Resend: "
STR_ERR_LINE_NO = "Line Number is not Last Line Number+1, Last Line: "
STR_ERR_CHECKSUM_MISMATCH = "checksum mismatch, Last Line: "
STR_ERR_NO_CHECKSUM = "No Checksum with line number, Last Line: "
STR_ERR_KILLED = "Printer halted. kill() called!"
STR_ERR_STOPPED = (
    "Printer stopped due to errors. Fix the error and use M999 to restart. "
    "(Temperature is reset. Set it after restarting)"
)
STR_BUSY_PROCESSING = "busy: processing"
STR_UNKNOWN_COMMAND = 'Unknown command: "'
STR_EXTERNAL_RESET = " External Reset"
M112_KILL_STR = "M112 Shutdown"  # Marlin/src/MarlinCore.cpp PGMSTR(M112_KILL_STR, ...)
ECHO = "echo:"  # SERIAL_ECHO_START
ERROR = "Error:"  # SERIAL_ERROR_START

# -- a stock build: Marlin/Configuration.h, Configuration_adv.h, src/inc/Version.h ---------------
SOURCE_CODE_URL = "github.com/MarlinFirmware/Marlin"
PROTOCOL_VERSION = "1.0"
MACHINE_UUID = "cede2a2f-41a2-4748-9b12-c55c62f367ff"  # DEFAULT_MACHINE_UUID
DISTRIBUTION_DATE = "2024-06-01"  # STRING_DISTRIBUTION_DATE (build dependent)
COMPILED = ("Jun  1 2024", "12:00:00")  # __DATE__, __TIME__ (build dependent)
DEFAULT_ACCELERATION = 3000.0  # mm/s², DEFAULT_ACCELERATION / _RETRACT_ / _TRAVEL_ACCELERATION
DEFAULT_FEEDRATE_MM_M = 4000.0  # Marlin/src/module/motion.cpp
DEFAULT_STEPS_PER_UNIT = {"X": 80.0, "Y": 80.0, "Z": 400.0, "E": 500.0}  # { 80, 80, 400, 500 }
ROTARY_NAMES = "ABCUVW"  # AXIS4_NAME ... AXIS9_NAME: ['A', 'B', 'C', 'U', 'V', 'W']
QUICKSTOP_CLEAN = 1.0  # s: cleaning_buffer_counter = TEMP_TIMER_FREQUENCY ticks (1 kHz)
#: lines that do not end a held first move's delay: moves (held with it, up to three) and
#: the stops, which drop it
_KEEPS_HELD = (("G", 0), ("G", 1), ("M", 410), ("M", 112))
FIRST_MOVE_BLOCKS = 3  # get_current_block: "If the number of movements queued is less than 3"


class _Interrupt(Exception):
    """Unwinds the serve thread to its main loop."""


class _Reboot(_Interrupt):
    """A reset (DTR on open, or the reset button): the board boots again."""


class _Halted(_Interrupt):
    """kill(): the board does nothing more until it is reset."""


class _Shutdown(_Interrupt):
    """The emulator is closing."""


# -- numbers as Marlin reads and prints them ---------------------------------------------------

_DEC = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
_HEX = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?\d+)?")
_INT = re.compile(r"\s*([+-]?)(\d+)")
_DIGITS = "0123456789"


def _f32(value: float) -> float:
    """``value`` rounded to a C float (Marlin's ``float``); out of range is +-inf."""
    try:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def strtof_value(text: str) -> float:
    """``parser.value_float()`` (Marlin/src/gcode/parser.h): the value is cut at the first
    ``E``/``e`` ("to prevent scientific notation interpretation") and read by ``strtof``, so
    ``1e9`` is 1, ``0x10`` is 16 and ``1e99`` is 1; digits past a float's range give inf."""
    text = text.split(" ", 1)[0]
    for i, c in enumerate(text):
        if c in "Ee":
            text = text[:i]
            break
    hexa = _HEX.match(text)
    if hexa:
        raw = hexa.group(0)
        sign = -1.0 if raw.startswith("-") else 1.0
        body = raw.lstrip("+-")
        if "p" not in body.lower():
            body += "p0"
        return _f32(sign * float.fromhex(body))
    dec = _DEC.match(text)
    return _f32(float(dec.group(0))) if dec else 0.0


def strtol(text: str) -> int:
    """C ``strtol(text, nullptr, 10)`` on a 32-bit ``long`` (saturating)."""
    m = _INT.match(text)
    if m is None:
        return 0
    value = int(m.group(1) + m.group(2))
    return max(-(2**31), min(2**31 - 1, value))


def strtoul(text: str) -> int:
    """C ``strtoul``: a minus sign wraps (``-1`` is 4294967295)."""
    m = _INT.match(text)
    if m is None:
        return 0
    value = min(int(m.group(2)), 2**32 - 1)
    return (-value) % 2**32 if m.group(1) == "-" else value


def print_float(value: float, digits: int = 2) -> str:
    """A float as Marlin's serial prints it (Print::printFloat, SERIAL_FLOAT_PRECISION 2): a
    sign for any negative value (``-0.00``), rounded half up, ``nan``/``inf``/``ovf``."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    if abs(value) > 4294967040.0:
        return "ovf"
    text = ""
    if value < 0.0:
        text, value = "-", -value
    rounding = 0.5
    for _ in range(digits):
        rounding *= 0.1
    value += rounding
    whole = int(value)
    rest = value - whole
    text += str(whole)
    if digits:
        text += "."
    for _ in range(digits):
        rest *= 10.0
        digit = int(rest)
        text += str(digit)
        rest -= digit
    return text


def line_checksum(text: str) -> int:
    """The XOR of every byte before the ``*`` (queue.cpp ``get_serial_commands``)."""
    value = 0
    for byte in text.encode("latin-1", errors="replace"):
        value ^= byte
    return value


@dataclass
class _Command:
    """One parsed command line (Marlin/src/gcode/parser.cpp ``GCodeParser::parse`` with
    FASTER_GCODE_PARSER): ``letter`` is ``?`` for a line that is no command."""

    letter: str
    code: int
    params: dict[str, str | None] = field(default_factory=dict)
    text: str = ""  # command_ptr: the command as typed, for "Unknown command"

    def seen(self, c: str) -> bool:
        return c in self.params

    def seenval(self, c: str) -> bool:
        return self.params.get(c) is not None

    def float(self, c: str) -> float | None:
        raw = self.params.get(c)
        return None if raw is None else strtof_value(raw)

    def long(self, c: str, default: int = 0) -> int:
        raw = self.params.get(c)
        return default if raw is None else strtol(raw)

    def byte(self, c: str, default: int = 0) -> int:
        return max(0, min(255, self.long(c))) if self.seenval(c) else default

    def ushort(self, c: str, default: int = 0) -> int:
        return self.long(c) % 2**16 if self.seenval(c) else default

    def int16(self, c: str, default: int = 0) -> int:
        return (self.long(c) + 2**15) % 2**16 - 2**15 if self.seenval(c) else default

    def boolval(self, c: str, default: bool = False) -> bool:
        if self.seenval(c):
            return self.byte(c) != 0  # value_bool: !has_value() || !!value_byte()
        return True if self.seen(c) else default


def parse_command(line: str) -> _Command:
    """``GCodeParser::parse`` for a stock build (case sensitive: GCODE_CASE_INSENSITIVE is off
    in Configuration_adv.h): skip ``N<n>``, cut at ``*``, G/M/T and a number, then A-Z
    parameters; a letter given twice keeps its last value."""
    p = line.lstrip(" ")
    if p[:1] == "N" and len(p) > 1 and p[1] in _DIGITS + "+-":
        i = 2
        while i < len(p) and p[i] in _DIGITS:
            i += 1
        p = p[i:].lstrip(" ")
    star = p.find("*")
    if star >= 0:
        p = p[:star].rstrip(" ")
    text = p
    letter = p[:1]
    if letter not in ("G", "M", "T"):
        return _Command("?", 0, {}, text)
    rest = p[1:].lstrip(" ")
    j = 0
    while j < len(rest) and rest[j] in _DIGITS:
        j += 1
    if j == 0:  # "Bail if there's no command code number"
        return _Command("?", 0, {}, text)
    code = int(rest[:j]) % 2**16  # codenum is uint16_t
    return _Command(letter, code, _scan_params(rest[j:].lstrip(" ")), text)


def _valid_float(p: str) -> bool:
    """parser.h ``valid_float``: ``[-+]?.?[0-9]``."""
    if p[:1] in ("-", "+"):
        p = p[1:]
    return p[:1] in tuple(_DIGITS) or (p[:1] == "." and p[1:2] in tuple(_DIGITS))


def _scan_params(args: str) -> dict[str, str | None]:
    params: dict[str, str | None] = {}
    i, n = 0, len(args)
    while i < n:
        c = args[i]
        i += 1
        if "A" <= c <= "Z":  # PARAM_OK with FASTER_GCODE_PARSER: only A-Z
            while i < n and args[i] == " ":
                i += 1
            params[c] = args[i:] if _valid_float(args[i:]) else None
        if i < n and not ("A" <= args[i] <= "Z"):  # "Another parameter right away?"
            while i < n and args[i] in _DIGITS + ".+-":  # DECIMAL_SIGNED
                i += 1
            while i < n and args[i] == " ":
                i += 1
    return params


# -- seeing the port opened (Linux inotify, through libc) ------------------------------------------

_IN_OPEN, _IN_CLOSE = 0x20, 0x08 | 0x10  # IN_OPEN; IN_CLOSE_WRITE | IN_CLOSE_NOWRITE
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)


def _watch_opens(path: str) -> int | None:
    """An inotify descriptor reporting each open and close of ``path``; None if unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    if int(libc.inotify_add_watch(fd, path.encode(), _IN_OPEN | _IN_CLOSE)) < 0:
        os.close(fd)
        return None
    return fd


def _open_events(fd: int) -> list[bool]:
    """The opens (True) and closes (False) reported since the last call, in order."""
    try:
        data = os.read(fd, 4096)
    except BlockingIOError:
        return []
    events, i = [], 0
    while i + _EVENT.size <= len(data):
        _, mask, _, length = _EVENT.unpack_from(data, i)
        i += _EVENT.size + length
        if mask & _IN_OPEN:
            events.append(True)
        if mask & _IN_CLOSE:
            events.append(False)
    return events


# -- the gripper --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _GripOutput:
    """Which output of the board drives the gripper, from ``grip_on`` and ``grip_off``."""

    kind: str  # fan | servo | pin | spindle
    index: int
    on: int | None  # the servo angle / pin value meaning closed (fan, spindle: any non-zero)
    off: int | None  # ... and open


def _grip_output(grip_on: str, grip_off: str) -> _GripOutput:
    on, off = parse_command(grip_on), parse_command(grip_off)
    if on.letter != "M" or off.letter != "M":
        raise ValueError(f"grip_on/grip_off must be M-codes, got {grip_on!r} / {grip_off!r}")
    codes = (on.code, off.code)
    if codes in ((106, 107), (106, 106)):
        return _GripOutput("fan", on.byte("P"), None, None)
    if codes == (280, 280):
        return _GripOutput("servo", on.int16("P"), on.int16("S"), off.int16("S"))
    if codes == (42, 42):
        return _GripOutput("pin", on.int16("P"), on.byte("S"), off.byte("S"))
    if on.code in (3, 4) and off.code == 5:
        return _GripOutput("spindle", 0, None, None)
    raise ValueError(
        f"grip_on/grip_off {grip_on!r} / {grip_off!r}: use a fan (M106 S255 / M107), a servo "
        "(M280 P0 S<a> / M280 P0 S<b>), a pin (M42 P<n> S255 / M42 P<n> S0) or a spindle "
        "(M3 / M5)"
    )


# -- the emulator -------------------------------------------------------------------------------


class MarlinEmulator(PtyController):
    """A stock Marlin 2.1 build on a pty, driving ``arm`` (see the module docstring).

    Options (the build): ``emergency_parser`` (EMERGENCY_PARSER, off in stock builds),
    ``keepalive`` (DEFAULT_KEEPALIVE_INTERVAL in s; None: HOST_KEEPALIVE_FEATURE off),
    ``spindle`` (SPINDLE_FEATURE: M3/M4/M5), ``fans`` (FAN_COUNT), ``servos`` (NUM_SERVOS),
    ``direct_pin_control`` (M42), ``inch_mode`` (INCH_MODE_SUPPORT: G20), ``rotary_axes``
    (AXIS4_NAME...: extra axes, driven as the arm's joints in order), ``extruders``,
    ``soft_endstops`` (native mm / degrees per axis: [XYZ]_MIN_POS/_MAX_POS), ``home_position``
    (mm: X_HOME_POS... where the board believes it is after boot and after G28; default: where
    the tool is now) and the serial side: ``auto_reset`` (DTR reset on open), ``boot_time``
    (s from the reset to the banner, during which input is lost as to a bootloader; real
    boards take 0.5 to 2 s), ``rx_buffer`` (bytes of unread input before the rest is dropped,
    as a UART board's RX_BUFFER_SIZE; None: no loss); ``resend_ok`` (False: as some 2.0.x
    builds, ``Resend: N`` with no ``ok`` after it); ``motion_before_homing`` (False:
    NO_MOTION_BEFORE_HOMING, a move before ``G28`` is dropped with ``echo:Home XYZ first``);
    ``joint_space`` (a joint-space arm, BCN3D Moveo or Thor: every axis, X Y Z and then
    ``rotary_axes``, is one of the backend's joints in order, in degrees; a G1 is one joint
    move of all of them, its F along the line in axis space, as ARTICULATED_ROBOT_ARM measures
    it; nothing is the tool's position).
    """

    def __init__(
        self,
        arm: Arm,
        *,
        auto_reset: bool = True,
        boot_time: float = 0.5,
        emergency_parser: bool = False,
        keepalive: float | None = 2.0,
        spindle: bool = False,
        fans: int = 1,
        servos: int = 0,
        direct_pin_control: bool = False,
        inch_mode: bool = False,
        grip_on: str = "M106 S255",
        grip_off: str = "M107",
        rotary_axes: str = "",
        extruders: int = 1,
        soft_endstops: dict[str, tuple[float, float]] | None = None,
        home_position: tuple[float, float, float] | None = None,
        orientation: tuple[float, float, float] | None = None,
        block_buffer_size: int = 16,
        bufsize: int = 4,
        max_cmd_size: int = 96,
        rx_buffer: int | None = None,
        quickstop_clean: float = QUICKSTOP_CLEAN,
        version: str = "bugfix-2.1.x",
        machine_name: str = "3D Printer",
        resend_ok: bool = True,
        motion_before_homing: bool = True,
        joint_space: bool = False,
    ) -> None:
        if len(set(rotary_axes)) != len(rotary_axes) or not set(rotary_axes) <= set(ROTARY_NAMES):
            raise ValueError(f"rotary_axes {rotary_axes!r}: distinct letters of {ROTARY_NAMES}")
        if block_buffer_size < 3 or bufsize < 1 or max_cmd_size < 8:
            raise ValueError("block_buffer_size >= 3, bufsize >= 1, max_cmd_size >= 8")
        # the planner holds BLOCK_BUFFER_SIZE - 1 blocks (Planner::moves_free); the worker
        # holds ``planner_size`` queued jobs besides the one under way
        super().__init__(arm, planner_size=block_buffer_size - 2, max_line=max_cmd_size)
        self.auto_reset = auto_reset
        self.boot_time = boot_time
        self.emergency_parser = emergency_parser
        self.keepalive = keepalive
        self.spindle = spindle
        self.fans = fans
        self.servos = servos
        self.direct_pin_control = direct_pin_control
        self.inch_mode = inch_mode
        self.grip = _grip_output(grip_on, grip_off)
        self.rotary_axes = rotary_axes
        self.extruders = extruders
        self.axes = "XYZ" + rotary_axes
        self.orientation = orientation
        self.bufsize = bufsize
        self.max_cmd_size = max_cmd_size
        self.rx_buffer = rx_buffer
        self.quickstop_clean = quickstop_clean
        self.version = version
        self.machine_name = machine_name
        self.resend_ok = resend_ok
        self.motion_before_homing = motion_before_homing
        self.joint_space = joint_space
        #: the axes that are the backend's joints, in order
        self.joint_axes = self.axes if joint_space else rotary_axes
        limits = {a: (-1000.0, 1000.0) for a in "XYZ"} | {a: (-360.0, 360.0) for a in rotary_axes}
        self.soft_endstops = limits | dict(soft_endstops or {})
        here = arm.state()
        self._home = self._actual(here.pose, here.joints)
        if home_position is not None:
            self._home.update(zip("XYZ", home_position, strict=True))
        # -- observable state (for tests) --
        self.halted = False  # kill() was called: nothing more until a reset
        self.boots = 0
        self.port_open = not auto_reset
        self.rx_overruns = 0
        self.outputs_during_motion = 0  # M106/M107/M280/M42 while the planner was busy
        self.gripper_closed = False
        # -- serial side (reader thread, under _rx_lock) --
        self._rx_lock = threading.Lock()
        self._rx_cond = threading.Condition(self._rx_lock)
        self._rx: deque[str] = deque()
        self._rx_bytes = 0
        self._buf = bytearray()  # the line being received
        self._sis = 0  # process_stream_char's serial input state
        self._ep_state = "RESET"
        self._ep_kill = False
        self._ep_quickstop = False
        self._reset_pending = False
        self._reading = threading.Event()  # cleared: busy, the serial buffer is not read
        self._reading.set()
        self._watch: int | None = None
        # -- firmware state (serve thread) --
        self._ring: deque[str] = deque()
        self._ring_lock = threading.Lock()
        self._last_n = 0
        self._stopped = False
        self._busy = False
        self._in_task = False
        self._next_busy = 0.0
        self._interval = keepalive
        self._native: dict[str, float] = {}
        self._shift: dict[str, float] = {}
        self._offset: dict[str, float] = {}
        self._e = 0.0
        self._homed: set[str] = set()
        self._relative = False
        self._e_relative = False
        self._unit = 1.0
        self._feedrate = DEFAULT_FEEDRATE_MM_M / 60.0
        self._accel = [DEFAULT_ACCELERATION] * 3  # print, retract, travel
        self._fan_speed = [0] * fans
        self._servo_angle: dict[int, int] = {}
        self._pins: dict[int, int] = {}
        self._spindle_on = False
        self._quickstops = 0
        self._backend_errors = 0
        #: the worker's stop count this board has dealt with (its quickstop ran since)
        self._stops_seen = 0
        #: moves planned into an empty planner, not yet handed to the steppers (see the
        #: module docstring, "The first move"), each with the stop count it was planned in
        self._held: list[tuple[int, Job]] = []
        self._held_lock = threading.Lock()
        self.block_buffer_size = block_buffer_size
        self._table = self._handlers()
        self._reset_state()

    # -- what tests read ----------------------------------------------------------------------

    @property
    def line_number(self) -> int:
        """The last line number accepted (``N``), as ``Resend:`` counts from it."""
        return self._last_n

    @property
    def acceleration(self) -> float:
        """``M204 P`` (or S): for moves that extrude. Moves without E use
        :attr:`travel_acceleration` (planner.cpp ``_populate_block``)."""
        return self._accel[0]

    @property
    def travel_acceleration(self) -> float:
        """``M204 T`` (or S): the acceleration of every move of an arm (no E)."""
        return self._accel[2]

    @property
    def stopped(self) -> bool:
        """Marlin's MF_STOPPED (after a fault): moves are ignored until ``M999``."""
        return self._stopped

    @property
    def queued(self) -> tuple[str, ...]:
        """The command queue (read from the link, not yet done), oldest first."""
        with self._ring_lock:
            return tuple(self._ring)

    @property
    def position(self) -> dict[str, float]:
        """Where the board believes each axis is (native mm / degrees), as M114 reports it."""
        return dict(self._native)

    @property
    def homed(self) -> frozenset[str]:
        return frozenset(self._homed)

    # -- hooks of PtyController ---------------------------------------------------------------

    def banner(self) -> list[str]:
        """What ``setup()`` prints (Marlin/src/MarlinCore.cpp): ``start``, the reset cause, the
        version (no ``echo:``), the build lines; then ``settings.first_load()`` without
        EEPROM_SETTINGS (Marlin/src/module/settings.cpp ``reset``)."""
        blocks = 88 * self.block_buffer_size  # sizeof(block_t) * BLOCK_BUFFER_SIZE
        return [
            "start",
            STR_EXTERNAL_RESET,
            f"Marlin {self.version}",
            f"{ECHO} Last Updated: {DISTRIBUTION_DATE} | Author: (none, default config)",
            f"{ECHO} Compiled: {COMPILED[0]}",
            f"{ECHO} Free Memory: 2843  PlannerBufferBytes: {blocks}",
            f"{ECHO}Hardcoded Default Settings Loaded",
        ]

    def error_lines(self, message: str) -> list[str]:
        """A command that failed: ``Error:<msg>`` (SERIAL_ERROR_MSG), then its ``ok``."""
        return [f"{ERROR}{message}", STR_OK]

    def on_line(self, line: str) -> bool:
        """A whole line as read, before it goes into the serial buffer. Marlin's emergency
        parser is not here but in :meth:`_feed`: it sees every byte as it arrives (HAL
        MarlinSerial ``store_rxd_char`` calls ``emergency_parser.update`` before storing it)
        and acts at the end of the line; it never takes the line out of the stream."""
        return True

    # -- life -----------------------------------------------------------------------------------

    def start(self) -> MarlinEmulator:
        self._master, self._slave = open_pty()
        self._wake = os.pipe()
        tty.setraw(self._slave)
        self._path = os.ttyname(self._slave)
        self._watch = None
        if self.auto_reset:
            # nobody holds the slave open from here on, so each open by a driver (DTR, the
            # Arduino's reset) is seen: watched before start() returns, so none is missed
            os.close(self._slave)
            self._slave = -1
            self._watch = _watch_opens(self._path)
        self._running.set()
        for target, name in ((self._read_loop, "marlin-rx"), (self._serve, "marlin-main")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Within: the board takes no line from its serial buffer, as one busy in a long
        blocking command; what arrives is received (and counted) but not answered."""
        self._reading.clear()
        try:
            yield
        finally:
            self._reading.set()
            with self._rx_cond:
                self._rx_cond.notify_all()

    def reset(self) -> None:
        """Press the reset button: the board reboots (and prints its banner)."""
        self._request_reset()

    def _request_reset(self) -> None:
        with self._rx_cond:
            self._rx.clear()
            self._rx_bytes = 0
            self._buf.clear()
            self._sis = 0
            self._ep_state = "RESET"
            self._reset_pending = True
            self.halted = False  # the reset wakes a killed board too
            self._rx_cond.notify_all()
        self._drop_held()
        self.worker.stop()  # the MCU resets: the steppers stop at once

    # -- the serial side (reader thread) --------------------------------------------------------

    def _read_loop(self) -> None:
        """The link. With ``auto_reset`` an open of the slave (a driver opening the port,
        which raises DTR on a real board) resets the board. Opens and closes are seen with
        inotify on the slave's node, which keeps every open in order however fast a driver
        closes and reopens; where inotify is missing, by the master's EIO while the slave is
        closed (a close and reopen quicker than ``_POLL`` is then missed)."""
        watch, self._watch = self._watch, None
        try:
            if watch is None and self.auto_reset:
                log.warning("marlin emulator: no inotify; a quick close and reopen is missed")
                self._read_by_eio()
            else:
                self._read_watching(watch)
        finally:
            if watch is not None:
                os.close(watch)

    def _read_watching(self, watch: int | None) -> None:
        opens = 0  # the slave's open file descriptions (a driver usually holds one)
        readable = not self.auto_reset  # the master, while someone holds the slave open
        while self._running.is_set():
            fds = [self._wake[0], *([] if watch is None else [watch])]
            fds += [self._master] if readable else []
            try:
                ready, _, _ = select.select(fds, [], [], 0.05)
                if self._wake[0] in ready:
                    return
                if watch is not None and watch in ready:
                    for opened in _open_events(watch):
                        if opened:
                            opens += 1
                            readable = True
                            if opens == 1:  # DTR rises: the board resets
                                self.port_open = True
                                self._request_reset()
                        else:
                            opens = max(0, opens - 1)
                            self.port_open = opens > 0
                if self._master not in ready:
                    continue
                chunk = os.read(self._master, 4096)
            except BlockingIOError:
                continue  # a hangup, and the port reopened since: see open_pty
            except OSError as exc:
                if exc.errno == errno.EIO:  # nobody holds the slave: wait for an open
                    readable = False
                    continue
                return
            except ValueError:
                return
            self._feed(chunk)

    def _read_by_eio(self) -> None:
        port_open = False
        while self._running.is_set():
            if not port_open:
                if self._wait_wake(_POLL):
                    return
                probe = self._probe()
                if probe is None:
                    continue
                port_open = self.port_open = True
                self._request_reset()
                self._feed(probe)
                continue
            try:
                ready, _, _ = select.select([self._master, self._wake[0]], [], [], 0.05)
                if self._wake[0] in ready:
                    return
                if not ready:
                    continue
                chunk = os.read(self._master, 4096)
            except BlockingIOError:
                continue  # a hangup, and the port reopened since: see open_pty
            except OSError as exc:
                if exc.errno == errno.EIO:
                    port_open = self.port_open = False  # the driver closed the port
                    continue
                return
            except ValueError:
                return
            self._feed(chunk)

    def _wait_wake(self, timeout: float) -> bool:
        try:
            ready, _, _ = select.select([self._wake[0]], [], [], timeout)
        except (OSError, ValueError):
            return True
        return bool(ready)

    def _probe(self) -> bytes | None:
        """None while nobody has the slave open; else what was waiting (maybe nothing)."""
        try:
            ready, _, _ = select.select([self._master], [], [], 0)
            return os.read(self._master, 4096) if ready else b""
        except BlockingIOError:
            return b""  # someone holds the slave open; nothing is waiting
        except (OSError, ValueError):
            return None

    def _feed(self, data: bytes) -> None:
        """Bytes from the host, one at a time as the RX interrupt takes them: the emergency
        parser sees each byte first; then the line is built as ``process_stream_char`` does
        (``;`` comments, ``\\`` escapes, backspace, a line cut at MAX_CMD_SIZE - 1 chars) and
        a non-empty line goes into the serial buffer (an empty one is never answered)."""
        if not data:
            return
        with self._rx_cond:
            for byte in data:
                eol = byte in (0x0A, 0x0D)  # ISEOL
                if self.halted or self._muted:  # interrupts off / a hung board
                    if eol:
                        if self._buf:  # arrived, never acted on: listed for tests
                            self.received.append(self._buf.decode("ascii", "replace").strip())
                        self.dropped += bool(self._buf)
                        self._buf.clear()
                    elif len(self._buf) < self.max_cmd_size:
                        self._buf.append(byte)
                    self._sis, self._ep_state = 0, "RESET"
                    continue
                if self.emergency_parser:
                    self._ep_update(byte)
                if eol:
                    self._line_done()
                    continue
                if self._sis == 1:  # PS_EOL: a comment or an overflow, to the end of the line
                    continue
                if self._sis >= 4:  # PS_ESC: the escaped byte is kept as it is
                    self._sis -= 4
                elif byte == 0x5C:  # a backslash starts an escape and is dropped
                    self._sis += 4
                    continue
                elif byte == 0x3B:  # ';' starts a comment
                    self._sis = 1
                    continue
                if byte == 0x08:  # backspace erases the previous character
                    if self._buf:
                        self._buf.pop()
                else:
                    self._buf.append(byte)
                    if len(self._buf) >= self.max_cmd_size - 1:
                        self._sis = 1  # "Skip the rest on overflow"

    def _line_done(self) -> None:
        line = self._buf.decode("latin-1")
        self._buf.clear()
        self._sis = 0
        if line and self.on_line(line):
            self._enqueue(line)

    def _enqueue(self, line: str) -> None:
        """Into the serial buffer (called with ``_rx_lock`` held)."""
        size = len(line) + 1
        if self.rx_buffer is not None and self._rx_bytes + size > self.rx_buffer:
            self.rx_overruns += 1  # a full RX ring drops what arrives (store_rxd_char)
            log.info("marlin emulator: RX buffer full, dropped %r", line)
            return
        while len(self._rx) >= _MAX_RX_LINES and self._running.is_set():
            self._rx_cond.wait(0.05)
        self._rx.append(line)
        self._rx_bytes += size
        self.received.append(line)
        self.lines_received += 1
        self.max_unanswered = max(self.max_unanswered, self.lines_received - self.lines_answered)
        self._rx_cond.notify_all()

    def _ep_update(self, byte: int) -> None:
        """``EmergencyParser::update`` for M108, M112 and M410 (Marlin/src/feature/e_parser.cpp):
        an optional ``N<n>`` and spaces, the code, then anything up to the end of the line."""
        c, s = chr(byte), self._ep_state
        eol = c in "\n\r"
        if s == "IGNORE":
            s = "RESET" if eol else s
        elif s == "RESET":
            s = {" ": s, "\n": s, "\r": s, "N": "N", "M": "M"}.get(c, "IGNORE")
        elif s == "N":
            s = s if c in _DIGITS + "- " else ("M" if c == "M" else "IGNORE")
        elif s == "M":
            s = {" ": "M", "1": "M1", "4": "M4"}.get(c, "IGNORE")
        elif s in ("M1", "M10", "M11", "M4", "M41"):
            s = {
                ("M1", "0"): "M10",
                ("M1", "1"): "M11",
                ("M10", "8"): "M108",
                ("M11", "2"): "M112",
                ("M4", "1"): "M41",
                ("M41", "0"): "M410",
            }.get((s, c), "IGNORE")
        elif eol:  # M108 / M112 / M410 stay until the end of the line, whatever follows
            if s == "M112":
                self._ep_kill = True  # killed_by_M112
                self._drop_held()
                self.worker.stop()
            elif s == "M410":
                self._ep_quickstop = True  # quickstop_by_M410
                self._drop_held()
                self.worker.stop()
            self._rx_cond.notify_all()
            s = "RESET"
        self._ep_state = s

    # -- the firmware (serve thread) -------------------------------------------------------------

    def _serve(self) -> None:
        boot = False
        while self._running.is_set():
            try:
                if boot:
                    boot = False
                    self._boot()
                if self.halted:
                    self._wait_for_reset()
                    continue
                if self._muted:  # a hung board: what it had is lost, nothing is answered
                    self._forget_input()
                    self._pause(0.01)
                    continue
                self._idle()
                with self._ring_lock:
                    line = self._ring[0] if self._ring else None
                if line is None:
                    self._pause(0.01)
                    continue
                answer = self.execute(line)
                with self._ring_lock:
                    self._ring.popleft()
                self.reply(answer)
            except _Reboot:
                boot = True
            except _Halted:
                continue
            except _Shutdown:
                return

    def _forget_input(self) -> None:
        with self._ring_lock:
            self._ring.clear()
        with self._rx_cond:
            self._rx.clear()
            self._rx_bytes = 0

    def _pause(self, seconds: float) -> None:
        with self._rx_cond:
            if not (self._rx or self._reset_pending or self._ep_kill or self._ep_quickstop):
                self._rx_cond.wait(seconds)

    def _wait_for_reset(self) -> None:
        with self._rx_cond:
            while self._running.is_set() and not self._reset_pending:
                self._rx_cond.wait(0.05)
        if not self._running.is_set():
            raise _Shutdown
        raise _Reboot

    def _reset_state(self) -> None:
        """What a reset forgets (or a stock build starts with)."""
        with self._ring_lock:
            self._ring.clear()
        self._last_n = 0
        self._stopped = False
        self.halted = False
        self._busy = False
        self._in_task = False
        self._ep_kill = self._ep_quickstop = False
        self._drop_held()
        self._stops_seen = self.worker.stops
        self._interval = self.keepalive
        self._native = {a: self._home[a] for a in self.axes}
        self._shift = dict.fromkeys(self.axes, 0.0)
        self._offset = dict.fromkeys(self.axes, 0.0)
        self._e = 0.0
        self._homed = set()
        self._relative = self._e_relative = False
        self._unit = 1.0
        self._feedrate = DEFAULT_FEEDRATE_MM_M / 60.0
        self._accel = [DEFAULT_ACCELERATION] * 3
        self._fan_speed = [0] * self.fans
        self._servo_angle = {}
        self._pins = {}
        self._spindle_on = False

    def _boot(self) -> None:
        """setup(): after a reset the board knows nothing; it believes it is at its home
        position (current_position = X_HOME_POS...: Marlin/src/module/motion.cpp)."""
        with self._rx_cond:
            self._reset_pending = False
        self.worker.wait_idle(5.0)  # the steppers stopped with the reset
        self._reset_state()
        self._sync_offset()
        self.boots += 1
        if self.gripper_closed:
            # a reset puts every output pin low: a fan- or spindle-driven gripper lets go
            self.gripper_closed = False
            log.warning("marlin emulator: the reset switched the gripper output off")
            self.worker.submit(_grip(False), timeout=1.0)
        # the bootloader, then setup(): what arrives meanwhile is lost, and the banner comes
        # after a host's open has finished (pyserial flushes its input right after opening)
        deadline = time.monotonic() + self.boot_time
        while True:
            with self._rx_cond:
                self._rx.clear()
                self._rx_bytes = 0
                self._buf.clear()
                self._sis = 0
                left = deadline - time.monotonic()
                if left <= 0 or not self._running.is_set():
                    break
                self._rx_cond.wait(min(_POLL, left))
            if self._reset_pending:
                raise _Reboot
        self.write_lines(self.banner())
        self._next_busy = time.monotonic() + (self._interval or 0.0)

    def _sync_offset(self) -> None:
        """Where the tool really is against where the board believes it is."""
        state = self.arm.state()
        actual = self._actual(state.pose, state.joints)
        self._offset = {a: actual[a] - self._native[a] for a in self.axes}

    def _actual(self, pose: Pose, joints: tuple[float, ...]) -> dict[str, float]:
        actual = {"X": pose.x * 1000.0, "Y": pose.y * 1000.0, "Z": pose.z * 1000.0}
        for i, axis in enumerate(self.joint_axes):
            actual[axis] = math.degrees(joints[i]) if i < len(joints) else 0.0
        return actual

    # -- idle() ----------------------------------------------------------------------------------

    def _idle(self) -> None:
        """Marlin/src/MarlinCore.cpp ``idle``: read the link into the command queue
        (``manage_inactivity``), act on the emergency parser's flags (``Temperature::task``),
        and say ``busy`` (``host_keepalive``). Every wait of a command runs this."""
        if not self._running.is_set():
            raise _Shutdown
        if self._reset_pending:
            raise _Reboot
        self._get_available_commands()
        self._task()
        self._check_backend()
        self._host_keepalive()

    def _task(self) -> None:
        if self._in_task:  # no_reentry: quickstop_stepper() calls idle() again
            return
        self._in_task = True
        try:
            if self._ep_kill:
                self._kill()
            if self._ep_quickstop:
                self._ep_quickstop = False  # "quickstop_stepper may call idle so clear this now"
                self._quickstop()
        finally:
            self._in_task = False

    def _host_keepalive(self) -> None:
        now = time.monotonic()
        if self._interval and self._busy and not self._muted:
            if now < self._next_busy:
                return
            self.write_lines([f"{ECHO}{STR_BUSY_PROCESSING}"])
        self._next_busy = now + (self._interval or 0.0)

    def _check_backend(self) -> None:
        error = self.worker.take_error()
        if error is None:
            return
        # the emulator's mapping: a block the arm could not do is a fault Marlin answers with
        # stop() (Marlin/src/MarlinCore.cpp): the reason, then STR_ERR_STOPPED once
        self._backend_errors += 1
        lines = [f"{ERROR}{error}"]
        if not self._stopped:
            lines.append(f"{ERROR}{STR_ERR_STOPPED}")
            self._stopped = True
        self.write_lines(lines)

    def _get_available_commands(self) -> None:
        """GCodeQueue::get_serial_commands: while the queue has room, take a line, check its
        line number and checksum, warn a stopped board of a move, act early on M108/M112/M410
        (no emergency parser), and queue it."""
        while True:
            with self._ring_lock:
                if len(self._ring) >= self.bufsize:
                    return
            with self._rx_cond:
                if self._reset_pending:
                    raise _Reboot
                if not self._rx or self._muted or not self._reading.is_set():
                    return
                line = self._rx.popleft()
                self._rx_bytes -= len(line) + 1
                self._rx_cond.notify_all()
            self._take_line(line)

    def _take_line(self, line: str) -> None:
        command = line.lstrip(" ")
        early = not self.emergency_parser and command[:1] == "M" and command[1:4] in ("112", "410")
        if not early:
            self._release_held()  # the host's next line ends a first move's delay (see above)
        if command[:1] == "N":
            m110 = "M110" in command
            npos = command
            if m110:
                second = command.find("N", 4)
                if second >= 0:
                    npos = command[second:]
            number = strtol(npos[1:])
            star = command.rfind("*")
            if number != self._last_n + 1 and not m110:
                self._line_error(STR_ERR_LINE_NO)
                return
            if star < 0:
                self._line_error(STR_ERR_NO_CHECKSUM)
                return
            if strtol(command[star + 1 :]) != line_checksum(command[:star]):
                self._line_error(STR_ERR_CHECKSUM_MISMATCH)
                return
            self._last_n = number
        if self._stopped:  # "Movement commands give an alert when the machine is stopped"
            g = command.find("G")
            if g >= 0 and strtol(command[g + 1 :]) in (0, 1):
                self.write_lines([STR_ERR_STOPPED])
        if not self.emergency_parser and command[:1] == "M":
            if command[1:4] == "112":
                self._kill()
            elif command[1:4] == "410":
                self._quickstop()
            # M108 would end a wait for heating; there is no heater here
        with self._ring_lock:
            self._ring.append(line)

    def _line_error(self, message: str) -> None:
        """gcode_line_error: the error, the rest of the serial buffer thrown away, then
        flush_and_request_resend: ``Resend: <last+1>`` and ``ok``."""
        self.write_lines([f"{ERROR}{message}{self._last_n}"])
        with self._rx_cond:
            self._rx.clear()
            self._rx_bytes = 0
            self._buf.clear()
            self._sis = 0
        self.lines_answered += 1
        resend = [f"{STR_RESEND}{self._last_n + 1}"]
        self.write_lines([*resend, STR_OK] if self.resend_ok else resend)

    # -- stops -----------------------------------------------------------------------------------

    def _kill(self) -> None:
        """kill(M112_KILL_STR, nullptr, true) then minkill(): steppers off, interrupts off,
        nothing more (no "ok") until the board is reset."""
        self._drop_held()
        self.worker.stop()
        self.halted = True
        self._ep_kill = False
        self.write_lines([f"{ECHO}{M112_KILL_STR}", f"{ERROR}{STR_ERR_KILLED}"])
        raise _Halted

    def _quickstop(self) -> None:
        """quickstop_stepper(): drop the planned blocks and stop now, wait (the planner then
        refuses moves for a second, and synchronize() waits that out), and take the position
        from where the steppers are. The command queue is left as it is: a move in it (or
        waiting for room in the planner) is planned after this, as in Marlin."""
        self._drop_held()
        self.worker.stop()
        self._quickstops += 1
        self._synchronize()
        deadline = time.monotonic() + self.quickstop_clean
        while time.monotonic() < deadline:
            self._idle()
            self._pause(min(_POLL, max(0.0, deadline - time.monotonic())))
        state = self.arm.state()
        actual = self._actual(state.pose, state.joints)
        self._native = {a: actual[a] - self._offset[a] for a in self.axes}
        self._stops_seen = self.worker.stops

    # -- waiting -----------------------------------------------------------------------------------

    def _synchronize(self) -> None:
        """planner.synchronize(): idle() until every planned block is done."""
        self._release_held()  # Marlin waits the first move's delay out
        while True:
            self._idle()
            if self.worker.wait_idle(_POLL):
                self._idle()
                return

    def _plan(self, job: Job, *, move: bool = False) -> None:
        """planner.buffer_line(): wait (in idle()) while the planner is full. A stop by the
        emergency parser empties the worker at once, but the room it frees is not this
        block's until the quickstop has run in idle() (Planner::quick_stop runs there, in
        Temperature::task): the block is planned after it, as Marlin plans it. A ``move``
        planned into an empty planner is held (see the module docstring, "The first move")."""
        while True:
            if move and self._hold(job):
                return
            self._release_held()  # the planner keeps its order
            if self.worker.submit(job, timeout=_POLL, stops=self._stops_seen):
                return
            self._idle()
            if self.worker.stops != self._stops_seen and not self._ep_quickstop:
                self._stops_seen = self.worker.stops  # a stop no quickstop follows

    def _hold(self, job: Job) -> bool:
        """Hold ``job`` if the planner is empty but for held moves (True: it is planned)."""
        with self._held_lock:
            if self.worker.stops != self._stops_seen or not (self._held or self.worker.idle):
                return False
            self._held.append((self._stops_seen, job))
            if len(self._held) < FIRST_MOVE_BLOCKS:
                return True
        self._release_held()  # three moves: the first is delivered at once
        return True

    def _release_held(self) -> None:
        """Hand the held moves to the steppers, unless a stop has dropped them since."""
        with self._held_lock:
            held, self._held = self._held, []
        for stops, job in held:
            if not self.worker.submit(job, timeout=_POLL, stops=stops):
                return  # stopped since (or closing): the planner was emptied

    def _drop_held(self) -> None:
        """Planner::quick_stop and a reset empty the planner: held moves too."""
        with self._held_lock:
            self._held.clear()

    def _dwell(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            self._idle()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._pause(min(_POLL, left))

    # -- commands ----------------------------------------------------------------------------------

    def execute(self, line: str) -> list[str]:
        """Run one queued line (process_next_command): its output, then ``ok``."""
        if self._fail_next is not None:
            message, self._fail_next = self._fail_next, None
            return self.error_lines(message)
        cmd = parse_command(line)
        if (cmd.letter, cmd.code) not in _KEEPS_HELD:
            # the host's next line ends a first move's delay when the board comes to it too,
            # not only when it is read (the reader may take it before the move is planned)
            self._release_held()
        self._busy = True  # KEEPALIVE_STATE(IN_HANDLER)
        try:
            out = self._dispatch(cmd)
        except _Interrupt:
            raise
        except Exception as exc:  # a bad line must never kill the emulator
            log.exception("marlin emulator: %r failed", line)
            return self.error_lines(f"{type(exc).__name__}: {exc}")
        finally:
            self._busy = False
        return [*out, STR_OK]

    def _dispatch(self, cmd: _Command) -> list[str]:
        handler = self._table.get((cmd.letter, cmd.code))
        if handler is None:
            if cmd.letter == "T":
                return []  # T<n>: tool change; one tool here
            return [f'{ECHO}{STR_UNKNOWN_COMMAND}{cmd.text}"']
        return handler(cmd)

    def _handlers(self) -> dict[tuple[str, int], Callable[[_Command], list[str]]]:
        """The commands of this build (Marlin/src/gcode/gcode.cpp process_parsed_command)."""
        table: dict[tuple[str, int], Callable[[_Command], list[str]]] = {
            ("G", 0): self._g0_g1,
            ("G", 1): self._g0_g1,
            ("G", 4): self._g4,
            ("G", 21): lambda c: self._units(1.0),  # without INCH_MODE_SUPPORT: NOOP
            ("G", 28): self._g28,
            ("G", 90): lambda c: self._set_relative(False),
            ("G", 91): lambda c: self._set_relative(True),
            ("G", 92): self._g92,
            ("M", 17): _nothing,  # enable steppers
            ("M", 18): _nothing,  # disable steppers (the arm's joints keep their pose here)
            ("M", 84): _nothing,
            ("M", 75): _nothing,  # print job timer
            ("M", 76): _nothing,
            ("M", 77): _nothing,
            ("M", 110): self._m110,
            ("M", 114): lambda c: [self._position_line()],
            ("M", 115): self._m115,
            ("M", 117): _nothing,  # LCD message: no display
            ("M", 204): self._m204,
            ("M", 400): self._m400,
            ("M", 999): self._m999,
        }
        if self.inch_mode:
            table["G", 20] = lambda c: self._units(25.4)
        if self.extruders:
            table["M", 82] = lambda c: self._set_e_relative(False)
            table["M", 83] = lambda c: self._set_e_relative(True)
        if self.emergency_parser:  # already acted on when read: nothing left to do
            for code in (108, 112, 410):
                table["M", code] = _nothing
        else:
            table["M", 108] = _nothing
            table["M", 112] = self._m112
            table["M", 410] = self._m410
        if self.keepalive is not None:
            table["M", 113] = self._m113
        if self.fans:
            table["M", 106] = self._m106
            table["M", 107] = self._m107
        if self.servos:
            table["M", 280] = self._m280
        if self.direct_pin_control:
            table["M", 42] = self._m42
        if self.spindle:
            table["M", 3] = self._m3_m4
            table["M", 4] = self._m3_m4
            table["M", 5] = self._m5
        return table

    # motion

    def _g0_g1(self, cmd: _Command) -> list[str]:
        """G0_G1.cpp: only while running (a stopped board ignores moves but answers ok);
        get_destination_from_command (gcode.cpp): absent axes stay where the board believes
        they are, words for axes the build lacks are ignored; apply_motion_limits (motion.cpp)
        clamps homed axes to the soft endstops; then one planner block."""
        if self._stopped:
            return []
        if not self.motion_before_homing and set(self.axes) - self._homed:
            # motion.cpp homing_needed_error(): MSG_HOME_FIRST "Home %s%s%s first"
            return [f"{ECHO}Home {''.join(a for a in 'XYZ' if a not in self._homed)} first"]
        dest = dict(self._native)
        for axis in self.axes:
            value = cmd.float(axis)
            if value is None:
                continue
            if axis in "XYZ" and not self.joint_space:
                value *= self._unit
            dest[axis] = self._native[axis] + value if self._relative else value - self._shift[axis]
        if self.extruders:
            e = cmd.float("E")
            if e is not None:
                e *= self._unit
                self._e = self._e + e if (self._e_relative or self._relative) else e
        feed = cmd.float("F")
        if feed is not None and feed > 0:  # parser.floatval('F') > 0
            self._feedrate = feed * self._unit / 60.0
        for axis in self._homed:
            low, high = self.soft_endstops[axis]
            dest[axis] = min(max(dest[axis], low), high)
        cartesian = any(dest[a] != self._native[a] for a in "XYZ") and not self.joint_space
        rotary = any(dest[a] != self._native[a] for a in self.joint_axes)
        if not all(math.isfinite(v) for v in dest.values()):
            log.warning("marlin emulator: a non-finite target %s is not planned", dest)
            cartesian = rotary = False
        target = {a: dest[a] + self._offset[a] for a in self.axes}
        if cartesian:
            mm = (target["X"], target["Y"], target["Z"])
            self._plan(_linear_move(mm, self._feedrate, self.orientation), move=True)
        if rotary:
            degrees = {i: target[a] for i, a in enumerate(self.joint_axes)}
            self._plan(_joint_move(degrees, self._feedrate), move=True)
        self._native = dest
        return []

    def _g4(self, cmd: _Command) -> list[str]:
        """G4.cpp: P<ms>, S<s> (S wins), after planner.synchronize()."""
        ms = strtoul(cmd.params["P"] or "") if cmd.seenval("P") else 0
        if cmd.seenval("S"):
            ms = max(0, int((cmd.float("S") or 0.0) * 1000.0))
        self._synchronize()
        self._dwell(ms / 1000.0)
        return []

    def _g28(self, cmd: _Command) -> list[str]:
        """G28.cpp: synchronize, home (every axis here: the arm homes as one), reset the G92
        shift, then report_current_position()."""
        self._synchronize()
        before = (self._quickstops, self._backend_errors)
        self._plan(_home)
        self._synchronize()
        if (self._quickstops, self._backend_errors) == before:
            self._native = {a: self._home[a] for a in self.axes}
            self._shift = dict.fromkeys(self.axes, 0.0)
            self._homed = set(self.axes)
            self._sync_offset()
        return [self._position_line()]

    def _g92(self, cmd: _Command) -> list[str]:
        """G92.cpp: set the logical position of the named axes (a shift; nothing moves)."""
        for axis in self.axes:
            value = cmd.float(axis)
            if value is not None:
                unit = self._unit if axis in "XYZ" else 1.0
                self._shift[axis] = value * unit - self._native[axis]
        e = cmd.float("E")
        if self.extruders and e is not None:
            self._e = e
        return []

    def _set_relative(self, relative: bool) -> list[str]:
        self._relative = relative
        return []

    def _set_e_relative(self, relative: bool) -> list[str]:
        self._e_relative = relative
        return []

    def _units(self, factor: float) -> list[str]:
        self._unit = factor
        return []

    def _m400(self, cmd: _Command) -> list[str]:
        self._synchronize()
        return []

    # reports and settings

    def _position_line(self) -> str:
        """report_current_position_projected (motion.cpp) with report_a_position
        (stepper.cpp): the logical position the board believes, then the planner's steps."""
        text = ""
        for axis in self.axes:
            label = f"{axis}:" if axis == "X" else f" {axis}:"
            text += label + print_float(self._native[axis] + self._shift[axis])
        if self.extruders:
            text += " E:" + print_float(self._e)
        counts = []
        for axis in self.axes:
            steps = self._native[axis] * DEFAULT_STEPS_PER_UNIT.get(axis, 80.0)
            counts.append(f"{axis}:{_lround(steps)}")
        return f"{text} Count {' '.join(counts)}"

    def _m115(self, cmd: _Command) -> list[str]:
        """M115.cpp with EXTENDED_CAPABILITIES_REPORT (stock); a capability the emulated build
        lacks is 0."""
        head = (
            f"FIRMWARE_NAME:Marlin {self.version} ({COMPILED[0]} {COMPILED[1]}) "
            f"SOURCE_CODE_URL:{SOURCE_CODE_URL} PROTOCOL_VERSION:{PROTOCOL_VERSION} "
            f"MACHINE_TYPE:{self.machine_name} EXTRUDER_COUNT:{self.extruders}"
        )
        if len(self.axes) != 3:
            head += f" AXIS_COUNT:{len(self.axes)}"
        head += f" UUID:{MACHINE_UUID}"
        caps = [
            ("SERIAL_XON_XOFF", False),
            ("BINARY_FILE_TRANSFER", False),
            ("EEPROM", False),
            ("VOLUMETRIC", False),
            ("AUTOREPORT_POS", False),
            ("AUTOREPORT_TEMP", False),
            ("PROGRESS", False),
            ("PRINT_JOB", True),
            ("AUTOLEVEL", False),
            ("RUNOUT", False),
            ("Z_PROBE", False),
            ("LEVELING_DATA", False),
            ("BUILD_PERCENT", False),
            ("SOFTWARE_POWER", False),
            ("TOGGLE_LIGHTS", False),
            ("CASE_LIGHT_BRIGHTNESS", False),
        ]
        if self.spindle:
            caps.append(("SPINDLE", True))
        caps += [
            ("EMERGENCY_PARSER", self.emergency_parser),
            ("HOST_ACTION_COMMANDS", False),
            ("PROMPT_SUPPORT", False),
            ("SDCARD", False),
            ("REPEAT", False),
            ("SD_WRITE", False),
            ("AUTOREPORT_SD_STATUS", False),
            ("LONG_FILENAME", False),
            ("LFN_WRITE", False),
            ("CUSTOM_FIRMWARE_UPLOAD", False),
            ("EXTENDED_M20", False),
            ("THERMAL_PROTECTION", True),
            ("MOTION_MODES", False),
            ("ARCS", False),
            ("BABYSTEPPING", False),
            ("CHAMBER_TEMPERATURE", False),
            ("COOLER_TEMPERATURE", False),
            ("MEATPACK", False),
            ("CONFIG_EXPORT", False),
        ]
        return [head, *(f"Cap:{name}:{int(on)}" for name, on in caps)]

    def _m204(self, cmd: _Command) -> list[str]:
        """M200-M205.cpp: no P/R/S/T reports; S sets print and travel (legacy), P print, R
        retract, T travel. Values are taken as given (no check)."""
        if not any(cmd.seen(c) for c in "PRST"):
            p, r, t = (print_float(a / self._unit) for a in self._accel)
            return [f"  M204 P{p} R{r} T{t}"]
        if cmd.seenval("S"):
            self._accel[0] = self._accel[2] = (cmd.float("S") or 0.0) * self._unit
        for i, c in enumerate("PRT"):
            if cmd.seenval(c):
                self._accel[i] = (cmd.float(c) or 0.0) * self._unit
        return []

    def _m110(self, cmd: _Command) -> list[str]:
        if cmd.seenval("N"):
            self._last_n = cmd.long("N")
        return []

    def _m113(self, cmd: _Command) -> list[str]:
        """M113.cpp: S<seconds> (0-60); without S, report."""
        if cmd.seenval("S"):
            self._interval = float(min(cmd.byte("S"), 60))
            return []
        return [f"{ECHO}M113 S{int(self._interval or 0)}"]

    def _m112(self, cmd: _Command) -> list[str]:
        self._kill()
        return []

    def _m410(self, cmd: _Command) -> list[str]:
        self._quickstop()
        return []

    def _m999(self, cmd: _Command) -> list[str]:
        """M999.cpp: running again (after stop(), not after kill()); unless S1, ask the host
        to resend from the line after the last one taken (flush_and_request_resend prints
        ``ok`` too, so M999 answers ``ok`` twice). Queued lines are kept."""
        self._stopped = False
        if cmd.boolval("S"):
            return []
        return [f"{STR_RESEND}{self._last_n + 1}", STR_OK]

    # outputs

    def _m106(self, cmd: _Command) -> list[str]:
        """M106_M107.cpp: P<fan> (default 0), S<speed> (default 255, at most 255); at once,
        not after the moves already planned (LASER_SYNCHRONOUS_M106_M107 is off)."""
        fan = cmd.byte("P", 0)
        if fan >= self.fans:
            return []
        speed = cmd.ushort("S", 255)
        self._fan_speed[fan] = min(speed, 255)
        self._outputs_changed(synchronous=False)
        return []

    def _m107(self, cmd: _Command) -> list[str]:
        fan = cmd.byte("P", 0)
        if fan < self.fans:
            self._fan_speed[fan] = 0
            self._outputs_changed(synchronous=False)
        return []

    def _m280(self, cmd: _Command) -> list[str]:
        """M280.cpp: P<index> S<angle> at once; without S, report; -1 detaches."""
        if not cmd.seenval("P"):
            return []
        index = cmd.int16("P")
        if not 0 <= index < self.servos:
            return [f"{ERROR}Servo {index} out of range"]
        if not cmd.seenval("S"):
            return [f"{ECHO} Servo {index}: {self._servo_angle.get(index, 0)}"]
        angle = cmd.int16("S")
        if angle >= 0:
            self._servo_angle[index] = angle
        else:
            self._servo_angle.pop(index, None)
        self._outputs_changed(synchronous=False)
        return []

    def _m42(self, cmd: _Command) -> list[str]:
        """M42.cpp (DIRECT_PIN_CONTROL): P<pin> S<value>, at once."""
        if not cmd.seenval("S"):
            return []
        self._pins[cmd.int16("P", 13)] = cmd.byte("S")
        self._outputs_changed(synchronous=False)
        return []

    def _m3_m4(self, cmd: _Command) -> list[str]:
        """spindle_laser M3_M4 (CUTTER_MODE_STANDARD): synchronize, then on (S0 is off)."""
        self._synchronize()
        self._spindle_on = (cmd.float("S") or 0.0) > 0 if cmd.seenval("S") else True
        self._outputs_changed(synchronous=True)
        return []

    def _m5(self, cmd: _Command) -> list[str]:
        self._synchronize()
        self._spindle_on = False
        self._outputs_changed(synchronous=True)
        return []

    def _grip_state(self) -> bool | None:
        g = self.grip
        if g.kind == "fan":
            return g.index < self.fans and self._fan_speed[g.index] > 0
        if g.kind == "spindle":
            return self._spindle_on
        value = (self._servo_angle if g.kind == "servo" else self._pins).get(g.index)
        if value is not None and value == g.on:
            return True
        if value is None or value == g.off:
            return False
        return None  # another angle or value: the gripper stays as it is

    def _outputs_changed(self, *, synchronous: bool) -> None:
        closed = self._grip_state()
        if closed is None or closed == self.gripper_closed:
            return
        if not synchronous and (self._held or not self.worker.idle):
            # Marlin switches the output now, while the arm still moves; the backend can only
            # do one thing at a time, so the grip runs after the planned moves here
            self.outputs_during_motion += 1
            log.warning(
                "marlin emulator: the gripper output changed while the arm moved; a real "
                "Marlin switches it at once: send M400 first"
            )
        self.gripper_closed = closed
        self._plan(_grip(closed))


def _nothing(cmd: _Command) -> list[str]:
    return []


def _lround(value: float) -> int:
    """C ``lround``: halves away from zero (0 for what is not finite here)."""
    if not math.isfinite(value):
        return 0
    return int(math.copysign(math.floor(abs(value) + 0.5), value))


def _home(arm: Arm) -> None:
    arm.home()


def _grip(close: bool) -> Job:
    def job(arm: Arm) -> None:
        arm.grip(close)

    return job


def _linear_move(
    target_mm: tuple[float, float, float],
    feed_mm_s: float,
    orientation: tuple[float, float, float] | None,
) -> Job:
    def job(arm: Arm) -> None:
        here = arm.state().pose
        x, y, z = (v / 1000.0 for v in target_mm)
        pose = replace(here, x=x, y=y, z=z)
        if orientation is not None:
            pose = Pose(x, y, z, *orientation)
        arm.move_to(pose, feed_mm_s / 1000.0)

    return job


def _joint_move(target_deg: dict[int, float], feed_deg_s: float) -> Job:
    def job(arm: Arm) -> None:
        joints = list(arm.state().joints)
        for i, degrees in target_deg.items():
            if i < len(joints):
                joints[i] = math.radians(degrees)
        arm.move_joints(tuple(joints), math.radians(feed_deg_s))

    return job
