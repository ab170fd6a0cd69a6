"""``onboard up``'s state in SQLite: what survives a kill -9, a stop and a damaged file.

The kill test runs real ``onboard up`` processes killed with SIGKILL after a log line drawn
from a seeded RNG (onboard.testing.crash; ``bench/restart.py`` runs 50 and more); the others
run ``onboard up`` in process against a state file left as a crash or a stop leaves it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from onboard.cli.main import main
from onboard.config import load_robot
from onboard.service.mission import load_mission
from onboard.service.store import Store, state_path
from onboard.testing.crash import robot_file, run_trial

ROOT = Path(__file__).resolve().parent.parent
ONBOARD = Path(sys.executable).parent / "onboard"
UP = ["up", "--once", "--llm", "standin", "--clock", "virtual"]


def _events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _greet(folder: Path, on_interrupt: str = "resume") -> Path:
    mission = folder / "greet.toml"
    mission.write_text(
        f'on_interrupt = "{on_interrupt}"\n\n[[steps]]\nname = "hello"\nskill = "engage"\n\n'
        '[[steps]]\nname = "bye"\nskill = "engage"\n',
        encoding="utf-8",
    )
    return mission


def _crashed_in_step(robot: Path, mission: Path) -> Path:
    """The state file as a kill -9 during the mission's first step leaves it: the attempt
    committed as running, its recording begun, no verdict, the start never stopped."""
    config = load_robot(robot)
    config.recordings_dir.mkdir()
    store = Store(state_path(config))
    store.recover()
    (run,) = store.enqueue([load_mission(mission)[0]])
    store.begin(run)
    recording = config.recordings_dir / "greet-hello-1-20260101-000000.jsonl"
    store.step_started(run, 0, 1, recording)
    recording.write_text('{"kind": "header"}\n', encoding="utf-8")
    store.close()
    return recording


@pytest.mark.parametrize(("on_interrupt", "seed", "kills"), [("resume", 7, 2), ("abort", 13, 1)])
def test_kill_9_at_random_log_lines_loses_and_doubles_nothing(
    tmp_path: Path, on_interrupt: str, seed: int, kills: int
) -> None:
    robot = robot_file(ROOT / "robot.toml", tmp_path)
    trial = run_trial(ONBOARD, robot, tmp_path, seed, kills, on_interrupt)
    assert trial.ok, trial.summary()
    # the seeds' kills come after a step_start line: in the tidy step on the twin's arm, and
    # (resume) again in the start that runs it once more
    assert trial.kill_points == ["start 2", "start 1"][:kills] and trial.starts == kills + 1
    assert trial.interrupted == trial.running_at_kill  # every attempt a kill cut short
    if on_interrupt == "resume":
        assert trial.mission == "done" and trial.judged == {"greet": 1, "stack": 1,
                                                            "broken": 2, "bye": 1}  # fmt: skip


def test_a_step_a_crash_cut_short_is_interrupted_and_run_again_as_its_mission_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = robot_file(ROOT / "robot.toml", tmp_path)
    mission = _greet(tmp_path)
    recording = _crashed_in_step(robot, mission)
    assert main(["--robot", str(robot), *UP, "--mission", str(mission)]) == 0
    events = _events(capsys.readouterr().out)
    names = [e["event"] for e in events]
    # the arm is made safe before anything else, then the state is read
    assert names[:3] == ["arm_safe", "connected", "state"] and events[2]["after_crash"]
    interrupted = events[3]
    assert interrupted["event"] == "step_interrupted" and interrupted["step"] == "hello"
    assert interrupted["recording"] == str(recording) and interrupted["then"] == "resume"
    ready = names.index("ready")
    assert names[ready - 1] == "operator"  # the control API and e-stop inputs, then ready
    assert events[ready]["resumed"] == ["greet"]
    start = events[ready + 1]
    assert start["event"] == "mission_start" and (start["at_step"], start["attempt"]) == (
        "hello",
        2,
    )
    ends = [(e["step"], e["attempt"], e["verdict"]) for e in events if e["event"] == "step_end"]
    assert ends == [("hello", 2, "success"), ("bye", 1, "success")]
    store = Store(state_path(load_robot(robot)))
    rows = [(a.step, a.attempt, a.status, a.verdict) for a in store.attempts()]
    assert rows == [("hello", 1, "interrupted", "interrupted"), ("hello", 2, "finished", "success"),
                    ("bye", 1, "finished", "success")]  # fmt: skip
    assert [m["status"] for m in store.missions()] == ["done"]
    files = sorted(str(p) for p in load_robot(robot).recordings_dir.glob("*.jsonl"))
    assert sorted(store.recordings()) == files and len(files) == 3
    store.close()
    assert main(["--robot", str(robot), "up", "--status"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1:3] == [
        "run 1: greet done",
        f"  hello #1: interrupted, interrupted  {recording.name}",
    ]
    assert shown[3].startswith("  hello #2: finished, success  greet-1-hello-2-")
    # a start after a clean stop queues the mission files again
    assert main(["--robot", str(robot), *UP, "--mission", str(mission)]) == 0
    events = _events(capsys.readouterr().out)
    assert events[2]["after_crash"] is False
    assert [e["attempt"] for e in events if e["event"] == "step_end"] == [1, 1]


def test_on_interrupt_abort_ends_the_mission_and_a_crash_after_the_queue_ran_empty_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = robot_file(ROOT / "robot.toml", tmp_path)
    robot.write_text(robot.read_text().split("\n[drivers.arm]")[0], encoding="utf-8")
    mission = _greet(tmp_path, "abort")
    _crashed_in_step(robot, mission)
    assert main(["--robot", str(robot), *UP, "--mission", str(mission)]) == 0
    events = _events(capsys.readouterr().out)
    assert [e["event"] for e in events] == ["connected", "state", "step_interrupted",
                                            "mission_end", "operator", "ready", "idle",
                                            "stopped"]  # fmt: skip
    assert events[3]["result"] == "aborted" and events[3]["at_step"] == "hello"
    # killed once the queue had run empty (the start never stopped): nothing is run twice
    database = state_path(load_robot(robot))
    with sqlite3.connect(database) as db:
        db.execute("UPDATE starts SET stopped = NULL")
    assert main(["--robot", str(robot), *UP, "--mission", str(mission)]) == 0
    events = _events(capsys.readouterr().out)
    assert events[1]["after_crash"] and "mission_start" not in [e["event"] for e in events]


def test_a_damaged_state_file_or_on_interrupt_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = robot_file(ROOT / "robot.toml", tmp_path)
    mission = _greet(tmp_path)
    database = state_path(load_robot(robot))
    database.parent.mkdir()
    database.write_bytes(b"not a database, " * 512)
    for command in (["up", "--check"], UP):
        assert main(["--robot", str(robot), *command, "--mission", str(mission)]) == 2
        out, err = capsys.readouterr()
        assert err.count("\n") == 1 and err.startswith(f"onboard: error: {database}: ")
        assert "move it aside" in err
    assert _events(out)[0]["event"] == "arm_safe"  # up made the arm safe before it failed
    # robot.toml may put the file elsewhere; a folder that does not exist is not made
    text = robot.read_text().replace(
        'recordings = "', 'state = "/nowhere/s.sqlite"\nrecordings = "'
    )
    robot.write_text(text, encoding="utf-8")
    assert main(["--robot", str(robot), "up", "--check", "--mission", str(mission)]) == 2
    assert "/nowhere/s.sqlite: " in capsys.readouterr().err
    mission.write_text(mission.read_text().replace('"resume"', '"later"'), encoding="utf-8")
    assert main(["--robot", str(robot), "up", "--check", "--mission", str(mission)]) == 2
    assert f"{mission}:1: [on_interrupt] Input should be 'resume' or 'abort'" in (
        capsys.readouterr().err
    )


def test_up_first_stops_the_motion_a_killed_host_left_going_on_a_marlin_board(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A board with its own planner (Marlin, native USB: no reset when the port opens) goes on
    with the move a host queued before it died, inside the M400 after it; the next ``onboard
    up`` stops it first, and its handshake is in step."""
    from arm_harness import BOUND, require

    from onboard.drivers.arm.config import SimArmConfig
    from onboard.drivers.arm.twin_arm import SimArm
    from onboard.drivers.emulators.marlin_pty import MarlinEmulator
    from onboard.drivers.twin import SCENES
    from onboard.drivers.twin.world import Twin

    with Twin(SCENES / "blocks.toml") as twin:
        backend = SimArm(twin, SimArmConfig(realtime=True))  # motions take their real time
        backend.connect()
        with MarlinEmulator(backend, auto_reset=False) as emulator:
            start = backend.state().pose
            port = os.open(emulator.path, os.O_RDWR | os.O_NOCTTY)
            # 120 mm at 2 mm/s, a minute; then M400, as the driver sends after a move: the
            # board's command queue waits inside it for the move's end
            os.write(port, b"G91\nG1 Y120 F120\nM400\n")
            require(emulator.worker.wait_started(1, BOUND), "the board began the move")
            os.close(port)  # the host is gone (kill -9 closes its port); the move goes on
            robot = robot_file(ROOT / "robot.toml", tmp_path)
            text = robot.read_text().split("\n[drivers.arm]")[0]
            arm = f'[drivers.arm]\nkind = "gcode"\nurl = "{emulator.path}"\nboot_timeout = 0.0\n'
            robot.write_text(f"{text}\n{arm}", encoding="utf-8")
            mission = _greet(tmp_path)
            assert main(["--robot", str(robot), *UP, "--mission", str(mission)]) == 0
            events = _events(capsys.readouterr().out)
            assert events[0]["event"] == "arm_safe" and events[0]["arm"] == "gcode"
            assert "M410" in " ".join(emulator.received)
            require(emulator.worker.wait_idle(BOUND), "the board's planner is empty")
            assert not backend.state().moving
            assert backend.state().pose.y - start.y < 0.06  # stopped long before its end
        backend.close()
