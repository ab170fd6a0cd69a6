"""A file's sha256 is hashed once per path, modification time and size: a replay of many
recordings does not hash the same model files again, and a rewritten file is hashed anew."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from onboard.base.digest import file_sha256


def test_the_digest_is_the_files_and_a_rewritten_file_is_hashed_again(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"weights v1")
    assert file_sha256(path) == hashlib.sha256(b"weights v1").hexdigest()
    info = path.stat()
    path.write_bytes(b"weights v2")  # the same size: only the modification time tells
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000))
    assert file_sha256(path) == hashlib.sha256(b"weights v2").hexdigest()


def test_a_missing_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        file_sha256(tmp_path / "nothing.onnx")
