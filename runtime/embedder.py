"""Sentence embeddings from the int8 all-MiniLM-L6-v2 ONNX model (no torch).

Mean pooling and L2 normalisation live inside the ONNX graph, so the model's
``embedding`` output is already a unit vector per input text.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from tokenizers import Tokenizer

from runtime.errors import ModelError

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "minilm"
REBUILD_CMD = "pip install -e '.[train]' && python models/minilm/build.py"
MAX_TOKENS = 128
DIM = 384
CACHE_SIZE = 4096

FloatArray = npt.NDArray[np.float32]


class Embedder:
    """Maps texts to float32 unit vectors of shape (n, 384)."""

    def __init__(self, model_dir: Path, threads: int = 1) -> None:
        model_path = Path(model_dir) / "model.onnx"
        tokenizer_path = Path(model_dir) / "tokenizer.json"
        try:
            tokenizer = Tokenizer.from_file(str(tokenizer_path))
        except Exception as exc:
            raise ModelError(_load_failure(tokenizer_path, exc)) from exc
        # The shipped tokenizer.json pads every input to a fixed 128 tokens;
        # pad to the longest text of each batch instead, which is much faster.
        tokenizer.no_padding()
        tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer = tokenizer

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            self._session = ort.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:
            raise ModelError(_load_failure(model_path, exc)) from exc
        self._cache: OrderedDict[str, FloatArray] = OrderedDict()

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Embed ``texts``; returns an (n, 384) float32 array of unit vectors."""
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        if len(texts) == 1:
            return self._embed_one(texts[0])[np.newaxis, :].copy()
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        return self._run(texts)

    def _embed_one(self, text: str) -> FloatArray:
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        vector = self._run([text])[0]
        vector.setflags(write=False)
        self._cache[text] = vector
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return vector

    def _run(self, texts: Sequence[str]) -> FloatArray:
        encodings = self._tokenizer.encode_batch(list(texts))
        feeds = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array(
                [e.attention_mask for e in encodings], dtype=np.int64
            ),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        (embedding,) = self._session.run(["embedding"], feeds)
        return np.asarray(embedding, dtype=np.float32)


def _load_failure(path: Path, exc: Exception) -> str:
    reason = "missing" if not path.exists() else f"unreadable ({type(exc).__name__})"
    return f"model file {path} is {reason}; rebuild with: {REBUILD_CMD}"
