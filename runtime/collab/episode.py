"""One team episode (ReAd, seed 000) as a team skill on the loop every skill runs.

::

    observe (the environment's state: text and the critic's features)
      -> propose: the method's request (one agent's action for ReAd-S, every agent's else;
         RoCo's dialogue before it)
      -> check: the reply's form -> the environment's legality -> the critic's score; a
         refused proposal is asked again with its reason, at most ``refine_limit`` times,
         then the best refused proposal the critic scored above WAIT, or WAIT
      -> act: the agents' actions gathered; once every agent chose, the environment steps
      -> ends: the task done (success) or the step limit reached (failure)

The skill (skills/team.toml) runs on :class:`~onboard.loop.engine.SkillRunner`: the method's
request is the kind's plan prompt and its ``Ask`` (runtime/collab/kind.py), the checks are its
``Check`` s (runtime/collab/refine.py), the environment is its driver
(runtime/collab/driver.py), refinements are rounds. This module sets it up on a virtual clock
and reads the episode back as a :class:`TeamOutcome` (the tables' terms).

Records (recording format 4, ``skill_kind = "team"``): ``header`` (when given:
:func:`team_header`), ``setup`` (the method, seed, agents, vocabulary), ``state`` at each step,
each ``env`` record of what the loop read of the environment (runtime/collab/playback.py),
each ``request`` / ``reply`` (or ``error``; NQ is the number of request records: every dialogue
message and reflection is one), the loop's ``mapping``, ``check``, ``reask``, ``fallback``,
``fallback_choice`` and ``transition`` records, each ``env_step`` (the joint action, reward,
feedback), a ``disturbance`` after the step at which the environment was re-initialised
(``disturb_at``), the loop's ``end``, the method's closing requests (Reflexion's reflection),
and the ``outcome``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from functools import cache
from pathlib import Path
from string import Template
from typing import Any

from onboard import bundled
from onboard.base.errors import CriticError, UsageError
from onboard.collab.card import check_card
from onboard.collab.driver import TeamDriver
from onboard.collab.kind import PlanAsk, RecordedAsk, TeamFigures, TeamKind, TeamLedger, team_checks
from onboard.collab.methods import EnvView, Method, TeamSettings, TrialMemory, Turn
from onboard.collab.names import TEAM_COMMANDS
from onboard.collab.playback import RecordedEnv
from onboard.collab.refine import CriticView
from onboard.config import RobotConfig
from onboard.llm.types import Completes
from onboard.loop.clock import VirtualClock
from onboard.loop.engine import SkillRunner, Verdict
from onboard.loop.kind import Observation
from onboard.loop.recorder import Recorder
from onboard.loop.recording import SkillText, build_header
from onboard.loop.skill import Skill, load_skill

__all__ = ["RecordedAsk", "TeamFigures", "TeamOutcome", "TeamSettings", "run_team_episode",
           "team_header", "team_skill"]  # fmt: skip


@dataclass
class TeamOutcome(TeamFigures):
    """An episode's result: its figures and the joint actions the environment ran."""

    joint_actions: list[dict[str, str]] = field(default_factory=list)

    def figures(self) -> dict[str, Any]:
        """The figures alone (the joint actions left out)."""
        return {f.name: getattr(self, f.name) for f in fields(TeamFigures)}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@cache
def team_skill(path: str | None = None) -> Skill:
    """The team skill: the shipped skills/team.toml, or the file at ``path``."""
    found = Path(path) if path is not None else bundled.skills_dir() / "team.toml"
    return load_skill(found, (), {"team": TEAM_COMMANDS})


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
    skill: Skill | None = None,
) -> TeamOutcome:
    """Run ``method`` on ``env`` reset with ``seed`` until success or the step limit, as the
    team skill (the shipped one unless ``skill`` is given; see the module's docstring).

    ``disturb_at=n``: the disturbance of the seed's Table 1: once the action of step n has
    run (and the episode is not over), the environment is re-initialised with ``seed``
    (``env.reset_to``: the step count goes on), recorded as a ``disturbance`` record; the
    history is left as it is and no prompt says so, except a method's that reads
    ``turn.log.disturbed_at`` (RoCo-P). ``memory``: what the method keeps across the episodes
    of one evaluation cell (Reflexion's reflections); the evaluation passes the same object
    to each episode of the cell, in order. When the endpoint refused every request (an HTTP
    4xx), the outcome is recorded and that LLMError raised: the episode measured nothing."""
    if method.critic is not None and critic is None:
        raise UsageError(f"method {method.name} scores proposals with a critic: give it one")
    _check_fit(critic, env)
    if disturb_at is not None:
        if disturb_at < 0:
            raise UsageError(f"disturb_at {disturb_at}: a step number is 0 or more")
        if not callable(getattr(env, "reset_to", None)):
            raise UsageError(f"{type(env).__name__} cannot be re-initialised mid-episode "
                             "(no reset_to): no disturbance test on it")  # fmt: skip
    env = RecordedEnv(env, recorder)
    skill = skill or team_skill()
    limit = settings.limit if method.refined else 0
    skill = _for_task(skill, settings, limit)
    if header is not None:
        recorder.write("header", **header)
    env.reset(seed)
    extra: dict[str, Any] = {}
    if disturb_at is not None:
        extra["disturb_at"] = disturb_at
    if memory is not None:
        extra["trial_memory"] = {"reflections": list(memory.reflections), "keep": memory.keep}
    recorder.write("setup", method=method.name, task=settings.task.name, seed=seed,
                   starts=getattr(env, "starts", "all"), agents=list(env.agents),
                   vocabulary=list(env.vocabulary), feature_names=list(env.feature_names),
                   **settings.options(), **extra)  # fmt: skip
    recorded = RecordedAsk(llm, recorder)
    turn = Turn(env, settings, recorded, critic, recorder.write)
    turn.log.trials = memory
    ledger = TeamLedger(recorder, method, turn)
    turn.record = ledger
    clock = VirtualClock()
    ask = PlanAsk(method, turn, recorded)
    kind = TeamKind(method, turn, ask)
    driver = TeamDriver(turn, method, clock, seed, disturb_at)

    def ends(_: Observation) -> Verdict | None:
        if env.success:
            return Verdict(True, "the task is done")
        if env.done or env.steps >= settings.task.step_limit:
            return Verdict(False, f"the task is not done after {env.steps} steps")
        return None

    runner = SkillRunner(
        skill, clock, driver, ask, kind, ledger,
        action_text=False, second_stage=False, constrained=settings.constrained, latency=0.0,
        checks=team_checks(method, turn), max_rounds=limit, fallback_plan=kind.fallback_plan,
        ends=ends, on_finish=lambda _: clock.stop(),
    )  # fmt: skip
    driver.seen = runner.observe
    recorder.write("state", step=turn.step, text=turn.state,
                   features=[float(x) for x in turn.features])  # fmt: skip
    runner.start(turn.observation())
    clock.run(until=math.inf)
    if not runner.finished:
        runner.stop("the loop ran out of events")
    if method.finish is not None:
        method.finish(turn, bool(env.success))
    outcome = TeamOutcome(**asdict(ledger.figures), joint_actions=driver.joint_actions)
    outcome.success, outcome.steps = bool(env.success), int(env.steps)
    outcome.queries, outcome.reward = recorded.requests, float(env.reward_total)
    recorder.write("outcome", finished=outcome.success, outcome=outcome.to_json())
    if recorded.refusal is not None and recorded.answered == 0:
        # the endpoint refused every request (a stand-in that cannot read another task, a
        # bad key): the episode measured nothing, so its one line ends the command
        raise recorded.refusal
    return outcome


def _check_fit(critic: CriticView | None, env: EnvView) -> None:
    """A critic whose card names other agents, actions or features than the level's scores
    something else: refused in one line naming the first difference."""
    card = getattr(critic, "card", None)  # a loaded Critic has its card
    if card is None:
        return
    found = check_card(card, card.task, card.level, env.vocabulary, env.feature_names,
                       env.agents, getattr(env, "reach", None))  # fmt: skip
    if found:
        where = getattr(critic, "path", "the critic")
        raise CriticError(f"{where}: {found[0]}: a critic of another task or level")


def _for_task(skill: Skill, settings: TeamSettings, rounds: int) -> Skill:
    from dataclasses import replace

    goal = Template(skill.goal).safe_substitute(goal=settings.task.description.strip())
    return replace(skill, goal=goal, max_rounds=rounds)
