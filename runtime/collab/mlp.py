"""The critic's network as plain arrays: one definition for ONNX export, numpy and torch.

``Q(s, a) = w_out . h_L + b_out`` with ``h_1 = relu(s W_s + sum_i E[i V + a_i] + b_1)`` and
``h_k = relu(h_{k-1} W_k + b_k)``. Each agent slot's action index picks one row of the
embedding table ``E`` [N V, H] (the same as one-hot times a weight matrix, without building
the one-hot), added to the state's first layer: scoring costs one Gather, not a wide concat.

:func:`to_onnx` writes that graph with the ``onnx`` package (a dev/train dependency, imported
inside), inputs ``state`` float32 [B, S] and ``actions`` int64 [B, N], output ``q`` float32
[B], and the sizes in the model's metadata so a loader can check the card against them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["META_AGENTS", "META_STATE", "META_VOCABULARY", "OPSET", "MlpWeights", "to_onnx"]

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

#: the opset written; onnxruntime >= 1.20 (the runtime's floor) reads it
OPSET = 17
IR_VERSION = 8
META_VOCABULARY = "onboard.critic.vocabulary_size"
META_AGENTS = "onboard.critic.n_agents"
META_STATE = "onboard.critic.state_size"


@dataclass(frozen=True)
class MlpWeights:
    """Weights of the critic MLP (float32). ``hidden`` holds the layers after the first."""

    state_in: FloatArray  # [S, H]
    embed: FloatArray  # [N * V, H]: slot i, action a -> row i * V + a
    bias_in: FloatArray  # [H]
    hidden: tuple[tuple[FloatArray, FloatArray], ...]  # ([H, H'], [H']) each
    out_w: FloatArray  # [H_last]
    out_b: float
    n_agents: int

    def __post_init__(self) -> None:
        rows, width = self.embed.shape
        if rows % self.n_agents or self.state_in.shape[1] != width:
            raise ValueError(f"embedding {self.embed.shape} does not fit {self.n_agents} agents")

    @property
    def state_size(self) -> int:
        return int(self.state_in.shape[0])

    @property
    def vocabulary_size(self) -> int:
        return int(self.embed.shape[0]) // self.n_agents

    @property
    def offsets(self) -> IntArray:
        return np.arange(self.n_agents, dtype=np.int64) * self.vocabulary_size

    @classmethod
    def random(
        cls,
        state_size: int,
        n_agents: int,
        vocabulary_size: int,
        hidden: tuple[int, ...],
        seed: int,
    ) -> MlpWeights:
        """He-initialised weights: the untrained critic of a shape (a control, and tests)."""
        rng = np.random.default_rng(seed)

        def layer(fan_in: int, fan_out: int) -> FloatArray:
            scale = np.sqrt(2.0 / fan_in)
            weights: FloatArray = (rng.standard_normal((fan_in, fan_out)) * scale).astype(
                np.float32
            )
            return weights

        first = hidden[0]
        rest = []
        for a, b in itertools.pairwise(hidden):
            rest.append((layer(a, b), np.zeros(b, np.float32)))
        return cls(
            state_in=layer(state_size, first),
            embed=(rng.standard_normal((n_agents * vocabulary_size, first)) * 0.5).astype(
                np.float32
            ),
            bias_in=np.zeros(first, np.float32),
            hidden=tuple(rest),
            out_w=(rng.standard_normal(hidden[-1]) * np.sqrt(1.0 / hidden[-1])).astype(np.float32),
            out_b=0.0,
            n_agents=n_agents,
        )

    def forward(self, state: FloatArray, actions: IntArray) -> FloatArray:
        """Q for a batch, in numpy (the reference the ONNX graph must equal)."""
        h = state @ self.state_in + self.embed[actions + self.offsets].sum(axis=1) + self.bias_in
        np.maximum(h, 0.0, out=h)
        for w, b in self.hidden:
            h = h @ w + b
            np.maximum(h, 0.0, out=h)
        q: FloatArray = (h @ self.out_w + np.float32(self.out_b)).astype(np.float32, copy=False)
        return q


def to_onnx(weights: MlpWeights, path: Path) -> None:
    """Write the graph of :class:`MlpWeights` to ``path`` (needs the ``onnx`` package)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def init(name: str, value: npt.NDArray[np.generic]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.ascontiguousarray(value), name)

    inits = [
        init("offsets", weights.offsets),
        init("embed", weights.embed),
        init("state_in", weights.state_in),
        init("bias_in", weights.bias_in),
        init("sum_axes", np.array([1], np.int64)),
        init("out_w", weights.out_w.reshape(-1, 1)),
        init("out_b", np.array([weights.out_b], np.float32)),
        init("flat", np.array([-1], np.int64)),
    ]
    nodes = [
        helper.make_node("Add", ["actions", "offsets"], ["rows"]),
        helper.make_node("Gather", ["embed", "rows"], ["slot_embed"], axis=0),
        helper.make_node("ReduceSum", ["slot_embed", "sum_axes"], ["action_in"], keepdims=0),
        helper.make_node("Gemm", ["state", "state_in", "bias_in"], ["state_h"]),
        helper.make_node("Add", ["state_h", "action_in"], ["pre0"]),
        helper.make_node("Relu", ["pre0"], ["h0"]),
    ]
    last = "h0"
    for k, (w, b) in enumerate(weights.hidden, start=1):
        inits += [init(f"w{k}", w), init(f"b{k}", b)]
        nodes += [
            helper.make_node("Gemm", [last, f"w{k}", f"b{k}"], [f"pre{k}"]),
            helper.make_node("Relu", [f"pre{k}"], [f"h{k}"]),
        ]
        last = f"h{k}"
    nodes += [
        # a Gemm to [B, 1], not a MatMul by a vector: onnxruntime's matrix-vector MatMul took
        # 70% of the time at batch 4096 (bench/critic.py)
        helper.make_node("Gemm", [last, "out_w", "out_b"], ["q_column"]),
        helper.make_node("Reshape", ["q_column", "flat"], ["q"]),
    ]
    graph = helper.make_graph(
        nodes,
        "critic",
        [
            helper.make_tensor_value_info(
                "state", TensorProto.FLOAT, ["batch", weights.state_size]
            ),
            helper.make_tensor_value_info(
                "actions", TensorProto.INT64, ["batch", weights.n_agents]
            ),
        ],
        [helper.make_tensor_value_info("q", TensorProto.FLOAT, ["batch"])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="onboard",
        ir_version=IR_VERSION,
    )
    for key, value in (
        (META_VOCABULARY, weights.vocabulary_size),
        (META_AGENTS, weights.n_agents),
        (META_STATE, weights.state_size),
    ):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
