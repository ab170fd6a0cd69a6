"""Make a detector look twice: at the frame and at its mirror image, in one ONNX file.

    python models/detector/mirror.py NET.onnx models/detector/model.onnx

The written model runs the network (its nodes copied, its weights shared) on the input and on
the input flipped left to right, turns the second view's boxes back (cx -> W - cx) and returns
both views' boxes, the frame's first: ``[1, 4 + C, 2 x anchors]``, the contract
``onboard.perception.detector`` reads. Non-maximum suppression then keeps, per object, the
better-scored view's box; an object only one view scores well is still found. This is the
horizontal-flip test-time augmentation of the YOLO family (ultralytics' ``augment=True``), moved
into the graph, so everything that loads the model (the runtime, the benchmark, the hard set's
evaluation) measures the same thing, at twice the network's cost. onnx only, no torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: the metadata key a mirrored model carries (and the refusal to mirror twice reads)
KEY = "views"
VIEWS = "frame + mirror image, boxes of both before NMS (models/detector/mirror.py)"
PREFIX = "mirror/"
_END = -(2**63) + 1  # Slice's "to the start" for a negative step


def mirrored(proto: onnx.ModelProto) -> onnx.ModelProto:
    """``proto`` with a second, mirrored view; its single input and output keep their names."""
    graph = proto.graph
    if any(p.key == KEY for p in proto.metadata_props):
        raise ValueError("the model already looks at the mirror image")
    if len(graph.input) != 1 or len(graph.output) != 1:
        raise ValueError("expected one input [1, 3, H, W] and one output [1, 4 + C, anchors]")
    if any(
        a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
        for n in graph.node
        for a in n.attribute
    ):
        raise ValueError("a node with a subgraph (If, Loop, Scan) cannot be copied")
    image, out = graph.input[0].name, graph.output[0].name
    dims = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    rows_anchors = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or not dims[3] or len(rows_anchors) != 3 or not all(rows_anchors[1:]):
        raise ValueError("the model's input width and output shape must be fixed")
    width, (rows, anchors) = dims[3], rows_anchors[1:]
    shared = {i.name for i in graph.initializer} | {""}

    def renamed(name: str) -> str:
        if name == image:
            return PREFIX + "images"
        return name if name in shared else PREFIX + name

    frame_nodes, mirror_nodes = [], []
    for node in graph.node:
        first = onnx.NodeProto()
        first.CopyFrom(node)
        first.output[:] = ["frame/output" if o == out else o for o in node.output]
        frame_nodes.append(first)
        second = onnx.NodeProto()
        second.CopyFrom(node)
        second.name = PREFIX + node.name if node.name else ""
        second.input[:] = [renamed(i) for i in node.input]
        second.output[:] = [renamed(o) for o in node.output]
        mirror_nodes.append(second)

    def const(name: str, values: Sequence[int] | float) -> onnx.TensorProto:
        dtype = np.float32 if isinstance(values, float) else np.int64
        return numpy_helper.from_array(np.array(values, dtype=dtype), name)

    extra = [
        const("mirror/axis_w", [3]),
        const("mirror/step_back", [-1]),
        const("mirror/last", [-1]),
        const("mirror/to_start", [_END]),
        const("mirror/zero", [0]),
        const("mirror/one", [1]),
        const("mirror/rows", [rows]),
        const("mirror/width", float(width)),
    ]
    flip = helper.make_node(
        "Slice",
        [image, "mirror/last", "mirror/to_start", "mirror/axis_w", "mirror/step_back"],
        [PREFIX + "images"],
        name="mirror/flip",
    )
    unflip = [
        helper.make_node(
            "Slice",
            [PREFIX + out, "mirror/zero", "mirror/one", "mirror/one"],
            ["mirror/cx"],
            name="mirror/cx",
        ),
        helper.make_node(
            "Slice",
            [PREFIX + out, "mirror/one", "mirror/rows", "mirror/one"],
            ["mirror/rest"],
            name="mirror/rest",
        ),
        helper.make_node(
            "Sub", ["mirror/width", "mirror/cx"], ["mirror/cx_back"], name="mirror/cx_back"
        ),
        helper.make_node(
            "Concat",
            ["mirror/cx_back", "mirror/rest"],
            ["mirror/output"],
            name="mirror/output",
            axis=1,
        ),
        helper.make_node("Concat", ["frame/output", "mirror/output"], [out], name="views", axis=2),
    ]
    output = helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [1, rows, 2 * anchors])
    new_graph = helper.make_graph(
        [*frame_nodes, flip, *mirror_nodes, *unflip],
        graph.name,
        [graph.input[0]],
        [output],
        [*graph.initializer, *extra],
    )
    result = helper.make_model(new_graph, opset_imports=proto.opset_import)
    result.ir_version = proto.ir_version
    result.producer_name = proto.producer_name
    for entry in proto.metadata_props:
        result.metadata_props.add().CopyFrom(entry)
    view = result.metadata_props.add()
    view.key, view.value = KEY, VIEWS
    onnx.checker.check_model(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a detector as train.py exports it")
    parser.add_argument("out", type=Path, help="where to write the two-view model")
    args = parser.parse_args(argv)
    try:
        proto = mirrored(onnx.load(str(args.source)))
    except (OSError, ValueError, onnx.checker.ValidationError) as exc:
        print(f"mirror.py: error: {args.source}: {exc}", file=sys.stderr)
        return 2
    onnx.save(proto, str(args.out))
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes): {VIEWS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
