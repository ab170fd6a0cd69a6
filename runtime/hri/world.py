"""The simulated robot and person: a mobile base with a head and a speaker, on one line.

The person follows a scenario file (activity, gaze, walking away); the robot's base closes
the distance at its configured speed. Perception publishes the scenario's descriptions
while the person is within the camera's range, and "not visible" once they leave it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from onboard.base.errors import DriverError
from onboard.config import SimDriverConfig
from onboard.drivers.base import Args, Done, Running
from onboard.drivers.speech import RecordedSpeech, Speech
from onboard.hri.person import PersonObservation
from onboard.hri.scenario import Scenario
from onboard.loop.clock import Clock, Timer

__all__ = ["SimRobot", "SimWorld"]

TICK = 0.1  # seconds: odometry and range checks at 10 Hz
NEAREST = 0.8  # metres: a person walking toward the robot stops this far from it


class SimWorld:
    """Positions along the line from robot to person, advanced by the clock."""

    def __init__(
        self,
        scenario: Scenario,
        config: SimDriverConfig,
        clock: Clock,
        publish: Callable[[PersonObservation], None],
    ) -> None:
        self.scenario = scenario
        self.config = config
        self.clock = clock
        self._publish = publish
        self.robot = 0.0
        self.person = scenario.scenario.distance
        self.person_speed = 0.0
        self.activity = scenario.activity[0].text
        self.toward = scenario.gaze[0].toward
        self.visible = True
        self._base_goal: float | None = None
        self._arrived: Done | None = None
        self._last = 0.0
        self._timers: list[Timer] = []

    @property
    def distance(self) -> float:
        return self.person - self.robot

    def observation(self) -> PersonObservation:
        return PersonObservation(
            t=self.clock.now(),
            activity=self.activity if self.visible else None,
            toward=self.toward if self.visible else None,
            visible=self.visible,
            distance=self.distance,
        )

    def start(self) -> None:
        self._last = self.clock.now()
        for a in self.scenario.activity[1:]:
            self._at(a.at, partial(self._set, activity=a.text))
        for g in self.scenario.gaze[1:]:
            self._at(g.at, partial(self._set, toward=g.toward))
        for m in self.scenario.motion:
            self._at(m.at, partial(self._walk, m.speed))
        self._timers.append(self.clock.call_later(TICK, self._tick))

    def close(self) -> None:
        for timer in self._timers:
            timer.cancel()

    def move_base(self, stop_distance: float, arrived: Done) -> None:
        self._advance()
        self._base_goal, self._arrived = stop_distance, arrived

    def halt_base(self) -> None:
        self._advance()
        self._base_goal, self._arrived = None, None

    @property
    def base_moving(self) -> bool:
        return self._base_goal is not None

    def attend(self) -> None:
        """The robot looks at the person: one free to talk looks back after ``notice_time``
        (until the scenario's next gaze change); a busy one does not. An approach draws no
        look: it is every episode's start action, and a person walking by who looked back at
        once would leave the seed's person-environment nothing to decide."""
        notice = self.config.notice_time
        if notice is None or not self.visible or self.toward:
            return
        if self.scenario.label_at(self.clock.now()) in ("ok-to-engage", "ready"):
            self._timers.append(self.clock.call_later(notice, self._notice))

    def _notice(self) -> None:
        if self.visible and not self.toward:
            self._set(toward=True)

    def _at(self, t: float, action: Callable[[], None]) -> None:
        self._timers.append(self.clock.call_at(t, action))

    def _set(self, activity: str | None = None, toward: bool | None = None) -> None:
        self._advance()
        if activity is not None:
            self.activity = activity
        if toward is not None:
            self.toward = toward
        if self.visible:
            self._publish(self.observation())

    def _walk(self, speed: float) -> None:
        self._advance()
        self.person_speed = speed

    def _advance(self) -> None:
        now = self.clock.now()
        dt, self._last = now - self._last, now
        self.person = max(self.person + self.person_speed * dt, self.robot + NEAREST)
        if self._base_goal is not None:
            self.robot = min(self.robot + self.config.speed * dt, self.person - self._base_goal)

    def _tick(self) -> None:
        self._advance()
        if self._base_goal is not None and self.distance <= self._base_goal + 1e-6:
            arrived, self._base_goal, self._arrived = self._arrived, None, None
            if arrived is not None:
                arrived()
        in_range = self.distance <= self.config.camera_range
        if in_range != self.visible:
            self.visible = in_range
            self._publish(self.observation())
        self._timers.append(self.clock.call_later(TICK, self._tick))


@dataclass
class _Pending:
    timer: Timer | None = None
    on_cancel: Callable[[], None] | None = None

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.on_cancel is not None:
            self.on_cancel()


class SimRobot:
    """The robot driver for the simulated world."""

    COMMANDS = frozenset(
        {"none", "base.approach", "base.stop", "head.look_at_person", "speech.say"}
    )

    def __init__(self, world: SimWorld, speech: Speech | None = None) -> None:
        self.world = world
        self.speech: Speech = speech if speech is not None else RecordedSpeech()
        self.log: list[tuple[float, str]] = []
        self._stopped = False

    @property
    def commands(self) -> frozenset[str]:
        return self.COMMANDS

    def start(self, command: str, args: Args, done: Done) -> Running:
        clock, config = self.world.clock, self.world.config
        if self._stopped:
            raise DriverError(f"sim robot: {command!r} refused: the robot was stopped "
                              "(resume() first)")  # fmt: skip
        self.log.append((clock.now(), command))
        if command == "none":
            return _Pending()
        if command == "head.look_at_person":
            self.world.attend()
        if command == "base.approach":
            self.world.move_base(float(args.get("stop_distance", 1.5)), done)
            return _Pending(on_cancel=self.world.halt_base)
        if command == "base.stop":
            self.world.halt_base()
            return _Pending(timer=clock.call_later(config.stop_time, done))
        if command == "head.look_at_person":
            return _Pending(timer=clock.call_later(config.look_time, done))
        if command == "speech.say":
            text = str(args.get("text", ""))
            self.speech.say(text)
            seconds = max(1.0, len(text.split()) / config.words_per_second)
            return _Pending(timer=clock.call_later(seconds, done), on_cancel=self.speech.silence)
        raise DriverError(f"sim robot: unknown command {command!r}")

    def stop(self) -> None:
        self._stopped = True
        self.log.append((self.world.clock.now(), "stop"))
        self.world.halt_base()
        self.speech.silence()

    def resume(self) -> None:
        self._stopped = False
