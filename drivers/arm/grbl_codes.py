"""GRBL 1.1's numbered answers, worded: it prints ``error:N`` and ``ALARM:N`` only.

From gnea/grbl ``doc/csv/error_codes_en_US.csv`` and ``doc/csv/alarm_codes_en_US.csv``.
"""

from __future__ import annotations

__all__ = ["ALARMS", "ERRORS", "alarm_text", "error_text"]

ERRORS: dict[int, str] = {
    1: "expected command letter: a G-code word has no letter",
    2: "bad number format: a word's value is missing or not a number",
    3: "invalid statement: a '$' command GRBL does not know",
    4: "value < 0: a negative value where a positive one is expected",
    5: "setting disabled: homing is not enabled ($22=1)",
    6: "value < 3 usec: the step pulse must be longer than 3 us",
    7: "EEPROM read failed: settings restored to their defaults",
    8: "not idle: a '$' command can only be used while GRBL is idle",
    9: "G-code lock: G-code is locked out during alarm or jog (home with $H or unlock with $X)",
    10: "homing not enabled: soft limits need homing enabled",
    11: "line overflow: the line is longer than GRBL accepts and was not run",
    12: "step rate > 30 kHz: a setting would exceed the maximum step rate",
    13: "check door: the safety door is open",
    14: "line length exceeded: a startup or build line was not stored",
    15: "travel exceeded: the jog target exceeds machine travel",
    16: "invalid jog command",
    17: "setting disabled: laser mode needs PWM output",
    20: "unsupported command: an unsupported or invalid G-code command in the block",
    21: "modal group violation: two commands of one modal group in the block",
    22: "undefined feed rate",
    23: "the command needs an integer value",
    24: "two commands that need axis words in one block",
    25: "a repeated word in the block",
    26: "no axis words for a command that needs them",
    27: "invalid line number",
    28: "a required value word is missing",
    29: "G59.x work coordinate systems are not supported",
    30: "G53 is allowed only with G0 and G1",
    31: "axis words where no command uses them",
    32: "G2/G3 arcs need at least one in-plane axis word",
    33: "invalid motion target",
    34: "invalid arc radius",
    35: "G2/G3 arcs need at least one in-plane offset word",
    36: "unused value words in the block",
    37: "G43.1 tool length offset is not on the configured axis",
    38: "tool number greater than the maximum supported",
}

ALARMS: dict[int, str] = {
    1: "hard limit triggered: position likely lost, home again",
    2: "soft limit: the motion target exceeds machine travel (position kept; $X unlocks)",
    3: "reset while in motion: position likely lost, home again",
    4: "probe fail: the probe was not in the expected initial state",
    5: "probe fail: the probe did not touch within the programmed travel",
    6: "homing fail: the homing cycle was reset",
    7: "homing fail: the safety door was opened while homing",
    8: "homing fail: pull-off did not clear the limit switch",
    9: "homing fail: no limit switch found within the search distance",
}


def error_text(code: str) -> str:
    """``"20"`` -> ``"error:20 (unsupported command: ...)"``; text kept as it came otherwise."""
    number = int(code) if code.strip().isdigit() else None
    if number is None:
        return code.strip() or "error"
    return f"error:{number} ({ERRORS.get(number, 'unknown error code')})"


def alarm_text(code: str) -> str:
    number = int(code) if code.strip().isdigit() else None
    if number is None:
        return f"ALARM:{code.strip()}"
    return f"ALARM:{number} ({ALARMS.get(number, 'unknown alarm code')})"
