"""A fleet over Zenoh (issue 33, item 5): the coordinator's decision latency across
processes against in process, in the same run, and the partition's stop time.

**Decision latency**, per environment step that ran an action: from the end of the previous
step (or the layout) to the step's first action arriving at its arm's executor. It holds the
whole team decision of the step (ReAd-J: one joint request; ReAd-S: one request per agent,
each scored by the critic, refinements included) and, across processes, the Zenoh hop to the
controller (the hop alone, from the action's put to the controller taking it, is its own
column). With no arms, the same env's actions are done as they are asked (the decision's
cost alone, no physics in the process). In process the same env (``FleetSort``) runs the
same episodes, seeds and stand-in, its actions called on the twin's arms in this process
(no Zenoh, no JAKA link);
across processes they go to three ``onboard up`` processes, each a fleet member (robot.toml's
``[fleet]``) driving its arm over JAKA TCP of ``onboard fleet world``. The arrival is the
controller's own clock (``Result.received``): one host, one clock.

**Partition stop time**: Bob's controller reaches the coordinator through a TCP proxy; once
Bob's arm has begun an action the proxy is cut; the stop time is from the cut to Bob's
controller stopping its arm (its ``stopped`` log line), and ``silent`` the heartbeat silence
its watchdog saw then; the coordinator's detection is from the cut to its AgentLost.

    python bench/fleet.py [--level level1] [--methods read_j read_s] [--partitions 3]

Prints a table and writes bench/results/fleet.json.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from _common import environment, write_results
from rich.console import Console
from rich.table import Table

from onboard.base.errors import AgentLost
from onboard.cli.fleet import fleet_episode
from onboard.collab.evaluate import EvalSettings
from onboard.collab.taskfile import find_team_task
from onboard.collab.twin_sort import SCENE, SceneFrames, SortRig, put, scene_panels
from onboard.config import load_example_robot
from onboard.drivers.emulators.truth_client import TruthClient
from onboard.drivers.twin.scene import find_scene, load_scene
from onboard.drivers.twin.world import Twin
from onboard.evaluation.fleet_sort import lay_out
from onboard.fleet.bus import Bus, open_bus
from onboard.fleet.env import FleetSort
from onboard.fleet.link import FleetLink
from onboard.fleet.wire import Point
from onboard.testing.fleet_rig import FleetRig


@dataclass
class LocalDone:
    ok: bool
    error: str
    received: float
    placed: dict[str, Point] = field(default_factory=dict)


class NoArms:
    """No arm at all: an action is done as it is asked (the decision's cost alone)."""

    def act(self, agent: str, action: str, cubes: Mapping[str, Point]) -> LocalDone:
        received = time.time()
        cube = action.split()[1]
        return LocalDone(True, "", received, {cube: (0.0, 0.0, 0.0)})

    def lost(self, agent: str) -> str | None:
        return None

    def stop_all(self, reason: str, but: str = "") -> list[str]:
        return []

    def lay_out(self, start: dict[str, str]) -> dict[str, Point]:
        return {cube: (0.0, 0.0, 0.0) for cube in start}


class LocalArms:
    """The twin's three arms in this process, as a fleet link: an action is a call."""

    def __init__(self, rig: SortRig) -> None:
        self.rig = rig

    def act(self, agent: str, action: str, cubes: Mapping[str, Point]) -> LocalDone:
        received = time.time()
        _, cube, _, panel = action.split()
        where = dict(cubes)
        goal = put(self.rig.twin, self.rig.arms[agent], agent, self.rig.panels, where, cube,
                   panel)  # fmt: skip
        return LocalDone(True, "", received, {cube: goal})

    def lost(self, agent: str) -> str | None:
        return None

    def stop_all(self, reason: str, but: str = "") -> list[str]:
        return []

    def lay_out(self, start: dict[str, str]) -> dict[str, Point]:
        where = {cube: self.rig.panels[panel].slot(0) for cube, panel in start.items()}
        for cube, (x, y, z) in where.items():
            self.rig.twin.set_object_pose(cube, (x, y, z + 0.001), (0.0, 0.0, 0.0, 1.0))
        self.rig.twin.settle(0.3)
        return where


def in_process(
    arms: LocalArms, task: Any, level: str, name: str, settings: EvalSettings
) -> dict[str, Any]:
    env = FleetSort(task, level, arms, arms.lay_out)
    episode = fleet_episode(load_example_robot(), settings, env, name)
    return {"success": episode.success, "steps": episode.steps, "decisions": env.decisions}


def across(rig: FleetRig, bus: Bus, truth: TruthClient, task: Any, level: str, name: str,
           settings: EvalSettings) -> dict[str, Any]:  # fmt: skip
    panels = scene_panels(SceneFrames(load_scene(find_scene(SCENE))))
    link = FleetLink(bus, rig.fleet, task.agent_names, period=rig.period,
                     timeout=rig.timeout).start()  # fmt: skip
    try:
        link.wait_ready(60.0)
        env = FleetSort(task, level, link, lambda s: lay_out(truth, panels, s))
        episode = fleet_episode(load_example_robot(), settings, env, name)
    finally:
        link.close()
    return {"success": episode.success, "steps": episode.steps, "decisions": env.decisions,
            "hops": link.hops}  # fmt: skip


def partitions(
    rig: FleetRig, task: Any, level: str, trials: int, settings: EvalSettings
) -> list[dict[str, float]]:
    """Cut Bob off while his arm runs an action, ``trials`` times (healed and reset between)."""
    robot = load_example_robot()
    host, port = rig.truth.split(":")
    panels = scene_panels(SceneFrames(load_scene(find_scene(SCENE))))
    out = []
    with open_bus([rig.endpoint]) as bus, TruthClient(host, int(port)) as truth:
        for _ in range(trials):
            link = FleetLink(bus, rig.fleet, task.agent_names, period=rig.period,
                             timeout=rig.timeout).start()  # fmt: skip
            lost: dict[str, float] = {}

            def coordinate(link: FleetLink = link, lost: dict[str, float] = lost) -> None:
                env = FleetSort(task, level, link, lambda s: lay_out(truth, panels, s))
                try:
                    fleet_episode(robot, settings, env, "read_s")
                except AgentLost:
                    lost["t"] = time.time()

            try:
                link.wait_ready(60.0)
                rig.drain("Bob")
                coordinator = threading.Thread(target=coordinate)
                coordinator.start()
                rig.wait_event("Bob", "action", timeout=120.0)
                cut = rig.proxy.cut()
                stopped = rig.wait_event("Bob", "stopped", timeout=30.0)
                coordinator.join(timeout=120.0)
                rig.proxy.heal()
                link.wait_ready(60.0, latched_ok=True)
                for agent in task.agent_names:
                    link.command(agent, "reset", "bench: next trial")
            finally:
                link.close()
            out.append({"stop_s": stopped["t"] - cut, "silent_s": stopped["silent"],
                        "detected_s": lost.get("t", float("nan")) - cut})  # fmt: skip
            print(f"partition: Bob stopped {out[-1]['stop_s']:.3f} s after the cut "
                  f"(silent {out[-1]['silent_s']:.3f} s), the coordinator knew after "
                  f"{out[-1]['detected_s']:.3f} s", flush=True)  # fmt: skip
    return out


def _hostport(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--level", default="level1")
    parser.add_argument("--methods", nargs="+", default=["read_j", "read_s"])
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="episodes per method and side")
    args = parser.parse_args()
    task = find_team_task("sort_cubes")
    settings = EvalSettings(trials=1, seed=0, llm="standin")
    began = time.perf_counter()
    local: dict[str, list[dict[str, Any]]] = {name: [] for name in args.methods}
    bare: dict[str, list[dict[str, Any]]] = {name: [] for name in args.methods}
    remote: dict[str, list[dict[str, Any]]] = {name: [] for name in args.methods}
    with (
        Twin(SCENE) as twin,
        SortRig(twin, task) as arms,
        FleetRig(fleet="bench", through=None) as rig,
        open_bus([rig.endpoint]) as bus,
        TruthClient(*_hostport(rig.truth)) as truth,
    ):
        for repeat in range(args.repeats):  # interleaved: neither side gets the warm caches
            for name in args.methods:
                bare[name].append(in_process(NoArms(), task, args.level, name, settings))
                local[name].append(in_process(LocalArms(arms), task, args.level, name, settings))
                remote[name].append(across(rig, bus, truth, task, args.level, name, settings))
                here, there = local[name][-1]["decisions"], remote[name][-1]["decisions"]
                print(f"repeat {repeat + 1}, {name}: no arms {_ms(bare[name][-1]['decisions'])} "
                      f"ms, in process {_ms(here)} ms, across "
                      f"{_ms(there)} ms (median per step)", flush=True)  # fmt: skip
    with FleetRig(fleet="bench", through="Bob") as rig:
        cuts = partitions(rig, task, args.level, args.partitions, settings)
    table = Table(title=f"fleet: sort_cubes {args.level}, the stand-in; decision latency "
                  "(median ms per step, every step of every repeat)")  # fmt: skip
    for column in ("method", "steps", "no arms", "in process", "across processes", "ratio",
                   "Zenoh hop", "success"):  # fmt: skip
        table.add_column(column, justify="right")
    rows = {}
    for name in args.methods:
        a = [d for run in local[name] for d in run["decisions"]]
        b = [d for run in remote[name] for d in run["decisions"]]
        z = [d for run in bare[name] for d in run["decisions"]]
        ratio = statistics.median(b) / statistics.median(a) if a and b else float("nan")
        rows[name] = {"in_process": local[name], "across": remote[name], "no_arms": bare[name],
                      "median_no_arms_s": statistics.median(z) if z else None,
                      "median_in_process_s": statistics.median(a) if a else None,
                      "median_across_s": statistics.median(b) if b else None,
                      "ratio": ratio,
                      "median_hop_s": statistics.median(
                          [h for run in remote[name] for h in run["hops"]])}  # fmt: skip
        steps = f"{local[name][0]['steps']} / {remote[name][0]['steps']}"
        won = (f"{sum(r['success'] for r in local[name])} / "
               f"{sum(r['success'] for r in remote[name])} of {args.repeats}")  # fmt: skip
        hop = f"{rows[name]['median_hop_s'] * 1000:.2f}"
        table.add_row(name, steps, _ms(z), _ms(a), _ms(b), f"{ratio:.2f}", hop, won)
    console = Console()
    console.print(table)
    stops = [c["stop_s"] for c in cuts]
    if stops:
        console.print(f"partition (Bob cut mid-action, heartbeat timeout {rig.timeout} s, period "
                      f"{rig.period} s), {len(stops)} trials: stop {min(stops):.3f}-"
                      f"{max(stops):.3f} s after the cut (median "
                      f"{statistics.median(stops):.3f} s)")  # fmt: skip
    path = write_results("fleet", {
        "level": args.level, "llm": "standin", "methods": rows, "partitions": cuts,
        "heartbeat": {"period_s": 0.1, "timeout_s": 0.5},
        "seconds": round(time.perf_counter() - began, 1), "machine": environment(),
    })  # fmt: skip
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
