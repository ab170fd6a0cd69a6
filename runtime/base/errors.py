"""The one error tree of onboard.

Every error a user can cause or meet is one of these, and prints as one line that names
where it came from. Foreign exceptions (httpx, onnxruntime, tomllib, pydantic) are
translated at the boundary that meets them, with ``raise ... from exc``.

::

    OnboardError
    ├── ConfigError            robot.toml, a skill or a scenario file is wrong (file, key, line)
    │   ├── SkillError         a skill file
    │   ├── ScenarioError      a scenario file
    │   ├── TeamTaskError      a multi-robot task file (tasks/*.toml)
    │   └── MissionError       a mission file (skills/missions/*.toml)
    ├── ModelError             a model file is missing or unreadable
    │   ├── ModelMismatch      ... differs from the one a recording was made with
    │   └── CriticError        a critic model or its card is wrong (one line: FILE: reason)
    ├── LLMError               the LLM endpoint failed
    │   ├── LLMTimeout         ... past the decision deadline      (also a TimeoutError)
    │   ├── LLMReplyError      ... answered something unusable (or too much)
    │   └── LLMRefused         ... not asked: the endpoint's budget is spent
    ├── DriverError            a driver refused or failed a command
    │   ├── ArmError           the arm refused or failed (controller error, bad reply)
    │   │   ├── ArmTimeout     ... did not answer in time          (also a TimeoutError)
    │   │   ├── LinkLost       ... the serial line or socket dropped (also a ConnectionError)
    │   │   └── SafetyError    ... a command outside the safety limits was refused
    │   ├── CameraError        the camera failed
    │   │   └── StaleFrame     ... no frame fresh enough             (also a TimeoutError)
    │   └── FleetError         a fleet over Zenoh cannot run an action (docs/fleet.md)
    │       └── AgentLost      ... an agent's heartbeat stopped: its arm stopped itself
    ├── RecordingError         a recording cannot be read or written
    │   ├── RecordingWriteError  ... a write failed mid-episode (disk full): the robot stopped
    │   ├── IncompleteRecording  ... has no end record: its process was killed
    │   ├── RecordingFormatError ... is in a format this onboard does not replay (format 1)
    │   └── ReplayDivergence   a replay did not follow its recording
    ├── CodeError              generated robot code was refused or did not run to its end
    │   ├── CodeRefused        ... the sandbox's check refused it (file:line: refused: reason)
    │   └── CodeAborted        ... a run ended early (step budget, memory, CPU, wall time, an
    │                              API call that failed, a signal): the arm was stopped
    ├── CandidateError         a bottom-up candidate cannot be found or added
    ├── CalibrationError       `onboard calibrate` cannot run as asked or store its result
    └── UsageError             the command line asks for something impossible (a port, a URL)
        └── MissingExtraError  ... a part whose extra is not installed    (also an ImportError)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "AgentLost",
    "ArmError",
    "ArmTimeout",
    "CalibrationError",
    "CameraError",
    "CandidateError",
    "CodeAborted",
    "CodeError",
    "CodeRefused",
    "ConfigError",
    "CriticError",
    "DriverError",
    "FleetError",
    "IncompleteRecording",
    "LLMError",
    "LLMRefused",
    "LLMReplyError",
    "LLMTimeout",
    "LinkLost",
    "MissingExtraError",
    "MissionError",
    "ModelError",
    "ModelMismatch",
    "OnboardError",
    "Problem",
    "RecordingError",
    "RecordingFormatError",
    "RecordingWriteError",
    "ReplayDivergence",
    "SafetyError",
    "ScenarioError",
    "SkillError",
    "StaleFrame",
    "TeamTaskError",
    "UsageError",
]


class OnboardError(Exception):
    """Base of every onboard error; ``str()`` is one line fit for a terminal."""


class Problem:
    """One thing wrong in a file: where (file, key path, line) and what."""

    __slots__ = ("file", "key", "line", "message")

    def __init__(self, file: Path | str, key: str, line: int | None, message: str) -> None:
        self.file = str(file)
        self.key = "".join(c if c.isprintable() else " " for c in key)  # one line, always
        self.line = line
        self.message = " ".join(message.split())

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        key = f" [{self.key}]" if self.key else ""
        return f"{where}:{key} {self.message}"

    def __repr__(self) -> str:
        return f"Problem({self!s})"


class ConfigError(OnboardError):
    """One or more problems in a configuration file; one line per problem."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class SkillError(ConfigError):
    """A skill file is wrong."""


class ScenarioError(ConfigError):
    """A scenario file is wrong."""


class TeamTaskError(ConfigError):
    """A multi-robot task file (``tasks/*.toml``) is wrong."""


class MissionError(ConfigError):
    """A mission file (``skills/missions/*.toml``) is malformed or names what is not there."""


class ModelError(OnboardError):
    """A model file is missing or cannot be loaded."""


class ModelMismatch(ModelError):
    """A model file here differs (by sha256) from the one a recording was made with."""


class CriticError(ModelError):
    """A critic (ONNX model and its TOML card) is missing, malformed or does not match: its
    card, its task or the shape it was asked with. One line, ``FILE: reason``."""


class LLMError(OnboardError):
    """The LLM endpoint failed."""


class LLMTimeout(LLMError, TimeoutError):
    """No usable answer within the decision deadline."""


class LLMReplyError(LLMError):
    """The LLM answered, but nothing usable could be read from the answer."""


class LLMRefused(LLMError):
    """Not asked: the endpoint's request or token budget ([llm]) is spent."""


class DriverError(OnboardError):
    """A driver refused or failed a command."""


class ArmError(DriverError):
    """The arm refused or failed a command."""


class ArmTimeout(ArmError, TimeoutError):
    """The arm did not answer in time."""


class LinkLost(ArmError, ConnectionError):
    """The link to the arm (serial line or socket) dropped."""


class SafetyError(ArmError):
    """A command outside the safety limits was refused."""


class CameraError(DriverError):
    """The camera failed."""


class StaleFrame(CameraError, TimeoutError):
    """No frame fresh enough arrived in time."""


class FleetError(DriverError):
    """A fleet (docs/fleet.md) cannot run an action: an agent not there, or stopped."""


class AgentLost(FleetError):
    """An agent's heartbeat stopped (a partition, a crash): its controller stops its own arm
    within its heartbeat timeout."""

    def __init__(self, agent: str, message: str) -> None:
        super().__init__(message)
        self.agent = agent


class RecordingError(OnboardError):
    """A recording cannot be read or written."""


class RecordingWriteError(RecordingError):
    """A recording could not be written to the end (a full disk): the episode was stopped."""


class IncompleteRecording(RecordingError):
    """A recording has a header but no end record: the process writing it was killed."""


class RecordingFormatError(RecordingError):
    """A recording in a format this onboard does not replay: format 1 (before the header
    carried the skill's text), or a format newer than it knows."""


class ReplayDivergence(RecordingError):
    """A replay asked something its recording does not hold."""


class CodeError(OnboardError):
    """Generated robot code was refused, or a run of it did not reach its end."""


class CodeRefused(CodeError):
    """The sandbox's check refused a program; ``problems`` holds one line per refusal."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class CodeAborted(CodeError):
    """A run of generated code ended early; ``reason`` names why in one word (``steps``,
    ``memory``, ``cpu``, ``wall``, ``api``, ``error``, ``signal``): the arm was stopped."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class CandidateError(OnboardError):
    """A bottom-up candidate cannot be found or added."""


class CalibrationError(OnboardError):
    """``onboard calibrate`` cannot run as asked, or cannot store its result."""


class UsageError(OnboardError):
    """The command line asks for something impossible: a port out of range or in use, a host
    that does not resolve, a non-HTTP URL, no trials."""


class MissingExtraError(UsageError, ImportError):
    """A part that needs an optional extra (``pip install -e '.[NAME]'``) was asked for
    without it; the message names the extra."""
