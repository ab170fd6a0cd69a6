"""Replay of a team episode: the same method run again with the same critic, the LLM's
replies and the environment's answers read from the recording (format 4: ``env`` records,
runtime/collab/playback.py) instead of asked for; a format 3 recording re-simulates its
environment from the recorded seed instead.

Each request the replayed loop makes must equal the recorded one (the prompts carry the state,
the history, the refused proposals with their scores: a change in any shows here first); the
joint actions must be the recorded ones step by step. The first difference raises
ReplayDivergence naming the request or the step.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from onboard.base.errors import RecordingError, ReplayDivergence
from onboard.collab.episode import TeamOutcome, run_team_episode
from onboard.collab.methods import EnvView, TaskView, TeamSettings, TrialMemory, method
from onboard.collab.playback import PlaybackEnv
from onboard.collab.refine import CriticView
from onboard.loop.recorder import MemoryRecorder, read_recording
from onboard.loop.recording import Header, check_models, read_header
from onboard.loop.replies import RecordedExchanges, exchanges_by_id

__all__ = [
    "TeamReplay",
    "replay_team_episode",
    "replay_team_recording",
]


@dataclass(frozen=True)
class TeamReplay:
    header: Header
    recorded: list[dict[str, str]]
    outcome: TeamOutcome


def replay_team_episode(
    path: Path,
    env: EnvView | None,
    critic: CriticView | None,
    task: TaskView,
    *,
    critic_file: Path | None = None,
) -> TeamReplay:
    """Replay the team recording at ``path`` with ``critic`` (``critic_file``, when given,
    must have the recorded sha256): on ``env`` (made for the recorded task level), or, when
    it is None, on the environment's answers the recording holds (format 4)."""
    records = list(read_recording(path))
    header = read_header(records, path)
    if header.skill_kind != "team":
        raise RecordingError(f"{path}: a {header.skill_kind} recording, not a team episode")
    if env is None:
        if header.format < 4:
            raise RecordingError(f"{path}: a format {header.format} team episode keeps no "
                                 "environment answers: replay it on its environment")  # fmt: skip
        env = PlaybackEnv(records, path)
    if critic_file is not None:
        check_models(header, {"critic": critic_file}, path)
    setup = next((r for r in records if r.get("kind") == "setup"), {})
    if not isinstance(env, PlaybackEnv) and hasattr(env, "starts"):
        env.starts = setup.get("starts", "all")  # re-simulated: from the same start states
    options = header.options
    settings = TeamSettings(
        task=task,
        level=str(options["level"]),
        constrained=bool(options["constrained"]),
        refine_limit=int(options["refine_limit"]),
        epsilon=float(options["epsilon"]),
        history_limit=int(options["history_limit"]),
    )
    llm = RecordedExchanges(exchanges_by_id(records), str(path), check_schema=True)
    # a disturbed episode is disturbed again; a trial memory is the one the episode began with
    # the episode's setup (recordings made before the team ran on the runner: its "start")
    start = next((r for r in records if r.get("kind") in ("setup", "start") and "method" in r), {})
    disturb_at = start.get("disturb_at")
    kept = start.get("trial_memory")
    memory = None
    if isinstance(kept, Mapping):
        memory = TrialMemory([str(x) for x in kept.get("reflections", [])], int(kept["keep"]))
    playback = env if isinstance(env, PlaybackEnv) else None
    if playback is not None:
        playback.requests_diverged = lambda: len(llm.diverged)

    def first_divergence() -> str | None:
        """A request's or the environment's, whichever came first (the environment's may
        be raised in a check, which the loop takes for a refusal and goes on)."""
        if playback is not None and playback.diverged is not None:
            before, message = playback.diverged
            return llm.diverged[0] if before else message
        return llm.diverged[0] if llm.diverged else None

    try:
        outcome = run_team_episode(
            env, method(str(options["method"])), llm, critic, settings, MemoryRecorder(),
            int(options["seed"]), disturb_at=None if disturb_at is None else int(disturb_at),
            memory=memory,
        )  # fmt: skip
    except ReplayDivergence as exc:
        raise ReplayDivergence(first_divergence() or str(exc)) from exc
    first = first_divergence()
    if first is not None:
        raise ReplayDivergence(first)
    recorded = [dict(r["joint"]) for r in records if r.get("kind") == "env_step"]
    for step, (was, now) in enumerate(zip(recorded, outcome.joint_actions, strict=False)):
        if was != now:
            raise ReplayDivergence(f"{path}: step {step}: recorded joint action {was}, "
                                   f"replayed {now}")  # fmt: skip
    if len(recorded) != len(outcome.joint_actions):
        raise ReplayDivergence(
            f"{path}: {len(recorded)} steps recorded, {len(outcome.joint_actions)} replayed"
        )
    if llm.asked != len(llm.exchanges):
        raise ReplayDivergence(
            f"{path}: the replay asked {llm.asked} of the {len(llm.exchanges)} recorded requests"
        )
    return TeamReplay(header, recorded, outcome)


def replay_team_recording(path: Path) -> tuple[list[str], list[str]]:
    """``onboard replay`` of a team episode: the task file from the header's text, its
    simulator at the recorded level, the recorded critic file (its sha256 checked); the
    (recorded, replayed) joint actions, one ``Alice: MOVE x, Bob: WAIT`` a step. A request
    the replay makes differently raises ReplayDivergence."""
    from onboard.collab.critic import Critic
    from onboard.collab.envs import make_env
    from onboard.collab.prompts import proposal_text
    from onboard.collab.taskfile import load_team_task

    header = read_header(list(read_recording(path)), path)
    with tempfile.TemporaryDirectory(prefix="onboard-replay-") as folder:
        task_file = Path(folder) / (Path(header.skill.file).name or "task.toml")
        task_file.write_text(header.skill.toml, encoding="utf-8")
        task = load_team_task(task_file)
    level = str(header.options["level"])
    recorded_critic = header.models.files.get("critic")
    critic_file = None if recorded_critic is None else Path(recorded_critic.file)
    if critic_file is not None:  # a missing or changed critic: one line before any loading
        check_models(header, {"critic": critic_file}, path)
    critic = None if critic_file is None else Critic.load(critic_file)
    env = None if header.format >= 4 else make_env(task, level)
    replay = replay_team_episode(path, env, critic, task, critic_file=critic_file)
    return (
        [proposal_text(j) for j in replay.recorded],
        [proposal_text(j) for j in replay.outcome.joint_actions],
    )
