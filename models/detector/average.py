"""Average detectors in weight space: the weighted mean of every float weight of models that share
one graph, such as the shipped model and a model fine-tuned from it by train.py --init.

    python models/detector/average.py --out /tmp/model.onnx v1.onnx=0.6 /tmp/stage1.onnx=0.4

train.py --init folds each batch norm into its conv and trains the folded weights, so a model and
the models fine-tuned from it hold the same tensors and their mean is a model of the same graph
(robust fine-tuning by weight-space ensembling, WiSE-FT). The first model gives the graph and the
metadata; the others must match it tensor for tensor. Needs onnx (the dev or train extra).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from onboard.base.digest import file_sha256


class AverageError(Exception):
    """Models that cannot be averaged: named in one line."""


def parse_weighted(text: str) -> tuple[Path, float]:
    """``PATH=WEIGHT`` as (path, weight); a weight is a positive number."""
    path, _, weight = text.rpartition("=")
    try:
        value = float(weight)
    except ValueError:
        value = float("nan")
    if not path or not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: not PATH=WEIGHT with a weight above 0")
    return Path(path), value


def _graph(path: Path) -> onnx.ModelProto:
    try:
        return onnx.load(str(path))
    except OSError as exc:
        raise AverageError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    except DecodeError:
        raise AverageError(f"{path}: not an ONNX model") from None


def average(models: list[tuple[Path, float]]) -> onnx.ModelProto:
    """The weighted mean of ``models`` (path, weight); weights need not sum to 1."""
    if not models:
        raise AverageError("no models to average")
    loaded = [(path, _graph(path), weight) for path, weight in models]
    first_path, first, _ = loaded[0]
    ops = [node.op_type for node in first.graph.node]
    tensors = {i.name: numpy_helper.to_array(i) for i in first.graph.initializer}
    total = sum(weight for *_, weight in loaded)
    sums = {name: np.zeros(a.shape, np.float64) for name, a in tensors.items()}
    for path, model, weight in loaded:
        if [node.op_type for node in model.graph.node] != ops:
            raise AverageError(f"{path}: another graph than {first_path}'s")
        arrays = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        if {n: a.shape for n, a in arrays.items()} != {n: a.shape for n, a in tensors.items()}:
            raise AverageError(f"{path}: other tensors than {first_path}'s")
        for name, array in arrays.items():
            if array.dtype.kind == "f":
                sums[name] += weight * array.astype(np.float64)
            elif not np.array_equal(array, tensors[name]):
                raise AverageError(f"{path}: {name} is not a float tensor and differs")
    out = onnx.ModelProto()
    out.CopyFrom(first)
    for init in out.graph.initializer:
        array = tensors[init.name]
        if array.dtype.kind == "f":
            mean = (sums[init.name] / total).astype(array.dtype)
            init.CopyFrom(numpy_helper.from_array(mean, init.name))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=parse_weighted, metavar="PATH=WEIGHT")
    parser.add_argument("--out", type=Path, required=True, help="where to write the mean model")
    args = parser.parse_args(argv)
    try:
        model = average(args.models)
    except AverageError as exc:
        print(f"average.py: error: {exc}", file=sys.stderr)
        return 2
    onnx.save(model, str(args.out))
    digest = file_sha256(args.out)
    shares = ", ".join(f"{path.name} {weight:g}" for path, weight in args.models)
    print(f"{args.out}: sha256 {digest}, the mean of {shares}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
