"""Speech drivers: the simulated speaker keeps what was said; espeak-ng really speaks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from onboard.base.errors import DriverError
from onboard.drivers.speech import EspeakSpeech, RecordedSpeech


def test_recorded_speech_keeps_utterances() -> None:
    speech = RecordedSpeech()
    speech.say("Hello there.")
    speech.silence()
    assert speech.said == ["Hello there."]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_espeak_writes_real_audio(tmp_path: Path) -> None:
    speech = EspeakSpeech(wav_dir=tmp_path)
    speech.say("Excuse me, would you like some assistance?")
    assert speech.wait() == 0
    (wav,) = speech.files
    data = wav.read_bytes()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    assert len(data) > 20_000  # about two seconds of 22 kHz 16-bit audio


def test_missing_espeak_is_a_one_line_driver_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(DriverError, match="apt-get install espeak-ng"):
        EspeakSpeech()
