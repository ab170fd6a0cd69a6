"""The Marlin 2.1 emulator over its real pty, spoken to with raw bytes (not through a driver).

Every wait is bounded (arm_harness.BOUND) and every ordering is decided by an event, never by
a sleep: a motion is kept under way by holding the twin's physics at a step (Twin.hold_at), a
line is known to be in the board when it shows in ``emulator.queued`` or ``emulator.dropped``.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from arm_harness import BOUND, HOLD_AFTER, require, twin_arm, wait_until

from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.marlin_pty import MarlinEmulator, line_checksum
from onboard.drivers.twin import SCENES

SCENE = SCENES / "blocks.toml"
BUSY = "echo:busy: processing"
KILLED = ["echo:M112 Shutdown", "Error:Printer halted. kill() called!"]
BANNER_END = "echo:Hardcoded Default Settings Loaded"
NUMBER = r"-?\d+\.\d\d"
BOOT = 0.05  # s from a reset to the banner (the emulator's bootloader; real boards: 0.5-2 s)


@pytest.fixture
def backend() -> Iterator[SimArm]:
    with twin_arm() as arm:
        yield arm


class Host:
    """A serial host on the emulator's pty: raw lines out, raw lines in.

    The pty is opened with ``os.open``, not pyserial: pyserial flushes its input at the end of
    ``open()``, and a board that boots in 50 ms (BOOT) may have printed its banner before that
    flush on a loaded machine, which then throws the banner away."""

    def __init__(self, path: str, board: MarlinEmulator | None = None) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
        self.board = board  # named in a timeout's message: what the board had seen
        tty.setraw(self.fd, termios.TCSANOW)  # TCSAFLUSH, the default, would flush too
        self._pending = b""

    def close(self) -> None:
        """Close the port (again: nothing; the fd number may belong to someone else by then)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def in_waiting(self) -> int:
        """Bytes the board printed that the host has not read."""
        return struct.unpack("i", fcntl.ioctl(self.fd, termios.FIONREAD, b"\0" * 4))[0]

    def send(self, *lines: str) -> None:
        data = "".join(line + "\n" for line in lines).encode("latin-1")
        while data:
            data = data[os.write(self.fd, data) :]

    def read_until(self, done: Callable[[str], bool], what: str) -> list[str]:
        """Lines up to and including the first for which ``done`` holds."""
        lines: list[str] = []
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.02)
            if ready:
                self._pending += os.read(self.fd, 4096)
            while b"\n" in self._pending:
                raw, self._pending = self._pending.split(b"\n", 1)
                lines.append(raw.decode("latin-1"))
                if done(lines[-1]):
                    return lines
        seen = ""
        if self.board is not None:
            seen = f"; the board: {self.board.boots} boots, port open {self.board.port_open}"
        require(False, f"{what} (read {lines!r}{seen})")
        return lines

    def answer(self) -> list[str]:
        """The lines of one answer, busy keepalives left out, up to its ``ok``."""
        lines = self.read_until(lambda x: x == "ok", "an ok")[:-1]
        return [x for x in lines if x != BUSY]

    def banner(self) -> list[str]:
        return self.read_until(lambda x: x == BANNER_END, "the boot banner")


def numbered(n: int, command: str) -> str:
    text = f"N{n} {command}"
    return f"{text}*{line_checksum(text)}"


@contextmanager
def board(backend: SimArm, **options: object) -> Iterator[tuple[MarlinEmulator, Host]]:
    """An emulator with a host that has opened it and read its banner."""
    options.setdefault("keepalive", 0.05)
    options.setdefault("boot_time", BOOT)
    with MarlinEmulator(backend, **options) as emulator:  # type: ignore[arg-type]
        host = Host(emulator.path, emulator)
        try:
            if emulator.auto_reset:
                host.banner()
            yield emulator, host
        finally:
            host.close()


def z_mm(arm: SimArm) -> float:
    return arm.state().pose.z * 1000.0


# -- boot -------------------------------------------------------------------------------------


def test_opening_the_port_boots_the_board_and_a_reopen_boots_it_again(backend: SimArm) -> None:
    with MarlinEmulator(backend, boot_time=BOOT) as emulator:
        host = Host(emulator.path, emulator)
        lines = host.banner()
        assert lines[:3] == ["start", " External Reset", "Marlin bugfix-2.1.x"]
        assert all(x.startswith("echo:") for x in lines[3:])
        host.send("M110 N41")
        assert host.answer() == []
        assert emulator.line_number == 41
        host.close()
        host = Host(emulator.path, emulator)
        assert host.banner()[0] == "start"
        assert emulator.boots == 2
        assert emulator.line_number == 0  # a reset keeps no line number
        host.send(numbered(1, "M114"))
        assert host.answer()[0].startswith("X:")
        host.close()


def test_a_port_closed_and_reopened_at_once_boots_the_board_every_time(backend: SimArm) -> None:
    """A host that closes the port and opens it again at once gets a new banner every time.
    It did not always (CI failed on the test above): the close makes the pty's master
    readable (a hangup); when the reopen came between that wakeup and the emulator's read,
    the read blocked, waiting for the host's first byte while the host waited for the banner.
    The window is narrow, so the test reopens many times with thread switches as frequent as
    they go."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with MarlinEmulator(backend, boot_time=0.001) as emulator:
            host = Host(emulator.path, emulator)
            try:
                host.banner()
                for attempt in range(1, 501):
                    host.close()
                    host = Host(emulator.path, emulator)
                    assert host.banner()[0] == "start", f"reopen {attempt}"
                    assert emulator.boots == attempt + 1
            finally:
                host.close()
    finally:
        sys.setswitchinterval(interval)


def test_without_auto_reset_the_board_says_nothing_until_spoken_to(backend: SimArm) -> None:
    with board(backend, auto_reset=False) as (emulator, host):
        host.send("M115")
        lines = host.answer()
        assert lines[0].startswith("FIRMWARE_NAME:Marlin ")  # no banner before it
        assert emulator.boots == 0


def test_a_reset_forgets_where_the_tool_is(backend: SimArm) -> None:
    """After a reset Marlin believes it is at its home position wherever the tool is."""
    with board(backend) as (emulator, host):
        home_z = z_mm(backend)
        host.send(f"G1 Z{home_z - 20:.2f} F3000", "M400")
        host.answer(), host.answer()
        assert z_mm(backend) == pytest.approx(home_z - 20, abs=3)
        host.close()
        # a quick reopen is another test's subject; here the board must have seen the close
        wait_until(lambda: not emulator.port_open, "the board to see the port closed")
        host = Host(emulator.path, emulator)
        host.banner()
        assert emulator.boots == 2
        host.send("M114")
        assert f"Z:{home_z:.2f}" in host.answer()[0]  # where it believes it is, not where it is
        host.close()


# -- answers ----------------------------------------------------------------------------------


def test_an_unknown_command_is_echoed_then_answered_ok(backend: SimArm) -> None:
    with board(backend) as (emulator, host):
        host.send("M3 S100")
        assert host.answer() == ['echo:Unknown command: "M3 S100"']
        host.send("G20")  # no INCH_MODE_SUPPORT in a stock build
        assert host.answer() == ['echo:Unknown command: "G20"']
        started = emulator.worker.started
        host.send("G1 A10", "M400")  # an axis the build lacks is ignored
        assert host.answer() == [] and host.answer() == []
        assert emulator.worker.started == started
    with board(backend, spindle=True) as (_, host):
        host.send("M3 S100")
        assert host.answer() == []


def test_an_error_is_followed_by_ok(backend: SimArm) -> None:
    with board(backend) as (emulator, host):
        emulator.fail_next("simulated fault")
        host.send("M114")
        assert host.answer() == ["Error:simulated fault"]


def test_a_bad_line_is_answered_with_resend_and_the_resent_line_is_taken(
    backend: SimArm,
) -> None:
    with board(backend) as (emulator, host):
        host.send("M110 N0")
        assert host.answer() == []  # wait for it: see the test below
        host.send(numbered(1, "M114"))
        host.answer()
        good = numbered(2, "M114")
        host.send(good[:-1] + str((int(good[-1]) + 1) % 10))
        assert host.answer() == ["Error:checksum mismatch, Last Line: 1", "Resend: 2"]
        host.send(good)
        assert host.answer()[0].startswith("X:")
        host.send(numbered(5, "M114"))
        assert host.answer() == [
            "Error:Line Number is not Last Line Number+1, Last Line: 2",
            "Resend: 3",
        ]
        host.send("N3 M114")
        assert host.answer() == ["Error:No Checksum with line number, Last Line: 2", "Resend: 3"]
        assert emulator.line_number == 2


def test_lines_are_read_ahead_so_m110_must_be_answered_before_numbered_lines_follow(
    backend: SimArm,
) -> None:
    """Lines are checked when read into the command queue, and read while earlier commands
    wait; M110 sets the number when it runs. N1 sent right behind M110 N0 is read (and taken)
    before M110 runs, which then sets the number back to 0: N2 is refused."""
    with board(backend) as (emulator, host):
        host.send("G4 P50", "M110 N0", numbered(1, "M114"))
        host.answer(), host.answer()
        assert host.answer()[0].startswith("X:")  # N1 was taken while G4 waited
        assert emulator.line_number == 0  # and then M110 N0 ran
        host.send(numbered(2, "M114"))
        assert host.answer() == [
            "Error:Line Number is not Last Line Number+1, Last Line: 0",
            "Resend: 1",
        ]


# -- waiting ----------------------------------------------------------------------------------


def test_m400_is_answered_when_the_move_has_ended_with_busy_lines_meanwhile(
    backend: SimArm,
) -> None:
    twin = backend.twin
    with board(backend) as (emulator, host):
        target = z_mm(backend) - 40
        with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
            host.send(f"G1 Z{target:.2f} F600")
            assert host.answer() == []  # ok once planned, not done
            host.send("M400")
            require(gate.wait_reached(BOUND), "the move reached the held step")
            lines = host.read_until(lambda x: x == BUSY, "a busy line")
            lines += host.read_until(lambda x: x == BUSY, "a second busy line")
            assert "ok" not in lines
            gate.release()
        host.answer()
        assert emulator.worker.idle
        assert z_mm(backend) == pytest.approx(target, abs=3)


# -- stops ------------------------------------------------------------------------------------


@contextmanager
def m400_held(backend: SimArm, host: Host, numbers: bool = False) -> Iterator[Callable[[], None]]:
    """A long move and an M400 waiting for it, the physics held; yields the release."""
    twin = backend.twin
    target = z_mm(backend) - 40
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        if numbers:
            host.send("M110 N0")
            host.answer()
            host.send(numbered(1, f"G1 Z{target:.2f} F600"), numbered(2, "M400"))
        else:
            host.send(f"G1 Z{target:.2f} F600", "M400")
        host.answer()
        require(gate.wait_reached(BOUND), "the move reached the held step")
        yield gate.release


def test_without_emergency_parser_a_numbered_m112_waits_behind_m400(backend: SimArm) -> None:
    with board(backend) as (emulator, host), m400_held(backend, host, numbers=True) as release:
        host.send(numbered(3, "M112"))
        wait_until(lambda: any("M112" in q for q in emulator.queued), "M112 is queued")
        assert not emulator.halted and not backend.state().stopped
        release()
        assert host.answer() == []  # M400's ok first
        lines = host.read_until(lambda x: x == KILLED[1], "the kill")
        assert [x for x in lines if x != BUSY] == KILLED
        assert emulator.halted


def test_without_emergency_parser_a_bare_m112_acts_as_soon_as_it_is_read(
    backend: SimArm,
) -> None:
    """The serial buffer is read in idle(), also while M400 waits (MarlinCore.cpp
    manage_inactivity), and a line starting "M112" kills at once (queue.cpp)."""
    with board(backend) as (emulator, host), m400_held(backend, host) as release:
        host.send("M112")
        wait_until(lambda: emulator.halted, "the board halted")
        require(backend.wait_stopped(BOUND), "the arm stopped")
        release()
        lines = host.read_until(lambda x: x == KILLED[1], "the kill")
        assert "ok" not in lines


def test_with_emergency_parser_m112_halts_at_once_and_only_a_reset_helps(
    backend: SimArm,
) -> None:
    with board(backend, emergency_parser=True) as (emulator, host):
        with m400_held(backend, host, numbers=True) as release:
            host.send(numbered(3, "M112"))
            wait_until(lambda: emulator.halted, "the board halted")
            require(backend.wait_stopped(BOUND), "the arm stopped while its move was held")
            release()
        lines = host.read_until(lambda x: x == KILLED[1], "the kill")
        assert "ok" not in lines
        dropped = emulator.dropped
        host.send("M999", "M114")
        wait_until(lambda: emulator.dropped >= dropped + 2, "the halted board took both lines")
        assert host.in_waiting == 0  # nothing answered, M999 included
        assert emulator.halted
        host.close()
        wait_until(lambda: not emulator.port_open, "the board to see the port closed")
        host = Host(emulator.path, emulator)  # a reopen resets the board
        host.banner()
        host.send("M114")
        assert host.answer()[0].startswith("X:")
        assert not emulator.halted
        host.close()


def test_with_emergency_parser_m410_stops_the_move_and_the_board_goes_on(
    backend: SimArm,
) -> None:
    with board(backend, emergency_parser=True) as (_, host):
        start = z_mm(backend)
        with m400_held(backend, host) as release:
            host.send("M410")
            require(backend.wait_stopped(BOUND), "the arm stopped while its move was held")
            release()
        assert host.answer() == []  # M400: the planner is empty now
        assert host.answer() == []  # M410 itself, in its turn
        stopped_at = z_mm(backend)
        assert start - stopped_at < 20  # well short of the 40 mm move
        host.send("M114")
        reported = re.search(rf"Z:({NUMBER})", host.answer()[0])
        assert reported and float(reported.group(1)) == pytest.approx(stopped_at, abs=0.5)
        host.send(f"G1 Z{start:.2f} F3000", "M400")
        assert host.answer() == [] and host.answer() == []
        assert z_mm(backend) == pytest.approx(start, abs=3)


def test_a_move_read_before_m410_is_planned_after_it_and_waits_for_the_hosts_next_line(
    backend: SimArm,
) -> None:
    """M410 leaves the command queue alone (planner.cpp quick_stop): a G1 queued behind the
    M400 is planned once the stop is over, alone in the planner, where it waits (Marlin:
    BLOCK_DELAY_FOR_1ST_MOVE) until the host's next line; a second M410 sent at its ok drops
    it, so nothing moves after the first stop. Without that M410, the next line starts it."""
    twin = backend.twin
    with board(backend, emergency_parser=True, quickstop_clean=0.05) as (emulator, host):
        start = z_mm(backend)
        with m400_held(backend, host) as release:
            host.send(f"G1 Z{start - 30:.2f} F600", "M410")
            require(backend.wait_stopped(BOUND), "the arm stopped while its move was held")
            release()
        assert host.answer() == []  # M400
        began, step = emulator.worker.started, twin.snapshot.step
        assert host.answer() == []  # the queued G1: planned after the stop
        assert host.answer() == []  # M410 itself, in its turn
        assert emulator.worker.started == began and twin.snapshot.step == step  # held
        host.send("M410", "M400")  # the driver's second stop, at the G1's ok
        assert host.answer() == [] and host.answer() == []
        assert emulator.worker.started == began and twin.snapshot.step == step
        host.send(f"G1 Z{start - 30:.2f} F3000")
        assert host.answer() == []
        assert emulator.worker.started == began  # alone: it waits for the next line
        host.send("M114")
        host.answer()
        require(emulator.worker.wait_started(began + 1, BOUND), "the next line started it")


# -- reports ----------------------------------------------------------------------------------


def test_m114_reports_the_position_and_the_step_counts(backend: SimArm) -> None:
    with board(backend) as (_, host):
        host.send("M114")
        (line,) = host.answer()
        assert re.fullmatch(
            rf"X:{NUMBER} Y:{NUMBER} Z:{NUMBER} E:{NUMBER} Count X:-?\d+ Y:-?\d+ Z:-?\d+", line
        ), line
    with board(backend, rotary_axes="AB") as (_, host):
        host.send("M114")
        (line,) = host.answer()
        assert re.fullmatch(
            rf"X:{NUMBER} Y:{NUMBER} Z:{NUMBER} A:{NUMBER} B:{NUMBER} E:{NUMBER} "
            r"Count X:-?\d+ Y:-?\d+ Z:-?\d+ A:-?\d+ B:-?\d+",
            line,
        ), line


@pytest.mark.parametrize("parser", [False, True])
def test_m115_reports_the_firmware_and_its_capabilities(backend: SimArm, parser: bool) -> None:
    with board(backend, emergency_parser=parser) as (_, host):
        host.send("M115")
        lines = host.answer()
        assert lines[0].startswith("FIRMWARE_NAME:Marlin bugfix-2.1.x (")
        assert "PROTOCOL_VERSION:1.0" in lines[0]
        assert f"Cap:EMERGENCY_PARSER:{int(parser)}" in lines
        assert all(re.fullmatch(r"Cap:[A-Z0-9_]+:[01]", x) for x in lines[1:])


# -- numbers and limits -----------------------------------------------------------------------


def test_a_number_with_an_exponent_is_read_as_its_mantissa(backend: SimArm) -> None:
    with board(backend) as (emulator, host):
        start = z_mm(backend)
        host.send("G91", "G1 Z-1e3 F600", "M400")  # Z-1, not Z-1000
        for _ in range(3):
            assert host.answer() == []
        assert z_mm(backend) == pytest.approx(start - 1, abs=1)
        assert not emulator.stopped


def test_homed_axes_are_clamped_to_the_soft_endstops(backend: SimArm) -> None:
    home_z = z_mm(backend)
    limits = {"Z": (home_z - 30, home_z + 30)}
    with board(backend, soft_endstops=limits) as (_, host):
        host.send("G28")
        assert host.answer()[0].startswith("X:")  # G28 reports where it homed
        host.send("G1 Z-99999 F3000", "M400", "M114")
        host.answer(), host.answer()
        assert f"Z:{home_z - 30:.2f}" in host.answer()[0]
        assert z_mm(backend) == pytest.approx(home_z - 30, abs=3)


# -- the gripper --------------------------------------------------------------------------------


def test_the_fan_output_drives_the_gripper_and_a_reset_lets_go(backend: SimArm) -> None:
    with board(backend) as (emulator, host):
        host.send("M280 P0 S90")  # no servos in a stock build
        assert host.answer() == ['echo:Unknown command: "M280 P0 S90"']
        host.send("M106 S255", "M400")
        host.answer(), host.answer()
        assert backend.state().gripper_closed
        assert emulator.outputs_during_motion == 0
        host.close()
        wait_until(lambda: not emulator.port_open, "the board to see the port closed")
        host = Host(emulator.path, emulator)  # the reset puts the fan pin low
        host.banner()
        wait_until(lambda: not backend.state().gripper_closed, "the gripper opened")
        host.close()


# -- faults, settings and the serial buffer ---------------------------------------------------


def test_a_move_the_arm_cannot_do_stops_the_board_until_m999(backend: SimArm) -> None:
    stopped = (
        "Printer stopped due to errors. Fix the error and use M999 to restart. "
        "(Temperature is reset. Set it after restarting)"
    )
    with board(backend) as (emulator, host):
        host.send("G1 X5000 F3000", "M400")  # 5 m away: out of the arm's reach
        assert host.answer() == []
        lines = host.answer()
        assert lines[-1] == f"Error:{stopped}" and lines[0].startswith("Error:")
        assert emulator.stopped
        started = emulator.worker.started
        host.send("G1 Z400", "M400")  # read by a stopped board: an alert, and not moved
        assert host.answer() == [stopped]
        assert host.answer() == []
        assert emulator.worker.started == started
        host.send("M999")  # running again; asks for the line after the last one taken
        assert host.answer() == ["Resend: 1"]
        assert host.answer() == []  # M999's own ok: flush_and_request_resend sent one too
        assert not emulator.stopped


def test_comments_are_not_answered_and_a_long_line_is_cut(backend: SimArm) -> None:
    with board(backend) as (_, host):
        host.send("; a comment alone is no command", "M114 ; position")
        assert host.answer()[0].startswith("X:")  # the only answer
        host.send("M110 N0")
        host.answer()
        host.send(numbered(1, "M117 " + "x" * 120))  # cut at 95 characters, before its '*'
        assert host.answer() == ["Error:No Checksum with line number, Last Line: 0", "Resend: 1"]


def test_m204_s_sets_the_travel_acceleration_that_moves_without_e_use(backend: SimArm) -> None:
    with board(backend) as (emulator, host):
        host.send("M204 P800")
        host.answer()
        assert (emulator.acceleration, emulator.travel_acceleration) == (800.0, 3000.0)
        host.send("M204 S500", "M204")
        host.answer()
        assert host.answer() == ["  M204 P500.00 R3000.00 T500.00"]
        assert emulator.travel_acceleration == 500.0


def test_a_full_serial_buffer_drops_what_arrives(backend: SimArm) -> None:
    """Lines wait in the RX buffer while the command queue is full (M400 and three more)."""
    line = "M117 " + "x" * 15  # 21 bytes with its newline: three fit in 64
    with board(backend, rx_buffer=64) as (emulator, host), m400_held(backend, host) as release:
        host.send("M114", "M114", "M114")
        wait_until(lambda: len(emulator.queued) == 4, "the command queue is full")
        host.send(*[line] * 5)
        wait_until(lambda: emulator.rx_overruns == 2, "two lines were dropped")
        release()
        answers = [host.answer() for _ in range(1 + 3 + 3)]
        assert answers[0] == []  # M400
        assert all(a[0].startswith("X:") for a in answers[1:4])
        assert emulator.lines_received == 2 + 3 + 3
