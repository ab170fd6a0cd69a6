"""The service's state in SQLite (the standard library's ``sqlite3``, WAL mode): the mission
queue, each step attempt's status and verdict, and the index of recordings. It survives a
crash or a power cut: every change is one transaction, committed before the log says so.

- A **start** is one ``onboard up`` process: ``stopped`` is set when it ends by itself or by
  a stop signal, never after a crash (kill -9, a power cut, an internal error).
- A **batch** is what one start of ``onboard up`` queued from mission files. It closes when
  the queue runs empty; until then a restart continues it (its files are not queued again),
  and a start after a crash queues nothing new either: the crash came after the queue's end.
- A **mission run** is a queued mission (``queued``, ``running``, ``done``, ``aborted``) with
  the mission as it was queued (JSON, so a resume runs what was queued) and a cursor: the
  step to run next and its attempt number. A mission that repeats has one run per round:
  the next round is queued in the transaction that ends the last. A run ``held`` for the
  operator says why, and stays held across restarts until the operator decides.
- An **attempt** is one run of one step: ``running`` from the moment it starts, then
  ``finished`` with its verdict, or ``interrupted`` (the service died or was stopped during
  it): never ``finished`` after an interruption.
- A **recording** row indexes the file of one attempt, committed with the attempt's verdict
  (or with its interruption, when the file exists); ``deleted`` once the recordings quota
  rotated it out.

A step's verdict, its recording's row and the mission's next cursor are one transaction, so a
kill -9 at any point leaves either the step ``running`` (interrupted at the next start) or
finished with everything it owns.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from onboard.base.errors import ConfigError, Problem
from onboard.config import RobotConfig
from onboard.service.mission import Mission

__all__ = ["Attempt", "Interruption", "Run", "Store", "state_path"]

#: the schema's version (``PRAGMA user_version``); a newer file is refused, not rewritten,
#: an older one is brought up to date in place (:data:`MIGRATIONS`)
VERSION = 2
FILE = "state.sqlite"

SCHEMA = """
CREATE TABLE IF NOT EXISTS starts (
    id INTEGER PRIMARY KEY,
    started TEXT NOT NULL,
    stopped TEXT
);
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY,
    started TEXT NOT NULL,
    closed TEXT
);
CREATE TABLE IF NOT EXISTS missions (
    id INTEGER PRIMARY KEY,
    batch INTEGER NOT NULL REFERENCES batches(id),
    name TEXT NOT NULL,
    path TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('queued', 'running', 'done', 'aborted')),
    step INTEGER NOT NULL DEFAULT 0,
    attempt INTEGER NOT NULL DEFAULT 1,
    detail TEXT,
    queued TEXT NOT NULL,
    ended TEXT,
    round INTEGER NOT NULL DEFAULT 1,
    held TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY,
    mission INTEGER NOT NULL REFERENCES missions(id),
    step_index INTEGER NOT NULL,
    step TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'interrupted')),
    verdict TEXT,
    exit_code INTEGER,
    seconds REAL,
    error TEXT,
    recording TEXT NOT NULL,
    started TEXT NOT NULL,
    ended TEXT,
    UNIQUE (mission, step_index, attempt),
    CHECK (status != 'interrupted' OR verdict IS NOT 'success')
);
CREATE TABLE IF NOT EXISTS recordings (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    attempt INTEGER NOT NULL UNIQUE REFERENCES attempts(id),
    verdict TEXT NOT NULL,
    bytes INTEGER NOT NULL,
    indexed TEXT NOT NULL,
    deleted TEXT
);
"""

#: what brings a file of each older version up to the next
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "ALTER TABLE missions ADD COLUMN round INTEGER NOT NULL DEFAULT 1",
        "ALTER TABLE missions ADD COLUMN held TEXT",
        "ALTER TABLE recordings ADD COLUMN deleted TEXT",
    ),
}


def state_path(robot: RobotConfig) -> Path:
    """robot.toml's ``state``, else ``state.sqlite`` beside the recordings."""
    if robot.state is not None:
        return robot.resolve(robot.state)
    return robot.recordings_dir / FILE


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Run:
    """A queued mission and where it stands."""

    id: int
    mission: Mission
    step: int  # the cursor: the step to run next ...
    attempt: int  # ... and its attempt's number
    resumed: bool = False  # it had begun before this start
    #: attempts interrupted, per step index: they spend none of the step's retries
    interrupted: dict[int, int] = field(default_factory=dict)
    round: int = 1  # which run of a repeating mission
    held: str | None = None  # held for the operator: why

    @property
    def name(self) -> str:
        return self.mission.name or self.mission.path.stem


@dataclass(frozen=True)
class Interruption:
    """What :meth:`Store.recover` found and did about one mission run."""

    mission: str
    run: int
    step: str | None  # the step whose attempt was interrupted (None: between two steps)
    attempt: int | None
    recording: str | None  # the interrupted attempt's recording, indexed
    then: Literal["resume", "abort"]


@dataclass(frozen=True)
class Attempt:
    """One row of the attempts table (``onboard up --status``, tests)."""

    mission: str
    run: int
    step: str
    attempt: int
    status: str
    verdict: str | None
    recording: str | None


class Store:
    """One SQLite file; every method is one transaction. Thread-safe (one connection, a lock):
    the loop writes, a control API may read."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path) if path != ":memory:" else None
        shown = str(path)
        self._lock = threading.Lock()
        self._start: int | None = None
        #: the last start ended in a crash (set by :meth:`recover`)
        self.after_crash = False
        try:
            if self.path is not None and not self.path.parent.is_dir():
                raise sqlite3.OperationalError(f"its folder {self.path.parent} does not exist")
            self._db = sqlite3.connect(shown, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise _unreadable(shown, exc) from None
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a commit survives a power cut
            self._db.execute("PRAGMA foreign_keys=ON")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > VERSION:
                raise sqlite3.DatabaseError(f"schema version {version}, newer than this onboard's")
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"damaged: {check}")
            with self._transaction():
                for old in range(version or VERSION, VERSION):
                    for statement in MIGRATIONS[old]:
                        self._db.execute(statement)
                for statement in SCHEMA.split(";"):
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={VERSION}")
        except sqlite3.Error as exc:
            self._db.close()
            raise _unreadable(shown, exc) from None

    @classmethod
    def memory(cls) -> Store:
        return cls(":memory:")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- at start: recover, then queue -----------------------------------------------------

    def recover(self) -> list[Interruption]:
        """After a crash, a power cut or a stop: each attempt still ``running`` becomes
        ``interrupted`` (its recording indexed when the file exists), and each mission run
        that had begun is resumed or aborted as its mission's ``on_interrupt`` says. A
        resumed run runs its interrupted step again, as a new attempt."""
        found: list[Interruption] = []
        with self._transaction() as db:
            last = db.execute("SELECT stopped FROM starts ORDER BY id DESC LIMIT 1").fetchone()
            self.after_crash = last is not None and last[0] is None
            self._start = db.execute("INSERT INTO starts (started) VALUES (?)", (_now(),)).lastrowid
            running = db.execute(
                "SELECT id, mission FROM attempts WHERE status = 'running'"
            ).fetchall()
            for attempt_id, _ in running:
                db.execute(
                    "UPDATE attempts SET status = 'interrupted', verdict = 'interrupted', "
                    "ended = ? WHERE id = ?",
                    (_now(), attempt_id),
                )
                self._index(db, attempt_id, "interrupted")
            for run_id, spec, step, attempt in db.execute(
                "SELECT id, spec, step, attempt FROM missions WHERE status = 'running' ORDER BY id"
            ).fetchall():
                mission = Mission.model_validate_json(spec)
                last = db.execute(
                    "SELECT id, step_index, step, attempt, status, recording FROM attempts "
                    "WHERE mission = ? ORDER BY id DESC LIMIT 1",
                    (run_id,),
                ).fetchone()
                at_step = last is not None and (last[1], last[3]) == (step, attempt)
                where = (last[2], last[3], self._indexed(db, last[0])) if at_step else None
                if mission.on_interrupt == "abort":
                    detail = f"interrupted at step {last[2]}" if where else "interrupted"
                    self._move(db, run_id, "aborted", detail)
                elif at_step:
                    db.execute(
                        "UPDATE missions SET attempt = ? WHERE id = ?", (attempt + 1, run_id)
                    )
                name = mission.name or mission.path.stem
                step_name, number, recording = where or (None, None, None)
                found.append(
                    Interruption(name, run_id, step_name, number, recording, mission.on_interrupt)
                )
        return found

    def enqueue(self, missions: list[Mission]) -> list[Run]:
        """Queue ``missions`` (one start's mission files) and return the queue, oldest first.
        While the last batch is open (a start whose queue never ran empty) its files are not
        queued again: the restart continues it; a file new to it joins it. After a crash
        that came once the last batch was done, nothing is queued (the batch is not run
        twice); a start after a clean stop queues a new batch."""
        with self._transaction() as db:
            row = db.execute("SELECT id, closed FROM batches ORDER BY id DESC LIMIT 1").fetchone()
            if row is not None and row[1] is None:
                batch = row[0]
                queued = {p for (p,) in db.execute(
                    "SELECT path FROM missions WHERE batch = ?", (batch,))}  # fmt: skip
            elif row is not None and self.after_crash:
                batch, queued = row[0], {_key(m) for m in missions}
            else:
                batch = db.execute("INSERT INTO batches (started) VALUES (?)", (_now(),)).lastrowid
                queued = set()
            for mission in missions:
                if _key(mission) not in queued:
                    self._insert(db, batch, mission)
        return self.pending()

    def add(self, mission: Mission) -> Run:
        """Queue one more mission (into the open batch, or a new one)."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT id FROM batches WHERE closed IS NULL ORDER BY id DESC"
            ).fetchone()
            if row is not None:
                batch = int(row[0])
            else:
                batch = int(
                    db.execute("INSERT INTO batches (started) VALUES (?)", (_now(),)).lastrowid or 0
                )
            run_id = self._insert(db, batch, mission)
        return next(r for r in self.pending() if r.id == run_id)

    def pending(self) -> list[Run]:
        """Mission runs not yet done or aborted, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, spec, step, attempt, status, round, held FROM missions "
                "WHERE status IN ('queued', 'running') ORDER BY id"
            ).fetchall()
            runs = []
            for run_id, spec, step, attempt, status, round_, held in rows:
                counts = dict(self._db.execute(
                    "SELECT step_index, count(*) FROM attempts WHERE mission = ? "
                    "AND status = 'interrupted' GROUP BY step_index", (run_id,)))  # fmt: skip
                mission = Mission.model_validate_json(spec)
                runs.append(Run(run_id, mission, step, attempt, status == "running", counts,
                                round_, held))  # fmt: skip
        return runs

    def last_queued(self, mission: Mission) -> datetime | None:
        """When ``mission``'s file was last queued (its first round; None: never)."""
        with self._lock:
            (when,) = self._db.execute(
                "SELECT max(queued) FROM missions WHERE path = ? AND round = 1", (_key(mission),)
            ).fetchone()
        return None if when is None else datetime.fromisoformat(when.replace("Z", "+00:00"))

    def is_pending(self, mission: Mission) -> bool:
        """A run of ``mission``'s file is queued or running."""
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM missions WHERE path = ? AND status IN ('queued', 'running')",
                (_key(mission),),
            ).fetchone()
        return row is not None

    def close_batch(self) -> None:
        """The queue ran empty: the next start queues the mission files afresh."""
        with self._transaction() as db:
            db.execute("UPDATE batches SET closed = ? WHERE closed IS NULL", (_now(),))

    def stopped(self) -> None:
        """This start ends cleanly (by itself or a stop signal): the next is not a recovery."""
        if self._start is not None:
            with self._transaction() as db:
                db.execute("UPDATE starts SET stopped = ? WHERE id = ?", (_now(), self._start))

    # -- while running ---------------------------------------------------------------------

    def begin(self, run: Run) -> None:
        with self._transaction() as db:
            db.execute("UPDATE missions SET status = 'running' WHERE id = ?", (run.id,))

    def step_started(self, run: Run, index: int, attempt: int, recording: Path) -> int:
        """An attempt begins (committed before its episode starts); its id."""
        with self._transaction() as db:
            db.execute(
                "UPDATE missions SET step = ?, attempt = ? WHERE id = ?", (index, attempt, run.id)
            )
            cursor = db.execute(
                "INSERT INTO attempts (mission, step_index, step, attempt, status, recording, "
                "started) VALUES (?, ?, ?, ?, 'running', ?, ?)",
                (run.id, index, run.mission.steps[index].name, attempt, str(recording), _now()),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

    def step_finished(
        self,
        attempt_id: int,
        verdict: str,
        exit_code: int,
        seconds: float,
        error: str | None,
        then: tuple[int, int] | Literal["done", "aborted"],
        detail: str | None = None,
        held: str | None = None,
    ) -> Run | None:
        """An attempt's verdict, its recording's row and the mission's next cursor (or its
        end, and the next round of a repeating mission, returned), in one transaction.
        ``held``: the run waits at the cursor for the operator, this says why."""
        with self._transaction() as db:
            db.execute(
                "UPDATE attempts SET status = 'finished', verdict = ?, exit_code = ?, "
                "seconds = ?, error = ?, ended = ? WHERE id = ? AND status = 'running'",
                (verdict, exit_code, seconds, error, _now(), attempt_id),
            )
            self._index(db, attempt_id, verdict)
            run_id = db.execute(
                "SELECT mission FROM attempts WHERE id = ?", (attempt_id,)
            ).fetchone()[0]
            again = self._move(db, run_id, then, detail)
            if held is not None:
                db.execute("UPDATE missions SET held = ? WHERE id = ?", (held, run_id))
        return self._run(again)

    def step_stopped(self, attempt_id: int, exit_code: int | None) -> None:
        """A stop signal ended the attempt: it is interrupted (a restart resumes or aborts its
        mission as the mission says), its recording indexed."""
        with self._transaction() as db:
            db.execute(
                "UPDATE attempts SET status = 'interrupted', verdict = 'stopped', exit_code = ?, "
                "ended = ? WHERE id = ? AND status = 'running'",
                (exit_code, _now(), attempt_id),
            )
            self._index(db, attempt_id, "stopped")

    def end(
        self,
        run: Run,
        result: Literal["done", "aborted"],
        detail: str | None = None,
        repeat: bool = True,
    ) -> Run | None:
        """The run ends; the next round of a repeating mission is queued (and returned)
        unless ``repeat`` is False (the operator ended it)."""
        with self._transaction() as db:
            again = self._move(db, run.id, result, detail, repeat)
        return self._run(again)

    def release(self, run: Run, then: tuple[int, int]) -> None:
        """The operator decided: the held run goes on at ``then`` (step, attempt)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE missions SET step = ?, attempt = ?, held = NULL WHERE id = ?",
                (*then, run.id),
            )

    def mark_rotated(self, paths: list[str]) -> list[str]:
        """Those of ``paths`` indexed and not marked yet are marked deleted (the recordings
        quota deleted them); their paths, oldest first."""
        if not paths:
            return []
        with self._transaction() as db:
            rows = [
                row
                for path in paths
                for row in db.execute(
                    "SELECT id, path FROM recordings WHERE path = ? AND deleted IS NULL", (path,)
                )
            ]
            db.executemany(
                "UPDATE recordings SET deleted = ? WHERE id = ?", [(_now(), i) for i, _ in rows]
            )
        return [p for _, p in sorted(rows)]

    def rotated(self) -> list[str]:
        """Every indexed recording whose file is gone is marked deleted (one stat each: see
        :meth:`mark_rotated` for those a quota names); their paths, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, path FROM recordings WHERE deleted IS NULL ORDER BY id"
            ).fetchall()
        gone = [(i, p) for i, p in rows if not Path(p).exists()]
        if gone:
            with self._transaction() as db:
                db.executemany(
                    "UPDATE recordings SET deleted = ? WHERE id = ?",
                    [(_now(), i) for i, _ in gone],
                )
        return [p for _, p in gone]

    # -- reading ---------------------------------------------------------------------------

    def attempts(self) -> list[Attempt]:
        with self._lock:
            rows = self._db.execute(
                "SELECT m.name, a.mission, a.step, a.attempt, a.status, a.verdict, r.path "
                "FROM attempts a JOIN missions m ON m.id = a.mission "
                "LEFT JOIN recordings r ON r.attempt = a.id ORDER BY a.id"
            ).fetchall()
        return [Attempt(*row) for row in rows]

    def missions(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, batch, name, path, status, step, attempt, detail, round, held "
                "FROM missions ORDER BY id"
            ).fetchall()
        keys = ("run", "batch", "mission", "path", "status", "step", "attempt", "detail",
                "round", "held")  # fmt: skip
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def recordings(self, kept: bool = False) -> list[str]:
        """The indexed recordings' paths (``kept``: only those not rotated out)."""
        where = " WHERE deleted IS NULL" if kept else ""
        with self._lock:
            rows = self._db.execute(f"SELECT path FROM recordings{where} ORDER BY id")
            return [p for (p,) in rows]

    # -- helpers (inside a transaction) ----------------------------------------------------

    def _run(self, run_id: int | None) -> Run | None:
        return None if run_id is None else next(r for r in self.pending() if r.id == run_id)

    def _insert(self, db: sqlite3.Connection, batch: int, mission: Mission, round_: int = 1) -> int:
        cursor = db.execute(
            "INSERT INTO missions (batch, name, path, spec, status, queued, round) "
            "VALUES (?, ?, ?, ?, 'queued', ?, ?)",
            (batch, mission.name or mission.path.stem, _key(mission),
             mission.model_dump_json(), _now(), round_),
        )  # fmt: skip
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    @staticmethod
    def _index(db: sqlite3.Connection, attempt_id: int, verdict: str) -> None:
        """The attempt's recording joins the index, if the episode wrote it."""
        (recording,) = db.execute(
            "SELECT recording FROM attempts WHERE id = ?", (attempt_id,)
        ).fetchone()
        path = Path(recording)
        try:
            size = path.stat().st_size
        except OSError:
            return  # the step stopped before its episode began recording
        db.execute(
            "INSERT INTO recordings (path, attempt, verdict, bytes, indexed) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (attempt) DO NOTHING",
            (recording, attempt_id, verdict, size, _now()),
        )

    @staticmethod
    def _indexed(db: sqlite3.Connection, attempt_id: int) -> str | None:
        row = db.execute("SELECT path FROM recordings WHERE attempt = ?", (attempt_id,)).fetchone()
        return row[0] if row else None

    def _move(
        self,
        db: sqlite3.Connection,
        run_id: int,
        then: tuple[int, int] | Literal["done", "aborted"],
        detail: str | None,
        repeat: bool = True,
    ) -> int | None:
        """The run's cursor moves, or the run ends; an ended run of a repeating mission
        queues its next round in the same batch (its id returned)."""
        if isinstance(then, tuple):
            db.execute("UPDATE missions SET step = ?, attempt = ? WHERE id = ?", (*then, run_id))
            return None
        db.execute(
            "UPDATE missions SET status = ?, detail = ?, ended = ?, held = NULL WHERE id = ?",
            (then, detail, _now(), run_id),
        )
        batch, spec, round_ = db.execute(
            "SELECT batch, spec, round FROM missions WHERE id = ?", (run_id,)
        ).fetchone()
        mission = Mission.model_validate_json(spec)
        if not repeat or (mission.repeat != "forever" and round_ >= mission.repeat):
            return None
        return self._insert(db, batch, mission, round_ + 1)


def _key(mission: Mission) -> str:
    """A mission file's identity in a batch: its resolved path."""
    return str(mission.path.resolve()) if str(mission.path) else json.dumps(mission.name)


def _unreadable(path: str, exc: sqlite3.Error) -> ConfigError:
    why = " ".join(str(exc).split()) or type(exc).__name__
    return ConfigError([Problem(path, "", None, f"the service's state database cannot be "
                        f"used ({why}); move it aside to start with an empty queue")])  # fmt: skip
