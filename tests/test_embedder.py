"""The MiniLM embedder on the real model in models/minilm (int8-stored, fp32 compute)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from onboard.base.errors import ModelError
from onboard.grounding.embedder import DEFAULT_MODEL_DIR, Embedder, session_options

TEXTS = [
    "Please turn left at the next corner.",
    "What's the weather like tomorrow?",
    "hi",
    "",
    "The robot patrolled the warehouse, checking every aisle. " * 40,  # > 128 tokens
]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    return Embedder(DEFAULT_MODEL_DIR)


def test_shape_and_dtype(minilm: Embedder) -> None:
    vectors = minilm.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384)
    assert vectors.dtype == np.float32
    assert minilm.embed([]).shape == (0, 384)


def test_unit_norm(minilm: Embedder) -> None:
    norms = np.linalg.norm(minilm.embed(TEXTS), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)


@pytest.mark.parametrize(
    ("text", "paraphrase", "unrelated"),
    [
        ("Stop moving immediately.", "Halt right now!", "I love chocolate cake."),
        (
            "The battery is almost empty.",
            "My battery level is very low.",
            "Where is the nearest train station?",
        ),
        (
            "Can you pick up the red cup?",
            "Please grab the red mug.",
            "The stock market fell sharply today.",
        ),
        ("Thank you so much!", "Thanks a lot!", "Turn left at the corner."),
    ],
)
def test_paraphrase_closer_than_unrelated(
    minilm: Embedder, text: str, paraphrase: str, unrelated: str
) -> None:
    a, p, u = minilm.embed([text, paraphrase, unrelated])
    assert float(a @ p) > float(a @ u) + 0.2


def test_batch_equals_one_by_one() -> None:
    batched = Embedder(DEFAULT_MODEL_DIR).embed(TEXTS)
    single = Embedder(DEFAULT_MODEL_DIR)
    one_by_one = np.concatenate([single.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(batched, one_by_one, atol=1e-5)


def test_cached_vectors_are_not_aliased(minilm: Embedder) -> None:
    first = minilm.embed(["hello there"])
    expected = first.copy()
    first[:] = 0.0
    np.testing.assert_array_equal(minilm.embed(["hello there"]), expected)


def test_missing_dir_raises_model_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelError) as info:
        Embedder(missing)
    message = str(info.value)
    assert str(missing) in message
    assert "build.py" in message
    assert "\n" not in message


def test_unreadable_model_raises_model_error_at_the_first_text(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"not an onnx file")
    (tmp_path / "tokenizer.json").write_bytes((DEFAULT_MODEL_DIR / "tokenizer.json").read_bytes())
    embedder = Embedder(tmp_path, cache=tmp_path / "cache")  # the session starts when needed
    with pytest.raises(ModelError, match=r"model\.onnx"):
        embedder.embed_references(["hello"])


# kernels whose results depend on the CPU's int8 instructions
INT8_KERNELS = {
    "MatMulInteger",
    "DynamicQuantizeLinear",
    "QuantizeLinear",
    "QLinearMatMul",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "MatMulNBits",
    "QGemm",
}


def test_model_stores_int8_weights_as_dequantized_constants() -> None:
    graph = onnx.load(str(DEFAULT_MODEL_DIR / "model.onnx")).graph
    assert not {n.op_type for n in graph.node} & INT8_KERNELS
    constants = {t.name: t for t in graph.initializer}
    dequantize = [n for n in graph.node if n.op_type == "DequantizeLinear"]
    assert len(dequantize) == 38  # 36 linear layers, the word and position embeddings
    for node in dequantize:
        weight, scale = (constants[name] for name in node.input)
        assert weight.data_type == onnx.TensorProto.INT8
        assert scale.data_type == onnx.TensorProto.FLOAT
        assert {a.name: a.i for a in node.attribute}["block_size"] == 32


def test_session_folds_the_weights_to_fp32(tmp_path: Path) -> None:
    """What onnxruntime runs: fp32 MatMuls only, no dequantization left, no int8 kernel."""
    options = session_options()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(
        str(DEFAULT_MODEL_DIR / "model.onnx"), options, providers=["CPUExecutionProvider"]
    )
    graph = onnx.load(str(tmp_path / "optimized.onnx")).graph
    ops = {n.op_type for n in graph.node}
    assert "MatMul" in ops
    assert not ops & (INT8_KERNELS | {"DequantizeLinear"})
    types = {t.data_type for t in graph.initializer}
    assert not types & {onnx.TensorProto.INT8, onnx.TensorProto.UINT8}


def test_unoptimized_session_agrees_within_kernel_noise(minilm: Embedder) -> None:
    plain = Embedder(DEFAULT_MODEL_DIR, optimize=False)
    np.testing.assert_allclose(plain.embed(TEXTS), minilm.embed(TEXTS), atol=1e-5)
