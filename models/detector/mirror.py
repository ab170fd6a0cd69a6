"""Make a detector look twice: at the frame and at its mirror image, in one ONNX file.

    python models/detector/mirror.py NET.onnx OUT.onnx
    python models/detector/mirror.py NET.onnx OUT.onnx --view NET_AT_448.onnx

The written model runs the network (its nodes copied, its weights shared) on the input and on
the input flipped left to right, turns the second view's boxes back (cx -> W - cx) and returns
both views' boxes, the frame's first: ``[1, 4 + C, 2 x anchors]``, the contract
``onboard.perception.detector`` reads. Non-maximum suppression then keeps, per object, the
better-scored view's box; an object only one view scores well is still found. This is the
flip of the YOLO family's test-time augmentation (ultralytics' ``augment=True`` flips and
rescales), moved into the graph, so everything that loads the model (the runtime, the
benchmark, the hard set's evaluation) measures the same thing, at twice the network's cost:
with the shipped network, hard set 0.940 to 0.949 and 83 to 44 fps end to end on one thread
(CARD.md, "Two views of each frame"), so it is not shipped. onnx only, no torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

#: the metadata key a mirrored model carries (and the refusal to mirror twice reads)
KEY = "views"
VIEWS = "boxes of both views before NMS (models/detector/mirror.py)"
PREFIX = "mirror/"
_END = -(2**63) + 1  # Slice's "to the start" for a negative step


def _layout(proto: onnx.ModelProto) -> tuple[int, int, int, int]:
    """(height, width, rows, anchors) of a model of the contract, or ValueError."""
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
    dims = [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim]
    out = [d.dim_value for d in graph.output[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or not all(dims[2:]) or len(out) != 3 or not all(out[1:]):
        raise ValueError("the model's input size and output shape must be fixed")
    return dims[2], dims[3], out[1], out[2]


def mirrored(proto: onnx.ModelProto, view: onnx.ModelProto | None = None) -> onnx.ModelProto:
    """``proto`` with a second view, of the input flipped left to right; its single input and
    output keep their names. ``view``: the network that takes that view, when not ``proto``'s
    own nodes and weights (the same network exported at a larger input: the flipped input is
    resized to it, bilinear, and its boxes scaled back)."""
    second = view or proto
    height, width, rows, anchors = _layout(proto)
    view_height, view_width, view_rows, view_anchors = _layout(second)
    if view_rows != rows:
        raise ValueError(f"the view's network has {view_rows} output rows, not {rows}")
    image, out = proto.graph.input[0].name, proto.graph.output[0].name
    view_image, view_out = second.graph.input[0].name, second.graph.output[0].name
    # the mirror view's tensors are prefixed; its weights are the frame's own when it is one
    shared = ({i.name for i in proto.graph.initializer} if view is None else set()) | {""}

    def renamed(name: str) -> str:
        if name == view_image:
            return PREFIX + "images"
        return name if name in shared else PREFIX + name

    frame_nodes, mirror_nodes = [], []
    for node in proto.graph.node:
        first = onnx.NodeProto()
        first.CopyFrom(node)
        first.output[:] = ["frame/output" if o == out else o for o in node.output]
        frame_nodes.append(first)
    for node in second.graph.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        copy.name = PREFIX + node.name if node.name else ""
        copy.input[:] = [renamed(i) for i in node.input]
        copy.output[:] = [renamed(o) for o in node.output]
        mirror_nodes.append(copy)
    view_weights = []
    if view is not None:
        for init in view.graph.initializer:
            weight = onnx.TensorProto()
            weight.CopyFrom(init)
            weight.name = PREFIX + init.name
            view_weights.append(weight)

    def const(name: str, values: Sequence[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, dtype=np.int64), name)

    sx, sy = width / view_width, height / view_height
    extra = [
        const("mirror/axis_w", [3]),
        const("mirror/step_back", [-1]),
        const("mirror/last", [-1]),
        const("mirror/to_start", [_END]),
        const("mirror/zero", [0]),
        const("mirror/one", [1]),
        const("mirror/four", [4]),
        const("mirror/rows", [rows]),
        numpy_helper.from_array(np.array(width, np.float32), "mirror/width"),
        numpy_helper.from_array(
            np.array([sx, sy, sx, sy], np.float32).reshape(1, 4, 1), "mirror/box_scale"
        ),
    ]
    resized = (view_height, view_width) != (height, width)
    flip = [
        helper.make_node(
            "Slice",
            [image, "mirror/last", "mirror/to_start", "mirror/axis_w", "mirror/step_back"],
            ["mirror/flipped" if resized else PREFIX + "images"],
            name="mirror/flip",
        )
    ]
    if resized:
        extra.append(const("mirror/size", [1, 3, view_height, view_width]))
        flip.append(
            helper.make_node(
                "Resize",
                ["mirror/flipped", "", "", "mirror/size"],
                [PREFIX + "images"],
                name="mirror/resize",
                mode="linear",
                coordinate_transformation_mode="half_pixel",
            )
        )

    def cut(source: str, start: str, stop: str, name: str) -> onnx.NodeProto:
        return helper.make_node("Slice", [source, start, stop, "mirror/one"], [name], name=name)

    turned = PREFIX + view_out
    unflip = [
        cut(turned, "mirror/zero", "mirror/four", "mirror/boxes"),
        helper.make_node(
            "Mul", ["mirror/boxes", "mirror/box_scale"], ["mirror/scaled"], name="mirror/scaled"
        ),
        cut("mirror/scaled", "mirror/zero", "mirror/one", "mirror/cx"),
        cut("mirror/scaled", "mirror/one", "mirror/four", "mirror/cy_w_h"),
        cut(turned, "mirror/four", "mirror/rows", "mirror/scores"),
        helper.make_node(
            "Sub", ["mirror/width", "mirror/cx"], ["mirror/cx_back"], name="mirror/cx_back"
        ),
        helper.make_node(
            "Concat",
            ["mirror/cx_back", "mirror/cy_w_h", "mirror/scores"],
            ["mirror/output"],
            name="mirror/output",
            axis=1,
        ),
        helper.make_node("Concat", ["frame/output", "mirror/output"], [out], name="views", axis=2),
    ]
    total = anchors + view_anchors
    output = helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [1, rows, total])
    new_graph = helper.make_graph(
        [*frame_nodes, *flip, *mirror_nodes, *unflip],
        proto.graph.name,
        [proto.graph.input[0]],
        [output],
        [*proto.graph.initializer, *view_weights, *extra],
    )
    result = helper.make_model(new_graph, opset_imports=proto.opset_import)
    result.ir_version = proto.ir_version
    result.producer_name = proto.producer_name
    for entry in proto.metadata_props:
        result.metadata_props.add().CopyFrom(entry)
    entry = result.metadata_props.add()
    entry.key = KEY
    entry.value = f"frame {width}x{height} + mirror image {view_width}x{view_height}; {VIEWS}"
    onnx.checker.check_model(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="a detector as train.py exports it")
    parser.add_argument("out", type=Path, help="where to write the two-view model")
    parser.add_argument(
        "--view",
        type=Path,
        help="the network that takes the mirror view (the source's own by default), such as"
        " the source's weights exported at a larger input",
    )
    args = parser.parse_args(argv)
    loaded = []
    for path in filter(None, (args.source, args.view)):
        try:
            proto = onnx.load(str(path))
            _layout(proto)
        except (OSError, ValueError, DecodeError) as exc:
            print(f"mirror.py: error: {path}: {exc}", file=sys.stderr)
            return 2
        loaded.append(proto)
    try:
        result = mirrored(*loaded)
    except (ValueError, onnx.checker.ValidationError) as exc:
        print(f"mirror.py: error: {args.view or args.source}: {exc}", file=sys.stderr)
        return 2
    onnx.save(result, str(args.out))
    views = next(p.value for p in result.metadata_props if p.key == KEY)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes): {views}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
