"""Hostile input on both protocols, both sides: every class of fault, and property tests.

The emulators must answer any byte string with an error reply or a valid answer and keep
reading: a probe sent after the noise (behind a line break, the resync point) is answered.
The drivers must never write a number the firmware would misread (an exponent, nan, inf) or
one out of range. Every wait is for a reply line or object, bounded by BOUND seconds.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest
import serial
from arm_harness import BOUND, require, twin_arm, unnumbered, wait_until
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onboard.base.errors import ArmError, SafetyError
from onboard.drivers.arm.gcode import (
    WORD_LIMITS,
    GcodeArm,
    GcodeArmConfig,
    fixed,
    parse_position,
)
from onboard.drivers.arm.jaka import (
    MAX_DEPTH,
    MAX_FRAME,
    BadFrame,
    JakaArm,
    JakaArmConfig,
    JsonStream,
)
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators.grbl_pty import GrblEmulator
from onboard.drivers.emulators.jaka_server import MAX_WAITS, JakaServer
from onboard.drivers.emulators.marlin_pty import MarlinEmulator
from onboard.drivers.emulators.pty_controller import MAX_LINE, TOO_LONG, LineReader

#: fixed example counts; derandomized when CI is set, so a CI run is reproducible
PROPERTY = settings(max_examples=150, deadline=None, derandomize=bool(os.environ.get("CI")))
PROBE = b'{"cmdName":"get_robot_state"}'


@pytest.fixture(scope="module")
def backend() -> Iterator[SimArm]:
    with twin_arm() as arm:
        yield arm


# -- JAKA: the emulator -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(backend: SimArm) -> Iterator[JakaServer]:
    with JakaServer(backend, port=0, status_port=0) as server:  # powered off: nothing moves
        yield server


class Client:
    """A raw command connection: send bytes, read reply objects (BOUND s per read)."""

    def __init__(self, server: JakaServer) -> None:
        self.sock = socket.create_connection(server.address, timeout=BOUND)
        self.stream = JsonStream()
        self.replies: list[dict[str, Any]] = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next_reply(self) -> dict[str, Any]:
        while not self.replies:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                data = b""
            require(bool(data), "the emulator replied (the connection is alive)")
            self.replies = self.stream.feed(data)
        return self.replies.pop(0)

    def until_probe(self) -> list[dict[str, Any]]:
        """The replies before the probe's, which must be a success."""
        before = []
        while (reply := self.next_reply())["cmdName"] != "get_robot_state":
            before.append(reply)
        assert reply["errorCode"] == "0", reply
        return before

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(server: JakaServer) -> Iterator[Client]:
    c = Client(server)
    yield c
    c.close()


FAULTS = {
    "malformed": b'{"cmdName": }',
    "bad literal": b'{"cmdName": "power_on", "x": tru}',
    "array of commands": b'[{"cmdName":"power_on"}]',
    "scalar": b"42",
    "string": b'"power_on"',
    "float overflow": b'{"cmdName":"power_on","x":1e999}',
    "int overflow": b'{"cmdName":"power_on","x":' + b"9" * 400 + b"}",
    "int too long": b'{"cmdName":"power_on","x":' + b"9" * 5000 + b"}",
    "nan": b'{"cmdName":"power_on","x":NaN}',
    "infinity": b'{"cmdName":"power_on","x":-Infinity}',
    "deep nesting": b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    "deep arrays": b"[" * 100_000,
    "32 KB of {": b"{" * 32_768,
    "unfinished {": b'{"cmdName":"power_on"',
    "double {": b'{{"cmdName":"power_on"}',
    "mismatched": b'{"cmdName":"power_on"]',
    "line break in a string": b'{"cmdName":"power\n_on"}',
    "not utf-8": b'{"cmdName":"\xff\xfe"}',
    "noise": b"\x00\xfe#%&garbled]}",
    "oversized frame": b'{"cmdName":"power_on","pad":"' + b"a" * (2 * MAX_FRAME) + b'"}',
}


@pytest.mark.parametrize("data", FAULTS.values(), ids=FAULTS.keys())
@pytest.mark.parametrize("separator", [b"\n", b""], ids=["line", "joined"])
def test_jaka_emulator_answers_every_malformed_frame_and_reads_on(
    server: JakaServer, client: Client, data: bytes, separator: bytes
) -> None:
    # joined: a frame abandoned mid-way resyncs where "}{" shows a new object begins
    client.send(data + separator + PROBE + (PROBE if not separator else b""))
    errors = client.until_probe()
    assert errors and all(r["errorCode"] != "0" for r in errors), errors
    assert not server.powered  # nothing inside a refused frame ran
    client.send(PROBE)  # and the connection is still in step
    assert client.until_probe() == []


def test_jaka_emulator_answers_an_oversized_frame_before_it_ends(client: Client) -> None:
    client.send(b'{"cmdName":"power_on","pad":"' + b"a" * (MAX_FRAME + 1024))
    reply = client.next_reply()  # the cap is answered now, not when the frame ends
    assert reply["errorCode"] == "1" and str(MAX_FRAME) in reply["errorMsg"]
    client.send(b'"}\n' + PROBE)
    client.until_probe()


def test_jaka_emulator_survives_an_int_that_overflows_inside_a_command(
    server: JakaServer, client: Client
) -> None:
    big = b"1" + b"0" * 320  # parses as an int, too large for float(): answered, never fatal
    client.send(b'{"cmdName":"set_digital_output","type":0,"index":' + big + b',"value":1}')
    assert client.next_reply()["errorCode"] == "1"
    client.send(PROBE)
    client.until_probe()


def test_jaka_emulator_bounds_outstanding_wait_complete(backend: SimArm) -> None:
    # as older firmware, each wait_complete is answered when the motions are done: held back
    with JakaServer(backend, port=0, status_port=0, wait_complete="done") as blocking:
        client = Client(blocking)
        busy = blocking.worker.started
        assert blocking.worker.submit(lambda arm: blocking.worker.dwell(10 * BOUND), timeout=BOUND)
        require(blocking.worker.wait_started(busy + 1, BOUND), "the controller is busy")
        try:
            client.send(b'{"cmdName":"wait_complete"}' * (MAX_WAITS + 12))
            refused = [client.next_reply() for _ in range(12)]  # at once: the others wait
            assert all(r["errorCode"] == "2" and "outstanding" in r["errorMsg"] for r in refused)
            client.send(b'{"cmdName":"stop_program"}')  # ends the busy job...
            replies = [client.next_reply() for _ in range(MAX_WAITS + 1)]  # ...and the waits
            names = sorted(r["cmdName"] for r in replies)
            assert names == ["stop_program"] + ["wait_complete"] * MAX_WAITS
            assert all(r["errorCode"] == "0" for r in replies)
        finally:
            client.close()
            backend.resume()  # the stop latched the twin's arm, shared with later tests


FRAGMENTS = st.sampled_from(
    [b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b" ", b"\n", b"\r", b"\t", b"0", b"-1.5",
     b"1e999", b"NaN", b"true", b"null", b'"cmdName"', b'"power_off"', b"\x00", b"\xff",
     b'{"cmdName":"power_off"}', b'{"cmdName":"joint_move","jointPosition":[1e999]}']
)  # fmt: skip
HOSTILE = st.one_of(st.binary(max_size=512), st.lists(FRAGMENTS, max_size=60).map(b"".join))


@PROPERTY
@given(data=HOSTILE)
def test_jaka_emulator_answers_any_bytes_and_never_drops_the_connection(
    server: JakaServer, data: bytes
) -> None:
    client = Client(server)
    try:
        client.send(data + b"\n" + PROBE)
        replies = client.until_probe()
    finally:
        client.close()
    assert all(set(r) >= {"cmdName", "errorCode", "errorMsg"} for r in replies)
    if data.strip():
        assert replies, "noise went unanswered"


# -- JAKA: the driver's splitter ----------------------------------------------------------------


def reasons(frames: list[Any]) -> list[str]:
    return [f.reason if isinstance(f, BadFrame) else "object" for f in frames]


@pytest.mark.parametrize("data", FAULTS.values(), ids=FAULTS.keys())
def test_json_stream_reports_each_fault_and_resyncs(data: bytes) -> None:
    stream = JsonStream()  # the driver's: a line break inside an object is only whitespace
    frames = stream.frames(data + b"\n" + PROBE + PROBE)
    assert frames[-1] == json.loads(PROBE)
    assert any(isinstance(f, BadFrame) for f in frames), reasons(frames)
    assert stream.skipped >= 1


def test_json_stream_keeps_objects_across_chunks_and_line_breaks() -> None:
    stream = JsonStream()
    text = b'{"a": [1, {"b": "}{\\""}],\n "c": null}{"d": 2}'
    got = [f for i in range(len(text)) for f in stream.frames(text[i : i + 1])]
    assert got == [{"a": [1, {"b": '}{"'}], "c": None}, {"d": 2}]
    assert stream.skipped == 0


def test_json_stream_caps_depth_before_parsing() -> None:
    ok = b'{"a":' * MAX_DEPTH + b"1" + b"}" * MAX_DEPTH
    deep = b"[" + ok + b"]"
    assert isinstance(JsonStream().frames(ok)[0], dict)
    assert "nested deeper" in reasons(JsonStream().frames(deep))[0]


@PROPERTY
@given(data=HOSTILE, cut=st.integers(min_value=1, max_value=64))
def test_json_stream_resyncs_after_any_bytes_and_bounds_its_buffer(data: bytes, cut: int) -> None:
    stream = JsonStream(max_frame=256)
    text = data + b"\n" + PROBE + PROBE
    objects = []
    for i in range(0, len(text), cut):
        objects += stream.feed(text[i : i + cut])
        assert stream.pending <= 256
    assert objects and objects[-1] == json.loads(PROBE)


# -- G-code: the GRBL emulator (GRBL refuses what it cannot read; see its source) --------------


@pytest.fixture(scope="module")
def pty(backend: SimArm) -> Iterator[tuple[GrblEmulator, serial.SerialBase]]:
    with GrblEmulator(backend) as emulator:  # homing off: Idle, takes G-code at once
        port = serial.serial_for_url(emulator.path, timeout=BOUND)
        require(answer(port) == "", "the banner began")  # GRBL prints "\r\n" first
        require(answer(port).startswith("Grbl 1.1"), "the board booted")
        yield emulator, port
        port.close()


def answer(port: serial.SerialBase) -> str:
    """The next line from the emulator (BOUND s at most)."""
    raw = port.readline()
    require(raw.endswith(b"\n"), "the emulator answered a line")
    return str(raw.decode("ascii", errors="replace").strip())


def probe(port: serial.SerialBase) -> list[str]:
    """Send $G; the answers before its parser-state report, which must be followed by ok."""
    port.write(b"$G\n")
    before = []
    while not (line := answer(port)).startswith("[GC:"):
        before.append(line)
    assert answer(port) == "ok"
    return before


GCODE_FAULTS = {
    "exponent": "G1 X1e9 F100",
    "exponent, upper case": "G1 X1E9 Y0 F100",
    "signed exponent": "G1 X-1.5e+2 F100",
    "a joint GRBL does not have": "G1 A10 F100",
    "nan": "G1 X nan F100",
    "inf": "G1 XINF F100",
    "no number": "G1 X F100",
    "hex": "G1 X0x10 F100",
    "repeated word": "G1 X0 X10 F100",
    "two signs": "G1 X--1 F100",
    "decimal overflow": "G1 X" + "9" * 200,
    "an M-code GRBL does not have": "M400",
    "position query it does not have": "M114",
    "acceleration it does not have": "M204 S100",
    "negative dwell": "G4 P-1",
    "zero feed": "G1 X0 F0",
    "negative feed": "G1 X1 F-100",
    "junk": "G1 #5 X1 F100",
    "line too long": "G1 X1" + " 0" * MAX_LINE + " Y1 F100",
}


@pytest.mark.parametrize("line", GCODE_FAULTS.values(), ids=GCODE_FAULTS.keys())
def test_grbl_emulator_answers_error_for_every_bad_line_and_does_not_move(
    pty: tuple[GrblEmulator, serial.SerialBase], backend: SimArm, line: str
) -> None:
    emulator, port = pty
    started, before = emulator.worker.started, backend.state().pose
    port.write(line.encode("latin-1") + b"\n")
    reply = answer(port)
    assert re.fullmatch(r"error:\d+", reply), (line, reply)
    assert probe(port) == []  # answers in step
    assert emulator.worker.started == started  # nothing was queued
    assert backend.state().pose == before


def test_grbl_emulator_answers_an_endless_line_once_and_reads_on(
    pty: tuple[GrblEmulator, serial.SerialBase],
) -> None:
    _, port = pty
    port.write(b"G1 X1" + b"0" * 20 * MAX_LINE)  # no line break yet: GRBL counts, then
    port.write(b"0" * 5000 + b"\n")  # answers the line once, at its end
    assert answer(port) == "error:11"  # line overflow
    assert probe(port) == []


def test_grbl_dwell_ends_at_a_reset(pty: tuple[GrblEmulator, serial.SerialBase]) -> None:
    emulator, port = pty
    port.write(b"G4 P600\n")  # ten minutes: its ok comes when the dwell ends...
    wait_until(lambda: "G4P600" in emulator.received, "the dwell is under way")
    port.write(b"\x18")  # ...which the reset ends now
    lines = [answer(port) for _ in range(3)]
    assert lines[0] == "ok" and lines[2].startswith("Grbl 1.1"), lines
    assert probe(port) == []


@PROPERTY
@given(data=st.binary(max_size=400))
def test_grbl_emulator_answers_any_bytes_with_ok_or_error(
    pty: tuple[GrblEmulator, serial.SerialBase], data: bytes
) -> None:
    _, port = pty
    # real-time bytes (status, hold, resume, reset), "$" commands (sleep, settings reset) and
    # M-codes (M0 pauses for the operator) are GRBL's to act on, not noise: kept out
    noise = bytes(b for b in data if b not in b"?!~$Mm\x18" and b < 0x80)
    port.write(noise + b"\n")
    for line in probe(port):
        assert line == "ok" or re.fullmatch(r"error:\d+", line), line


@PROPERTY
@given(data=st.binary(max_size=2000), cut=st.integers(min_value=1, max_value=300))
def test_line_reader_is_chunk_independent_and_bounded(data: bytes, cut: int) -> None:
    whole = LineReader(max_line=64).feed(data)
    reader, lines = LineReader(max_line=64), []
    for i in range(0, len(data), cut):
        lines += reader.feed(data[i : i + cut])
        assert reader.pending <= 64
    # a long line is cut where a chunk ends; it is reported once either way
    assert [x for x in lines if x != TOO_LONG] == [x for x in whole if x != TOO_LONG]
    assert all(len(x) <= 64 for x in lines)  # real-time bytes are the controller's, not here


def test_line_reader_reports_a_long_line_once() -> None:
    reader = LineReader(max_line=8)
    assert reader.feed(b"G1 X1\rG1 X") == ["G1 X1"]
    assert reader.feed(b"1234567890") == [TOO_LONG]
    assert reader.feed(b"1234567890" * 10) == []
    assert reader.feed(b"0\nM114\n") == ["M114"]
    reader.feed(b"G1 X1")
    reader.clear()  # a reset drops the line it cut
    assert reader.feed(b"0\n") == ["0"]


# -- G-code: the driver -------------------------------------------------------------------------


@given(
    letter=st.sampled_from(sorted(WORD_LIMITS)),
    fraction=st.floats(min_value=0.0, max_value=1.0),
    digits=st.integers(min_value=0, max_value=4),
)
@example(letter="F", fraction=0.75, digits=1)  # 750000.25: a tie, 0.05 away either way
@PROPERTY
def test_fixed_words_are_plain_decimals_within_range(
    letter: str, fraction: float, digits: int
) -> None:
    low, high = WORD_LIMITS[letter]
    value = low + (high - low) * fraction
    word = fixed(letter, value, digits)
    assert re.fullmatch(rf"{letter}-?\d+(\.\d{{{digits}}})?", word), word
    # exact arithmetic: in floats a tie's error (0.05) can come out a hair over half a unit
    error = abs(Decimal(word[1:]) - Decimal(value))
    assert error <= Decimal("0.5") * Decimal(10) ** -digits


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, 1e9, -1e9, 1e-300 - 20_000, 10_000.001]
)
def test_fixed_refuses_non_finite_and_out_of_range_values(value: float) -> None:
    with pytest.raises(SafetyError, match="refusing to write X"):
        fixed("X", value)


def test_gcode_driver_writes_nothing_for_a_value_it_refuses(backend: SimArm) -> None:
    with MarlinEmulator(backend, emergency_parser=True) as emulator:
        config = GcodeArmConfig(url=emulator.path, timeout=BOUND, grip_settle=0.0)
        with GcodeArm(config) as arm:
            here = arm.state().pose
            sent = emulator.lines_received
            for pose in (replace(here, x=1e9), replace(here, z=math.nan)):
                with pytest.raises(SafetyError):
                    arm.move_to(pose)
            with pytest.raises(ArmError, match="joint_axes"):  # it has no rotational axes
                arm.move_joints((math.inf, 0.0))
            for accel in (-1.0, math.nan):
                with pytest.raises(SafetyError):
                    arm.set_acceleration(accel, 1.0)
            assert emulator.lines_received == sent  # not a byte written
            arm.set_acceleration(2.0, 1.0)
            assert unnumbered(emulator.received[-1]) == "M204 S2000"


@pytest.mark.parametrize(
    "report", ["X:1e9 Y:0 Z:0", "X:nan Y:0 Z:0", "X:1.0 Y:INF Z:0", "X:" + "9" * 400 + " Y:0 Z:0"]
)
def test_gcode_driver_refuses_a_position_report_it_would_misread(report: str) -> None:
    with pytest.raises(ArmError, match="position report"):
        parse_position(report)


def test_jaka_driver_refuses_to_send_non_finite_numbers(server: JakaServer) -> None:
    host, port = server.address
    config = JakaArmConfig(host=host, port=port, status_port=None, timeout=BOUND, power_on=False)
    with JakaArm(config) as arm:
        server.received.clear()
        with pytest.raises(SafetyError, match="non-finite"):
            arm.call("set_digital_output", type=0, index=math.nan, value=1)
        assert arm.robot_state() == (False, False)  # the link is in step
        assert [c["cmdName"] for c in server.received] == ["get_robot_state"]
