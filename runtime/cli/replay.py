"""``onboard replay``: re-run a recording offline and compare the action sequences."""

from __future__ import annotations

from pathlib import Path

from onboard.base.errors import UsageError
from onboard.hri.replay import as_recording_error, read_episode, replay

__all__ = ["replay_command", "replay_recording"]


def replay_recording(path: Path, scene: str | None = None) -> tuple[list[str], list[str]]:
    """Replay a recording of either kind of skill: (recorded, replayed) action sequences.
    ``scene``: for a scene recording, the twin scene to replay in instead of its task's."""
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


def replay_command(path: Path, scene: str | None = None) -> int:
    recorded, replayed = replay_recording(path, scene)
    print(f"recorded: {' -> '.join(recorded)}")
    print(f"replayed: {' -> '.join(replayed)}")
    if recorded != replayed:
        print("replay DIVERGED from the recording")
        return 1
    print("replay reproduces the recorded action sequence")
    return 0
