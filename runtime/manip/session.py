"""Assemble one scene-skill episode: the arm and camera robot.toml names, the detector, the
loop; run it on a clock with a goal from the command line.

The same code drives the physics twin in-process (``[drivers.arm] kind = "sim"``), the JAKA
emulator of ``onboard sim serve`` over TCP, or a real arm; the arm is always behind SafeArm.
With the in-process twin on the virtual clock, the twin keeps the loop's time: each time the
loop's clock moves on, the twin steps to it (a 5 s model call lets 5 s of physics pass), and
an arm motion takes the simulated time it took in the twin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from string import Template
from typing import Any

from onboard.base.errors import ConfigError, Problem, UsageError
from onboard.base.signals import on_stop_signals
from onboard.catalog import make_mapper
from onboard.config import RobotConfig
from onboard.drivers.factory import Hardware, hardware
from onboard.grounding.embedder import MODEL_FILE
from onboard.hri.session import make_clock
from onboard.loop.clock import Clock, VirtualClock, WallClock
from onboard.loop.engine import Ask, Outcome, SkillRunner
from onboard.loop.episode import begin_recording, stop_hooks
from onboard.loop.playback import PlaybackDriver
from onboard.loop.recorder import Recorder
from onboard.loop.recording import build_header
from onboard.loop.skill import Skill
from onboard.manip.arm_driver import ArmDriver
from onboard.manip.goal import GoalCheck, SceneGoal
from onboard.manip.kind import SceneKind
from onboard.manip.observation import SceneObservation
from onboard.manip.perception import ScenePerception
from onboard.manip.playback import ScenePlayback
from onboard.manip.resolve import ObjectResolver
from onboard.manip.verify import Effects, EffectVerify, SceneCheck
from onboard.perception.detector import Detector
from onboard.perception.pose import HandEye
from onboard.perception.scene_observer import SceneObserver
from onboard.perception.self_filter import Hand

__all__ = [
    "SceneOptions",
    "goal_skill",
    "hand_eye_of",
    "keep_time",
    "run_scene_episode",
    "scene_hardware",
]


@dataclass(frozen=True)
class SceneOptions:
    clock: str = "virtual"
    constrained: bool = False
    latency: float | Callable[[], float] | None = None
    handle_signals: bool = False
    #: seconds of the episode clock the robot has for the goal
    limit: float = 300.0
    #: seconds between two looks at the table while nothing else looks
    look_every: float = 1.0
    #: where the virtual clock starts (a replay of a wall-clock run: the run's first look)
    start: float = 0.0


def goal_skill(skill: Skill, goal: str) -> Skill:
    """The skill with the user's request in its goal (``$goal``)."""
    if not goal.strip():
        raise UsageError(f'{skill.name}: the goal is empty; pass --goal "..."')
    filled = Template(skill.goal).safe_substitute(goal=goal.strip())
    return replace(skill, goal=filled, request=goal.strip())


@contextmanager
def scene_hardware(robot: RobotConfig, realtime: bool = False) -> Iterator[Hardware]:
    """The arm and camera of robot.toml, connected; both are needed for a scene skill.
    ``realtime``: a simulated arm's motions follow the wall clock (for a wall-clock run)."""
    arm, camera = robot.drivers.arm, robot.drivers.camera
    if realtime and arm is not None and arm.kind == "sim":
        arm = arm.model_copy(update={"realtime": True})
    if arm is None or camera is None:
        missing = " and ".join(n for n, c in (("arm", arm), ("camera", camera)) if c is None)
        raise ConfigError(
            [
                Problem(
                    robot.root / "robot.toml", f"drivers.{missing}", None, "a scene skill needs it"
                )
            ]
        )
    with hardware(arm, camera, robot.safety, robot.root) as found:
        yield found


def hand_eye_of(robot: RobotConfig, needs: str = "a scene skill") -> HandEye:
    """robot.toml's ``[hand_eye]``; missing, a ConfigError saying who ``needs`` it."""
    if robot.hand_eye is None:
        why = f"{needs} needs it (the camera in the base frame): onboard calibrate --write"
        raise ConfigError([Problem(robot.root / "robot.toml", "hand_eye", None, why)])
    return HandEye.from_config(robot.hand_eye)


def run_scene_episode(
    robot: RobotConfig,
    skill: Skill,
    ask: Ask,
    recorder: Recorder,
    found: Hardware | None,
    detector: Detector,
    options: SceneOptions = SceneOptions(),
    on_runner: Callable[[SkillRunner], None] | None = None,
    task: Mapping[str, Any] | None = None,
    playback: ScenePlayback | None = None,
) -> Outcome:
    """Run ``skill`` (its goal already set: :func:`goal_skill`) until it ends, it is stopped,
    or ``options.limit`` seconds pass. ``on_runner`` sees the runner before it starts (tests
    and benchmarks); ``task`` is what the recording's header says the episode was asked
    (the request, the scene; by default the skill's goal). The goal check compiles the
    skill's request (runtime/manip/goal.py). ``playback``: the looks and the arm's
    completions of a recording instead of ``found`` (a replay: runtime/manip/playback.py)."""
    if playback is None and (found is None or found.arm is None or found.camera is None):
        raise UsageError("a scene skill needs an arm and a camera")
    hand_eye = hand_eye_of(robot)  # before anything moves
    clock = make_clock(options.clock, options.start)
    twin = found.twin if found is not None else None
    virtual = isinstance(clock, VirtualClock)
    header = build_header(
        robot,
        skill,
        "scene",
        task=dict(task) if task is not None else {"goal": skill.goal},
        options={k: v for k, v in options.__dict__.items() if k not in ("latency", "start")},
        latency=options.latency if isinstance(options.latency, float) else None,
        models={"embedder": robot.embedder_dir / MODEL_FILE, "detector": detector.path},
    )
    begin_recording(recorder, clock, robot.llm.api_key(), header)
    driver: ArmDriver | PlaybackDriver
    if playback is not None:
        driver = playback.arm(clock)
        look, look_latency = playback.looks.look, playback.looks.latency(clock.now)
    else:
        assert found is not None and found.arm is not None and found.camera is not None
        elapsed = (lambda: twin.time) if (virtual and twin is not None) else None
        arm = ArmDriver(found.arm, clock, elapsed=elapsed, record=recorder.write)
        arm.home()
        if twin is not None:
            keep_time(clock, twin, virtual)
        table = None if skill.scene is None else skill.scene.table
        perception = ScenePerception(
            found.camera,
            detector,
            SceneObserver(hand_eye, sides="base", table=table, zone=robot.hand_zone),
            clock.now,
            holding=lambda: arm.holding,
            images=skill.prompt.images,
            hand=lambda: Hand.of(arm.arm),
        )
        driver, look, look_latency = arm, perception.look, (lambda: 0.0)
    mapper = make_mapper(robot, skill)
    resolver = ObjectResolver(mapper.embedder, near_tie=robot.mapping.near_tie)
    kind = SceneKind(skill, mapper, resolver)
    goal = SceneGoal(skill, skill.request or skill.goal, resolver, known=detector.classes)
    effects = Effects()
    runner = SkillRunner(
        skill,
        clock,
        driver,
        ask,
        kind,
        recorder.write,
        second_stage=False,
        constrained=options.constrained,
        latency=options.latency,
        checks=[SceneCheck(skill, effects), GoalCheck(skill, goal)],
        verifiers=[EffectVerify(skill, effects)],
        look=look,
        max_rounds=skill.max_rounds,
        on_finish=lambda _: clock.stop(),
        breaker_failures=robot.llm.breaker_failures,
        breaker_cooldown=robot.llm.breaker_cooldown,
        goal=goal,
    )
    if on_runner is not None:
        on_runner(runner)
    _look_periodically(runner, look, options.look_every, look_latency)

    halt = driver.stop if isinstance(driver, ArmDriver) else None
    with on_stop_signals(stop_hooks(runner, ask, recorder, halt), options.handle_signals):
        try:
            runner.start(look())
            clock.run(until=options.limit)
        finally:
            if not runner.finished:
                runner.stop("time limit reached" if clock.now() >= options.limit else "interrupted")
            if isinstance(clock, WallClock):
                clock.close()
    if recorder.fault is not None:
        raise recorder.fault
    return runner.outcome


def keep_time(clock: Clock, twin: object, virtual: bool) -> None:
    """The twin steps to the loop's clock: on each advance of virtual time, or every 50 ms
    of wall time. An arm motion steps the twin itself, ahead of the clock; the twin then
    waits for the clock to catch up."""
    from onboard.drivers.twin.world import Twin

    assert isinstance(twin, Twin)
    offset = twin.time - clock.now()

    def catch_up(now: float) -> None:
        behind = now + offset - twin.time
        if behind > 0:
            twin.step(behind)

    if isinstance(clock, VirtualClock):
        clock.on_advance(catch_up)
        return

    def tick() -> None:
        catch_up(clock.now())
        clock.call_later(0.05, tick)

    clock.post(tick)


def _look_periodically(
    runner: SkillRunner,
    take_look: Callable[[], SceneObservation],
    every: float,
    latency: Callable[[], float],
) -> None:
    """Perception posts a fresh look every ``every`` seconds (off the loop); ``latency``:
    the virtual time a look takes (a replay's: when the recorded one came back)."""
    clock = runner.clock

    def look() -> None:
        if runner.finished:
            return
        if runner.plans_asked == 0:  # the goal is asked first: looks begin with the plans
            clock.call_later(every, look)
            return

        def seen(result: SceneObservation | BaseException, _took: float) -> None:
            if not runner.finished and isinstance(result, SceneObservation):
                runner.observe(result)
            clock.call_later(every, look)

        clock.submit(take_look, seen, latency=latency)

    clock.call_later(every, look)
