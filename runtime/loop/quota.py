"""The recordings folder's quota (``recordings_max_mb``): the oldest episodes go first.

An episode is a ``*.jsonl`` or ``*.mcap`` file in the folder with its images folder
(``<stem>.images/``, which counts); ``candidates.jsonl`` is not one, and the recording about
to be written is never deleted. Episodes go oldest first by modification time (then name).

:class:`RecordingsQuota` keeps a ledger of the episodes it has measured, so a process that
records many (``onboard up``) measures each one once: each call reads the folder's names
(one directory listing, no stat per file) and measures only the names it has not seen; a
name gone from the listing (deleted by hand, or by another process's quota) leaves the
ledger and is reported with what the quota deleted (:meth:`RecordingsQuota.take_gone`). An
episode is measured the first time the quota sees it other than as the recording about to be
written, i.e. once it is finished, when another process is not writing it meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from onboard.loop.recording import images_dir

__all__ = ["RecordingsQuota", "enforce_quota", "quota_in_force"]

_IN_FORCE: ContextVar[RecordingsQuota | None] = ContextVar("recordings_quota", default=None)


class RecordingsQuota:
    """``folder``'s episodes kept within ``max_bytes``, each measured once (see above)."""

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._ledger: dict[str, tuple[float, int]] = {}  # name -> (mtime, bytes)
        self._total = 0
        self._gone: list[Path] = []

    def make_room(self, keep: Path) -> list[Path]:
        """Delete the oldest episodes until the rest fit ``max_bytes``, never ``keep`` (the
        recording about to be written); what was deleted, oldest first."""
        names = self._listing()
        keep_name = keep.name if keep.resolve().parent == self.folder.resolve() else None
        for name in [n for n in self._ledger if n not in names or n == keep_name]:
            self._forget(name)
            if name != keep_name:  # keep is measured again once it is written
                self._gone.append(self.folder / name)
        for name in sorted(names - self._ledger.keys() - {keep_name}):
            self._measure(name)
        dropped: list[Path] = []
        if self._total > self.max_bytes:
            for _, name in sorted((mtime, n) for n, (mtime, _) in self._ledger.items()):
                if self._total <= self.max_bytes:
                    break
                path = self.folder / name
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                shutil.rmtree(images_dir(path), ignore_errors=True)
                self._forget(name)
                dropped.append(path)
        self._gone += dropped
        return dropped

    def take_gone(self) -> list[Path]:
        """The episodes gone since the last call: deleted by :meth:`make_room`, or missing
        from the folder's listing since the one before (deleted by anyone else)."""
        gone, self._gone = self._gone, []
        return gone

    @contextlib.contextmanager
    def in_force(self) -> Iterator[None]:
        """While the block runs (on this thread), a recording started in :attr:`folder`
        makes room through this quota (:func:`quota_in_force`), not a fresh one."""
        token = _IN_FORCE.set(self)
        try:
            yield
        finally:
            _IN_FORCE.reset(token)

    def _listing(self) -> set[str]:
        names: set[str] = set()
        with contextlib.suppress(OSError), os.scandir(self.folder) as entries:
            for entry in entries:
                episode = entry.name.endswith((".jsonl", ".mcap"))
                with contextlib.suppress(OSError):
                    if episode and entry.name != "candidates.jsonl" and entry.is_file():
                        names.add(entry.name)
        return names

    def _measure(self, name: str) -> None:
        path = self.folder / name
        try:
            info = path.stat()
        except OSError:
            return  # gone since the listing
        size = info.st_size + _folder_size(images_dir(path))
        self._ledger[name] = (info.st_mtime, size)
        self._total += size

    def _forget(self, name: str) -> None:
        _, size = self._ledger.pop(name)
        self._total -= size


def quota_in_force(folder: Path) -> RecordingsQuota | None:
    """The quota a caller put in force for ``folder`` (:meth:`RecordingsQuota.in_force`)."""
    quota = _IN_FORCE.get()
    if quota is None or quota.folder.resolve() != folder.resolve():
        return None
    return quota


def enforce_quota(folder: Path, max_bytes: int, keep: Path) -> list[Path]:
    """One :meth:`RecordingsQuota.make_room` on a fresh ledger: every episode measured."""
    return RecordingsQuota(folder, max_bytes).make_room(keep)


def _folder_size(folder: Path) -> int:
    total = 0
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total
