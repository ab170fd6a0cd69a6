"""A long run of ``onboard up`` and a stop during a motion, measured from outside the process.

**The soak** runs a mission that loops (``repeat = N``: one engage episode a round, the
stand-in LLM, the virtual clock) through one real ``onboard up --once`` process, with a
recordings quota small enough that the folder rotates. As each step's ``step_end`` log line
arrives, the process's resident memory, open file descriptors and threads are read from
``/proc`` (every ``every`` episodes), with the recordings folder's size. At the end the state
database is read: every episode judged once, every recording indexed, the ones the quota
deleted marked so.

**The stop** runs a tidy mission that loops on a G-code arm: Marlin's emulator on a pty in
front of the twin's arm moving in real time, the twin's camera served on loopback, the LLM as
robot.toml says (``"local"``: the service starts SmolLM2's server). Once the arm is moving
under a step (a ``G0``/``G1`` line the step sent, the arm's state moving), SIGTERM; then how
long the process took to exit, what the board received after its last motion line (a stop:
``M410``), whether the arm stopped, and whether the LLM server the service started is gone.

``bench/soak.py`` runs both at full length; tests/test_soak.py a short version.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

__all__ = ["Sample", "Soak", "Stop", "folder_bytes", "run_soak", "stop_during_motion"]

SOAK_MISSION = """\
name = "soak"
repeat = {episodes}

[[steps]]
name = "greet"
skill = "engage"
scenario = "person-object"
timeout = 120
"""

STOP_MISSION = """\
name = "tidy-loop"
repeat = "forever"

[[steps]]
name = "stack"
skill = "tidy"
goal = "put the red block on the blue block"
on_failure = "continue"
"""

#: seconds any one wait of the harness may last before it fails (a guard, not a timing)
BOUND = 600.0


@dataclass(frozen=True)
class Sample:
    episode: int
    rss_kb: int
    fds: int
    threads: int
    folder_bytes: int


@dataclass
class Soak:
    episodes: int
    quota_bytes: int
    samples: list[Sample] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    rotated: int = 0  # recordings the log said the quota deleted
    exit_code: int | None = None
    seconds: float = 0.0
    #: from the state database at the end
    judged: int = 0
    indexed: int = 0
    deleted: int = 0
    files: int = 0  # episode recordings in the folder at the end
    largest_episode: int = 0  # bytes of the largest recording in the folder at the end

    def after(self, warmup: int) -> list[Sample]:
        return [s for s in self.samples if s.episode >= warmup]

    def rss_growth_per_100(self, warmup: int) -> float:
        """MB per 100 episodes after ``warmup``: the least-squares slope of RSS on episode."""
        kept = self.after(warmup)
        if len(kept) < 2:
            return float("nan")
        xs = [s.episode for s in kept]
        ys = [s.rss_kb / 1024 for s in kept]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mx) ** 2 for x in xs
        )
        return slope * 100

    def growth(self, key: str, warmup: int) -> int:
        """How much ``key`` (fds, threads) grew after ``warmup``: the least of the last three
        samples less the least of the first three. A leak accumulates; a descriptor or a
        thread that happened to be open at one reading (an episode's stand-in server
        starting) does not count."""
        values = [getattr(s, key) for s in self.after(warmup)]
        return min(values[-3:]) - min(values[:3]) if values else 0

    def spread(self, key: str, warmup: int) -> tuple[int, int]:
        values = [getattr(s, key) for s in self.after(warmup)]
        return (min(values), max(values)) if values else (0, 0)


def proc_sample(pid: int, episode: int, folder: Path) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    rss = int(fields["VmRSS"].split()[0])
    threads = int(fields["Threads"])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return Sample(episode, rss, fds, threads, folder_bytes(folder))


def folder_bytes(folder: Path) -> int:
    """What the quota counts: episode recordings (``*.jsonl``, ``*.mcap``) and their images."""
    total = 0
    for entry in folder.rglob("*"):
        if (
            entry.is_file()
            and entry.name != "candidates.jsonl"
            and "state.sqlite" not in entry.name
        ):
            total += entry.stat().st_size
    return total


def soak_robot(template: Path, folder: Path, quota_mb: float) -> Path:
    """:func:`~onboard.testing.crash.robot_file` (onboard's skills, the recordings in
    ``folder/rec``, the control API on any free port) under a recordings quota of
    ``quota_mb``."""
    from onboard.testing.crash import robot_file

    path = robot_file(template, folder)
    text = path.read_text(encoding="utf-8")
    key = f'recordings = "{folder / "rec"}"'
    text = text.replace(key, f"{key}\nrecordings_max_mb = {quota_mb}", 1)
    path.write_text(text, encoding="utf-8")
    return path


def run_soak(onboard: Path, robot: Path, folder: Path, episodes: int, every: int) -> Soak:
    """``episodes`` rounds of :data:`SOAK_MISSION` through one ``onboard up --once``,
    sampled every ``every`` episodes (and after the first)."""
    from onboard.config import load_robot

    config = load_robot(robot)
    mission = folder / "soak.toml"
    mission.write_text(SOAK_MISSION.format(episodes=episodes), encoding="utf-8")
    soak = Soak(episodes, int(config.recordings_max_mb * 1e6))
    command = [str(onboard), "--robot", str(robot), "up", "--once", "--llm", "standin",
               "--clock", "virtual", "--mission", str(mission)]  # fmt: skip
    began = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True) as process:  # fmt: skip
        assert process.stdout is not None
        done = 0
        for line in process.stdout:
            event = json.loads(line)
            if event["event"] == "recordings_rotated":
                soak.rotated += event["count"]
            if event["event"] != "step_end":
                continue
            done += 1
            verdict = event["verdict"]
            soak.verdicts[verdict] = soak.verdicts.get(verdict, 0) + 1
            if done == 1 or done % every == 0:
                soak.samples.append(proc_sample(process.pid, done, config.recordings_dir))
        soak.exit_code = process.wait(BOUND)
    soak.seconds = time.monotonic() - began
    with sqlite3.connect(config.recordings_dir / "state.sqlite") as db:
        soak.judged = db.execute("SELECT count(*) FROM attempts WHERE status = 'finished'")\
            .fetchone()[0]  # fmt: skip
        soak.indexed = db.execute("SELECT count(*) FROM recordings").fetchone()[0]
        soak.deleted = db.execute(
            "SELECT count(*) FROM recordings WHERE deleted IS NOT NULL"
        ).fetchone()[0]
    files = list(config.recordings_dir.glob("*.jsonl"))
    soak.files = len(files)
    soak.largest_episode = max((p.stat().st_size for p in files), default=0)
    return soak


@dataclass
class Stop:
    llm: str
    exit_code: int | None = None
    seconds_to_exit: float = float("nan")
    #: what the board received after the last motion line, in order
    after_last_motion: list[str] = field(default_factory=list)
    arm_moving_after: bool | None = None
    llm_pid: int | None = None
    llm_gone: bool | None = None
    episodes_before: int = 0  # steps judged before the one the signal stopped
    #: the service's log from the signal on, and the signal's time (time.time())
    log_after: list[dict[str, Any]] = field(default_factory=list)
    signalled: float = 0.0

    def seconds_to(self, event: str) -> float:
        """From the signal to the service's first ``event`` log line after it."""
        for e in self.log_after:
            if e.get("event") == event:
                when = datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()
                return when - self.signalled
        return float("nan")

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 128 + signal.SIGTERM
            and self.seconds_to_exit < 2.0
            and "M410" in self.after_last_motion
            and self.arm_moving_after is False
            and self.llm_gone is not False
        )


@contextmanager
def served_twin() -> Iterator[tuple[Any, Any, tuple[str, int]]]:
    """The twin (the blocks scene) with its arm moving in real time behind Marlin's emulator
    on a pty, and its camera served on loopback: (backend arm, emulator, camera address)."""
    from onboard.drivers.arm.config import SimArmConfig
    from onboard.drivers.arm.twin_arm import SimArm
    from onboard.drivers.emulators.camera_server import CameraServer
    from onboard.drivers.emulators.marlin_pty import MarlinEmulator
    from onboard.drivers.twin import SCENES
    from onboard.drivers.twin.world import Twin

    with Twin(SCENES / "blocks.toml") as twin:
        backend = SimArm(twin, SimArmConfig(realtime=True))
        backend.connect()
        try:
            with (
                MarlinEmulator(backend, emergency_parser=True) as emulator,
                CameraServer(twin, "127.0.0.1", 0) as camera,
            ):
                yield backend, emulator, camera.address
        finally:
            backend.close()


def stop_robot(template: Path, folder: Path, pty: str, camera: tuple[str, int], llm: str) -> Path:
    """robot.toml for :func:`stop_during_motion`: Marlin on ``pty``, the served camera, the
    template's hand-eye calibration, robot.toml's LLM as ``llm`` ("local" or a URL; for
    "standin" the template's, which ``--llm standin`` replaces)."""
    from onboard import bundled
    from onboard.config import load_robot

    config = load_robot(template)
    hand_eye = config.hand_eye
    assert hand_eye is not None
    url = config.llm.base_url if llm == "standin" else llm
    text = f"""\
name = "stop-during-motion"
skills = "{bundled.skills_dir()}"
recordings = "{folder / "rec"}"
[llm]
base_url = "{url}"
[drivers.arm]
kind = "gcode"
url = "{pty}"
grip_settle = 0.0
[drivers.camera]
kind = "sim-serve"
host = "{camera[0]}"
port = {camera[1]}
[hand_eye]
translation = {list(hand_eye.translation)}
quaternion_xyzw = {list(hand_eye.quaternion_xyzw or ())}
[service]
port = 0
"""
    path = folder / "robot.toml"
    path.write_text(text, encoding="utf-8")
    return path


def stop_during_motion(onboard: Path, template: Path, folder: Path, llm: str) -> Stop:
    """SIGTERM to ``onboard up`` while a tidy step moves the served twin's arm; ``llm``:
    "local" (robot.toml's, the service starts the server) or "standin"."""
    stop = Stop(llm)
    mission = folder / "tidy-loop.toml"
    mission.write_text(STOP_MISSION, encoding="utf-8")
    with served_twin() as (backend, emulator, camera):
        robot = stop_robot(template, folder, emulator.path, camera, llm)
        standin = ["--llm", "standin"] if llm == "standin" else []
        command = [str(onboard), "--robot", str(robot), "up", "--clock", "virtual",
                   "--mission", str(mission), *standin]  # fmt: skip
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) as process:  # fmt: skip
            try:
                assert process.stdout is not None
                events = _EventReader(process.stdout, process)
                events.wait("ready")
                stop.llm_pid = events.pid_of_llm()
                _wait_for_a_motion(backend, emulator, events)
                stop.episodes_before = events.count("step_end")
                seen = len(events.events)
                began = time.monotonic()
                stop.signalled = time.time()
                process.send_signal(signal.SIGTERM)
                stop.exit_code = process.wait(BOUND)
                stop.seconds_to_exit = time.monotonic() - began
                events.join()
                stop.log_after = events.events[seen:]
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        emulator.worker.wait_idle(BOUND)
        stop.arm_moving_after = backend.state().moving
        lines = list(emulator.received)
        last = max((i for i, line in enumerate(lines) if _is_motion(line)), default=-1)
        stop.after_last_motion = [line.strip() for line in lines[last + 1 :]]
    if stop.llm_pid is not None:
        stop.llm_gone = not _alive(stop.llm_pid)
    return stop


def _is_motion(line: str) -> bool:
    words = line.split(";")[0].split()
    # a line numbered by the host: "N12 G1 X.. *71"
    if words and words[0].startswith("N"):
        words = words[1:]
    return bool(words) and words[0] in ("G0", "G1", "G2", "G3", "G28")


def _wait_for_a_motion(backend: Any, emulator: Any, events: _EventReader) -> None:
    """Until the arm moves under a step: a motion line the board received since the latest
    step_start was read, and the arm's state moving (checked each time the board begins a
    motion, or every 50 ms)."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if events.ended:
            raise RuntimeError("onboard up ended before a step moved the arm")
        since = events.lines_since_step_start(emulator.lines_received)
        if since and backend.state().moving:
            tail = list(emulator.received)[-since:]
            if any(_is_motion(line) for line in tail):
                return
        emulator.worker.wait_started(emulator.worker.started + 1, 0.05)
    raise TimeoutError(f"no motion under a step within {BOUND:.0f} s")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:  # a zombie has exited; only its parent's wait is missing
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class _EventReader:
    """The service's JSON log, read on a thread; waits by event name."""

    def __init__(self, stream: IO[str], process: subprocess.Popen[str]) -> None:
        self.events: list[dict[str, Any]] = []
        self.process = process
        self.ended = False
        self._cond = threading.Condition()
        self._received_at_start: int | None = None
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                if event.get("event") == "step_start":
                    self._received_at_start = None  # taken at the next look
                self._cond.notify_all()
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def wait(self, name: str) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self.ended or any(e.get("event") == name for e in self.events), BOUND
            )
            found = [e for e in self.events if e.get("event") == name]
        if found:
            return found[0]
        if not ok:
            raise TimeoutError(f"no {name} event within {BOUND:.0f} s")
        self.process.wait(BOUND)
        said = self.process.stderr.read().strip() if self.process.stderr else ""
        raise RuntimeError(f"onboard up ended ({self.process.returncode}) before {name}: {said}")

    def join(self) -> None:
        self._thread.join(BOUND)

    def pid_of_llm(self) -> int | None:
        with self._cond:
            found = [e for e in self.events if e.get("event") == "llm_server_ready"]
        return int(found[-1]["pid"]) if found and found[-1].get("pid") else None

    def count(self, name: str) -> int:
        with self._cond:
            return sum(1 for e in self.events if e.get("event") == name)

    def lines_since_step_start(self, received: int) -> int:
        """Lines the board received (``received`` in all) since the running step's
        step_start was read; 0 between steps. The count at the start is taken when first
        asked after it, so it never holds a line sent before the step."""
        with self._cond:
            starts = sum(1 for e in self.events if e.get("event") == "step_start")
            ends = sum(1 for e in self.events if e.get("event") == "step_end")
            if starts <= ends:
                return 0
            if self._received_at_start is None:
                self._received_at_start = received
            return min(received - self._received_at_start, 1000)
