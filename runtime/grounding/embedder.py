"""Sentence embeddings from the all-MiniLM-L6-v2 ONNX model (no torch).

Mean pooling and L2 normalisation live inside the ONNX graph, so the model's
``embedding`` output is already a unit vector per input text.

The model file stores its weights as int8 (blocks of 32 with an fp32 scale each), each
behind a DequantizeLinear of constants. With ``session.disable_quant_qdq`` set, onnxruntime's
constant folding turns them into fp32 matrices when the session starts (instead of fusing
them into int8 kernels), and every text then runs through fp32 kernels only. So the vectors
do not depend on the CPU's int8 instructions (AVX2, VNNI): kernels differ only in summation
order, about 1e-6 in a cosine (models/minilm/CARD.md).

The onnxruntime session starts at the first text that must be computed. A skill's reference
texts go through :meth:`Embedder.embed_references`, which keeps their vectors on disk
(:mod:`onboard.grounding.embedding_cache`), so a command whose skills did not change starts
without running the model at all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from onboard import bundled
from onboard.base.errors import ModelError
from onboard.grounding.embedding_cache import EmbeddingCache, cache_dir, identity_of

#: the model shipped with onboard (``models/minilm`` in the repository, package data installed)
DEFAULT_MODEL_DIR = bundled.package_path("onboard.models") / "minilm"
#: the ONNX graph inside a model folder (its sha256 is recorded in every episode's header)
MODEL_FILE = "model.onnx"
REBUILD_CMD = "pip install -e '.[train]' && python models/minilm/build.py"
MAX_TOKENS = 128
DIM = 384
CACHE_SIZE = 4096

FloatArray = npt.NDArray[np.float32]


class Embedder:
    """Maps texts to float32 unit vectors of shape (n, 384)."""

    def __init__(
        self,
        model_dir: Path,
        threads: int = 1,
        *,
        optimize: bool = True,
        cache: Path | None = None,
    ) -> None:
        """``optimize=False`` runs the graph as written, without fused kernels or folding
        (slower; tests compare it with the optimized session to measure kernel noise).
        ``cache``: the folder reference vectors are kept in (default: ``cache_dir()``)."""
        self._model_path = Path(model_dir) / MODEL_FILE
        self._tokenizer_path = Path(model_dir) / "tokenizer.json"
        self._threads = threads
        self._optimize = optimize
        try:
            self.identity = identity_of(
                [self._model_path, self._tokenizer_path],
                f"onnxruntime {ort.__version__}",
                f"optimize {optimize}",
            )
        except OSError as exc:
            path = self._model_path if not self._model_path.exists() else self._tokenizer_path
            raise ModelError(_load_failure(path, exc)) from exc
        self._disk = EmbeddingCache(cache or cache_dir(), self.identity, DIM)
        self._session: ort.InferenceSession | None = None
        self._tokenizer: Tokenizer | None = None
        self._cache: OrderedDict[str, FloatArray] = OrderedDict()
        #: how many texts the model has run on (the rest came from a cache)
        self.computed = 0

    def _start(self) -> tuple[ort.InferenceSession, Tokenizer]:
        """The session and tokenizer, loaded at the first text the model must run on."""
        if self._session is not None and self._tokenizer is not None:
            return self._session, self._tokenizer
        options = session_options(self._threads, self._optimize)
        try:
            session = ort.InferenceSession(
                str(self._model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ModelError(_load_failure(self._model_path, exc)) from exc
        try:
            tokenizer = Tokenizer.from_file(str(self._tokenizer_path))
        except Exception as exc:
            raise ModelError(_load_failure(self._tokenizer_path, exc)) from exc
        # tokenizer.json pads every input to a fixed 128 tokens; texts are run
        # one at a time (see embed), so padding is only wasted compute.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._session, self._tokenizer = session, tokenizer
        return session, tokenizer

    def embed_references(self, texts: Sequence[str]) -> FloatArray:
        """:meth:`embed`, through the vectors kept on disk: a skill's reference texts, the
        same at every start. Texts the disk does not hold are computed and added to it."""
        if isinstance(texts, str):
            raise TypeError("embed_references() takes a sequence of strings, not a string")
        kept = self._disk.lookup([t for t in texts if t not in self._cache])
        for text, vector in kept.items():
            self._remember(text, vector)
        out = self.embed(texts)
        self._disk.store({text: out[row] for row, text in enumerate(texts)})
        return out

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Embed ``texts``; returns an (n, 384) float32 array of unit vectors.

        Each text runs through the model on its own, so a text's vector never
        depends on its neighbours in a batch (padding and batched kernels change
        the last bits) and a cached vector equals a fresh one. One-by-one is also
        no slower here, as batching pays for padding.
        """
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._embed_one(text)
        return out

    def _embed_one(self, text: str) -> FloatArray:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        session, tokenizer = self._start()
        encoding = tokenizer.encode(text)
        feeds = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
        }
        (embedding,) = session.run(["embedding"], feeds)
        vector = np.asarray(embedding[0], dtype=np.float32)
        vector.setflags(write=False)
        self.computed += 1
        self._remember(text, vector)
        return vector

    def _remember(self, text: str, vector: FloatArray) -> None:
        self._cache[text] = vector
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)


def session_options(threads: int = 1, optimize: bool = True) -> ort.SessionOptions:
    """The onnxruntime settings every Embedder uses."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if optimize
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    # Never fuse the dequantized weights into int8 kernels (DequantizeLinear + MatMul ->
    # MatMulNBits), whose results would depend on the CPU; constant folding then turns
    # them into fp32 weights instead.
    options.add_session_config_entry("session.disable_quant_qdq", "1")
    return options


def _load_failure(path: Path, exc: Exception) -> str:
    reason = "missing" if not path.exists() else f"unreadable ({type(exc).__name__})"
    return f"model file {path} is {reason}; rebuild with: {REBUILD_CMD}"


_shared: dict[tuple[Path, int], Embedder] = {}
_sharing = threading.Lock()


def shared_embedder(model_dir: Path, threads: int = 1) -> Embedder:
    """The process's one :class:`Embedder` of ``model_dir`` at ``threads``: an episode's
    mapper and critic use it rather than each opening a session of their own (a session
    holds about 90 MB, freed late when the episode's objects form a cycle; a service runs
    thousands of episodes). A vector is the same from it as from a new one (each text runs
    alone, and cached vectors equal fresh ones)."""
    key = (Path(model_dir), threads)
    with _sharing:
        if key not in _shared:
            _shared[key] = Embedder(model_dir, threads=threads)
        return _shared[key]
