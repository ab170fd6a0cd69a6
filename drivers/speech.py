"""Speech output: recorded in simulation, spoken by espeak-ng on a real robot."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Protocol

from onboard.base.errors import DriverError

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
    """Speaks through the espeak-ng program (Debian package ``espeak-ng``).

    With ``wav_dir`` each utterance is written to a numbered WAV file instead of the sound
    card: for robots that route audio elsewhere, and for machines with no sound card.
    """

    def __init__(self, voice: str = "en", wav_dir: Path | None = None) -> None:
        program = shutil.which("espeak-ng")
        if program is None:
            raise DriverError("speech: espeak-ng is not installed (apt-get install espeak-ng)")
        self._program = program
        self._voice = voice
        self._wav_dir = wav_dir
        self._count = 0
        self._process: subprocess.Popen[bytes] | None = None
        self.files: list[Path] = []

    def say(self, text: str) -> None:
        self.silence()
        command = [self._program, "-v", self._voice]
        if self._wav_dir is not None:
            self._wav_dir.mkdir(parents=True, exist_ok=True)
            self._count += 1
            path = self._wav_dir / f"utterance-{self._count:03d}.wav"
            self.files.append(path)
            command += ["-w", str(path)]
        self._process = subprocess.Popen(
            [*command, "--", text], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait(self, timeout: float = 10.0) -> int | None:
        """Wait for the current utterance to finish; its exit code (None if none)."""
        return None if self._process is None else self._process.wait(timeout)

    def silence(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
        self._process = None
