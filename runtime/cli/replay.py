"""``onboard replay``: re-run a recording offline and compare the action sequences."""

from __future__ import annotations

from pathlib import Path

from onboard.hri.replay import replay

__all__ = ["replay_command"]


def replay_command(path: Path, scene: str | None = None) -> int:
    recorded, replayed = replay(path, scene)
    print(f"recorded: {' -> '.join(recorded)}")
    print(f"replayed: {' -> '.join(replayed)}")
    if recorded != replayed:
        print("replay DIVERGED from the recording")
        return 1
    print("replay reproduces the recorded action sequence")
    return 0
