"""One team episode: each environment step planned by a method, every exchange, check and
step recorded (recording format 3, ``skill_kind = "team"``).

Records, in order: ``header`` (when given: :func:`team_header`), ``start``, then per step a
``state`` (the text and the features), the method's ``request`` / ``reply`` (or ``error``),
``proposal``, ``check`` (the critic's ``score`` and ``ood`` flag), ``fallback`` records, and
the ``env_step`` (the joint action, reward, feedback), a ``disturbance`` after the step at
which the environment was re-initialised (``disturb_at``); the method's closing requests
(Reflexion's reflection) and ``end`` with the outcome. NQ is the number of ``request``
records: every dialogue message and reflection is one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, cast

from onboard.base.errors import CriticError, LLMError, UsageError
from onboard.collab.methods import (
    EnvView,
    EpisodeLog,
    Method,
    StepSeen,
    TeamSettings,
    TrialMemory,
    Turn,
)
from onboard.collab.prompts import WAIT, HistoryEntry
from onboard.collab.refine import CriticView
from onboard.config import RobotConfig
from onboard.llm.types import Completes, Message
from onboard.loop.recorder import Recorder
from onboard.loop.recording import SkillText, build_header

__all__ = ["RecordedAsk", "TeamFigures", "TeamOutcome", "TeamSettings", "run_team_episode",
           "team_header"]  # fmt: skip


class Resettable(Protocol):
    """An environment the disturbance can re-initialise mid-episode (TeamEnv.reset_to)."""

    def reset_to(self, seed: int) -> None: ...


class RecordedAsk:
    """Asks ``llm`` and records the exchange: a ``request`` record (NQ counts these), then a
    ``reply`` or an ``error`` record."""

    def __init__(self, llm: Completes, recorder: Recorder) -> None:
        self.llm = llm
        self.recorder = recorder
        self.requests = 0
        #: the response_format form a schema goes in, when the client says (ChatClient does)
        self.form: str | None = getattr(llm, "structured_output", None)

    def ask(
        self,
        purpose: str,
        messages: Sequence[Message],
        schema: Mapping[str, Any] | None,
        agents: Sequence[str],
    ) -> str:
        self.requests += 1
        form = {"structured_output": self.form} if schema is not None and self.form else {}
        self.recorder.write("request", id=self.requests, purpose=purpose, agents=list(agents),
                            messages=[dict(m) for m in messages], schema=schema,
                            constrained=schema is not None, **form)  # fmt: skip
        began = time.perf_counter()
        try:
            result = self.llm.complete(messages, schema)
        except LLMError as exc:
            self.recorder.write("error", id=self.requests, source="llm", purpose=purpose,
                                message=str(exc))  # fmt: skip
            raise
        self.recorder.write("reply", id=self.requests, purpose=purpose, text=result.text,
                            latency=round(time.perf_counter() - began, 4),
                            tokens=[result.prompt_tokens, result.completion_tokens],
                            finish_reason=result.finish_reason)  # fmt: skip
        return result.text


@dataclass
class TeamFigures:
    """An episode's figures: SR comes from ``success``, ES is ``steps``, NQ is ``queries``
    (the request records). ``vetoes``: proposals the critic refused for their score;
    ``failed``: proposals refused as unreadable or infeasible; ``fallbacks``: decisions that
    ended without an accepted proposal; ``ood_flags``: scores the critic could not vouch for
    (accepted unjudged)."""

    success: bool
    steps: int
    queries: int
    vetoes: int
    fallbacks: int
    ood_flags: int
    failed: int
    reward: float

    def figures(self) -> dict[str, Any]:
        """The figures alone (a subclass's other fields left out)."""
        return {f.name: getattr(self, f.name) for f in fields(TeamFigures)}


@dataclass
class TeamOutcome(TeamFigures):
    """An episode's result: its figures and the joint actions the environment ran."""

    joint_actions: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def team_header(
    robot: RobotConfig,
    task_file: Path,
    method: str,
    settings: TeamSettings,
    seed: int,
    *,
    env: str,
    critic_file: Path | None,
) -> dict[str, Any]:
    """The header of a team episode: the task file's text as its "skill", the
    level, seed and method, and the critic's file with its sha256."""
    return build_header(
        robot,
        SkillText(
            name=settings.task.name,
            toml=task_file.read_text(encoding="utf-8"),
            file=str(task_file),
        ),
        "team",
        options={"method": method, "seed": seed, **settings.options()},
        models={} if critic_file is None else {"critic": critic_file},
        task={"name": settings.task.name, "level": settings.level, "env": env, "seed": seed},
    )


def run_team_episode(
    env: EnvView,
    method: Method,
    llm: Completes,
    critic: CriticView | None,
    settings: TeamSettings,
    recorder: Recorder,
    seed: int,
    *,
    header: Mapping[str, Any] | None = None,
    disturb_at: int | None = None,
    memory: TrialMemory | None = None,
) -> TeamOutcome:
    """Run ``method`` on ``env`` reset with ``seed`` until success or the step limit.

    ``disturb_at=n``: the disturbance of the seed's Table 1: once the action of step n has
    run (and the episode is not over), the environment is re-initialised with ``seed``
    (``env.reset_to``: the step count goes on), recorded as a ``disturbance`` record; the
    history is left as it is and no prompt says so, except a method's that reads
    ``turn.log.disturbed_at`` (RoCo-P). ``memory``: what the method keeps across the episodes
    of one evaluation cell (Reflexion's reflections); the evaluation passes the same object
    to each episode of the cell, in order."""
    if method.critic and critic is None:
        raise UsageError(f"method {method.name} scores proposals with a critic: give it one")
    known = getattr(critic, "vocabulary", None)  # a critic's card names its vocabulary
    if known is not None and list(known) != list(env.vocabulary):
        where = getattr(critic, "path", "the critic")
        raise CriticError(
            f"{where}: its vocabulary ({len(known)} actions) is not this level's "
            f"({len(env.vocabulary)}): a critic of another task or level"
        )
    if disturb_at is not None:
        if disturb_at < 0:
            raise UsageError(f"disturb_at {disturb_at}: a step number is 0 or more")
        if not callable(getattr(env, "reset_to", None)):
            raise UsageError(f"{type(env).__name__} cannot be re-initialised mid-episode "
                             "(no reset_to): no disturbance test on it")  # fmt: skip
    if header is not None:
        recorder.write("header", **header)
    env.reset(seed)
    extra: dict[str, Any] = {}
    if disturb_at is not None:
        extra["disturb_at"] = disturb_at
    if memory is not None:
        extra["trial_memory"] = {"reflections": list(memory.reflections), "keep": memory.keep}
    recorder.write("start", method=method.name, task=settings.task.name, seed=seed,
                   agents=list(env.agents), vocabulary=list(env.vocabulary),
                   feature_names=list(env.feature_names), **settings.options(),
                   **extra)  # fmt: skip
    ask = RecordedAsk(llm, recorder)
    outcome = TeamOutcome(False, 0, 0, 0, 0, 0, 0, 0.0)
    history: list[HistoryEntry] = []
    log = EpisodeLog(trials=memory)
    limit = settings.task.step_limit
    while not env.done and env.steps < limit:
        step = env.steps
        state, features = env.describe(), env.features()
        recorder.write("state", step=step, text=state,
                       features=[float(x) for x in features])  # fmt: skip
        turn = Turn(env, settings, ask, critic, recorder.write, step, state, features, history,
                    log)  # fmt: skip
        decisions = method.plan(turn)
        joint = {agent: WAIT for agent in env.agents}
        for decision in decisions:
            joint.update(decision.actions)
            outcome.vetoes += decision.vetoes
            outcome.failed += decision.failed
            outcome.fallbacks += decision.how == "fallback"
            outcome.ood_flags += decision.ood
            history.extend(HistoryEntry(step, p, o) for p, o in decision.entries)
        result = env.step(joint)
        recorder.write("env_step", step=step, features=[float(x) for x in features],
                       joint=joint, reward=float(result.reward),
                       done=bool(result.done), success=bool(result.success),
                       feedback=dict(result.feedback))  # fmt: skip
        outcome.joint_actions.append(joint)
        log.steps.append(StepSeen(step, joint, dict(result.feedback), float(result.reward)))
        if step == disturb_at and not env.done:
            cast(Resettable, env).reset_to(seed)
            log.disturbed_at = step
            recorder.write("disturbance", step=step, seed=seed, text=env.describe())
    if method.finish is not None:
        state, features = env.describe(), env.features()
        end = Turn(env, settings, ask, critic, recorder.write, env.steps, state, features,
                   history, log)  # fmt: skip
        method.finish(end, bool(env.success))
    outcome.success, outcome.steps = bool(env.success), int(env.steps)
    outcome.queries, outcome.reward = ask.requests, float(env.reward_total)
    recorder.write("end", finished=outcome.success, outcome=outcome.to_json())
    return outcome
