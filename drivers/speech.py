"""Speech output: recorded in simulation, spoken by espeak-ng on a real robot."""

from __future__ import annotations

import shutil
import subprocess
from typing import Protocol

from runtime.errors import DriverError

__all__ = ["EspeakSpeech", "RecordedSpeech", "Speech"]


class Speech(Protocol):
    def say(self, text: str) -> None:
        """Start speaking ``text`` without blocking."""

    def silence(self) -> None:
        """Stop speaking now."""


class RecordedSpeech:
    """Keeps what would have been said: the simulated speaker."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, text: str) -> None:
        self.said.append(text)

    def silence(self) -> None:
        pass


class EspeakSpeech:
    """Speaks through the espeak-ng program (Debian package ``espeak-ng``)."""

    def __init__(self, voice: str = "en") -> None:
        program = shutil.which("espeak-ng")
        if program is None:
            raise DriverError("speech: espeak-ng is not installed (apt-get install espeak-ng)")
        self._program = program
        self._voice = voice
        self._process: subprocess.Popen[bytes] | None = None

    def say(self, text: str) -> None:
        self.silence()
        self._process = subprocess.Popen(
            [self._program, "-v", self._voice, "--", text],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def silence(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
        self._process = None
