"""GRBL 1.1's reading of a line: its number reader, its line filter and its G-code parser.

Written from the behaviour of gnea/grbl (the Arduino firmware, v1.1h), for the emulator in
:mod:`onboard.drivers.emulators.grbl_pty`; each rule names the source it comes from. This
module does not move anything: :func:`parse_block` checks a line against the parser state
and returns either GRBL's error code or a :class:`Block` whose targets are worked out (steps 1
to 3 of ``gc_execute_line`` in ``grbl/gcode.c``); the emulator runs it (step 4).

Differences from the firmware, all deliberate: numbers are Python floats (the AVR's are 32
bit); a command number outside 0..255 (``G300``, ``M-1``) is unsupported (error:20), where the
firmware's ``uint8_t`` conversion wraps it; probing (G38.x) is refused with error:20, as the
emulator has no probe pin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "Block",
    "LineFilter",
    "Modal",
    "ParserState",
    "Status",
    "arc_points",
    "parse_block",
    "read_float",
]

MM_PER_INCH = 25.4
LINE_BUFFER_SIZE = 80  # gnea/grbl grbl/protocol.h: a line holds 79 characters and its end
MAX_INT_DIGITS = 8  # gnea/grbl grbl/nuts_bolts.c: digits read_float keeps
MAX_LINE_NUMBER = 10_000_000  # gnea/grbl grbl/gcode.c
MAX_TOOL_NUMBER = 255  # gnea/grbl grbl/gcode.c
N_COORDINATE_SYSTEM = 6  # G54-G59 (gnea/grbl grbl/settings.h)
SETTING_INDEX_G28 = 6  # where G28 and G30 are kept beside G54-G59 (gnea/grbl grbl/settings.h)
SETTING_INDEX_G30 = 7
TOOL_LENGTH_OFFSET_AXIS = 2  # Z (gnea/grbl grbl/config.h)
ARC_ANGULAR_TRAVEL_EPSILON = 5e-7  # radians (gnea/grbl grbl/config.h)


class Status:
    """The status codes of ``report_status_message`` (gnea/grbl grbl/report.h), sent as
    ``error:N``; doc/csv/error_codes_en_US.csv describes each."""

    OK = 0
    EXPECTED_COMMAND_LETTER = 1
    BAD_NUMBER_FORMAT = 2
    INVALID_STATEMENT = 3
    NEGATIVE_VALUE = 4
    SETTING_DISABLED = 5
    SETTING_STEP_PULSE_MIN = 6
    SETTING_READ_FAIL = 7
    IDLE_ERROR = 8
    SYSTEM_GC_LOCK = 9
    SOFT_LIMIT_ERROR = 10
    OVERFLOW = 11
    MAX_STEP_RATE_EXCEEDED = 12
    CHECK_DOOR = 13
    LINE_LENGTH_EXCEEDED = 14
    TRAVEL_EXCEEDED = 15
    INVALID_JOG_COMMAND = 16
    SETTING_DISABLED_LASER = 17
    UNSUPPORTED_COMMAND = 20
    MODAL_GROUP_VIOLATION = 21
    UNDEFINED_FEED_RATE = 22
    COMMAND_VALUE_NOT_INTEGER = 23
    AXIS_COMMAND_CONFLICT = 24
    WORD_REPEATED = 25
    NO_AXIS_WORDS = 26
    INVALID_LINE_NUMBER = 27
    VALUE_WORD_MISSING = 28
    UNSUPPORTED_COORD_SYS = 29
    G53_INVALID_MOTION_MODE = 30
    AXIS_WORDS_EXIST = 31
    NO_AXIS_WORDS_IN_PLANE = 32
    INVALID_TARGET = 33
    ARC_RADIUS_ERROR = 34
    NO_OFFSETS_IN_PLANE = 35
    UNUSED_WORDS = 36
    G43_DYNAMIC_AXIS_ERROR = 37
    MAX_VALUE_EXCEEDED = 38


# -- modal values, as gnea/grbl grbl/gcode.h numbers them --------------------------------------

MOTION_SEEK, MOTION_LINEAR, MOTION_CW_ARC, MOTION_CCW_ARC, MOTION_NONE = 0, 1, 2, 3, 80
MOTION_PROBE = 140  # G38.2 (140) to G38.5 (143)
NON_MODAL_NONE, NON_MODAL_DWELL, NON_MODAL_SET_COORDINATE_DATA = 0, 4, 10
NON_MODAL_GO_HOME_0, NON_MODAL_SET_HOME_0 = 28, 38
NON_MODAL_GO_HOME_1, NON_MODAL_SET_HOME_1 = 30, 40
NON_MODAL_ABSOLUTE_OVERRIDE = 53
NON_MODAL_SET_COORDINATE_OFFSET, NON_MODAL_RESET_COORDINATE_OFFSET = 92, 102
PROGRAM_FLOW_RUNNING, PROGRAM_FLOW_PAUSED = 0, 3
PROGRAM_FLOW_COMPLETED_M2, PROGRAM_FLOW_COMPLETED_M30 = 2, 30
SPINDLE_DISABLE, SPINDLE_CW, SPINDLE_CCW = 0, 3, 4  # reported as M5, M3, M4
COOLANT_FLOOD, COOLANT_MIST = 1, 2  # bits: M8 and M7 may both be on; M9 clears both

# modal groups (gnea/grbl grbl/gcode.h MODAL_GROUP_*)
_G0, _G1, _G2, _G3, _G4, _G5, _G6, _G7, _G8, _G12, _G13 = range(11)
_M4, _M7, _M8 = 11, 12, 13

_AXIS_NONE, _AXIS_NON_MODAL, _AXIS_MOTION, _AXIS_TOOL_LENGTH = 0, 1, 2, 3

#: the value words GRBL knows besides the axes (gnea/grbl grbl/gcode.c, STEP 2); D, E, H, Q, U,
#: V, W and A/B/C (unless the machine has those axes) are unsupported
_VALUE_LETTERS = "FIJKLNPRST"


def read_float(line: str, index: int) -> tuple[float, int] | None:
    """GRBL's number reader (gnea/grbl grbl/nuts_bolts.c ``read_float``): an optional sign,
    digits and one decimal point, nothing else: no exponent (an ``E`` ends the number and is
    read as the next word), no ``nan`` or ``inf``. Digits past the eighth are dropped (those
    before the point still scale the value). Returns the value and the index after it, or None
    when there is no digit."""
    i = index
    negative = False
    if i < len(line) and line[i] in "+-":
        negative = line[i] == "-"
        i += 1
    value, exponent, digits, decimal = 0, 0, 0, False
    while i < len(line):
        c = line[i]
        if "0" <= c <= "9":
            digits += 1
            if digits <= MAX_INT_DIGITS:
                if decimal:
                    exponent -= 1
                value = value * 10 + (ord(c) - 48)
            elif not decimal:
                exponent += 1  # an overflow digit before the point still counts
        elif c == "." and not decimal:
            decimal = True
        else:
            break
        i += 1
    if not digits:
        return None
    number = float(value) * 10.0**exponent if value else 0.0
    return (-number if negative else number), i


class LineFilter:
    """``protocol_main_loop``'s reading of the serial bytes into a line (gnea/grbl
    grbl/protocol.c): whitespace and control characters are dropped, letters upper-cased,
    ``(...)`` and ``;...`` comments and ``/`` left out; a line past ``LINE_BUFFER_SIZE - 1``
    characters is flagged (answered error:11). ``\\n`` and ``\\r`` each end a line, so
    ``\\r\\n`` ends two, the second empty (and an empty line is answered ``ok``)."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.overflow = False
        self.paren = False
        self.semicolon = False

    def clear(self) -> None:
        self.chars.clear()
        self.overflow = self.paren = self.semicolon = False

    def feed(self, byte: int) -> tuple[str, bool] | None:
        """One byte; at the end of a line, the line and whether it overflowed."""
        if byte in (0x0A, 0x0D):
            line, overflow = "".join(self.chars), self.overflow
            self.clear()
            return line, overflow
        c = chr(byte)
        if self.overflow or self.paren or self.semicolon:
            if c == ")" and self.paren:  # the end of a (comment): the line goes on
                self.paren = False
        elif byte <= 0x20 or c == "/":  # whitespace, control characters, block delete
            pass
        elif c == "(":
            self.paren = True
        elif c == ";":
            self.semicolon = True
        elif len(self.chars) >= LINE_BUFFER_SIZE - 1:
            self.overflow = True
        else:
            self.chars.append(c.upper() if "a" <= c <= "z" else c)
        return None


@dataclass
class Modal:
    """``gc_modal_t``: the defaults are those ``gc_init`` leaves (all zero): G0 G54 G17 G21
    G90 G94 M5 M9."""

    motion: int = MOTION_SEEK
    feed_mode: int = 0  # 0: G94 units per minute, 1: G93 inverse time
    units: int = 0  # 0: G21 mm, 1: G20 inches
    distance: int = 0  # 0: G90 absolute, 1: G91 incremental
    plane: int = 0  # 0: G17 XY, 1: G18 ZX, 2: G19 YZ
    coord_select: int = 0  # 0..5: G54..G59
    spindle: int = SPINDLE_DISABLE
    coolant: int = 0
    tool_length: int = 0  # 0: G49, 1: G43.1
    program_flow: int = PROGRAM_FLOW_RUNNING


@dataclass
class ParserState:
    """``parser_state_t`` (``gc_state``): positions are machine coordinates in mm."""

    axes: int = 3
    modal: Modal = field(default_factory=Modal)
    feed_rate: float = 0.0  # mm/min (G94) or 1/min (G93)
    spindle_speed: float = 0.0
    tool: int = 0
    line_number: int = 0
    position: list[float] = field(default_factory=list)  # the last target the parser planned
    coord_system: list[float] = field(default_factory=list)  # the active G54..G59 offset
    coord_offset: list[float] = field(default_factory=list)  # G92
    tool_length_offset: float = 0.0

    def __post_init__(self) -> None:
        for vector in (self.position, self.coord_system, self.coord_offset):
            vector.extend([0.0] * (self.axes - len(vector)))

    def work_offset(self) -> list[float]:
        """The WCO of a status report: coordinate system + G92 + tool length offset (on Z)."""
        wco = [a + b for a, b in zip(self.coord_system, self.coord_offset, strict=True)]
        wco[TOOL_LENGTH_OFFSET_AXIS] += self.tool_length_offset
        return wco


@dataclass
class Block:
    """A checked line (``gc_block``), ready to run: targets in machine mm."""

    modal: Modal
    non_modal: int = NON_MODAL_NONE
    axis_command: int = _AXIS_NONE
    axis_words: frozenset[int] = frozenset()
    command_groups: frozenset[int] = frozenset()
    feed: float = 0.0  # mm/min, or 1/min in G93
    spindle_speed: float = 0.0
    tool: int = 0
    line_number: int = 0
    dwell: float = 0.0  # G4 P: seconds
    target: list[float] = field(default_factory=list)  # xyz[...] of gc_block.values
    ijk: list[float] = field(default_factory=list)  # arc offsets, or G10/G28/G30 data
    radius: float = 0.0
    coord_index: int = 0  # the G10 target: 0..5 = G54..G59
    block_coord_system: list[float] = field(default_factory=list)
    jog: bool = False
    clockwise: bool = False
    plane_axes: tuple[int, int, int] = (0, 1, 2)

    @property
    def moves(self) -> bool:
        """The block has a motion to run in its motion mode (step 20 of ``gc_execute_line``)."""
        return self.modal.motion != MOTION_NONE and self.axis_command == _AXIS_MOTION

    @property
    def sets_tool_length(self) -> bool:
        return self.axis_command == _AXIS_TOOL_LENGTH


def parse_block(
    line: str,
    gc: ParserState,
    coords: Sequence[Sequence[float]],
    *,
    axes: str = "XYZ",
    enable_m7: bool = False,
    jog: bool = False,
) -> Block | int:
    """Steps 1-3 of ``gc_execute_line`` (gnea/grbl grbl/gcode.c): read the words of a filtered
    line (upper case, no spaces), check them in the firmware's order and work out the targets;
    the first error found is returned as its status code. ``coords`` are the stored G54..G59,
    G28 and G30 positions; ``jog`` reads a ``$J=`` line."""
    n = len(axes)
    block = Block(modal=replace(gc.modal), jog=jog)
    values: dict[str, float] = {}
    axis_words: set[int] = set()
    groups: set[int] = set()
    axis_command = _AXIS_NONE
    if jog:  # gnea/grbl grbl/gcode.c: a jog is G1 in G94, whatever the modal state
        block.modal.motion, block.modal.feed_mode = MOTION_LINEAR, 0
    i = 3 if jog else 0
    # -- STEP 2: read every word; a word in error stops the line --------------------------
    while i < len(line):
        letter = line[i]
        if not "A" <= letter <= "Z":
            return Status.EXPECTED_COMMAND_LETTER
        read = read_float(line, i + 1)
        if read is None:
            return Status.BAD_NUMBER_FORMAT
        value, i = read
        int_value = math.trunc(value)
        mantissa = math.floor(100 * (value - int_value) + 0.5)  # catches G1.5 (C's round)
        if letter in "GM" and not 0 <= int_value <= 255:
            return Status.UNSUPPORTED_COMMAND
        if letter == "G":
            group = -1
            if int_value in (10, 28, 30, 92) or int_value in (4, 53):
                if int_value in (10, 28, 30, 92) and mantissa == 0:
                    if axis_command:
                        return Status.AXIS_COMMAND_CONFLICT
                    axis_command = _AXIS_NON_MODAL
                group = _G0
                block.non_modal = int_value
                if int_value in (28, 30, 92):
                    if mantissa not in (0, 10):
                        return Status.UNSUPPORTED_COMMAND
                    block.non_modal += mantissa
                    mantissa = 0
            elif int_value in (0, 1, 2, 3, 38, 80):
                if int_value != 80:
                    if axis_command:
                        return Status.AXIS_COMMAND_CONFLICT
                    axis_command = _AXIS_MOTION
                group = _G1
                block.modal.motion = int_value
                if int_value == 38:
                    # probing needs a probe pin; this emulator has none (see the module notes)
                    return Status.UNSUPPORTED_COMMAND
            elif int_value in (17, 18, 19):
                group, block.modal.plane = _G2, int_value - 17
            elif int_value in (90, 91):
                if mantissa == 0:
                    group, block.modal.distance = _G3, int_value - 90
                else:  # G91.1 is the only arc distance mode (and the default): accepted
                    if mantissa != 10 or int_value == 90:
                        return Status.UNSUPPORTED_COMMAND
                    group, mantissa = _G4, 0
            elif int_value in (93, 94):
                group, block.modal.feed_mode = _G5, 94 - int_value
            elif int_value in (20, 21):
                group, block.modal.units = _G6, 21 - int_value
            elif int_value == 40:
                group = _G7
            elif int_value in (43, 49):
                group = _G8
                if axis_command:
                    return Status.AXIS_COMMAND_CONFLICT
                axis_command = _AXIS_TOOL_LENGTH
                if int_value == 49:
                    block.modal.tool_length = 0
                elif mantissa == 10:
                    block.modal.tool_length = 1
                else:
                    return Status.UNSUPPORTED_COMMAND
                mantissa = 0
            elif 54 <= int_value <= 59:
                group, block.modal.coord_select = _G12, int_value - 54
            elif int_value == 61:
                if mantissa != 0:
                    return Status.UNSUPPORTED_COMMAND
                group = _G13
            else:
                return Status.UNSUPPORTED_COMMAND
            if mantissa > 0:
                return Status.COMMAND_VALUE_NOT_INTEGER
            if group in groups:
                return Status.MODAL_GROUP_VIOLATION
            groups.add(group)
        elif letter == "M":
            if mantissa > 0:
                return Status.COMMAND_VALUE_NOT_INTEGER
            if int_value in (0, 1, 2, 30):
                group = _M4
                if int_value == 0:
                    block.modal.program_flow = PROGRAM_FLOW_PAUSED
                elif int_value != 1:  # M1, the optional stop, is read and ignored
                    block.modal.program_flow = int_value
            elif int_value in (3, 4, 5):
                group = _M7
                block.modal.spindle = {3: SPINDLE_CW, 4: SPINDLE_CCW, 5: SPINDLE_DISABLE}[int_value]
            elif int_value in (8, 9) or (int_value == 7 and enable_m7):
                group = _M8
                if int_value == 7:
                    block.modal.coolant |= COOLANT_MIST
                elif int_value == 8:
                    block.modal.coolant |= COOLANT_FLOOD
                else:
                    block.modal.coolant = 0
            else:  # M400, M114, M112, M204, M410, M7 (without ENABLE_M7), ...
                return Status.UNSUPPORTED_COMMAND
            if group in groups:
                return Status.MODAL_GROUP_VIOLATION
            groups.add(group)
        else:
            if letter in axes:
                axis_words.add(axes.index(letter))
            elif letter not in _VALUE_LETTERS:
                return Status.UNSUPPORTED_COMMAND  # A, B, C, E, ... : no such word in GRBL
            if letter == "T" and value > MAX_TOOL_NUMBER:
                return Status.MAX_VALUE_EXCEEDED
            if letter in values:
                return Status.WORD_REPEATED
            if letter in "FNPTS" and value < 0:
                return Status.NEGATIVE_VALUE
            values[letter] = value
    block.command_groups = frozenset(groups)
    # -- STEP 3: check the block and work out its values, in the firmware's order ----------
    if axis_words and not axis_command:
        axis_command = _AXIS_MOTION  # axis words alone: the current motion mode
    if "N" in values and values["N"] > MAX_LINE_NUMBER:
        return Status.INVALID_LINE_NUMBER
    inches = block.modal.units == 1
    feed = values.get("F", 0.0)
    if jog:
        if "F" not in values:
            return Status.UNDEFINED_FEED_RATE
        if inches:
            feed *= MM_PER_INCH
    elif block.modal.feed_mode == 1:  # G93: F on every block that moves at a feed
        moves_at_feed = block.modal.motion not in (MOTION_NONE, MOTION_SEEK)
        if axis_command == _AXIS_MOTION and moves_at_feed and "F" not in values:
            return Status.UNDEFINED_FEED_RATE
    elif gc.modal.feed_mode == 0:  # G94 before and now: F is kept from the last block
        if "F" in values:
            if inches:
                feed *= MM_PER_INCH
        else:
            feed = gc.feed_rate
    block.feed = feed
    block.spindle_speed = values.get("S", gc.spindle_speed)
    block.tool = math.trunc(values.get("T", 0.0))
    block.line_number = math.trunc(values.get("N", 0.0))
    if block.non_modal == NON_MODAL_DWELL:
        if "P" not in values:
            return Status.VALUE_WORD_MISSING
        block.dwell = values.pop("P")
    axis_0, axis_1, axis_linear = ((0, 1, 2), (2, 0, 1), (1, 2, 0))[block.modal.plane]
    block.plane_axes = (axis_0, axis_1, axis_linear)
    target = [0.0] * n
    for index in axis_words:
        target[index] = values[axes[index]]
        if inches and index < 3:  # rotary axes are in degrees
            target[index] *= MM_PER_INCH
    dynamic_offset = axis_command == _AXIS_TOOL_LENGTH and block.modal.tool_length == 1
    if dynamic_offset and axis_words != {TOOL_LENGTH_OFFSET_AXIS}:
        return Status.G43_DYNAMIC_AXIS_ERROR
    block_coord_system = list(gc.coord_system)
    if _G12 in groups and gc.modal.coord_select != block.modal.coord_select:
        block_coord_system = list(coords[block.modal.coord_select])
    block.block_coord_system = block_coord_system
    ijk = [0.0] * n
    for letter, index in (("I", 0), ("J", 1), ("K", 2)):
        if letter in values:
            ijk[index] = values[letter]
    if block.non_modal == NON_MODAL_SET_COORDINATE_DATA:
        if not axis_words:
            return Status.NO_AXIS_WORDS
        if "P" not in values and "L" not in values:
            return Status.VALUE_WORD_MISSING
        index = math.trunc(values.get("P", 0.0))
        if index > N_COORDINATE_SYSTEM:
            return Status.UNSUPPORTED_COORD_SYS
        l_word = math.trunc(values.get("L", 0.0))
        if l_word != 20 and (l_word != 2 or "R" in values):
            return Status.UNSUPPORTED_COMMAND  # L2 (no R) or L20 only
        values.pop("L", None)
        values.pop("P", None)
        block.coord_index = index - 1 if index > 0 else block.modal.coord_select
        ijk = list(coords[block.coord_index])
        for index in axis_words:
            if l_word == 20:  # WCS = MPos - G92 - TLO - WPos
                ijk[index] = gc.position[index] - gc.coord_offset[index] - target[index]
                if index == TOOL_LENGTH_OFFSET_AXIS:
                    ijk[index] -= gc.tool_length_offset
            else:
                ijk[index] = target[index]
    elif block.non_modal == NON_MODAL_SET_COORDINATE_OFFSET:
        if not axis_words:
            return Status.NO_AXIS_WORDS
        for index in range(n):
            if index in axis_words:  # G92 = MPos - WCS - TLO - WPos
                target[index] = gc.position[index] - block_coord_system[index] - target[index]
                if index == TOOL_LENGTH_OFFSET_AXIS:
                    target[index] -= gc.tool_length_offset
            else:
                target[index] = gc.coord_offset[index]
    else:
        if axis_command != _AXIS_TOOL_LENGTH and axis_words:
            for index in range(n):
                if index not in axis_words:
                    target[index] = gc.position[index]
                elif block.non_modal != NON_MODAL_ABSOLUTE_OVERRIDE:
                    if block.modal.distance == 0:
                        target[index] += block_coord_system[index] + gc.coord_offset[index]
                        if index == TOOL_LENGTH_OFFSET_AXIS:
                            target[index] += gc.tool_length_offset
                    else:
                        target[index] += gc.position[index]
        if block.non_modal in (NON_MODAL_GO_HOME_0, NON_MODAL_GO_HOME_1):
            slot = (
                SETTING_INDEX_G28 if block.non_modal == NON_MODAL_GO_HOME_0 else SETTING_INDEX_G30
            )
            ijk = list(coords[slot])
            if axis_words:  # only the named axes go to the stored position
                for index in range(n):
                    if index not in axis_words:
                        ijk[index] = gc.position[index]
            else:
                axis_command = _AXIS_NONE
        elif block.non_modal == NON_MODAL_ABSOLUTE_OVERRIDE and block.modal.motion not in (
            MOTION_SEEK,
            MOTION_LINEAR,
        ):
            return Status.G53_INVALID_MOTION_MODE
    if block.modal.motion == MOTION_NONE:
        if axis_words:
            return Status.AXIS_WORDS_EXIST
    elif axis_command == _AXIS_MOTION:
        if block.modal.motion == MOTION_SEEK:
            if not axis_words:
                axis_command = _AXIS_NONE
        else:
            if block.feed == 0.0:
                return Status.UNDEFINED_FEED_RATE
            if block.modal.motion == MOTION_LINEAR:
                if not axis_words:
                    axis_command = _AXIS_NONE
            else:
                error = _check_arc(block, gc, values, axis_words, target, ijk, inches)
                if error:
                    return error
    # unused words: N F S T always count as used; the axes when the line has an axis command
    for letter in "NF" if jog else "NFST":
        values.pop(letter, None)
    if axis_command:
        for letter in axes:
            values.pop(letter, None)
    if values:
        return Status.UNUSED_WORDS
    block.axis_command = axis_command
    block.axis_words = frozenset(axis_words)
    block.target = target
    block.ijk = ijk
    # STEP 4 of a jog: only G20/G21, G90/G91 and G53 may come with it (gnea/grbl grbl/gcode.c)
    jog_words_ok = block.non_modal in (NON_MODAL_NONE, NON_MODAL_ABSOLUTE_OVERRIDE)
    if jog and (groups - {_G0, _G3, _G6} or not jog_words_ok):
        return Status.INVALID_JOG_COMMAND
    return block


def _check_arc(
    block: Block,
    gc: ParserState,
    values: dict[str, float],
    axis_words: set[int],
    target: list[float],
    ijk: list[float],
    inches: bool,
) -> int:
    """The G2/G3 checks of step 3 (gnea/grbl grbl/gcode.c): radius (R) or centre offset (IJK)
    form; fills ``block.radius`` and the centre offsets in ``ijk``."""
    axis_0, axis_1, _ = block.plane_axes
    block.clockwise = block.modal.motion == MOTION_CW_ARC
    if not axis_words:
        return Status.NO_AXIS_WORDS
    if not axis_words & {axis_0, axis_1}:
        return Status.NO_AXIS_WORDS_IN_PLANE
    x = target[axis_0] - gc.position[axis_0]
    y = target[axis_1] - gc.position[axis_1]
    if "R" in values:
        radius = values.pop("R")
        if target == gc.position:
            return Status.INVALID_TARGET
        if inches:
            radius *= MM_PER_INCH
        h_x2_div_d = 4.0 * radius * radius - x * x - y * y
        if h_x2_div_d < 0:
            return Status.ARC_RADIUS_ERROR
        if x == 0 and y == 0:  # the firmware divides by zero here; refused instead
            return Status.INVALID_TARGET
        h_x2_div_d = -math.sqrt(h_x2_div_d) / math.hypot(x, y)
        if block.modal.motion == MOTION_CCW_ARC:
            h_x2_div_d = -h_x2_div_d
        if radius < 0:  # a negative R asks for the arc of more than half a turn
            h_x2_div_d, radius = -h_x2_div_d, -radius
        ijk[axis_0] = 0.5 * (x - y * h_x2_div_d)
        ijk[axis_1] = 0.5 * (y + x * h_x2_div_d)
        block.radius = radius
        return Status.OK
    given = {index for letter, index in (("I", 0), ("J", 1), ("K", 2)) if letter in values}
    if not given & {axis_0, axis_1}:
        return Status.NO_OFFSETS_IN_PLANE
    for letter in ("I", "J", "K"):
        values.pop(letter, None)
    if inches:
        for index in range(3):
            ijk[index] *= MM_PER_INCH
    target_r = math.hypot(x - ijk[axis_0], y - ijk[axis_1])
    block.radius = math.hypot(ijk[axis_0], ijk[axis_1])
    delta_r = abs(target_r - block.radius)
    if delta_r > 0.005 and (delta_r > 0.5 or delta_r > 0.001 * block.radius):
        return Status.INVALID_TARGET
    return Status.OK


def arc_points(
    position: Sequence[float],
    target: Sequence[float],
    offset: Sequence[float],
    radius: float,
    plane_axes: tuple[int, int, int],
    clockwise: bool,
    tolerance: float,
) -> list[list[float]]:
    """The line segments ``mc_arc`` cuts an arc into (gnea/grbl grbl/motion_control.c): as many
    as keep each chord within ``tolerance`` ($12) of the circle; the last point is ``target``.
    Computed exactly here (the firmware rotates by a small-angle approximation and corrects
    every N_ARC_CORRECTION segments)."""
    axis_0, axis_1, axis_linear = plane_axes
    center_0 = position[axis_0] + offset[axis_0]
    center_1 = position[axis_1] + offset[axis_1]
    r_0, r_1 = -offset[axis_0], -offset[axis_1]
    rt_0, rt_1 = target[axis_0] - center_0, target[axis_1] - center_1
    travel = math.atan2(r_0 * rt_1 - r_1 * rt_0, r_0 * rt_0 + r_1 * rt_1)
    if clockwise:
        if travel >= -ARC_ANGULAR_TRAVEL_EPSILON:
            travel -= 2 * math.pi
    elif travel <= ARC_ANGULAR_TRAVEL_EPSILON:
        travel += 2 * math.pi
    chord = math.sqrt(tolerance * (2 * radius - tolerance)) if 0 < tolerance < 2 * radius else 0
    segments = math.floor(abs(0.5 * travel * radius) / chord) if chord > 0 else 0
    points: list[list[float]] = []
    if segments:
        theta = travel / segments
        linear = (target[axis_linear] - position[axis_linear]) / segments
        point = list(position)
        for i in range(1, segments):
            cos_t, sin_t = math.cos(i * theta), math.sin(i * theta)
            point = list(point)
            point[axis_0] = center_0 + r_0 * cos_t - r_1 * sin_t
            point[axis_1] = center_1 + r_0 * sin_t + r_1 * cos_t
            point[axis_linear] = position[axis_linear] + i * linear
            points.append(point)
    points.append(list(target))
    return points
