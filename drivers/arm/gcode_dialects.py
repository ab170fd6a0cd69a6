"""What differs between Marlin and GRBL: their answers, how a motion ends, position, homing,
stops and accelerations. :class:`~onboard.drivers.arm.gcode.GcodeArm` asks its dialect.

Marlin 2.1 (MarlinFirmware/Marlin):

- boots printing ``start`` (an Arduino board resets when the port opens); ``M110 N0`` then
  syncs, ``M115`` reports ``Cap:EMERGENCY_PARSER``; a board that does not reset (native USB)
  may still run what a killed host sent, so it is stopped (``M410``) before the handshake;
- answers ``ok``; an error is ``Error:<text>`` *then* ``ok``; an unknown command is
  ``echo:Unknown command: "M3"`` then ``ok`` (an error here, never success); with line
  numbers (on by default), a bad line is answered ``Error:...``, ``Resend: N``, ``ok`` (some
  2.0.x builds send no ``ok`` there: :mod:`~onboard.drivers.arm.gcode_link` handles both);
- ``echo:busy: processing`` every 2 s while a command blocks: a keepalive;
- a motion is done when ``M400`` is answered; position is ``M114`` (the position Marlin
  believes: a move clamped to the soft endstops, or dropped before homing with
  ``NO_MOTION_BEFORE_HOMING``, shows there); ``G28`` homes; ``M204 S`` sets acceleration;
- the recoverable stop is ``M410`` (quickstop): it empties the planner but not the command
  queue, so a move line answered after it gets a second ``M410``; mid-motion it loses the
  position (motion.cpp: "most likely out of sync"), so the driver requires ``G28`` after it.
  ``M112`` kills the board: it prints ``Error:Printer halted. kill() called!`` and answers
  nothing until it is reset or power-cycled (``M999`` cannot undo a kill). The driver sends
  ``M112`` only from :meth:`~onboard.drivers.arm.gcode.GcodeArm.emergency_stop`, never on a
  timeout. With ``EMERGENCY_PARSER`` (off in stock builds) both act the moment they arrive;
  without it, when Marlin reads the line (it reads during ``M400`` too, while its 4-line
  command queue has room; a numbered line waits its turn): build the firmware with it.

GRBL 1.1 (gnea/grbl, doc/markdown/interface.md and commands.md):

- boots printing ``Grbl 1.1h ['$' for help]``, in alarm when homing is enabled
  (``[MSG:'$H'|'$X' to unlock]``); ``$$`` lists the settings;
- answers ``ok`` or ``error:N`` (numbers only: :mod:`~onboard.drivers.arm.grbl_codes`);
  ``ALARM:N`` locks G-code out;
- has no M400/M114/M112/M204 (``error:20``) and no A/B/C axes (grblHAL has);
- a motion is done when ``G4 P0`` is answered (a dwell waits for the planner to empty) and
  the real-time ``?`` reports ``Idle``; position comes from the same report (``MPos`` less
  ``WCO``, or ``WPos``, per ``$10``; inches per ``$13``), at any time, even while moving;
- ``$H`` homes (``G28`` only goes to a stored position); while it runs GRBL ignores ``!``
  and answers no ``?`` (one report when it ends): a stop is a reset (ctrl-x, ``ALARM:6``)
  and ``state()`` gives the last known position;
- accelerations are the ``$120``-``$122`` settings (mm/s², stored in EEPROM, kept across
  power-off): the cap is written only on an axis whose own value is higher, and the board's
  values are written back on close;
- after a hard or soft limit (``ALARM:1``, ``ALARM:2``) GRBL hears nothing but a reset: the
  driver sends it at once; the board comes back in Alarm, and ``home()`` clears it;
- the recoverable stop is the real-time feed hold ``!``; the motion is then cancelled by a
  soft reset (ctrl-x) once the hold has come to rest, which keeps the position, before the
  next command. The reset switches the spindle and coolant outputs off: the driver switches
  a closed gripper's output back on at once.
"""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from typing import Protocol

from onboard.base.errors import ArmError, ArmTimeout
from onboard.drivers.arm.config import GcodeArmConfig
from onboard.drivers.arm.gcode_link import Heard, Kind, SerialLink
from onboard.drivers.arm.grbl_codes import alarm_text, error_text

__all__ = ["Dialect", "Grbl", "Host", "Marlin", "parse_position"]

log = logging.getLogger(__name__)

_AXIS_VALUE = re.compile(r"([A-Z]):\s*(\S*)")
_PLAIN = re.compile(r"-?(?:\d+\.?\d*|\.\d+)")
_POLL = 0.05
_QUICKSTOP = 1.0  # s: after M410 Marlin's planner is held and nothing answered for a second


class Host(Protocol):
    """What a dialect needs of the arm it speaks for."""

    config: GcodeArmConfig
    link: SerialLink

    def command(self, line: str, timeout: float | None = None) -> list[str]: ...

    @property
    def gripper_closed(self) -> bool: ...

    @property
    def homing(self) -> bool:
        """A homing cycle is under way."""
        ...

    def regrip(self) -> None:
        """Switch the gripper output on again (a reset switched it off)."""


def parse_position(line: str) -> dict[str, float]:
    """``"X:1.00 Y:2.00 Z:3.00 E:0.00 Count X:..."`` -> ``{"X": 1.0, "Y": 2.0, ...}``; a value
    that is not a plain decimal (an exponent, nan) raises ArmError."""
    head = line.split("Count", 1)[0]
    position = {}
    for axis, value in _AXIS_VALUE.findall(head):
        if not (_PLAIN.fullmatch(value) and math.isfinite(float(value))):  # 1e9 is not 1
            raise ArmError(f"GcodeArm: the position report has {axis}:{value[:20]!r}: {line!r}")
        position[axis] = float(value)
    return position


class Dialect:
    """The firmware-specific half of a G-code arm."""

    name = ""
    #: lines whose answer comes only when the motion before them is done
    sync_lines: tuple[str, ...] = ()
    #: commands whose answer waits for a motion (given the motion's time-out)
    blocking: frozenset[str] = frozenset()
    #: a position is known while the arm moves
    live_position = False
    #: the recoverable stop, sent during a motion, loses the position (home again)
    stop_loses_position = False
    #: the line written before a resent one, whose report marks the answers in step again
    resync: str | None = None

    def __init__(self, host: Host) -> None:
        self.host = host
        self.config = host.config
        #: G-code is refused until home() (GRBL booted in alarm)
        self.locked = False
        #: a reset the driver sent is awaited: the boot that follows loses nothing
        self.resetting = False
        #: connect() stopped a command an earlier host left running: the position is in doubt
        self.stopped_leftover = False

    def classify(self, line: str) -> Heard:
        raise NotImplementedError

    def on_status(self, text: str) -> None:
        """A status report (GRBL)."""

    def connect(self) -> bool:
        """Bring the controller up after the port opened; True if it rebooted (what it
        knew of its position is gone)."""
        raise NotImplementedError

    def on_alarm(self, text: str) -> None:
        """The controller raised an alarm (GRBL), worded as ``text`` (reader thread)."""

    def after_sync(self, timeout: float) -> None:
        """Anything more to know the motion is done, once the sync lines are answered."""

    def before_command(self) -> None:
        """Put the controller back in a state to take lines (after a stop)."""

    def position(self) -> dict[str, float]:
        """Axis -> millimetres (degrees for rotational axes), in work coordinates."""
        raise NotImplementedError

    def reports_moving(self) -> bool:
        """The controller's last report says the machine moves (read after position())."""
        return False

    def home_lines(self) -> list[str]:
        raise NotImplementedError

    def max_feed(self) -> float | None:
        """The fastest feed (mm/min) the controller will run a linear move at, if it says."""
        return None

    def acceleration_lines(self, mm_s2: float) -> list[str]:
        raise NotImplementedError

    def restore_lines(self) -> list[str]:
        """Lines that put back what ``acceleration_lines`` changed and outlives the link."""
        return []

    def stop(self) -> None:
        """The recoverable stop, written at once (any thread)."""
        raise NotImplementedError

    def on_timeout(self) -> None:
        """A line went unanswered: stop the machine recoverably."""
        self.stop()

    def stop_again(self) -> None:
        """A motion line was answered after a stop had been sent: stop what it started."""

    #: motion lines awaiting their answer at once, at most (None: the link's ``in_flight``)
    motion_window: int | None = None

    def emergency_stop(self) -> None:
        raise NotImplementedError

    @property
    def error(self) -> str | None:
        """A controller state that refuses motion (an alarm, a kill), worded."""
        link = self.host.link
        return link.halted or link.alarm or link.lost


class Marlin(Dialect):
    name = "marlin"
    sync_lines = ("M400",)
    blocking = frozenset({"M400", "G28", "G4", "G29"})
    # motion.cpp quickstop_stepper: after M410 the axes are "most likely out of sync"
    stop_loses_position = True
    resync = "M114"

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.emergency_parser: bool | None = None  # from M115; None: not reported
        #: connect()'s drain of the answers an earlier host is owed (see _stop_first):
        #: "owed", then "report" (the first M115's), "owed again"; None: not draining
        self._drain: str | None = None
        self._dropped_oks = 0

    def classify(self, line: str) -> Heard:
        heard = self._classify(line)
        if self._drain is not None:
            return self._classify_draining(heard, line.lower())
        return heard

    def _classify(self, line: str) -> Heard:
        lower = line.lower()
        if line.startswith("ok") and (len(line) == 2 or line[2] == " "):
            return Heard(Kind.OK)
        if lower.startswith("error:"):
            text = line[len("error:") :].strip()
            # MarlinCore.cpp kill() / minkill(): "Printer halted. kill() called!"; no ok follows
            if "halted" in lower or "kill() called" in lower:
                return Heard(Kind.HALTED, f"{text}: reset or power-cycle the board")
            return Heard(Kind.ERROR_THEN_OK, text or "error")
        if lower.startswith(("resend:", "rs ")):
            return Heard(Kind.RESEND, line.split(":" if ":" in line else " ", 1)[1].strip())
        if lower.startswith("echo:unknown command"):
            # gcode.cpp GcodeSuite::process_parsed_command: unknown -> echo, then ok
            return Heard(Kind.ERROR_THEN_OK, line[len("echo:") :].strip())
        if lower.startswith(("echo:busy:", "busy:")):
            return Heard(Kind.KEEPALIVE)
        if re.match(r"^X:\s*-?\d", line) or lower.startswith(("firmware_name:", "cap:")):
            return Heard(Kind.INFO)
        if lower == "start":
            return Heard(Kind.BOOT)
        # MarlinCore.cpp setup(): the reset's cause, the version, then echo: lines
        if lower.startswith(("echo:", "//", "wait", "marlin", "t:")) or lower.endswith(
            ("reset", "power-up")
        ):
            return Heard(Kind.NOISE)
        return Heard(Kind.GARBAGE)

    def _classify_draining(self, heard: Heard, lower: str) -> Heard:
        """``heard`` during connect()'s drain (reader thread): an answer, an error or a
        report owed to an earlier host is noise, until M115's report; see :meth:`_stop_first`."""
        if heard.kind is Kind.BOOT:
            self._drain = None  # the board restarted: it owes nothing
        elif lower.startswith("firmware_name:"):
            self._drain = "report" if self._drain == "owed" else None
        elif self._drain == "report":
            if heard.kind is Kind.OK:
                self._drain = "owed again"  # the first M115's own ok: its answer
            elif heard.kind is not Kind.INFO:
                return Heard(Kind.NOISE)
        elif heard.kind in (Kind.OK, Kind.ERROR_THEN_OK, Kind.RESEND, Kind.INFO):
            self._dropped_oks += heard.kind is Kind.OK
            return Heard(Kind.NOISE)
        return heard

    def connect(self) -> bool:
        link, cfg = self.host.link, self.config
        booted = link.wait_boot(0, cfg.boot_timeout)
        if not booted:
            log.info("GcodeArm: no 'start' within %.1f s: a board without reset", cfg.boot_timeout)
        boots = link.boots
        try:
            if not booted:
                self._stop_first()
            self._handshake()
        except ArmError:
            if link.boots == boots or self.error is not None:
                raise
            # the banner came after boot_timeout (a slow bootloader, a loaded host): what we
            # sent meanwhile was lost or failed by the boot, so start again on the booted board
            log.info("GcodeArm: the board booted during the handshake: starting it again")
            self._handshake()
        return link.boots > 0  # Marlin boots believing it is at its home position

    def _stop_first(self) -> None:
        """A board that did not reset when the port opened may still run what an earlier
        host sent: a host killed inside ``M400`` leaves the board's command queue waiting for
        the move's end, and an ``M110`` would wait behind it. ``M410`` stops it: the emergency
        parser acts on it as it arrives; without one Marlin acts on a bare ``M410`` as it
        reads it, which it does during ``M400`` while its 4-line queue has room (as it has
        behind onboard's driver: a numbered line waits for the one before).

        Then the answers still owed to that host are dropped. The first ``M115``'s report
        says the board has read the ``M410`` (it reads in order), not that the ``M410`` was
        answered: Marlin reads on during the quickstop, so a line sent with the stop may be
        queued before it. Every answer owed comes before the report of a second ``M115``,
        sent once the first is answered; the ``ok`` after that report is in step. An ``ok``
        dropped besides the ``M410``'s own was owed: a command was cut short, so the position
        is in doubt (:attr:`stopped_leftover`)."""
        link = self.host.link
        # the quickstop answers nothing for its second, twice without the emergency parser
        # (acted on when read, then run from the queue)
        timeout = self.config.timeout + 2 * _QUICKSTOP
        self._drain, self._dropped_oks = "owed", 0
        try:
            if not link.write_now(b"M410\n"):
                link.check()
            self.host.command("M115", timeout=timeout)
            self.host.command("M115", timeout=timeout)
        finally:
            self._drain = None
        self.stopped_leftover = self._dropped_oks > 1
        if self.stopped_leftover:
            log.warning(
                "GcodeArm: the board was still running what an earlier host sent; M410 stopped "
                "it (%d answer(s) it owed that host dropped)",
                self._dropped_oks - 1,
            )

    def _handshake(self) -> None:
        link, cfg = self.host.link, self.config
        self.host.command("M110 N0")  # in step from here, with or without line numbers
        if cfg.numbered:
            link.number_lines_from(0)
        info = self.host.command("M115")
        caps = dict(
            c.split(":")[1:3] for c in info if c.lower().startswith("cap:") and c.count(":") >= 2
        )
        if "EMERGENCY_PARSER" in caps:
            self.emergency_parser = caps["EMERGENCY_PARSER"].strip() == "1"
        if self.emergency_parser is False:
            log.warning(
                "GcodeArm: the firmware has no EMERGENCY_PARSER: a stop (M410) acts only when "
                "Marlin reads it, late if its command queue is full; build it with "
                "EMERGENCY_PARSER"
            )

    def position(self) -> dict[str, float]:
        info = self.host.command("M114")
        position = next((parse_position(i) for i in info if re.match(r"^X:\s*-?\d", i)), None)
        if position is None or not {"X", "Y", "Z"} <= position.keys():
            raise ArmError(
                "GcodeArm: M114 was answered without a position line: check that the "
                "firmware reports 'X:.. Y:.. Z:..'"
            )
        return position

    def home_lines(self) -> list[str]:
        return [self.config.home, "M400"]

    def acceleration_lines(self, mm_s2: float) -> list[str]:
        return [f"M204 S{mm_s2:.0f}"]

    def stop(self) -> None:
        if self.host.link.is_open and self.host.link.lost is None:
            try:
                self.host.link.urgent("M410")  # answered in turn, like any line
            except ArmError as exc:  # out of step or halted: nothing more to send
                log.warning("GcodeArm: M410 not sent: %s", exc)

    def stop_again(self) -> None:
        # M410 empties the planner, not the command queue (planner.cpp quick_stop): a G1 the
        # board had read when the first M410 came is planned once that stop's second is over
        # (quickstop_stepper synchronizes), and its ok says so. Alone in the planner it waits
        # BLOCK_DELAY_FOR_1ST_MOVE (100 ms) before it moves: this M410 is sent by the link's
        # reader the moment that ok is read, so it lands first
        self.stop()

    # one G1 awaiting its ok: a stop then leaves at most one move the board will plan after
    # it, alone in the planner and so held back (three or more planned at once would start
    # at once, before the second M410)
    motion_window = 1

    def on_timeout(self) -> None:
        # the answers are out of step (reconnect() resets the board); stop it regardless
        self.host.link.write_now(b"M410\n")

    def emergency_stop(self) -> None:
        self.host.link.write_now(b"M112\n")  # never answered: the board halts


class Grbl(Dialect):
    name = "grbl"
    sync_lines = ("G4 P0",)
    blocking = frozenset({"G4", "$H", "G28", "G30"})
    live_position = True

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.settings: dict[int, float] = {}
        self._status = threading.Condition()
        self._reports = 0
        self.state = ""
        self._machine: dict[str, float] = {}
        self._work: dict[str, float] | None = None
        self._offset: dict[str, float] = {}
        self._held = False  # a feed hold awaits its reset
        self._reset_from: int | None = None  # link.boots when a reset was sent, until it boots
        self._own: dict[int, float] = {}  # $120-$122 as the board had them, where changed

    # -- lines ----------------------------------------------------------------------------

    def classify(self, line: str) -> Heard:
        if line == "ok":
            return Heard(Kind.OK)
        if line.startswith("error:"):
            return Heard(Kind.ERROR, error_text(line[len("error:") :]))
        if line.startswith("<") and line.endswith(">"):
            return Heard(Kind.STATUS, line[1:-1])
        if line.startswith("ALARM:"):
            return Heard(Kind.ALARM, alarm_text(line[len("ALARM:") :]))
        if line.startswith("Grbl ") or line.startswith("GrblHAL "):
            return Heard(Kind.BOOT)
        if (line.startswith("[") and line.endswith("]")) or re.match(r"^\$\d+=", line):
            return Heard(Kind.INFO)
        return Heard(Kind.GARBAGE)

    def on_status(self, text: str) -> None:
        fields = text.split("|")
        inches = self.settings.get(13, 0.0) == 1.0
        scale = 25.4 if inches else 1.0
        values: dict[str, dict[str, float]] = {}
        for item in fields[1:]:
            key, _, raw = item.partition(":")
            if key in ("MPos", "WPos", "WCO"):
                try:
                    numbers = [float(v) * scale for v in raw.split(",")]
                except ValueError:
                    log.warning("GcodeArm: an unreadable status report: <%s>", text)
                    return
                if not all(math.isfinite(v) for v in numbers):
                    return
                values[key] = dict(zip(self._axes(), numbers, strict=False))
        with self._status:
            self.state = fields[0]
            if "WCO" in values:
                self._offset = values["WCO"]
            if "MPos" in values:
                self._machine, self._work = values["MPos"], None
            elif "WPos" in values:
                self._work = values["WPos"]
            self._reports += 1
            self._status.notify_all()

    def _axes(self) -> str:
        return self.config.axis_letters

    # -- status ---------------------------------------------------------------------------

    def query(self, timeout: float | None = None) -> str:
        """Ask ``?`` and wait for the report; the state's name (``Idle``, ``Run``...)."""
        timeout = timeout or self.config.timeout
        with self._status:
            seen = self._reports
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.host.link.write_now(b"?"):
                self.host.link.check()
                raise ArmError("GcodeArm: the link is down")
            with self._status:
                if self._status.wait_for(lambda: self._reports > seen, 0.25):
                    return self.state
        link = self.host.link
        link.write_now(b"!")  # it may be hung mid-motion: hold it
        link.desync = "?"
        why = f"GRBL is in {link.alarm}" if link.alarm else "is it GRBL 1.1?"
        raise ArmTimeout(
            f"GcodeArm: no status report to '?' within {timeout:.1f} s ({why}); a feed hold "
            "was sent: call reconnect() before the next command"
        )

    def wait_state(self, done: tuple[str, ...], timeout: float) -> str:
        """Poll ``?`` until the state begins with one of ``done``; the last state."""
        deadline = time.monotonic() + timeout
        state = self.query()
        while not state.startswith(done):
            if time.monotonic() > deadline:
                raise ArmTimeout(
                    f"GcodeArm: GRBL stayed {state!r} for {timeout:.1f} s (awaited {done})"
                )
            time.sleep(_POLL)
            state = self.query()
        return state

    def reports_moving(self) -> bool:
        return self.state.startswith(("Run", "Jog", "Home", "Hold:1"))

    def position(self) -> dict[str, float]:
        if self.host.link.lost is None:
            self.query()
        with self._status:
            if self._work is not None:
                return dict(self._work)
            return {a: v - self._offset.get(a, 0.0) for a, v in self._machine.items()}

    # -- the sequences --------------------------------------------------------------------

    def connect(self) -> bool:
        link, cfg = self.host.link, self.config
        self._held, self.locked, self.state = False, False, ""
        self._reset_from = None
        rebooted = link.wait_boot(0, cfg.boot_timeout)  # the board reset when the port opened
        if not rebooted:
            boots = link.boots
            self._write_reset()  # a board that did not reset on open: a soft reset keeps X Y Z
            if not link.wait_boot(boots, cfg.boot_timeout):
                raise ArmError(
                    f"GcodeArm: no GRBL banner from {cfg.url!r} within {cfg.boot_timeout:.1f} s"
                    f" after a reset: check the baud rate ({cfg.baud}) and that it runs GRBL 1.1"
                )
            self._reset_from = None
        self._read_settings()
        state = self.query()
        if state.startswith("Alarm") and cfg.unlock_on_connect:
            self.host.command("$X")
        elif state.startswith("Alarm"):
            self.locked = True  # G-code gives error:9 until $H
            log.info("GcodeArm: GRBL is in alarm after boot: home() ($H) before anything else")
        return rebooted

    def on_alarm(self, text: str) -> None:
        self.locked = True  # G-code gives error:9 until $H (or $X)
        if re.match(r"ALARM:[12]\b", text):
            # protocol.c: after a hard or soft limit GRBL hears nothing but a reset; the line
            # under way is answered ok after it, before the banner: dropped
            self.host.link.abandon(text)
            self._write_reset()

    def _write_reset(self) -> None:
        link = self.host.link
        self.resetting = True
        if self._reset_from is None:
            self._reset_from = link.boots
        link.write_now(b"\x18")

    def _read_settings(self) -> None:
        for line in self.host.command("$$"):
            match = re.match(r"^\$(\d+)=([-\d.]+)", line)
            if match:
                self.settings[int(match.group(1))] = float(match.group(2))

    def after_sync(self, timeout: float) -> None:
        state = self.wait_state(("Idle", "Alarm", "Hold", "Door"), timeout)
        if not state.startswith("Idle"):
            raise ArmError(f"GcodeArm: the motion ended with GRBL in {state!r}")

    def home_lines(self) -> list[str]:
        return [self.config.home]

    def max_feed(self) -> float | None:
        rates = [self.settings[n] for n in (110, 111, 112) if self.settings.get(n)]
        return min(rates) if rates else None  # $110-$112: GRBL caps every move's feed

    def acceleration_lines(self, mm_s2: float) -> list[str]:
        """Each axis at the lower of the cap and the board's own value (as ``$$`` said at the
        first connect): never above what the machine was tuned to; EEPROM settings, so
        written only when they change."""
        lines = []
        for n in (120, 121, 122):
            current = self.settings.get(n)
            if current is None:
                continue  # not reported: writing it might raise it
            own = self._own.setdefault(n, current)
            value = round(min(own, mm_s2), 3)
            if abs(current - value) > 0.0005:
                lines.append(f"${n}={value:.3f}")
                self.settings[n] = value
        return lines

    def restore_lines(self) -> list[str]:
        lines = []
        for n, own in self._own.items():
            if abs(self.settings.get(n, own) - own) > 0.0005:
                lines.append(f"${n}={own:.3f}")
                self.settings[n] = own
        return lines

    def stop(self) -> None:
        link = self.host.link
        if self.host.homing:
            # limits.c: no real-time command but a reset is acted on while homing
            self._write_reset()
            link.abandon("cancelled by stop()")
            return
        if not link.write_now(b"!"):  # feed hold: decelerates to rest, position kept
            return
        self._held = True
        link.abandon("cancelled by stop()")  # GRBL answers them only after cycle start

    def on_timeout(self) -> None:
        # a hold stops the machine with its position kept; the link is out of step until
        # reconnect(), which reopens the port (and a board that resets on open reboots)
        self.host.link.write_now(b"!")

    def before_command(self) -> None:
        """After a feed hold: wait until it is at rest, then reset to drop what was queued.
        A reset at rest keeps the position; if the hold never came to rest, GRBL alarms
        (position lost) and stays locked until home(). After any reset the driver sent: wait
        for the board to come back."""
        link, cfg = self.host.link, self.config
        regrip = False
        if self._held:
            try:
                self.wait_state(("Hold:0", "Idle", "Alarm", "Door"), cfg.hold_timeout)
            except ArmTimeout:
                log.error("GcodeArm: the feed hold did not come to rest; resetting anyway")
            regrip = self.host.gripper_closed  # the reset switches the output off
            self._write_reset()
            self._held = False
        since = self._reset_from
        if since is None:
            return
        if not link.wait_boot(since, cfg.boot_timeout):
            raise ArmTimeout(
                f"GcodeArm: GRBL did not come back from its reset in {cfg.boot_timeout:.1f} s"
            )
        self._reset_from = None
        link.desync = None
        if self.query().startswith("Alarm"):
            self.locked = True
            log.error("GcodeArm: GRBL is in alarm after the reset: home() before moving")
            return
        for line in cfg.startup:
            self.host.command(line)
        if regrip:
            self.host.regrip()

    def emergency_stop(self) -> None:
        self._write_reset()  # a reset in motion: ALARM:3, home again
