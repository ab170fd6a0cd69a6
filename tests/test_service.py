"""``onboard up``: missions run headless, the JSON-line log, sd_notify and the watchdog.

The example mission (engage, tidy, code) runs in process on the twin with the stand-ins; the
watchdog is watched through a real unix datagram socket, on the service's loop in process
and on a real ``onboard up`` process that is paused (SIGSTOP) and stopped (SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onboard import bundled
from onboard.cli.main import main
from onboard.loop.clock import WallClock
from onboard.service.notify import Notifier
from onboard.service.service import Watchdog

ROOT = Path(__file__).resolve().parent.parent
ONBOARD = Path(sys.executable).parent / "onboard"
EXAMPLE = bundled.skills_dir() / "missions" / "example.toml"
#: seconds systemd would wait for a ping in these tests (pings come every half of it)
WATCHDOG = 0.4


def _robot(folder: Path, arm: bool = True) -> Path:
    """The repository's robot, with the shipped skills and recordings in ``folder``."""
    text = (ROOT / "robot.toml").read_text(encoding="utf-8")
    text = text.replace('skills = "skills"', f'skills = "{bundled.skills_dir()}"', 1)
    text = text.replace('recordings = "recordings"', f'recordings = "{folder / "rec"}"', 1)
    if not arm:
        text = text.split("\n[drivers.arm]")[0]
    text += "\n[service]\nport = 0  # any free port: tests run side by side\n"
    path = folder / "robot.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(60)
    yield sock, path
    sock.close()


def _until(sock: socket.socket, wanted: str) -> list[str]:
    """Datagrams received up to and including the first that holds ``wanted``."""
    seen = []
    while True:
        seen.append(sock.recv(4096).decode())
        if wanted in seen[-1].splitlines():
            return seen


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _silent(sock: socket.socket) -> list[bytes]:
    """What arrives over five pings' worth of time, once the pings sent before the loop (or
    the process) stopped are read: nothing, if the pings came from what stopped."""
    sock.setblocking(False)
    try:
        while True:
            sock.recv(4096)
    except BlockingIOError:
        pass
    late = []
    sock.settimeout(WATCHDOG * 5)
    try:
        while True:
            late.append(sock.recv(4096))
    except TimeoutError:
        pass
    sock.settimeout(60)
    return late


def test_the_example_mission_runs_headless_on_the_twin_each_step_judged_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = _robot(tmp_path)
    args = ["--robot", str(robot), "up", "--once", "--llm", "standin", "--clock", "virtual"]
    assert main([*args, "--mission", str(EXAMPLE)]) == 0
    events = _events(capsys.readouterr().out)
    assert {"ts", "level", "event"} <= set(events[0])
    names = [e["event"] for e in events]
    assert names[:6] == ["arm_safe", "connected", "state", "operator", "ready", "mission_start"]
    assert names[-1] == "stopped"
    assert events[0]["arm"] == "sim" and events[0]["stopped"] is True  # before anything moves
    ends = [e for e in events if e["event"] == "step_end"]
    assert [(e["step"], e["skill"], e["verdict"]) for e in ends] == [
        ("greet", "engage", "success"),
        ("stack", "tidy", "success"),
        ("box", "code", "success"),
    ]
    for end in ends:  # each step recorded as onboard run records: a header, then an end
        records = [json.loads(x) for x in Path(end["recording"]).read_text().splitlines()]
        assert records[0]["kind"] == "header"
        assert "end" in [r["kind"] for r in records[-3:]], end["recording"]
        assert Path(end["recording"]).parent == tmp_path / "rec"
    assert events[-2] == {**events[-2], "event": "idle"}


def test_a_broken_mission_is_refused_by_check_and_up_check_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = _robot(tmp_path, arm=False)
    mission = tmp_path / "bad.toml"
    mission.write_text(
        '[[steps]]\nname = "a"\nskill = "engage"\ngoal = "wave"\n\n'
        '[[steps]]\nname = "b"\nskill = "tidy"\non_failure = { skip_to = "a" }\n',
        encoding="utf-8",
    )
    assert main(["--robot", str(robot), "up", "--check", "--mission", str(mission)]) == 2
    err = capsys.readouterr().err
    assert "on_failure skip_to 'a' names no later step" in err and f"{mission}:" in err
    mission.write_text(
        '[[steps]]\nname = "a"\nskill = "engage"\ngoal = "wave"\n\n'
        '[[steps]]\nname = "b"\nskill = "tidy"\n\n[[steps]]\nname = "c"\nskill = "dance"\n',
        encoding="utf-8",
    )
    assert main(["--robot", str(robot), "up", "--check", "--mission", str(mission)]) == 2
    err = capsys.readouterr().err
    assert f"{mission}:12: [steps[2].skill] no skill named 'dance' (skills here: code," in err
    assert f"{mission}:4: [steps[0].goal] engage is a person skill: it takes scenario" in err
    assert f"{mission}:8: [steps[1].skill] tidy is a scene skill: the step needs goal" in err
    # up holds a mission to what the robot drives: this one has no arm
    assert main(["--robot", str(robot), "up", "--check", "--mission", str(EXAMPLE)]) == 2
    err = capsys.readouterr().err
    assert f"{EXAMPLE}:12: [steps[1].skill] tidy is a scene skill: this robot has no " in err
    # in the robot's missions folder, onboard check finds it too
    missions = tmp_path / "skills" / "missions"
    missions.mkdir(parents=True)
    (missions / "bad.toml").write_text(mission.read_text(), encoding="utf-8")
    text = robot.read_text().replace(f'skills = "{bundled.skills_dir()}"', 'skills = "skills"')
    robot.write_text(text, encoding="utf-8")
    for name in ("engage.toml", "tidy.toml"):
        (tmp_path / "skills" / name).write_bytes((bundled.skills_dir() / name).read_bytes())
    assert main(["--robot", str(robot), "check"]) == 2
    assert "missions/bad.toml:4: [steps[0].goal]" in capsys.readouterr().err
    assert main(["--robot", str(robot), "up", "--check"]) == 2


def test_the_watchdog_pings_from_the_loop_so_a_blocked_loop_stops_them(
    notify_socket: tuple[socket.socket, str],
) -> None:
    sock, path = notify_socket
    clock = WallClock(workers=1)
    notifier = Notifier(path)
    watchdog = Watchdog(clock, notifier, WATCHDOG)
    release, blocked = threading.Event(), threading.Event()

    def block() -> None:  # a callback that hangs: the loop runs nothing else meanwhile
        blocked.set()
        release.wait(60)

    loop = threading.Thread(target=clock.run, args=(1e9,), daemon=True)
    watchdog.start()
    loop.start()
    try:
        assert _until(sock, "WATCHDOG=1") and _until(sock, "WATCHDOG=1")
        clock.post(block)
        assert blocked.wait(60)
        assert _silent(sock) == []
        release.set()
        assert _until(sock, "WATCHDOG=1")  # the loop runs again: so do the pings
    finally:
        release.set()
        clock.stop()
        loop.join(10)
        notifier.close()


def test_up_under_systemd_notify_says_ready_pings_stops_pinging_when_stopped_and_says_stopping(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    robot = _robot(tmp_path, arm=False)
    mission = tmp_path / "greet.toml"
    mission.write_text('[[steps]]\nname = "greet"\nskill = "engage"\n', encoding="utf-8")
    env = {**os.environ, "NOTIFY_SOCKET": path, "WATCHDOG_USEC": str(int(WATCHDOG * 1e6))}
    env.pop("WATCHDOG_PID", None)
    args = ["--robot", robot, "up", "--llm", "standin", "--clock", "virtual", "--mission", mission]
    process = subprocess.Popen(
        [str(ONBOARD), *map(str, args)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert "READY=1" in _until(sock, "READY=1")[-1]
        # the step stretches the watchdog to its timeout, then gives it back
        seen = _until(sock, f"WATCHDOG_USEC={int((600 + WATCHDOG) * 1e6)}")
        seen = _until(sock, f"WATCHDOG_USEC={int(WATCHDOG * 1e6)}")
        _until(sock, "WATCHDOG=1")
        _until(sock, "WATCHDOG=1")  # idle, the loop pings on
        os.kill(process.pid, signal.SIGSTOP)
        while _state(process.pid) != "T":  # the process is stopped (a state, not a time)
            time.sleep(0.01)
        assert _silent(sock) == []
        os.kill(process.pid, signal.SIGCONT)
        _until(sock, "WATCHDOG=1")
        process.send_signal(signal.SIGTERM)
        seen = _until(sock, "STOPPING=1")
        assert process.wait(60) == 143
        assert process.stdout is not None
        events = _events(process.stdout.read())
        end = next(e for e in events if e["event"] == "step_end")
        assert end["verdict"] == "success" and end["step"] == "greet"
        assert events[-1]["event"] == "stopped" and events[-1]["signal"] == "SIGTERM"
        assert seen
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGCONT)
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_a_failed_step_is_retried_then_skips_to_the_step_its_mission_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = _robot(tmp_path)
    mission = tmp_path / "skip.toml"
    mission.write_text(
        '[[steps]]\nname = "stack"\nskill = "tidy"\ngoal = "put the red block on the blue one"\n'
        'scene = "nowhere"\nretries = 1\non_failure = { skip_to = "greet" }\n\n'
        '[[steps]]\nname = "never"\nskill = "engage"\n\n'
        '[[steps]]\nname = "greet"\nskill = "engage"\n\n'
        '[[steps]]\nname = "again"\nskill = "tidy"\ngoal = "put the red block on the blue one"\n'
        'scene = "nowhere"\n\n'
        '[[steps]]\nname = "after"\nskill = "engage"\n',
        encoding="utf-8",
    )
    args = ["--robot", str(robot), "up", "--once", "--llm", "standin", "--clock", "virtual"]
    assert main([*args, "--mission", str(mission)]) == 1  # a step failed
    events = _events(capsys.readouterr().out)
    ends = [(e["step"], e["attempt"], e["verdict"]) for e in events if e["event"] == "step_end"]
    assert ends == [("stack", 1, "error"), ("stack", 2, "error"), ("greet", 1, "success"),
                    ("again", 1, "error")]  # fmt: skip
    error = next(e for e in events if e["event"] == "step_end")["error"]
    assert "nowhere" in error
    last = [e for e in events if e["event"] == "mission_end"][-1]
    assert last["result"] == "aborted" and last["at_step"] == "again"


def test_sigterm_during_a_step_stops_the_episode_closes_its_recording_and_exits_143(
    tmp_path: Path, notify_socket: tuple[socket.socket, str]
) -> None:
    sock, path = notify_socket
    robot = _robot(tmp_path, arm=False)
    mission = tmp_path / "greet.toml"
    mission.write_text('[[steps]]\nname = "greet"\nskill = "engage"\n', encoding="utf-8")
    env = {**os.environ, "NOTIFY_SOCKET": path}
    args = ["--robot", robot, "up", "--llm", "standin", "--clock", "wall", "--mission", mission]
    process = subprocess.Popen(
        [str(ONBOARD), *map(str, args)], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        _until(sock, "READY=1")
        for line in process.stdout:  # the wall-clock episode lasts tens of seconds
            if json.loads(line)["event"] == "step_start":
                break
        recordings = tmp_path / "rec"
        # the episode's runner has started (and with it the episode's own stop handler)
        while not any('"kind": "transition"' in p.read_text() for p in recordings.glob("*.jsonl")):
            time.sleep(0.01)
        process.send_signal(signal.SIGTERM)
        _until(sock, "STOPPING=1")
        assert process.wait(60) == 143
        events = [json.loads(x) for x in process.stdout.read().splitlines()]
        end = next(e for e in events if e["event"] == "step_end")
        assert end["exit_code"] == 143 and end["verdict"] != "success"
        assert events[-1]["event"] == "stopped" and events[-1]["signal"] == "SIGTERM"
        (recording,) = recordings.glob("*.jsonl")
        kinds = [json.loads(x)["kind"] for x in recording.read_text().splitlines()]
        assert kinds[0] == "header" and "end" in kinds[-3:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
