"""Exit codes a supervisor (systemd, a fleet manager, CI) can act on.

One table, shared by every command; the table of docs/exit-codes.md is checked against
:data:`TABLE` by a test, so the two cannot drift apart.
"""

from __future__ import annotations

import signal
from enum import IntEnum

from onboard.base.errors import (
    CalibrationError,
    CandidateError,
    CodeError,
    ConfigError,
    DriverError,
    IncompleteRecording,
    LLMError,
    ModelError,
    OnboardError,
    RecordingError,
    RecordingWriteError,
    ReplayDivergence,
    UsageError,
)

__all__ = ["TABLE", "ExitCode", "for_error", "for_signal"]


class ExitCode(IntEnum):
    SUCCESS = 0
    TASK_FAILED = 1
    INPUT_ERROR = 2
    LLM_UNREACHABLE = 3
    INCOMPLETE = 4
    INTERNAL_ERROR = 70
    SIGINT = 128 + signal.SIGINT
    OUTPUT_CLOSED = 128 + signal.SIGPIPE
    SIGTERM = 128 + signal.SIGTERM


#: code -> (name, meaning), in the order docs/exit-codes.md lists them.
TABLE: dict[ExitCode, tuple[str, str]] = {
    ExitCode.SUCCESS: (
        "success",
        "the episode's verdict is success (`run`); every episode reached a verdict (`eval`)",
    ),
    ExitCode.TASK_FAILED: (
        "task failed",
        "the episode ran to its verdict and the verdict is failure; `map`: no match; `replay`:"
        " the replay diverged from its recording; `code check`: the program was refused;"
        " `code run`: it ended early (a limit, a failed API call; the arm stopped)",
    ),
    ExitCode.INPUT_ERROR: (
        "configuration or input error",
        "robot.toml, a skill, scenario, recording or model file, or the command line is wrong"
        " (a port out of range or in use, a host that does not resolve, a non-HTTP URL);"
        " nothing ran",
    ),
    ExitCode.LLM_UNREACHABLE: (
        "LLM unreachable",
        "the episode asked the LLM and not one request got a usable reply (refused, timed"
        " out, HTTP errors, no chat completion, a reply that breaks the JSON schema); the"
        " fallback kept the robot safe",
    ),
    ExitCode.INCOMPLETE: (
        "incomplete episode",
        "the episode ended without a verdict: a driver fault, the fallback timed out, or its"
        " recording could not be written (a full disk; the robot was stopped); `replay`: the"
        " recording has no end record (its process was killed)",
    ),
    ExitCode.INTERNAL_ERROR: (
        "internal error",
        "a bug in onboard: the traceback is printed; please report it",
    ),
    ExitCode.SIGINT: ("stopped by signal", "SIGINT: the robot was stopped, the recording closed"),
    ExitCode.OUTPUT_CLOSED: (
        "output closed",
        "whatever read the output went away (`onboard check` piped into `head -2`): the rest"
        " of the output is dropped, without a traceback",
    ),
    ExitCode.SIGTERM: ("stopped by signal", "SIGTERM: the robot was stopped, the recording closed"),
}


def for_signal(name: str) -> ExitCode:
    """128 + the signal's number, as shells report a process a signal ended."""
    return ExitCode(128 + signal.Signals[name].value)


def for_error(exc: OnboardError) -> ExitCode:
    """The exit code of an error that ended a command before it could finish."""
    if isinstance(exc, ReplayDivergence | CodeError):
        return ExitCode.TASK_FAILED
    if isinstance(exc, RecordingWriteError | IncompleteRecording):
        return ExitCode.INCOMPLETE
    if isinstance(
        exc,
        ConfigError | ModelError | CandidateError | CalibrationError | RecordingError | UsageError,
    ):
        return ExitCode.INPUT_ERROR
    if isinstance(exc, LLMError):
        return ExitCode.LLM_UNREACHABLE
    if isinstance(exc, DriverError):
        return ExitCode.INCOMPLETE
    return ExitCode.INTERNAL_ERROR
