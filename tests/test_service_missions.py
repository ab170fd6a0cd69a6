"""Missions that loop, come on a schedule, or call the operator; the state's schema brought
up to date. The service runs in process on the twin with the stand-in LLM; the control API on
a loopback port; the operator's URL a loopback HTTP server that keeps what it is sent."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError
from service_harness import CONTROL, WAIT, serve_beside, until

from onboard import bundled
from onboard.base.errors import ConfigError
from onboard.cli.main import main
from onboard.config import RobotConfig
from onboard.service.log import JsonLog
from onboard.service.mission import Schedule, check_mission, load_mission
from onboard.service.notify import Notifier
from onboard.service.operator_call import OperatorCall, operator_url
from onboard.service.service import Options, Service
from onboard.service.settings import ServiceConfig
from onboard.service.store import Store

BROKEN = """
[[steps]]
name = "broken"
skill = "tidy"
goal = "put the red block on the blue block"
scene = "nowhere"
"""
GREET = """
[[steps]]
name = "greet"
skill = "engage"
scenario = "person-object"
"""


def _local(hour: int, minute: int = 0, days: int = 0) -> datetime:
    return (datetime(2026, 12, 5, hour, minute) + timedelta(days=days)).astimezone()


def test_a_schedule_is_due_now_once_for_what_it_missed_else_at_its_next_time() -> None:
    every = Schedule(every=3600)
    now = _local(9)
    assert every.due(None, now) == now  # never queued: now
    assert every.due(now - timedelta(minutes=10), now) == now + timedelta(minutes=50)
    assert every.due(now - timedelta(hours=5), now) == now  # five missed: one made up, now
    daily = Schedule(at=["17:30", "08:00"])
    assert daily.due(None, _local(7)) == _local(8)  # never queued: the next time, not now
    assert daily.due(None, _local(9)) == _local(17, 30)
    assert daily.due(None, _local(18)) == _local(8, days=1)
    assert daily.due(_local(17, 30, days=-1), _local(9)) == _local(9)  # 08:00 was missed
    assert daily.due(_local(8), _local(9)) == _local(17, 30)
    for wrong in ({}, {"every": 60, "at": ["08:00"]}, {"at": ["25:00"]}, {"every": 0.5}):
        with pytest.raises(ValidationError):
            Schedule.model_validate(wrong)


def _robot(folder: Path, **service: Any) -> RobotConfig:
    text = (Path(__file__).resolve().parent.parent / "robot.toml").read_text(encoding="utf-8")
    text = text.replace('skills = "skills"', f'skills = "{bundled.skills_dir()}"', 1)
    text = text.replace('recordings = "recordings"', f'recordings = "{folder / "rec"}"', 1)
    settings = "".join(f"{k} = {json.dumps(v)}\n" for k, v in {"port": 0, **service}.items())
    path = folder / "robot.toml"
    path.write_text(f"{text}\n[service]\n{settings}", encoding="utf-8")
    from onboard.config import load_robot

    return load_robot(path)


def _mission(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\n{text}', encoding="utf-8")
    return path


def _events(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_a_repeating_mission_runs_its_rounds_and_an_aborted_round_does_not_end_the_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    robot = _robot(tmp_path)
    loop = _mission(tmp_path, "loop", f"repeat = 3\n{GREET}")
    failing = _mission(tmp_path, "failing", f"repeat = 2\n{BROKEN}")
    args = ["--robot", str(robot.root / "robot.toml"), "up", "--once", "--llm", "standin",
            "--clock", "virtual", "--mission", str(loop), "--mission", str(failing)]  # fmt: skip
    assert main(args) == 1  # a step failed
    events = _events(capsys.readouterr().out)
    starts = [(e["mission"], e["round"]) for e in events if e["event"] == "mission_start"]
    assert starts == [("loop", 1), ("failing", 1), ("loop", 2), ("failing", 2), ("loop", 3)]
    ends = [(e["mission"], e["result"]) for e in events if e["event"] == "mission_end"]
    assert ends == [("loop", "done"), ("failing", "aborted"), ("loop", "done"),
                    ("failing", "aborted"), ("loop", "done")]  # fmt: skip
    with Store(tmp_path / "rec" / "state.sqlite") as store:
        runs = store.missions()
    assert [(r["mission"], r["round"], r["status"]) for r in runs] == [
        ("loop", 1, "done"), ("failing", 1, "aborted"), ("loop", 2, "done"),
        ("failing", 2, "aborted"), ("loop", 3, "done")]  # fmt: skip
    assert main(["--robot", str(robot.root / "robot.toml"), "up", "--status"]) == 0
    assert "run 3: loop round 2 done" in capsys.readouterr().out


def test_inside_up_the_recordings_quota_speaks_only_in_its_json_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The service logs JSON lines: a step's quota deleting the episodes before it is the
    ``recordings_rotated`` event and the index's mark, not ``onboard run``'s stderr line."""
    robot = _robot(tmp_path)
    path = robot.root / "robot.toml"
    text = path.read_text(encoding="utf-8")
    path.write_text(
        text.replace("\nrecordings = ", "\nrecordings_max_mb = 0.001\nrecordings = ", 1)
    )
    loop = _mission(tmp_path, "loop", f"repeat = 3\n{GREET}")
    args = ["--robot", str(path), "up", "--once", "--llm", "standin", "--clock", "virtual",
            "--mission", str(loop)]  # fmt: skip
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert err == ""
    events = _events(out)
    rotated = [e["recordings"] for e in events if e["event"] == "recordings_rotated"]
    with Store(tmp_path / "rec" / "state.sqlite") as store:
        indexed, kept = store.recordings(), store.recordings(kept=True)
    assert len(indexed) == 3 and kept == indexed[2:]  # each step's quota deleted the one before
    assert rotated == [[Path(indexed[0]).name], [Path(indexed[1]).name]]


class Hook(ThreadingHTTPServer):
    """A loopback endpoint that keeps each JSON body posted to it."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with hook.arrived:
                    hook.bodies.append(body)
                    hook.arrived.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def wait_for(self, count: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.bodies) >= count, WAIT)


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _serve(
    robot: RobotConfig,
    store: Store,
    queue: list[Path],
    drive: Callable[[str, io.StringIO], None],
    call: Callable[[dict[str, Any]], None] | None = None,
) -> str:
    """Run a service (not ``once``) with its control API, ``drive(url, log)`` beside it
    (tests/service_harness.py); the log's text."""
    out = io.StringIO()
    missions = [load_mission(p)[0] for p in queue]
    service = Service(robot, missions, Options(llm="standin", clock="virtual",
                      call_operator=call), JsonLog(out), Notifier(""), store=store)  # fmt: skip
    serve_beside(service, lambda url: drive(url, out))
    return out.getvalue()


def _until(url: str, holds: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
    return until(url + "/api/status", holds, what)


def _waiting(status: dict[str, Any]) -> bool:
    return status["operator"] is not None


def test_a_step_that_calls_the_operator_holds_its_mission_until_retried_or_skipped(
    tmp_path: Path, hook: Hook
) -> None:
    robot = _robot(tmp_path)
    text = BROKEN.replace('scene = "nowhere"', 'scene = "nowhere"\non_failure = "operator"')
    mission = _mission(tmp_path, "help", f"{text}{GREET}")
    log = JsonLog(io.StringIO())
    call = OperatorCall(hook.url, log)

    def drive(url: str, _out: io.StringIO) -> None:
        post = lambda path: httpx.post(url + path, headers=CONTROL, timeout=WAIT)  # noqa: E731
        assert post("/api/operator/skip").status_code == 409  # nothing waits yet
        status = _until(url, _waiting, "the operator called")
        assert status["operator"]["step"] == "broken" and status["operator"]["attempt"] == 2
        assert status["operator"]["why"] == "step broken failed (error)"
        assert status["mission"] == "help" and not status["in_step"]
        assert post("/api/operator/later").status_code == 404
        assert post("/api/operator/retry").json()["decided"] == "retry"
        hook.wait_for(2)  # the retried attempt failed too: called again
        _until(url, _waiting, "called again")
        assert post("/api/operator/skip").json()["step"] == "broken"
        _until(url, lambda s: s["mission"] is None and not s["queue"], "the mission ended")

    with Store(tmp_path / "state.sqlite") as store:
        out = _serve(robot, store, [mission], drive, call)
        attempts = [(a.step, a.attempt, a.verdict) for a in store.attempts()]
        (run,) = store.missions()
    call.join()
    events = _events(out)
    names = [e["event"] for e in events]
    assert names.count("operator_called") == 2 and names.count("operator_decided") == 2
    called = next(e for e in events if e["event"] == "operator_called")
    assert called["level"] == "error" and called["step"] == "broken"
    assert [(b["event"], b["mission"], b["step"]) for b in hook.bodies] == [
        ("operator_called", "help", "broken")] * 2  # fmt: skip
    assert attempts == [("broken", 1, "error"), ("broken", 2, "error"), ("greet", 1, "success")]
    assert run["status"] == "done" and run["held"] is None


def test_a_mission_held_for_the_operator_is_held_again_after_a_restart_and_an_abort_ends_the_loop(
    tmp_path: Path,
) -> None:
    robot = _robot(tmp_path)
    text = BROKEN.replace('scene = "nowhere"', 'scene = "nowhere"\non_failure = "operator"')
    mission = _mission(tmp_path, "help", f'repeat = "forever"\n{text}')
    path = tmp_path / "state.sqlite"

    def first(url: str, _out: io.StringIO) -> None:
        _until(url, _waiting, "the operator called")

    with Store(path) as store:
        _serve(robot, store, [mission], first)
        (run,) = store.missions()
    assert run["status"] == "running" and run["held"] == "step broken failed (error)"

    def second(url: str, _out: io.StringIO) -> None:
        status = _until(url, _waiting, "called again after the restart")
        assert status["operator"]["attempt"] == 2
        httpx.post(url + "/api/operator/abort", headers=CONTROL, timeout=WAIT)
        _until(url, lambda s: s["mission"] is None, "aborted")

    with Store(path) as store:
        store.recover()
        out = _serve(robot, store, [mission], second)
        runs = store.missions()
    starts = [e for e in _events(out) if e["event"] == "mission_start"]
    assert starts[0]["attempt"] == 2 and "at_step" in starts[0]  # resumed, not queued anew
    assert [(r["status"], r["detail"]) for r in runs] == [("aborted", "aborted by the operator")]


def test_a_scheduled_mission_is_queued_when_due_not_at_start(tmp_path: Path) -> None:
    robot = _robot(tmp_path)
    mission = _mission(tmp_path, "often", f"[schedule]\nevery = 1\n{GREET}")

    def drive(_url: str, out: io.StringIO) -> None:
        deadline = datetime.now() + timedelta(seconds=WAIT)
        while out.getvalue().count('"event": "mission_end"') < 2:
            assert datetime.now() < deadline, "two scheduled runs"
            threading.Event().wait(0.05)

    with Store(tmp_path / "state.sqlite") as store:
        out = _serve(robot, store, [mission], drive)
        runs = store.missions()
    events = _events(out)
    ready = next(e for e in events if e["event"] == "ready")
    assert ready["missions"] == []  # nothing queued at start: the schedule queues it
    assert [e["event"] for e in events].count("mission_queued") >= 2
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        queued = [datetime.fromisoformat(q.replace("Z", "+00:00"))
                  for (q,) in db.execute("SELECT queued FROM missions ORDER BY id")]  # fmt: skip
    assert (queued[1] - queued[0]).total_seconds() >= 1.0
    assert [r["status"] for r in runs[:2]] == ["done", "done"]


def test_the_operator_url_is_a_variable_and_a_wrong_one_is_one_line_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ServiceConfig()
    monkeypatch.delenv("ONBOARD_OPERATOR_URL", raising=False)
    assert operator_url(settings, tmp_path / "robot.toml") is None
    monkeypatch.setenv("ONBOARD_OPERATOR_URL", "ftp://pager.example/hook")
    with pytest.raises(ConfigError) as raised:
        operator_url(settings, tmp_path / "robot.toml")
    assert "[service.operator_url_env]" in str(raised.value)
    assert "ONBOARD_OPERATOR_URL holds not an http(s) URL" in str(raised.value)


def test_calling_the_operator_needs_the_control_api(tmp_path: Path) -> None:
    robot = _robot(tmp_path, api=False)
    text = BROKEN.replace('scene = "nowhere"', 'scene = "nowhere"\non_failure = "operator"')
    mission = _mission(tmp_path, "help", text)
    with pytest.raises(ConfigError) as raised:
        check_mission(robot, mission)
    assert "[service] api = false turns off" in str(raised.value)


V1_SCHEMA = """
CREATE TABLE starts (id INTEGER PRIMARY KEY, started TEXT NOT NULL, stopped TEXT);
CREATE TABLE batches (id INTEGER PRIMARY KEY, started TEXT NOT NULL, closed TEXT);
CREATE TABLE missions (id INTEGER PRIMARY KEY, batch INTEGER NOT NULL REFERENCES batches(id),
    name TEXT NOT NULL, path TEXT NOT NULL, spec TEXT NOT NULL, status TEXT NOT NULL CHECK
    (status IN ('queued', 'running', 'done', 'aborted')), step INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 1, detail TEXT, queued TEXT NOT NULL, ended TEXT);
CREATE TABLE attempts (id INTEGER PRIMARY KEY, mission INTEGER NOT NULL REFERENCES
    missions(id), step_index INTEGER NOT NULL, step TEXT NOT NULL, attempt INTEGER NOT NULL,
    status TEXT NOT NULL, verdict TEXT, exit_code INTEGER, seconds REAL, error TEXT,
    recording TEXT NOT NULL, started TEXT NOT NULL, ended TEXT);
CREATE TABLE recordings (id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, attempt INTEGER
    NOT NULL UNIQUE REFERENCES attempts(id), verdict TEXT NOT NULL, bytes INTEGER NOT NULL,
    indexed TEXT NOT NULL);
PRAGMA user_version = 1;
"""


def test_a_state_file_of_the_first_schema_is_brought_up_to_date_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    spec = load_mission(_mission(tmp_path, "old", GREET))[0].model_dump_json()
    with sqlite3.connect(path) as db:
        db.executescript(V1_SCHEMA)
        db.execute("INSERT INTO batches (started) VALUES ('2026-12-01T00:00:00Z')")
        db.execute(
            "INSERT INTO missions (batch, name, path, spec, status, queued) VALUES "
            "(1, 'old', 'old.toml', ?, 'queued', '2026-12-01T00:00:00Z')",
            (spec,),
        )
    with Store(path) as store:
        (run,) = store.pending()
        assert (run.name, run.round, run.held) == ("old", 1, None)
        assert store.recordings(kept=True) == []
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 2
