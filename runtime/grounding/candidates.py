"""The bottom-up action set (the seed's Figure 3).

A reply that maps onto no action is kept as a *candidate*, with the situation it answered.
A user who agrees it is a new action registers it: the action is written into the skill's
TOML with the reply as its reference response, keeping the file's comments and layout.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit

from onboard.base.errors import CandidateError, ConfigError, OnboardError, Problem
from onboard.loop.skill import action_name_problem

__all__ = ["Candidate", "CandidateStore", "add_action"]


@dataclass(frozen=True)
class Candidate:
    id: str
    skill: str
    reply: str
    situation: str
    wall: float
    registered_as: str | None = None


class CandidateStore:
    """An append-only JSON-lines file; each append is one write, flushed and fsynced."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, skill: str, reply: str, situation: str) -> Candidate:
        digest = hashlib.sha1(f"{skill}\n{reply}".encode()).hexdigest()[:8]
        candidate = Candidate(digest, skill, reply, situation, round(time.time(), 3))
        self._append({"event": "candidate", **candidate.__dict__})
        return candidate

    def mark_registered(self, candidate: Candidate, action: str) -> None:
        self._append({"event": "registered", "id": candidate.id, "action": action})

    def list(self, skill: str | None = None) -> builtins.list[Candidate]:
        """Candidates, one per distinct reply (the latest situation kept), oldest first."""
        found: dict[str, Candidate] = {}
        registered: dict[str, str] = {}
        for record in self._records():
            if record.get("event") == "registered" and _typed(record, _REGISTERED):
                registered[record["id"]] = record["action"]
            elif record.get("event") == "candidate" and _typed(record, _CANDIDATE):
                fields = {k: record[k] for k in _CANDIDATE}
                found[record["id"]] = Candidate(**fields)
        out = [
            Candidate(**{**c.__dict__, "registered_as": registered.get(c.id)})
            for c in found.values()
        ]
        return [c for c in out if skill is None or c.skill == skill]

    def get(self, ident: str) -> Candidate:
        matches = [c for c in self.list() if c.id.startswith(ident)]
        if len(matches) != 1:
            what = "no candidate" if not matches else f"{len(matches)} candidates"
            raise CandidateError(
                f"{self.path}: {what} with id {ident!r} (see `onboard actions list`)"
            )
        return matches[0]

    def _append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if _ends_torn(fd):
                    line = b"\n" + line  # a crash cut the last record: start on a new line
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:  # a full disk: one line, never a traceback
            raise CandidateError(f"{self.path}: cannot write: {exc.strerror or exc}") from exc

    def _records(self) -> builtins.list[dict[str, Any]]:
        if not self.path.exists():
            return []
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise CandidateError(f"{self.path}: cannot read candidates: {exc.strerror}") from exc
        records = []
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a crash; the others are intact
            if isinstance(record, dict):
                records.append(record)
        return records


#: the fields a record of each kind needs, and their types; other records are skipped
_CANDIDATE: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "skill": str,
    "reply": str,
    "situation": str,
    "wall": (int, float),
}
_REGISTERED: dict[str, type | tuple[type, ...]] = {"id": str, "action": str}


def _typed(record: dict[str, Any], fields: dict[str, type | tuple[type, ...]]) -> bool:
    return all(isinstance(record.get(k), t) for k, t in fields.items())


def _ends_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def add_action(
    skill_path: Path,
    name: str,
    reference: str,
    *,
    text: str,
    stimuli: str,
    command: str = "none",
    interruptible: bool = True,
    validate: Callable[[Path], object] | None = None,
) -> None:
    """Write ``[actions.NAME]`` at the end of the skill file, keeping every byte before it.

    Appended, not inserted among the other actions: a table after them (``[critic]``) keeps
    its place and its comments. The new file is validated (``validate`` loads it) before it
    atomically replaces the old one, so a bad registration never leaves a broken skill behind.
    """
    wrong = action_name_problem(name)
    if wrong is not None:
        raise CandidateError(f"{skill_path}: {wrong}; nothing was written")
    try:
        original = skill_path.read_text(encoding="utf-8")
        document = tomlkit.parse(original)
    except (OSError, tomlkit.exceptions.ParseError) as exc:
        raise CandidateError(f"{skill_path}: cannot read the skill: {exc}") from exc
    actions = document.get("actions")
    if actions is None:
        raise CandidateError(f"{skill_path}: has no [actions] table")
    if name in actions:
        raise CandidateError(f"{skill_path}: action {name!r} exists already")
    table = tomlkit.table()
    table.add(tomlkit.comment("registered bottom-up from an unmatched LLM reply"))
    table.add("text", text)
    stimulus = tomlkit.inline_table()
    stimulus.add("type", stimuli)
    if stimuli == "2-B":
        stimulus.add("horizon", 5.0)
    table.add("stimuli", stimulus)
    table.add("command", command)
    table.add("interruptible", interruptible)
    refs = tomlkit.array()
    refs.append(reference)
    table.add("references", refs)
    added = tomlkit.document()
    added.add("actions", tomlkit.table(is_super_table=True))
    added["actions"].add(name, table)  # dumps as [actions.NAME] alone
    content = original.rstrip("\n") + "\n\n" + tomlkit.dumps(added)
    try:
        tomlkit.parse(content)  # an inline ``actions = {...}`` cannot take a table after it
    except tomlkit.exceptions.ParseError as exc:
        raise CandidateError(f"{skill_path}: cannot append [actions.{name}]: {exc}") from exc
    _replace_validated(skill_path, content, validate)


def _replace_validated(path: Path, content: str, validate: Callable[[Path], object] | None) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".toml", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(content)
        os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))  # mkstemp makes it owner-only
        if validate is not None:
            try:
                validate(Path(tmp))
            except OnboardError as exc:  # named as the skill file, not the temporary one
                raise CandidateError(
                    f"{path}: the new action would break the skill: {_renamed(exc, tmp, path)}"
                ) from exc
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _renamed(exc: OnboardError, tmp: str, path: Path) -> str:
    """``exc`` as one line, its problems naming ``path`` where they name the file ``tmp``."""
    if isinstance(exc, ConfigError):
        problems = [
            Problem(path if p.file == tmp else p.file, p.key, p.line, p.message)
            for p in exc.problems
        ]
        return "; ".join(str(p) for p in problems)
    return str(exc).replace(tmp, str(path))
