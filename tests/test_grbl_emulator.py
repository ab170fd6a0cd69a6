"""The GRBL 1.1 emulator, spoken to byte for byte over its real pty with pyserial (no driver).

Each test checks one behaviour of the firmware (gnea/grbl 1.1h) that a driver must live with.
A motion that must still be under way while the test acts is held by the twin's gate
(``Twin.hold_at``, see arm_harness): the backend's thread blocks inside the physics step, so
the outcome depends on the order of events, never on how fast the machine is. Every wait is
bounded (``BOUND``) and fails naming what did not happen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
import serial
from arm_harness import BOUND, HOLD_AFTER, require, twin_arm, wait_until

from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.grbl_pty import BANNER, PLANNER_BLOCKS, GrblEmulator

FAST = {110: 30000.0, 111: 30000.0, 112: 30000.0}  # mm/min: GRBL's default 500 is slow
LOCKED = "[MSG:'$H'|'$X' to unlock]"
POSITION = re.compile(r"[MW]Pos:([-\d.]+),([-\d.]+),([-\d.]+)")


@pytest.fixture(scope="module")
def backend() -> Iterator[SimArm]:
    with twin_arm() as arm:
        yield arm


class Board:
    """The host's end of the link: raw lines out, GRBL's lines (without ``\\r\\n``) in."""

    def __init__(self, emulator: GrblEmulator) -> None:
        self.emulator = emulator
        self.port = serial.serial_for_url(emulator.path, timeout=BOUND)

    def close(self) -> None:
        self.port.close()

    def line(self) -> str:
        raw = self.port.readline()
        require(raw.endswith(b"\n"), "the board printed a line")
        return str(raw.decode("ascii", errors="replace").rstrip("\r\n"))

    def lines_until(self, last: Callable[[str], bool]) -> list[str]:
        lines = [self.line()]
        while not last(lines[-1]):
            lines.append(self.line())
        return lines

    def send(self, text: str) -> None:
        self.port.write(text.encode("ascii") + b"\n")

    def command(self, text: str) -> list[str]:
        """Send a line; what the board printed up to and including its ``ok`` or ``error:N``."""
        self.send(text)
        return self.lines_until(lambda line: line == "ok" or line.startswith("error:"))

    def status(self) -> str:
        self.port.write(b"?")
        return self.line()

    def boot(self) -> list[str]:
        """The banner: a blank line, then the welcome (and the lock message in Alarm)."""
        lines = [self.line(), self.line()]
        assert lines == ["", BANNER], lines
        if self.emulator.state_name == "Alarm":
            lines.append(self.line())
        return lines


def position(report: str) -> tuple[float, ...]:
    match = POSITION.search(report)
    assert match, report
    return tuple(float(v) for v in match.groups())


def field(report: str, name: str) -> str | None:
    for part in report.strip("<>").split("|"):
        if part.startswith(name + ":"):
            return part[len(name) + 1 :]
    return None


@pytest.fixture
def grbl(backend: SimArm) -> Iterator[GrblEmulator]:
    """machine_origin (0,0,0): MPos is the twin's tool position in mm."""
    with GrblEmulator(backend, settings=FAST, machine_origin=(0.0, 0.0, 0.0)) as emulator:
        yield emulator


@pytest.fixture
def board(grbl: GrblEmulator) -> Iterator[Board]:
    board = Board(grbl)
    board.boot()
    yield board
    board.close()


def tool_mm(backend: SimArm) -> tuple[float, float, float]:
    p = backend.state().pose
    return (p.x * 1000, p.y * 1000, p.z * 1000)


def far_move(
    backend: SimArm, dy: float = 60.0, feed: float = 1200.0
) -> tuple[str, tuple[float, ...]]:
    """A G1 that takes ~3 s of simulated time: the twin's gate holds it well before its end."""
    x, y, z = tool_mm(backend)
    return f"G1 X{x:.3f} Y{y + dy:.3f} Z{z:.3f} F{feed:.0f}", (x, y + dy, z)


def at(backend: SimArm, target_mm: tuple[float, ...], tolerance_mm: float = 3.0) -> bool:
    return math.dist(tool_mm(backend), target_mm[:3]) < tolerance_mm


# -- boot -------------------------------------------------------------------------------------


def test_the_board_boots_when_the_port_opens_and_again_on_reopen(
    grbl: GrblEmulator, backend: SimArm
) -> None:
    board = Board(grbl)
    assert board.boot() == ["", BANNER]
    assert board.status().startswith("<Idle|MPos:")
    assert board.command("M3 S1000") == ["ok"]  # the gripper is on the spindle output
    wait_until(lambda: backend.state().gripper_closed, "the gripper closed")
    board.close()
    wait_until(lambda: not grbl.connected, "the emulator saw the port close")
    board = Board(grbl)  # DTR resets the Arduino: a new boot, every output off
    assert board.boot() == ["", BANNER]
    assert grbl.boots == 2
    wait_until(lambda: not backend.state().gripper_closed, "the gripper opened at the reset")
    assert board.command("$G")[0].startswith("[GC:G0 G54 G17 G21 G90 G94 M5 M9")
    board.close()


def test_a_native_usb_board_is_silent_until_spoken_to(backend: SimArm) -> None:
    with GrblEmulator(backend, auto_reset=False) as emulator:
        board = Board(emulator)
        assert board.status().startswith("<Idle|MPos:0.000,0.000,0.000|")  # no banner first
        board.port.write(b"\x18")  # a soft reset prints it
        assert board.boot() == ["", BANNER]
        board.close()


def test_homing_enabled_boots_locked_and_dollar_h_homes(backend: SimArm) -> None:
    here = backend.state().pose
    backend.resume()
    backend.move_to(replace(here, y=here.y + 0.04, z=here.z - 0.03), 0.3)  # away from home
    with GrblEmulator(backend, settings={22: 1, **FAST}) as emulator:
        board = Board(emulator)
        assert board.boot() == ["", BANNER, LOCKED]
        report = board.status()
        assert report.startswith("<Alarm|MPos:0.000,0.000,0.000|")  # position lost at reset
        assert board.command("G0 X1") == ["error:9"]  # G-code is locked in Alarm
        assert board.command("$H") == ["ok"]
        assert at(
            backend,
            tuple(v * 1000 for v in backend.twin.forward(backend.twin.scene.arm.home).position()),
        )
        assert board.status().startswith("<Idle|MPos:-1.000,-1.000,-1.000|")  # $27 pull-off
        assert board.command("G0 X-2") == ["ok"]
        board.close()


def test_homing_disabled_is_error_5_and_unlock_needs_alarm(board: Board) -> None:
    assert board.command("$H") == ["error:5"]
    assert board.command("$X") == ["ok"]  # not in Alarm: no effect


# -- lines ------------------------------------------------------------------------------------

ERRORS = {
    "M400": 20,  # no such M-code in GRBL: wait with G4 P0
    "M114": 20,  # the position is in the status report (?)
    "M112": 20,  # the emergency stop is ctrl-x
    "M204 S100": 20,  # accelerations are $120-$122
    "M410": 20,
    "M7": 20,  # mist is a build option (ENABLE_M7), off by default
    "G0 A5": 20,  # no A/B/C axes
    "G0 X1e3": 20,  # no exponents: E is read as a word of its own
    "G0 X": 2,
    "G0 X--1": 2,
    "G0 X1 X2": 25,
    "G1 X1": 22,  # no feed rate yet
    "G17 G18": 21,
    "G0 X1 G1 Y1": 24,  # two motion commands: the axis-command check comes first
    "G1.5 X1": 23,
    "G4": 28,
    "G10 L3 X1": 20,  # only L2 and L20
    "G0 X1 P5": 36,
    "N12 G0 X1*97": 1,  # no checksums
    "$100=-1": 4,
    "$20=1": 10,  # soft limits need homing
    "$999=1": 3,
    "$Q": 2,
}


def test_each_line_is_answered_in_order_with_grbls_error_numbers(board: Board) -> None:
    for line, code in ERRORS.items():
        assert board.command(line) == [f"error:{code}"], line
    assert board.command("G1 X" + "1" * 90) == ["error:11"]  # more than 79 characters
    board.port.write(b"$G\r\n")  # \r and \n each end a line: two answers
    assert board.lines_until(lambda line: line == "ok")[0].startswith("[GC:")
    assert board.line() == "ok"
    assert board.command("g4 (a comment) p0 ; the rest") == ["ok"]  # lower case, comments


def test_status_reports_mpos_wpos_buffer_and_wco(board: Board) -> None:
    first = board.status()
    assert field(first, "WCO") == "0.000,0.000,0.000"  # the first report after a reset
    second = board.status()
    assert field(second, "WCO") is None and field(second, "Ov") == "100,100,100"
    assert board.command("G10 L20 P1 X0 Y0 Z0") == ["ok"]  # work zero here
    report = board.status()
    wco = tuple(float(v) for v in (field(report, "WCO") or "").split(","))
    assert wco == pytest.approx(position(report), abs=0.002)
    assert board.command("$10=2") == ["ok"]  # WPos, with the buffer state
    report = board.status()
    assert report.startswith("<Idle|WPos:")
    assert position(report) == pytest.approx((0.0, 0.0, 0.0), abs=0.002)
    assert field(report, "Bf") == f"{PLANNER_BLOCKS},128"
    assert board.command("$13=1") == ["ok"]  # inches
    inches = tuple(float(v) for v in (field(board.status(), "WCO") or "").split(","))
    assert inches == pytest.approx(tuple(v / 25.4 for v in wco), abs=0.0002)


def test_settings_and_parameters(board: Board) -> None:
    settings = board.command("$$")
    assert settings[-1] == "ok"
    for expected in ("$10=1", "$13=0", "$20=0", "$21=0", "$22=0", "$110=30000.000"):
        assert expected in settings
    for number in (111, 112, 120, 121, 122, 130, 131, 132):
        assert any(line.startswith(f"${number}=") for line in settings), number
    assert board.command("$120=50") == ["ok"]
    assert board.emulator.settings[120] == 50.0
    assert board.command("G10 L2 P2 X1 Y2.5 Z-3") == ["ok"]
    assert board.command("G92 X0") == ["ok"]
    params = board.command("$#")
    assert params[1] == "[G55:1.000,2.500,-3.000]"
    assert [line.split(":")[0] for line in params] == [
        "[G54", "[G55", "[G56", "[G57", "[G58", "[G59", "[G28", "[G30", "[G92", "[TLO",
        "[PRB", "ok",
    ]  # fmt: skip
    assert params[-2] == "[PRB:0.000,0.000,0.000:0]"
    assert board.command("$I") == ["[VER:1.1h.20190830:]", f"[OPT:V,{PLANNER_BLOCKS},128]", "ok"]


def test_g28_goes_to_the_stored_position_it_is_not_homing(board: Board, backend: SimArm) -> None:
    home = tool_mm(backend)
    assert board.command("G28.1") == ["ok"]  # stores where the parser is
    assert board.command("G91 G0 Y15") == ["ok"]
    assert board.command("G90 G28") == ["ok"]
    assert board.command("G4 P0") == ["ok"]
    assert at(backend, home)


def test_check_mode_moves_nothing_and_an_arc_runs_as_segments(
    board: Board, backend: SimArm
) -> None:
    emulator = board.emulator
    x, y, z = tool_mm(backend)
    started = emulator.worker.started
    assert board.command("$C") == ["[MSG:Enabled]", "ok"]
    assert board.command("G0 X0") == ["ok"]  # checked, not run
    assert board.command("$C") == ["[MSG:Disabled]", "ok"]  # leaving check mode resets
    assert board.boot() == ["", BANNER]
    assert emulator.worker.started == started
    # a quarter circle of radius 10 mm about (x, y + 10): chords within $12 = 0.002 mm
    assert board.command(f"G3 X{x + 10:.3f} Y{y + 10:.3f} I0 J10 F3000") == ["ok"]
    assert board.command("G4 P0") == ["ok"]
    assert at(backend, (x + 10, y + 10, z))
    assert emulator.worker.started - started > 20


# -- motion -----------------------------------------------------------------------------------


def test_status_is_answered_while_a_motion_runs(board: Board, backend: SimArm) -> None:
    twin, worker = backend.twin, board.emulator.worker
    move, _ = far_move(backend)
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        started = worker.started
        assert board.command(move) == ["ok"]  # answered when planned, not when done
        require(worker.wait_started(started + 1, BOUND), "the emulator began the move")
        require(gate.wait_reached(BOUND), "the move is under way")
        report = board.status()
        assert report.startswith("<Run|MPos:") and field(report, "FS") == "1200,0"
        board.port.write(b"\x18")  # end it: a reset while moving
        require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
    assert board.lines_until(lambda line: line == LOCKED) == ["ALARM:3", "", BANNER, LOCKED]


def test_g4_p0_is_answered_once_the_motion_is_done(board: Board, backend: SimArm) -> None:
    twin, emulator = backend.twin, board.emulator
    move, target = far_move(backend, dy=-40.0)
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        assert board.command(move) == ["ok"]
        received = emulator.lines_received
        board.send("G4 P0")
        require(gate.wait_reached(BOUND), "the move is under way")
        wait_until(lambda: emulator.lines_received == received + 1, "the board read G4 P0")
        assert board.port.in_waiting == 0  # the move cannot end while the gate holds it
        gate.release()
        assert board.line() == "ok"
    assert at(backend, target)
    assert emulator.worker.idle and not backend.state().moving
    assert board.status().startswith("<Idle|")


def test_ok_is_held_while_the_planner_is_full_and_overflow_bytes_are_lost(
    board: Board, backend: SimArm
) -> None:
    twin, emulator = backend.twin, board.emulator
    move, (_, y, _) = far_move(backend, dy=30.0)
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        assert board.command(move) == ["ok"]
        for i in range(1, PLANNER_BLOCKS):  # 14 more: the planner holds 15 blocks
            assert board.command(f"G1 Y{y - i:.3f}") == ["ok"]
        received = emulator.lines_received
        board.send(f"G1 Y{y - PLANNER_BLOCKS:.3f}")
        wait_until(lambda: emulator.lines_received == received + 1, "the board read line 16")
        require(gate.wait_reached(BOUND), "the first move is under way")
        assert emulator.planned == PLANNER_BLOCKS
        assert board.port.in_waiting == 0  # its ok waits for room in the planner
        # the main loop is stuck: what overflows the 128-byte receive buffer is dropped
        board.port.write(b"G1 Y1\n" * 40)
        wait_until(lambda: emulator.rx_dropped > 0, "the board dropped bytes")
        assert field(board.status(), "Bf") is None  # $10=1: no buffer field
        board.port.write(b"\x18")
        require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
    lines = board.lines_until(lambda line: line == LOCKED)
    assert lines == ["ALARM:3", "ok", "", BANNER, LOCKED]  # the blocked line gets its ok


def test_feed_hold_then_reset_after_the_hold_keeps_position_without_alarm(
    board: Board, backend: SimArm
) -> None:
    twin, emulator = backend.twin, board.emulator
    assert board.command("M3 S1000") == ["ok"]
    wait_until(lambda: backend.state().gripper_closed, "the gripper closed")
    require(emulator.worker.wait_idle(BOUND), "the gripper settled")
    move, _ = far_move(backend)
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        assert board.command(move) == ["ok"]
        require(gate.wait_reached(BOUND), "the move is under way")
        board.port.write(b"!")
        require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
        assert board.status().startswith("<Hold:1|")  # still slowing down (held in the gate)
    wait_until(lambda: emulator.state_name == "Hold:0", "the hold completed")
    held = board.status()
    assert held.startswith("<Hold:0|")
    # motion_control.c mc_reset: no ALARM:3 once the hold is complete
    board.port.write(b"\x18")
    assert board.boot() == ["", BANNER]
    after = board.status()
    assert after.startswith("<Idle|")
    assert position(after) == pytest.approx(position(held), abs=0.05)
    wait_until(lambda: not backend.state().gripper_closed, "the reset stopped the spindle")
    assert board.command("G4 P0") == ["ok"]  # takes commands again


def test_cycle_start_resumes_the_held_move_to_its_target(board: Board, backend: SimArm) -> None:
    twin, emulator = backend.twin, board.emulator
    move, target = far_move(backend, dy=-40.0)
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        assert board.command(move) == ["ok"]
        require(gate.wait_reached(BOUND), "the move is under way")
        board.port.write(b"!")
        require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
    wait_until(lambda: emulator.state_name == "Hold:0", "the hold completed")
    assert not at(backend, target)
    board.port.write(b"~")
    assert board.command("G4 P0") == ["ok"]
    assert at(backend, target)
    assert board.status().startswith("<Idle|")


def test_jog_cancel_stops_and_empties_the_planner_without_a_reset(
    board: Board, backend: SimArm
) -> None:
    twin, emulator = backend.twin, board.emulator
    with twin.hold_at(twin.snapshot.step + HOLD_AFTER) as gate:
        assert board.command("$J=G91 Y40 F1200") == ["ok"]
        require(gate.wait_reached(BOUND), "the jog is under way")
        assert board.status().startswith("<Jog|")
        assert board.command("G0 X1") == ["error:9"]  # G-code is locked while jogging
        board.port.write(b"\x85")
        require(backend.wait_stopped(BOUND), "the twin's arm latched the stop")
    wait_until(lambda: emulator.state_name == "Idle", "the jog was cancelled")
    assert emulator.planned == 0
    assert board.command("$J=G91 X1") == ["error:22"]  # a jog needs F
    assert board.command("$J=G91 X1 F100 M3") == ["error:16"]
    assert board.command("G4 P0") == ["ok"]


def test_soft_limits_alarm_2_waits_for_a_reset(backend: SimArm) -> None:
    with GrblEmulator(backend, settings={22: 1, 20: 1, **FAST}) as emulator:
        board = Board(emulator)
        board.boot()
        assert board.command("$H") == ["ok"]  # MPos -1,-1,-1: travel is [-200, 0] per axis
        assert board.command("$J=G91 X5 F100") == ["error:15"]  # a jog is refused
        board.send("G0 X5")  # out of travel: alarm, and only a reset is heard
        assert board.lines_until(lambda line: line.startswith("[MSG")) == [
            "ALARM:2",
            "[MSG:Reset to continue]",
        ]
        board.port.write(b"\x18")
        assert board.lines_until(lambda line: line == LOCKED) == ["ok", "", BANNER, LOCKED]
        assert emulator.alarm == 2
        assert board.command("$X") == ["[MSG:Caution: Unlocked]", "ok"]
        board.close()


# -- outputs ----------------------------------------------------------------------------------


def test_the_spindle_output_drives_the_gripper_and_needs_a_speed(
    board: Board, backend: SimArm
) -> None:
    started = board.emulator.worker.started
    assert board.command("M3") == ["ok"]  # S0: the PWM pin stays off
    assert board.emulator.worker.started == started
    assert board.command("S1000") == ["ok"]
    wait_until(lambda: backend.state().gripper_closed, "the gripper closed")
    assert field(board.status(), "A") in (None, "S")
    assert board.command("M5") == ["ok"]
    wait_until(lambda: not backend.state().gripper_closed, "the gripper opened")


def test_the_gripper_on_the_flood_output(backend: SimArm) -> None:
    with GrblEmulator(backend, grip_output="flood", auto_reset=False) as emulator:
        board = Board(emulator)
        assert board.command("M8") == ["ok"]
        wait_until(lambda: backend.state().gripper_closed, "the gripper closed")
        assert board.command("M9") == ["ok"]
        wait_until(lambda: not backend.state().gripper_closed, "the gripper opened")
        board.close()


# -- faults -----------------------------------------------------------------------------------


def test_faults_of_the_base_still_work(board: Board, backend: SimArm) -> None:
    board.emulator.fail_next("22")
    assert board.command("G4 P0") == ["error:22"]
    board.emulator.inject_garbage()
    assert "garbled" in board.line()
    assert board.command("G4 P0") == ["ok"]
    board.emulator.close_link()
    with pytest.raises(serial.SerialException):
        board.port.read(1)
    assert backend.state().stopped
