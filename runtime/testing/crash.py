"""Kill ``onboard up`` with SIGKILL at random points and check what its state database kept.

One **trial** runs a mission through real ``onboard up --once`` processes (the stand-in LLM,
the virtual clock), killing each of the first ``kills`` starts after its N-th JSON log line,
or (one kill in two, to land inside steps more often) after its N-th ``step_start`` line (N
and the choice drawn from a seeded RNG: a point chosen by the log's events, never by time),
then lets the last start finish. Right after each kill the database is read as the kill left it (the
attempts still ``running``); at the end it is held to what the logs and the recordings
folder say:

- **interrupted**: every attempt left ``running`` by a kill is ``interrupted`` (and each
  ``step_interrupted`` line a start printed names one), none ``finished``; nothing else was
  interrupted;
- **lost**: a step the log started or judged with no row, a recording file with no index
  row, an index row with no file, a mission neither done nor aborted;
- **duplicated**: a mission queued twice, a step judged more often than its mission allows,
  an attempt started twice, a recording indexed twice.

A kill can come after a start had ended cleanly (``--once``: its queue done, its stop
committed, the process about to exit); the next start then queues the mission afresh, as
any start after a clean stop does. The check expects one mission run per such start, and
holds each run to the rules above.

``bench/restart.py`` runs many trials and tabulates them; tests/test_service_state.py a few.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MISSION", "Trial", "mission_text", "robot_file", "run_trial"]

#: the trial's mission: two quick person steps around a scene step on the twin's arm, and a
#: step that cannot start (a scene that does not exist: verdict "error"), retried once, then
#: passed over. Steps judged in a finished run: greet 1, stack 1, broken 2, bye 1.
MISSION = """\
name = "crash"
on_interrupt = "{on_interrupt}"

[[steps]]
name = "greet"
skill = "engage"

[[steps]]
name = "stack"
skill = "tidy"
goal = "put the red block on the blue block"

[[steps]]
name = "broken"
skill = "tidy"
goal = "put the red block on the blue block"
scene = "nowhere"
retries = 1
on_failure = "continue"

[[steps]]
name = "bye"
skill = "engage"
"""
JUDGED = {"greet": 1, "stack": 1, "broken": 2, "bye": 1}
#: log lines of a start that runs the whole mission: arm_safe, connected, state, ready,
#: mission_start, two per judged attempt, mission_end, idle, stopped
LINES = 8 + 2 * sum(JUDGED.values())


def mission_text(on_interrupt: str) -> str:
    return MISSION.format(on_interrupt=on_interrupt)


def robot_file(template: Path, folder: Path) -> Path:
    """``template`` (the repository's robot.toml: the twin's arm and camera) with onboard's
    shipped skills, its recordings in ``folder/rec`` and the control API on any free port
    (another service may hold the default one), written to ``folder``."""
    from onboard import bundled

    text = template.read_text(encoding="utf-8")
    text = text.replace('skills = "skills"', f'skills = "{bundled.skills_dir()}"', 1)
    text = text.replace('recordings = "recordings"', f'recordings = "{folder / "rec"}"', 1)
    text += "\n[service]\nport = 0  # any free port\n"
    path = folder / "robot.toml"
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class Trial:
    seed: int
    on_interrupt: str
    starts: int = 0
    kills: int = 0
    #: where each kill came: after the N-th line ("line N") or N-th step_start ("start N")
    kill_points: list[str] = field(default_factory=list)
    #: attempts the kills left running, and how many of them the end found interrupted
    running_at_kill: int = 0
    interrupted: int = 0
    mission: str = ""  # how the first run ended: done or aborted
    #: kills that came after their start had ended cleanly (each makes a new mission run)
    after_clean_stop: int = 0
    exit_code: int | None = None
    judged: dict[str, int] = field(default_factory=dict)  # the first run's judged attempts
    recordings: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.wrong)

    def summary(self) -> dict[str, Any]:
        return {**self.__dict__, "ok": self.ok}


def run_trial(
    onboard: Path, robot: Path, folder: Path, seed: int, kills: int, on_interrupt: str
) -> Trial:
    """One mission, killed ``kills`` times (a start that ends before its N-th line is not
    killed: it finished), then run to its end; ``folder`` holds the mission and the robot's
    recordings folder is where robot.toml says (empty at the start)."""
    rng = random.Random(seed)
    trial = Trial(seed, on_interrupt)
    mission = folder / "crash.toml"
    mission.write_text(mission_text(on_interrupt), encoding="utf-8")
    command = [str(onboard), "--robot", str(robot), "up", "--once", "--llm", "standin",
               "--clock", "virtual", "--mission", str(mission)]  # fmt: skip
    database = _database(robot)
    logs: list[list[dict[str, Any]]] = []
    snapshots: list[set[int]] = []
    clean: list[bool] = []
    finished = False
    while not finished:
        point: tuple[str | None, int] | None = None
        if trial.kills < kills:
            at_start = rng.random() < 0.5
            point = ("step_start", rng.randint(1, 5)) if at_start else (None, rng.randint(1, LINES))
        trial.starts += 1
        lines, code = _start(command, point)
        logs.append(lines)
        if code is None:
            assert point is not None
            trial.kills += 1
            trial.kill_points.append(f"{'start' if point[0] else 'line'} {point[1]}")
            snapshots.append(_running(database))
            clean.append(_stopped_cleanly(database))
        else:
            trial.exit_code, finished = code, True
    trial.after_clean_stop = sum(clean)
    _verify(trial, database, logs, snapshots, robot)
    return trial


def _start(
    command: list[str], point: tuple[str | None, int] | None
) -> tuple[list[dict[str, Any]], int | None]:
    """Run one start; kill it after the ``point[1]``-th line whose event is ``point[0]`` (None:
    any line). Its lines, and its exit code (None: killed)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines: list[dict[str, Any]] = []
    assert process.stdout is not None
    seen = 0
    try:
        for line in process.stdout:
            lines.append(json.loads(line))
            seen += point is not None and point[0] in (None, lines[-1]["event"])
            if point is not None and seen >= point[1]:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                return lines, None
        return lines, process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()


def _database(robot: Path) -> Path:
    from onboard.config import load_robot
    from onboard.service.store import state_path

    return state_path(load_robot(robot))


def _running(database: Path) -> set[int]:
    """The attempts a kill left running, read straight from the file (no onboard code)."""
    if not database.exists():
        return set()
    with sqlite3.connect(database) as db:
        try:
            return {i for (i,) in db.execute("SELECT id FROM attempts WHERE status = 'running'")}
        except sqlite3.OperationalError:  # killed before the schema was committed
            return set()


def _stopped_cleanly(database: Path) -> bool:
    """The last start had committed its clean stop when the kill came."""
    if not database.exists():
        return False
    with sqlite3.connect(database) as db:
        try:
            row = db.execute("SELECT stopped FROM starts ORDER BY id DESC LIMIT 1").fetchone()
        except sqlite3.OperationalError:
            return False
    return row is not None and row[0] is not None


def _verify(
    trial: Trial,
    database: Path,
    logs: list[list[dict[str, Any]]],
    snapshots: list[set[int]],
    robot: Path,
) -> None:
    db = sqlite3.connect(database)
    try:
        if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            trial.wrong.append("the database is damaged")
        runs = db.execute("SELECT id, status FROM missions").fetchall()
        attempts = {
            row[0]: row
            for row in db.execute(
                "SELECT id, mission, step_index, step, attempt, status, verdict, recording "
                "FROM attempts ORDER BY id"
            )
        }
        index = db.execute("SELECT path, attempt FROM recordings").fetchall()
    finally:
        db.close()

    # missions: queued once per start that followed a clean stop (and the first), ended
    expected = 1 + trial.after_clean_stop
    if len(runs) != expected:
        where = trial.lost if len(runs) < expected else trial.duplicated
        where.append(f"{len(runs)} mission runs for {expected}")
    trial.mission = runs[0][1] if runs else ""
    for run_id, status in runs:
        if status not in ("done", "aborted"):
            trial.lost.append(f"mission run {run_id} ended {status!r}, not done or aborted")

    # interrupted: exactly the attempts kills left running
    left_running = set().union(*snapshots) if snapshots else set()
    interrupted = {i for i, a in attempts.items() if a[5] == "interrupted"}
    trial.running_at_kill = len(left_running)
    trial.interrupted = len(left_running & interrupted)
    for i in sorted(left_running - interrupted):
        trial.wrong.append(f"attempt {i} was running at a kill, now {attempts[i][5]}")
    for i in sorted(interrupted - left_running):
        trial.wrong.append(f"attempt {i} is interrupted but no kill left it running")
    if any(a[5] == "running" for a in attempts.values()):
        trial.wrong.append("an attempt is still running")
    # a start killed right after its recovery committed never printed what it found: the
    # state is the record, the log reports it; a line must name an interrupted attempt
    found = {(a[1], a[3], a[4]) for i, a in attempts.items() if i in interrupted}
    for e in (e for lines in logs for e in lines if e["event"] == "step_interrupted"):
        if (e["run"], e["step"], e["attempt"]) not in found:
            trial.wrong.append(f"step_interrupted {e['step']} #{e['attempt']}: not interrupted")

    # steps: judged as often as the mission allows, in order, in each run
    for run_id, status in runs:
        mine = {i: a for i, a in attempts.items() if a[1] == run_id}
        judged = dict(Counter(a[3] for a in mine.values() if a[5] == "finished"))
        if run_id == runs[0][0]:
            trial.judged = judged
        for step, count in judged.items():
            if count > JUDGED[step]:
                trial.duplicated.append(f"run {run_id}: {step} judged {count} times")
        if status == "done":
            for step, count in JUDGED.items():
                if judged.get(step, 0) < count:
                    trial.lost.append(f"run {run_id}: {step} judged {judged.get(step, 0)} "
                                      f"of {count} times")  # fmt: skip
        order = [a[2] for a in mine.values()]
        if order != sorted(order):
            trial.wrong.append(f"run {run_id}: steps ran out of order: {order}")
        cut = [i for i in mine if i in interrupted]
        if trial.on_interrupt == "abort" and cut:
            if status != "aborted":
                trial.wrong.append(f"run {run_id}: on_interrupt = abort, yet it went on")
            if any(i > cut[0] for i in mine):
                trial.wrong.append(f"run {run_id}: on_interrupt = abort, yet a step ran after")
    verdicts = {(a[1], a[3], a[4]): a[6] for a in attempts.values()}
    started: Counter[tuple[int, str, int]] = Counter()
    for lines in logs:
        for e in lines:
            key = (e.get("run"), e.get("step"), e.get("attempt"))
            if e["event"] == "step_start":
                started[key] += 1  # type: ignore[index]
                if key not in verdicts:
                    trial.lost.append(f"step_start {key} has no row")
            if e["event"] == "step_end" and verdicts.get(key) != e["verdict"]:
                trial.lost.append(
                    f"step_end {key} {e['verdict']}: its row says {verdicts.get(key)}"
                )
    trial.duplicated += [f"attempt {k} started {n} times" for k, n in started.items() if n > 1]

    # recordings: each file indexed once, each row a file
    from onboard.config import load_robot

    folder = load_robot(robot).recordings_dir
    files = {str(p) for p in folder.glob("*.jsonl")}
    paths = [p for p, _ in index]
    trial.recordings = len(paths)
    trial.duplicated += [f"{p} indexed {n} times" for p, n in Counter(paths).items() if n > 1]
    trial.lost += [f"{p}: not indexed" for p in sorted(files - set(paths))]
    trial.lost += [f"{p}: indexed, no file" for p in sorted(set(paths) - files)]
    for path, attempt in index:
        if attempts[attempt][7] != path:
            trial.wrong.append(f"{path} indexed for attempt {attempt}, which recorded elsewhere")
