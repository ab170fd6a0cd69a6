"""Assemble one episode from robot.toml, a skill and a scenario, and run it on a clock.

``onboard run``, ``onboard eval`` and ``onboard replay`` all go through :func:`run_episode`,
so what is evaluated and replayed is exactly what runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any

from onboard.base.errors import CandidateError
from onboard.base.secrets import scrub
from onboard.base.signals import on_stop_signals
from onboard.catalog import load_robot_skill, make_mapper
from onboard.config import RobotConfig
from onboard.drivers.speech import EspeakSpeech, RecordedSpeech, Speech
from onboard.grounding.candidates import CandidateStore
from onboard.grounding.embedder import MODEL_FILE
from onboard.grounding.mapping import ActionMapper
from onboard.hri.checks import PersonVisible
from onboard.hri.critic import critic_model_path, open_skill_critic
from onboard.hri.kind import PersonKind
from onboard.hri.playback import PersonPlayback, PlaybackWorld
from onboard.hri.scenario import Scenario
from onboard.hri.world import SimRobot, SimWorld
from onboard.llm.client import ChatClient, ChatResult, Message
from onboard.loop.clock import Clock, VirtualClock, WallClock
from onboard.loop.engine import Ask, Check, Outcome, SkillRunner, Verify
from onboard.loop.episode import begin_recording, cancel, stop_hooks
from onboard.loop.exitcodes import ExitCode, for_signal
from onboard.loop.playback import PlaybackDriver
from onboard.loop.recorder import Recorder
from onboard.loop.recording import build_header
from onboard.loop.skill import Skill

__all__ = [
    "SCENARIO_ENDED",
    "EpisodeOptions",
    "HttpAsk",
    "Judgement",
    "JudgementKind",
    "default_checks",
    "episode_exit_code",
    "judge",
    "judge_speech",
    "load_robot_skill",
    "make_mapper",
    "run_episode",
]

#: the reason an episode ends when its scenario's time is up: a verdict, not a fault
SCENARIO_ENDED = "scenario ended"


class HttpAsk:
    """The LLM over HTTP: every purpose goes to the same endpoint."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client

    @property
    def structured_output(self) -> str:
        """The form a schema goes in ([llm] structured_output, resolved): recorded with each
        constrained request."""
        return self.client.structured_output

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        return self.client.complete(messages, schema)

    def cancel(self) -> None:
        """End the exchange in flight (the episode is over or a stop signal came)."""
        self.client.cancel()


@dataclass(frozen=True)
class EpisodeOptions:
    clock: str = "virtual"
    action_text: bool = True
    second_stage: bool = True
    constrained: bool = False
    latency: float | Callable[[], float] | None = None
    handle_signals: bool = False
    keep_candidates: bool = True
    #: where the virtual clock starts: a replay of a wall-clock run starts it at the run's
    #: first record, so that what the run scheduled from its start falls at the same times
    start: float = 0.0


def make_clock(kind: str, start: float = 0.0) -> Clock:
    return VirtualClock(start) if kind == "virtual" else WallClock()


def make_speech(robot: RobotConfig) -> Speech:
    config = robot.drivers.robot
    if config.speech == "espeak-ng":
        wav_dir = robot.resolve(config.speech_wav_dir) if config.speech_wav_dir else None
        return EspeakSpeech(wav_dir=wav_dir)
    return RecordedSpeech()


def run_episode(
    robot: RobotConfig,
    skill: Skill,
    scenario: Scenario,
    ask: Ask,
    mapper: ActionMapper,
    recorder: Recorder,
    options: EpisodeOptions = EpisodeOptions(),
    checks: Sequence[Check] | None = None,
    on_runner: Callable[[SkillRunner], None] | None = None,
    verifiers: Sequence[Verify] = (),
    playback: PersonPlayback | None = None,
) -> Outcome:
    """Run one episode until the skill ends or the scenario's end time passes.

    ``on_runner`` sees the runner before it starts (benchmarks read its timings).
    ``playback``: the looks and the robot's completions of a recording instead of the
    simulated person and robot (a replay: runtime/hri/playback.py).
    """
    clock = make_clock(options.clock, options.start)
    header = build_header(
        robot,
        skill,
        "person",
        scenario=scenario.model_dump(mode="json", by_alias=True),
        options={k: v for k, v in options.__dict__.items() if k not in ("latency", "start")},
        latency=options.latency if isinstance(options.latency, float) else None,
        models={
            "embedder": robot.embedder_dir / MODEL_FILE,
            **({"critic": critic_model_path(skill.critic.model)} if skill.critic else {}),
        },
    )
    begin_recording(recorder, clock, robot.llm.api_key(), header)
    store = CandidateStore(robot.recordings_dir / "candidates.jsonl")
    runner: SkillRunner | None = None

    def publish(observation: Any) -> None:
        if runner is not None:
            runner.observe(observation)

    def running() -> tuple[str, float]:
        return runner.running() if runner is not None else ("idle", 0.0)

    world: SimWorld | PlaybackWorld
    driver: SimRobot | PlaybackDriver
    if playback is None:
        world = SimWorld(scenario, robot.drivers.robot, clock, publish)
        driver = SimRobot(world, make_speech(robot))
    else:
        world, driver = playback.world(clock, publish), playback.driver(clock)
    keep = (
        partial(_keep_candidate, store, skill.name, robot.llm.api_key())
        if options.keep_candidates
        else None
    )
    runner = SkillRunner(
        skill,
        clock,
        driver,
        ask,
        PersonKind(mapper),
        recorder.write,
        action_text=options.action_text,
        second_stage=options.second_stage,
        constrained=options.constrained,
        latency=options.latency,
        checks=default_checks(robot, skill, running, clock.now) if checks is None else checks,
        verifiers=verifiers,
        max_rounds=skill.max_rounds,
        on_candidate=keep,
        on_finish=lambda _: clock.stop(),
        breaker_failures=robot.llm.breaker_failures,
        breaker_cooldown=robot.llm.breaker_cooldown,
    )
    if on_runner is not None:
        on_runner(runner)

    with on_stop_signals(stop_hooks(runner, ask, recorder), options.handle_signals):
        try:
            world.start()
            runner.start(world.observation())
            clock.run(until=scenario.end)
        finally:
            if not runner.finished:
                runner.stop(SCENARIO_ENDED if clock.now() >= scenario.end else "interrupted")
            world.close()
            cancel(ask)
            if isinstance(clock, WallClock):
                clock.close()
    if recorder.fault is not None:  # the robot is stopped; what was written is kept
        raise recorder.fault
    return runner.outcome


def default_checks(
    robot: RobotConfig,
    skill: Skill,
    running: Callable[[], tuple[str, float]],
    now: Callable[[], float] | None = None,
) -> list[Check]:
    """Every person episode's checks: the person is in sight for the end action, then the
    skill's critic when its ``[critic]`` names one."""
    checks: list[Check] = [PersonVisible(skill.end)]
    critic = open_skill_critic(skill, robot.embedder_dir, robot.models.threads)
    if critic is not None:
        checks.append(critic.check(running, now))
    return checks


def _keep_candidate(
    store: CandidateStore, skill: str, key: str | None, reply: str, situation: str
) -> None:
    """Keep an unmatched reply, the API key scrubbed from it (an endpoint may echo it); a
    candidate that cannot be kept (a full disk) is lost, not the episode: one line."""
    try:
        store.add(skill, scrub(reply, [key]), scrub(situation, [key]))
    except CandidateError as exc:
        print(f"onboard: warning: candidate not kept: {exc}", file=sys.stderr)


class JudgementKind(StrEnum):
    """What a judged episode did; only SUCCESS is a success, each failure is its own kind."""

    SUCCESS = "success"
    #: speak ran inside a not-ready label: the person was busy
    SPOKE_NOT_READY = "spoke_not_ready"
    #: speak ran with the person out of sight (whatever the label)
    SPOKE_OUT_OF_SIGHT = "spoke_out_of_sight"
    #: speak ran at a time no label covers
    SPOKE_UNLABELLED = "spoke_unlabelled"
    #: the scenario ran to its end without speak
    NEVER_SPOKE = "never_spoke"
    #: the episode was stopped before speak (a signal, a driver fault, the fallback timing out)
    STOPPED = "stopped"


@dataclass(frozen=True)
class Judgement:
    kind: JudgementKind
    reason: str

    @property
    def success(self) -> bool:
        return self.kind is JudgementKind.SUCCESS


def judge(outcome: Outcome, scenario: Scenario) -> Judgement:
    """Success and failure exactly as the seed's section IV, the failures told apart."""
    if outcome.spoke_at is None:
        if outcome.reason and outcome.reason != SCENARIO_ENDED:
            return Judgement(JudgementKind.STOPPED, f"stopped before speaking: {outcome.reason}")
        return Judgement(JudgementKind.NEVER_SPOKE, f"timeout: no speak by {scenario.end:g} s")
    return judge_speech(scenario, outcome.spoke_at, outcome.spoke_visible)


def judge_speech(scenario: Scenario, t: float, visible: bool | None) -> Judgement:
    """The verdict on speaking at ``t`` (``visible``: whether the person was in sight)."""
    if visible is False:
        reason = f"spoke at {t:.1f} s with the person out of sight"
        return Judgement(JudgementKind.SPOKE_OUT_OF_SIGHT, reason)
    label = scenario.label_at(t)
    if label in ("ok-to-engage", "ready"):
        return Judgement(JudgementKind.SUCCESS, f"spoke at {t:.1f} s ({label})")
    if label == "not-ready":
        return Judgement(JudgementKind.SPOKE_NOT_READY, f"spoke at {t:.1f} s (not-ready)")
    return Judgement(JudgementKind.SPOKE_UNLABELLED, f"spoke at {t:.1f} s (unlabelled)")


def episode_exit_code(outcome: Outcome, success: bool) -> ExitCode:
    """What an episode tells a supervisor: stopped, LLM unreachable, incomplete, or its verdict."""
    if outcome.signal is not None:
        return for_signal(outcome.signal)
    if outcome.llm_failures and not outcome.llm_replies:
        return ExitCode.LLM_UNREACHABLE
    if not outcome.finished and outcome.reason != SCENARIO_ENDED:
        return ExitCode.INCOMPLETE
    return ExitCode.SUCCESS if success else ExitCode.TASK_FAILED
