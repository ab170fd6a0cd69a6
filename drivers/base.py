"""The interface every robot driver offers the skill runtime."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

__all__ = ["Args", "Done", "RobotDriver", "Running"]

Args = Mapping[str, str | float | int | bool]
#: Called on the clock's loop when a command finishes by itself.
Done = Callable[[], None]


class Running(Protocol):
    """A command in progress."""

    def cancel(self) -> None:
        """Stop this command now (preemption); ``done`` will not be called."""


class RobotDriver(Protocol):
    """Runs named commands (``base.approach``, ``speech.say``...) without blocking."""

    @property
    def commands(self) -> frozenset[str]: ...

    def start(self, command: str, args: Args, done: Done) -> Running:
        """Begin ``command``; call ``done`` on the loop when it completes."""

    def stop(self) -> None:
        """Bring the robot to a safe state from any state: motion halted.

        The stop is latched: ``start`` raises :class:`~onboard.base.errors.DriverError` until
        :meth:`resume`, so a stop that arrives just before a command is never lost.
        """

    def resume(self) -> None:
        """Clear a latched stop: the caller moves the robot again on purpose."""
