"""The team skill's driver: the agents' choices gathered into one joint action the
environment runs.

``team.choose`` adds the step's agents' actions (one agent's for ReAd-S, every agent's for a
joint method); ``team.wait``, the fallback's command, has the agents asked WAIT. Once every
agent has chosen, the environment steps: the ``env_step`` record (the state's features, the
joint action, reward and physical feedback), the disturbance when it is due, and the next
step's look posted to the loop before the command completes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from onboard.base.errors import DriverError
from onboard.collab.methods import Method, StepSeen, Turn
from onboard.collab.names import TEAM_COMMANDS
from onboard.collab.prompts import WAIT
from onboard.collab.refine import WHY, TeamObservation
from onboard.drivers.base import Args, Done, Running
from onboard.loop.clock import Clock, Timer

__all__ = ["TEAM_COMMANDS", "TeamDriver"]


class Resettable(Protocol):
    """An environment the disturbance can re-initialise mid-episode (TeamEnv.reset_to)."""

    def reset_to(self, seed: int) -> None: ...


class _Pending:
    def __init__(self, timer: Timer) -> None:
        self.timer = timer

    def cancel(self) -> None:
        self.timer.cancel()


class TeamDriver:
    """Implements :class:`~onboard.drivers.base.RobotDriver` over a team environment."""

    def __init__(
        self,
        turn: Turn,
        method: Method,
        clock: Clock,
        seed: int,
        disturb_at: int | None = None,
    ) -> None:
        self.turn, self.method, self.clock = turn, method, clock
        self.seed, self.disturb_at = seed, disturb_at
        #: the loop's observe, set once the runner is built: each new step's look goes there
        self.seen: Callable[[TeamObservation], None] = lambda _: None
        self.joint_actions: list[dict[str, str]] = []

    @property
    def commands(self) -> frozenset[str]:
        return TEAM_COMMANDS

    def start(self, command: str, args: Args, done: Done) -> Running:
        if command not in TEAM_COMMANDS:
            raise DriverError(f"team driver: unknown command {command!r}")
        turn = self.turn
        if command == "team.choose":
            if WHY in args:
                raise DriverError("team driver: an unreadable reply cannot run")
            turn.chosen.update({str(a): str(x) for a, x in args.items()})
        elif command == "team.wait":
            turn.chosen.update({a: WAIT for a in self.method.asked(turn)})

        def complete() -> None:
            if command != "none":
                if all(a in turn.chosen for a in turn.env.agents):
                    self._step()
                self.seen(turn.observation())
            done()

        return _Pending(self.clock.call_later(0.0, complete))

    def _step(self) -> None:
        turn, env = self.turn, self.turn.env
        step = turn.step
        joint = {agent: turn.chosen.get(agent, WAIT) for agent in env.agents}
        result = env.step(joint)
        turn.record("env_step", step=step, features=[float(x) for x in turn.features],
                    joint=joint, reward=float(result.reward), done=bool(result.done),
                    success=bool(result.success), feedback=dict(result.feedback))  # fmt: skip
        self.joint_actions.append(joint)
        turn.log.steps.append(StepSeen(step, joint, dict(result.feedback), float(result.reward)))
        if step == self.disturb_at and not env.done:
            cast(Resettable, env).reset_to(self.seed)
            turn.log.disturbed_at = step
            turn.record("disturbance", step=step, seed=self.seed, text=env.describe())
        turn.next_step(step)
        if not env.done and env.steps < turn.settings.task.step_limit:
            turn.record("state", step=turn.step, text=turn.state,
                        features=[float(x) for x in turn.features])  # fmt: skip

    def stop(self) -> None:
        """Nothing moves between steps: the environment runs one joint action at a time."""

    def resume(self) -> None:
        """See :meth:`stop`."""
