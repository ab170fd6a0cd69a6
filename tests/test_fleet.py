"""A fleet over Zenoh (docs/fleet.md), in separate processes on loopback, scouting off, explicit
endpoints: the world (the twin's three arms, each behind its own JAKA controller), three
controllers, each an ``onboard up`` process with a ``[fleet]`` table, and the coordinator
(``onboard fleet run``, in this process). Bob's controller reaches the coordinator through a
TCP proxy the test owns; Alice's serves the control API.

- Sort Cubes by ReAd-J and ReAd-S (the critic) succeeds over the fleet as in one process:
  the same joint actions, step by step, and every cube on its target in physics;
- a partition (the proxy cut while Bob's arm runs an action): Bob's controller stops its arm
  within its heartbeat timeout, the coordinator names Bob lost, the others are stopped (the
  task file's ``on_lost = "stop"``);
- the rejoin: with the link back, Bob is heard again but latched, a run is refused naming
  it; ``onboard fleet reset`` clears the latches and the next episode succeeds;
- ``on_lost = "continue"``: Bob lost, the others go on acting, the episode ends failed;
- the e-stop of Alice's service stops her arm, latched: a run is refused naming it, and so
  is a reset until the e-stop is reset;
- a garbled payload or another version is one logged line; the controller reads on.

Each test starts from a healed link and unlatched arms (any order: ``make stress``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from onboard.cli.main import main
from onboard.fleet.bus import open_bus
from onboard.fleet.wire import Action, encode, key
from onboard.loop.recorder import read_recording
from onboard.testing.fleet_rig import FleetRig

pytest.importorskip("zenoh")

LEVEL = "level1"
CONTROL = {"X-Onboard": "1"}  # the control API's header for a POST


@pytest.fixture(scope="module")
def rig() -> Iterator[FleetRig]:
    with FleetRig(fleet="test", through="Bob") as fleet:
        yield fleet


def test_a_bad_message_is_one_logged_line_and_the_controller_reads_on(rig: FleetRig) -> None:
    with open_bus([rig.endpoint]) as bus:
        action = key(rig.fleet, "Alice", "action")
        heartbeat = key(rig.fleet, "coordinator", "heartbeat")
        # the controller may not be connected yet: the guard is the wait, the put repeats
        for data, where, line in (
            (b"\x00garbled{", action, f"{action}: payload: Invalid JSON"),
            (b'{"v": 2, "sender": "coordinator", "sent": 0, "seq": 0, "period": 0.1}',
             heartbeat, f"{heartbeat}: payload version 2, this reader reads v1"),
        ):  # fmt: skip
            event = None
            for _ in range(100):
                bus.put(where, data)
                try:
                    event = rig.wait_event("Alice", "bad_payload", timeout=0.2)
                    break
                except AssertionError:
                    continue
            assert event is not None and event["error"].startswith(line)
        reset = Action(sender="coordinator", sent=time.time(), id=1, command="reset")
        bus.put(action, encode(reset))
        assert rig.wait_event("Alice", "result", lambda e: e["id"] == 1)["ok"]


def ready(rig: FleetRig, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever an earlier test left (in any order): the link healed, Alice's e-stop reset,
    every arm unlatched (a reset: gripper opened, arm homed; harmless on an arm that was not
    stopped)."""
    rig.proxy.heal()
    httpx.post(f"{rig.api_url}/api/reset", headers=CONTROL)  # Alice's service's e-stop
    code = main(["fleet", "reset", "Alice", "Bob", "Chad", *rig.args()])
    assert code == 0, capsys.readouterr()
    capsys.readouterr()
    for agent in ("Alice", "Bob", "Chad"):
        rig.drain(agent)


def joints(path: Path) -> list[dict[str, str]]:
    return [dict(r["joint"]) for r in read_recording(path) if r["kind"] == "env_step"]


def fleet_run(
    rig: FleetRig, method: str, record: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict]:
    code = main(["fleet", "run", "sort_cubes", "--level", LEVEL, "--method", method,
                 "--truth", rig.truth, "--record", str(record), "--json", *rig.args()])  # fmt: skip
    out = capsys.readouterr().out.strip().splitlines()
    return code, json.loads(out[-1])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("method", ["read_j", "read_s"])
def test_sort_over_the_fleet_as_in_one_process(
    rig: FleetRig, method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready(rig, capsys)
    one = tmp_path / "one.jsonl"
    assert main(["task", "run", "sort_cubes", "--level", LEVEL, "--method", method,
                 "--record", str(one)]) == 0  # fmt: skip
    capsys.readouterr()
    code, figures = fleet_run(rig, method, tmp_path / "fleet.jsonl", capsys)
    assert code == 0, figures
    assert figures["success"] and figures["on_target"]
    assert figures["physics"] == {"blue_square": "panel2", "pink_polygon": "panel4",
                                  "yellow_trapezoid": "panel6"}  # fmt: skip
    assert joints(tmp_path / "fleet.jsonl") == joints(one)
    # each arm ran its own actions, and only those: its controller's log against the steps
    steps = [r for r in read_recording(tmp_path / "fleet.jsonl") if r["kind"] == "env_step"]
    for agent in ("Alice", "Bob", "Chad"):
        ran = [s["joint"][agent] for s in steps
               if s["joint"].get(agent, "WAIT") != "WAIT" and not s["feedback"][agent]]  # fmt: skip
        acted = [e["action"] for e in rig.drain(agent) if e["event"] == "action"]
        assert acted == ran, agent


@pytest.mark.timeout(400)
def test_a_partition_stops_the_arms_then_a_rejoin_is_reset(
    rig: FleetRig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ready(rig, capsys)
    ended: dict[str, int] = {}

    def coordinate() -> None:
        ended["code"] = main(["fleet", "run", "sort_cubes", "--level", LEVEL, "--method",
                              "read_s", "--truth", rig.truth, "--json", *rig.args()])  # fmt: skip

    coordinator = threading.Thread(target=coordinate)
    coordinator.start()
    try:
        rig.wait_event("Bob", "action", timeout=120.0)  # Bob's arm is running an action
        cut = rig.proxy.cut()
        stopped = rig.wait_event("Bob", "stopped", timeout=30.0)
    finally:
        coordinator.join(timeout=120.0)
    assert "coordinator heartbeat lost" in stopped["reason"]
    # within its timeout: the watchdog looks every half period; the guard is generous
    assert rig.timeout < stopped["silent"] < 2 * rig.timeout
    assert stopped["t"] > cut
    assert ended["code"] == 4  # incomplete: the episode ended without a verdict
    captured = capsys.readouterr()
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report["lost"] == "Bob" and sorted(report["stopped"]) == ["Alice", "Chad"]
    assert "Bob lost at step" in captured.err and "on_lost = stop" in captured.err
    for agent in ("Alice", "Chad"):  # the task file says stop: the others stopped, latched
        event = rig.wait_event(agent, "stopped", timeout=30.0)
        assert "stopped by the coordinator: Bob lost" in event["reason"]
    # the rejoin: the link back, Bob is heard again, latched; a run is refused until a reset
    rig.proxy.heal()
    code = main(["fleet", "run", "sort_cubes", "--level", LEVEL, "--method", "read_j",
                 "--truth", rig.truth, *rig.args()])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 4
    assert "stopped and latched: Alice: stopped by the coordinator: Bob lost" in err
    assert "Bob: coordinator heartbeat lost" in err
    assert main(["fleet", "reset", "Alice", "Bob", "Chad", *rig.args()]) == 0
    assert capsys.readouterr().out.splitlines() == ["Alice: reset", "Bob: reset", "Chad: reset"]
    code, figures = fleet_run(rig, "read_j", tmp_path / "again.jsonl", capsys)
    assert code == 0 and figures["on_target"], figures


@pytest.mark.timeout(300)
def test_on_lost_continue_lets_the_others_go_on(
    rig: FleetRig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = Path(__file__).resolve().parent.parent / "tasks" / "sort_cubes.toml"
    task = tmp_path / "sort_cubes.toml"
    task.write_text(shipped.read_text() + '\n[fleet]\non_lost = "continue"\n')
    ended: dict[str, int] = {}

    def coordinate() -> None:
        ended["code"] = main(["fleet", "run", str(task), "--level", LEVEL, "--method", "read_j",
                              "--truth", rig.truth, "--json", *rig.args()])  # fmt: skip

    ready(rig, capsys)
    coordinator = threading.Thread(target=coordinate)
    coordinator.start()
    try:
        rig.wait_event("Bob", "action", timeout=120.0)
        rig.proxy.cut()
        stopped = rig.wait_event("Bob", "stopped", timeout=30.0)
    finally:
        coordinator.join(timeout=240.0)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(report["lost"]) == ["Bob"]
    assert ended["code"] == 1 and not report["success"]  # Bob's panels are his alone
    assert report["steps"] > report["lost_at"]["Bob"]  # the episode went on
    later = []
    for agent in ("Alice", "Chad"):  # not stopped: they went on acting after Bob was lost
        events = rig.drain(agent)
        assert not [e for e in events if e["event"] == "stopped"], agent
        later += [e for e in events if e["event"] == "result" and e["t"] > stopped["t"]]
    # they acted; an action may fail in physics (Bob's arm stopped where it was, maybe over
    # a shared panel, holding a cube): its controller says so in one line, nothing believed
    assert later
    assert all(e["ok"] or e["error"].startswith(e["agent"] + ": PICK ") for e in later)
    assert all("\n" not in e["error"] for e in later)
    rig.proxy.heal()
    assert main(["fleet", "reset", "Bob", *rig.args()]) == 0


@pytest.mark.timeout(200)
def test_the_service_estop_latches_a_member_until_it_is_reset(
    rig: FleetRig, capsys: pytest.CaptureFixture[str]
) -> None:
    ready(rig, capsys)
    assert httpx.post(f"{rig.api_url}/api/estop", headers=CONTROL).json()["engaged"]
    stopped = rig.wait_event("Alice", "stopped", timeout=30.0)
    assert stopped["reason"] == "e-stop: api"
    code = main(["fleet", "run", "sort_cubes", "--level", LEVEL, "--method", "read_j",
                 "--truth", rig.truth, *rig.args()])  # fmt: skip
    assert code == 4
    assert "stopped and latched: Alice: e-stop: api" in capsys.readouterr().err
    # the coordinator cannot undo the e-stop: a reset is refused while it is engaged
    assert main(["fleet", "reset", "Alice", *rig.args()]) == 4
    assert "the e-stop is engaged" in capsys.readouterr().out
    assert httpx.post(f"{rig.api_url}/api/reset", headers=CONTROL).json()["reset"]
    assert main(["fleet", "reset", "Alice", *rig.args()]) == 0
    assert capsys.readouterr().out.splitlines() == ["Alice: reset"]
