"""``onboard replay``: re-run a recording offline and compare the action sequences."""

from __future__ import annotations

import tempfile
from pathlib import Path

from onboard.base.errors import OnboardError, UsageError
from onboard.hri.replay import as_recording_error, read_episode, replay
from onboard.loop.recorder import is_mcap

__all__ = ["replay_command", "replay_recording"]


def replay_recording(path: Path, scene: str | None = None) -> tuple[list[str], list[str]]:
    """Replay a recording of either kind of skill: (recorded, replayed) action sequences.
    ``scene``: for a scene recording, the twin scene to replay in instead of its task's.
    An MCAP recording replays as the JSON lines and images it holds."""
    if is_mcap(path):
        return _replay_mcap(path, scene)
    _, header, _ = as_recording_error(path, lambda: read_episode(path))
    if header.skill_kind == "code":
        if scene is not None:
            raise UsageError(f"--scene {scene}: {path} is a code episode; only scene ones take it")
        if header.options.get("method") in ("saycan", "progprompt"):
            from onboard.evaluation.code_eval import replay_baseline

            return replay_baseline(path)
        from onboard.replan.replay import replay_code_recording

        return replay_code_recording(path)
    if header.skill_kind == "team":
        if scene is not None:
            raise UsageError(f"--scene {scene}: {path} is a team episode; only scene ones take it")
        from onboard.collab.replay import replay_team_recording

        return replay_team_recording(path)
    if header.skill_kind == "scene":
        from onboard.manip.replay import replay_scene_recording

        return replay_scene_recording(path, scene)
    if scene is not None:
        raise UsageError(f"--scene {scene}: {path} is a person recording; only scene ones take it")
    return replay(path)


def _replay_mcap(path: Path, scene: str | None) -> tuple[list[str], list[str]]:
    """Every kind's replay reads JSON lines and an images folder: the MCAP file's are
    written to a temporary folder, under the recording's name; an error names the MCAP file."""
    from onboard.loop.mcapfile import export_jsonl

    with tempfile.TemporaryDirectory(prefix="onboard-replay-") as folder:
        copy = Path(folder) / f"{path.stem}.jsonl"
        export_jsonl(path, copy)
        try:
            return replay_recording(copy, scene)
        except OnboardError as exc:
            exc.args = tuple(
                a.replace(str(copy), str(path)) if isinstance(a, str) else a for a in exc.args
            )
            raise


def replay_command(path: Path, scene: str | None = None) -> int:
    recorded, replayed = replay_recording(path, scene)
    print(f"recorded: {' -> '.join(recorded)}")
    print(f"replayed: {' -> '.join(replayed)}")
    if recorded != replayed:
        print("replay DIVERGED from the recording")
        return 1
    print("replay reproduces the recorded action sequence")
    return 0
