"""One agent of a fleet, placed: its arm's frame, home and reach limits from the team task and
the scene, and its controller run beside ``onboard up``'s service (robot.toml's ``[fleet]``)
or alone (``onboard fleet controller``).

Under ``onboard up`` the controller shares the service's process, so the service's e-stop
(:data:`~onboard.drivers.arm.safety.STOP_LINE`) stops its arm from the input's own thread and
the controller latches it; the coordinator then reads the latch in the heartbeat and refuses
to start a run until ``onboard fleet reset``, which is refused while the e-stop is engaged.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from onboard.base.errors import ConfigError, OnboardError, Problem, UsageError
from onboard.base.tomlfile import line_in
from onboard.drivers.arm.safety import SafetyLimits

if TYPE_CHECKING:
    from onboard.collab.twin_sort import Frames, Panel
    from onboard.config import RobotConfig
    from onboard.fleet.controller import Controller
    from onboard.service.log import JsonLog

__all__ = ["Placement", "check_member", "place", "run_member"]


@dataclass(frozen=True)
class Placement:
    """Where ``agent``'s arm stands in the scene, where it may reach, and its home."""

    agent: str
    frames: Frames
    panels: Mapping[str, Panel]
    limits: SafetyLimits
    home: tuple[float, ...]


def place(agent: str, task_name: str, scene_name: str) -> Placement:
    """``agent`` of the team task ``task_name`` in the scene ``scene_name``; a UsageError
    when the task has no such agent or the scene no such arm."""
    from onboard.collab.taskfile import find_team_task
    from onboard.collab.twin_sort import SceneFrames, reach_limits, scene_panels
    from onboard.drivers.twin.scene import find_scene, load_scene

    task = find_team_task(task_name)
    if task.env != "sort_cubes":
        raise UsageError(f"task {task_name!r}: a fleet runs sort_cubes only")
    if agent not in task.agent_names:
        raise UsageError(f"agent {agent!r}: not in {task.name} ({', '.join(task.agent_names)})")
    frames = SceneFrames(load_scene(find_scene(scene_name)))
    spec = frames.scene.arm_specs().get(agent)
    if spec is None:
        raise UsageError(f"agent {agent!r}: the scene {scene_name} has no such arm")
    limits = reach_limits(frames, agent, task.agent(agent).reach)
    return Placement(agent, frames, scene_panels(frames), limits, tuple(spec.home))


def check_member(robot: RobotConfig, path: Path, missions: Sequence[Path] = ()) -> list[Problem]:
    """robot.toml's ``[fleet]`` against the task, the scene and the rest of robot.toml (its
    arm, and the robot's ``missions``: a member runs none)."""
    settings = robot.fleet
    if settings is None:
        return []
    problems: list[Problem] = []

    def problem(key: str, message: str) -> None:
        problems.append(Problem(path, key, line_in(path, key), message))

    try:
        place(settings.agent, settings.task, settings.scene)
    except (UsageError, ConfigError) as exc:
        problem("fleet.agent", str(exc).removeprefix("onboard: error: "))
    if robot.drivers.arm is None:
        problem("fleet", "a fleet member owns an arm: robot.toml has no [drivers.arm]")
    if missions:  # the arm takes its actions from the coordinator
        problem("fleet", "a fleet member's arm is the coordinator's: it runs no missions "
                f"({', '.join(str(m) for m in missions)})")  # fmt: skip
    return problems


@contextmanager
def run_member(robot: RobotConfig, log: JsonLog) -> Iterator[Controller]:
    """robot.toml's fleet controller, running on its own thread until the block ends (then
    its arm is stopped and closed). A controller that dies sends this process SIGTERM: the
    service stops (and systemd restarts it) rather than run on with an arm nobody drives."""
    from onboard.drivers.factory import hardware
    from onboard.fleet.bus import open_bus
    from onboard.fleet.controller import Controller

    settings = robot.fleet
    assert settings is not None and robot.drivers.arm is not None
    placement = place(settings.agent, settings.task, settings.scene)
    arm = robot.drivers.arm
    if getattr(arm, "home_joints", "absent") is None:  # home is where the scene's arm stands
        arm = arm.model_copy(update={"home_joints": placement.home})
    stop = threading.Event()
    with (
        hardware(arm, None, placement.limits, robot.root) as found,
        open_bus(settings.listen, settings.connect) as bus,
    ):
        assert found.arm is not None
        controller = Controller(settings.name, settings.agent, found.arm, placement.frames,
                                placement.panels, bus, period=settings.period,
                                timeout=settings.timeout, log=log)  # fmt: skip

        def serve() -> None:
            try:
                controller.run(stop)
            except (OnboardError, OSError) as exc:
                log.event("fleet_controller_failed", level="error", agent=settings.agent,
                          error=str(exc))  # fmt: skip
                os.kill(os.getpid(), signal.SIGTERM)

        thread = threading.Thread(target=serve, name=f"fleet-{settings.agent}", daemon=True)
        thread.start()
        try:
            yield controller
        finally:
            stop.set()
            thread.join(timeout=10.0)
