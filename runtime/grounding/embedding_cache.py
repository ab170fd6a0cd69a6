"""Reference embeddings kept on disk between runs, so a command does not re-embed a skill's
references at every start.

One file per embedder identity (the sha256 of the model and tokenizer files, the
onnxruntime version and the session's optimization setting): ``<cache
dir>/embeddings/<identity[:16]>.npz`` holding the texts, their vectors and the full
identity. A vector is looked up by its exact text, so a changed skill recomputes only the
references that changed. A file that cannot be read, or that belongs to another identity,
is rebuilt with a one-line notice on stderr; a cache folder that cannot be written is noted
once and the vectors are computed as if there were no cache. Nothing here is ever fatal.

The folder is ``$ONBOARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/onboard``, else
``~/.cache/onboard``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from onboard.base.digest import file_sha256

__all__ = ["EmbeddingCache", "cache_dir", "identity_of"]

FloatArray = npt.NDArray[np.float32]

#: at most this many texts are kept per identity (the oldest go first)
MAX_TEXTS = 50_000

#: the last file read, by (path, modification time, size): a process that builds many
#: mappers (a replay of an evaluation's recordings, one per episode) reads it once
_last_read: tuple[tuple[str, int, int], dict[str, FloatArray]] | None = None


def cache_dir() -> Path:
    """The folder onboard keeps caches in (see the module's docstring)."""
    explicit = os.environ.get("ONBOARD_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "onboard"


def identity_of(files: Sequence[Path], *settings: str) -> str:
    """The sha256 over ``files``' bytes and ``settings``: vectors computed under one
    identity are the vectors the same model, tokenizer and runtime compute again."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(bytes.fromhex(file_sha256(path)))
    for setting in settings:
        digest.update(b"\0" + setting.encode())
    return digest.hexdigest()


class EmbeddingCache:
    """The vectors of one embedder identity, loaded from and saved to one file."""

    def __init__(self, folder: Path, identity: str, dim: int) -> None:
        self.path = folder / "embeddings" / f"{identity[:16]}.npz"
        self._identity = identity
        self._dim = dim
        self._vectors: dict[str, FloatArray] = {}
        self._loaded = False
        self._unwritable = False

    def lookup(self, texts: Sequence[str]) -> dict[str, FloatArray]:
        """The cached vectors of those of ``texts`` the cache holds."""
        self._load()
        return {text: self._vectors[text] for text in texts if text in self._vectors}

    def store(self, vectors: Mapping[str, FloatArray]) -> None:
        """Keep ``vectors``; when any is new, write the file (atomically: a reader sees the
        old file or the new one, never a part)."""
        self._load()
        fresh = {t: v for t, v in vectors.items() if t not in self._vectors}
        if not fresh:
            return
        self._vectors.update(fresh)
        while len(self._vectors) > MAX_TEXTS:
            del self._vectors[next(iter(self._vectors))]
        if not self._unwritable:
            self._save()

    def _load(self) -> None:
        global _last_read
        if self._loaded:
            return
        self._loaded = True
        try:
            stat = self.path.stat()
        except OSError:
            return
        key = (str(self.path), stat.st_mtime_ns, stat.st_size)
        if _last_read is not None and _last_read[0] == key:
            self._vectors.update(_last_read[1])  # vectors are read-only: shared, not copied
            return
        try:
            # np.load leaves its own handle open when the zip is broken: pass ours
            with self.path.open("rb") as handle, np.load(handle, allow_pickle=False) as data:
                identity = str(data["identity"])
                texts = data["texts"]
                vectors = data["vectors"]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
            _notice(f"embedding cache {self.path} is unreadable ({type(exc).__name__}); "
                    "rebuilding it")  # fmt: skip
            return
        problem = self._problem(identity, texts, vectors)
        if problem is not None:
            _notice(f"embedding cache {self.path} {problem}; rebuilding it")
            return
        for text, vector in zip(texts.tolist(), vectors, strict=True):
            vector.setflags(write=False)
            self._vectors[text] = vector
        _last_read = (key, dict(self._vectors))

    def _problem(
        self, identity: str, texts: npt.NDArray[np.str_], vectors: FloatArray
    ) -> str | None:
        if identity != self._identity:
            return "belongs to another model"
        if texts.dtype.kind != "U" or texts.ndim != 1:
            return "holds no texts"
        if vectors.dtype != np.float32 or vectors.shape != (len(texts), self._dim):
            return f"holds vectors of shape {vectors.shape}, not ({len(texts)}, {self._dim})"
        if not np.isfinite(vectors).all():
            return "holds vectors that are not finite"
        return None

    def _save(self) -> None:
        texts = list(self._vectors)
        temporary: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                dir=self.path.parent, prefix=".tmp-", suffix=".npz", delete=False
            ) as handle:
                temporary = handle.name
                np.savez(
                    handle,
                    identity=np.array(self._identity),
                    texts=np.array(texts, dtype=np.str_),
                    vectors=np.stack([self._vectors[t] for t in texts]).astype(np.float32),
                )
            os.replace(temporary, self.path)
        except OSError as exc:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)
            self._unwritable = True
            _notice(f"embedding cache {self.path} cannot be written ({exc.strerror or exc}); "
                    "vectors are computed at every start")  # fmt: skip


def _notice(message: str) -> None:
    print(f"onboard: note: {message}", file=sys.stderr)
