"""Reference vectors kept on disk: the same vectors, computed once, never fatal when broken."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from onboard.grounding.embedder import DEFAULT_MODEL_DIR, Embedder
from onboard.grounding.embedding_cache import EmbeddingCache

REFERENCES = ["The robot should wait.", "The robot should approach the person.", "Say hello."]


def fresh(cache: Path) -> Embedder:
    return Embedder(DEFAULT_MODEL_DIR, cache=cache)


@pytest.fixture(scope="module")
def expected() -> np.ndarray:
    return Embedder(DEFAULT_MODEL_DIR).embed(REFERENCES)


def test_a_second_start_reads_the_vectors_and_runs_no_text(
    tmp_path: Path, expected: np.ndarray
) -> None:
    first = fresh(tmp_path)
    np.testing.assert_array_equal(first.embed_references(REFERENCES), expected)
    assert first.computed == len(REFERENCES)
    second = fresh(tmp_path)
    np.testing.assert_array_equal(second.embed_references(REFERENCES), expected)
    assert second.computed == 0


def test_a_changed_skill_recomputes_only_the_texts_that_changed(tmp_path: Path) -> None:
    fresh(tmp_path).embed_references(REFERENCES)
    changed = [*REFERENCES[:2], "The robot should leave."]
    again = fresh(tmp_path)
    again.embed_references(changed)
    assert again.computed == 1


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"not a zip file at all", "unreadable"), (b"PK\x03\x04 a cut zip", "unreadable")],
)
def test_a_corrupt_file_is_rebuilt_with_a_one_line_notice(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    expected: np.ndarray,
    content: bytes,
    reason: str,
) -> None:
    embedder = fresh(tmp_path)
    embedder._disk.path.parent.mkdir(parents=True)
    embedder._disk.path.write_bytes(content)
    np.testing.assert_array_equal(embedder.embed_references(REFERENCES), expected)
    notice = capsys.readouterr().err
    assert notice.count("\n") == 1
    assert str(embedder._disk.path) in notice and reason in notice and "rebuilding" in notice
    assert fresh(tmp_path).embed_references(REFERENCES).shape == (3, 384)
    assert capsys.readouterr().err == ""  # the rebuilt file reads


def test_a_file_of_another_model_is_rebuilt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    embedder = fresh(tmp_path)
    foreign = EmbeddingCache(tmp_path, "f" * 64, 384)
    foreign.path = embedder._disk.path  # another model's vectors where this one's belong
    foreign.store({REFERENCES[0]: np.zeros(384, dtype=np.float32)})
    vectors = embedder.embed_references(REFERENCES)
    assert "belongs to another model" in capsys.readouterr().err
    assert embedder.computed == len(REFERENCES)
    assert float(np.linalg.norm(vectors[0])) == pytest.approx(1.0, abs=1e-5)


def test_a_cache_path_that_is_a_file_is_noted_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], expected: np.ndarray
) -> None:
    (tmp_path / "cache").write_text("a file where the folder should be")
    embedder = fresh(tmp_path / "cache")
    np.testing.assert_array_equal(embedder.embed_references(REFERENCES), expected)
    embedder.embed_references(["one more"])
    assert capsys.readouterr().err.count("cannot be written") == 1
