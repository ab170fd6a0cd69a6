"""What every kind of episode does around its runner: start the recording, and stop the
robot on a failed recording or a stop signal (hri/session.py, manip/session.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from onboard.base.errors import RecordingWriteError
from onboard.loop.clock import Clock
from onboard.loop.engine import Ask, SkillRunner
from onboard.loop.recorder import Recorder

__all__ = ["begin_recording", "cancel", "stop_hooks"]


def begin_recording(
    recorder: Recorder, clock: Clock, secret: str | None, header: Mapping[str, Any]
) -> None:
    """Stamp records with the episode's clock, hide ``secret`` (the API key) in them, write
    the header; a header that cannot be written raises (nothing has moved yet)."""
    recorder.use_clock(clock.now)
    recorder.hide(secret)
    recorder.write("header", **header)
    if recorder.fault is not None:
        raise recorder.fault


def stop_hooks(
    runner: SkillRunner, ask: Ask, recorder: Recorder, halt: Callable[[], None] | None = None
) -> Callable[[str], None]:
    """Stop the robot when the recording fails (a full disk); returns the stop-signal
    handler, which posts the stop and stops waiting for the LLM (the virtual clock waits
    for it on the loop thread) so the stop runs within a second. ``halt`` (the arm's stop)
    is called at once from a thread of its own: on the virtual clock a motion runs on the
    loop's thread, which would otherwise finish it before the posted stop runs."""
    clock = runner.clock

    def stop_on_fault(fault: RecordingWriteError) -> None:
        clock.post(lambda: runner.stop(f"recording failed: {fault}"))

    recorder.on_fault = stop_on_fault

    def stop_on_signal(name: str) -> None:
        if halt is not None:  # not here: the signal may have come in the middle of a motion
            threading.Thread(target=halt, name="stop-on-signal", daemon=True).start()
        clock.post(lambda: runner.stop(f"{name} received", signal=name))
        clock.interrupt()
        cancel(ask)

    return stop_on_signal


def cancel(ask: Ask) -> None:
    """End the exchange in flight, for an Ask that can (HttpAsk)."""
    end = getattr(ask, "cancel", None)
    if callable(end):
        end()
