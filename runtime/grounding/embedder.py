"""Sentence embeddings from the all-MiniLM-L6-v2 ONNX model (no torch).

Mean pooling and L2 normalisation live inside the ONNX graph, so the model's
``embedding`` output is already a unit vector per input text.

The model file stores its weights as int8 (blocks of 32 with an fp32 scale each), each
behind a DequantizeLinear of constants. With ``session.disable_quant_qdq`` set, onnxruntime's
constant folding turns them into fp32 matrices when the session starts (instead of fusing
them into int8 kernels), and every text then runs through fp32 kernels only. So the vectors
do not depend on the CPU's int8 instructions (AVX2, VNNI): kernels differ only in summation
order, about 1e-6 in a cosine (models/minilm/CARD.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from onboard import bundled
from onboard.base.errors import ModelError

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

    def __init__(self, model_dir: Path, threads: int = 1, *, optimize: bool = True) -> None:
        """``optimize=False`` runs the graph as written, without fused kernels or folding
        (slower; tests compare it with the optimized session to measure kernel noise)."""
        model_path = Path(model_dir) / MODEL_FILE
        tokenizer_path = Path(model_dir) / "tokenizer.json"
        options = session_options(threads, optimize)
        try:
            self._session = ort.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ModelError(_load_failure(model_path, exc)) from exc
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise ModelError(_load_failure(tokenizer_path, exc)) from exc
        # tokenizer.json pads every input to a fixed 128 tokens; texts are run
        # one at a time (see embed), so padding is only wasted compute.
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._cache: OrderedDict[str, FloatArray] = OrderedDict()

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
        encoding = self._tokenizer.encode(text)
        feeds = {
            "input_ids": np.array([encoding.ids], dtype=np.int64),
            "attention_mask": np.array([encoding.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
        }
        (embedding,) = self._session.run(["embedding"], feeds)
        vector = np.asarray(embedding[0], dtype=np.float32)
        vector.setflags(write=False)
        self._cache[text] = vector
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return vector


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
