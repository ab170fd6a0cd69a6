"""Critic scoring speed: the ONNX critic against the same MLP in numpy and torch, one core.

    python bench/critic.py [--quick] [--state 40 --agents 3 --vocabulary 40 --hidden 64 64]

One MLP of the critic contract (inputs ``state`` float32 [B, S], ``actions`` int64 [B, N],
output ``q`` float32 [B]; each slot's action an embedding Gather added to the state's first
layer), random weights of the shape given (speed does not depend on the values), run by

- onnxruntime through ``onboard.collab.critic.QModel`` (what the loops use: batches of one
  and two rows through inputs and output bound once, larger ones through the binding's
  ``run``; one intra-op thread, sequential);
- onnxruntime through the public ``InferenceSession.run`` and through IOBinding with
  preallocated inputs and output (the per-call overhead cuts tried);
- numpy (``MlpWeights.forward``, BLAS held to one thread);
- torch (``onboard.collab.train.torch_module``, one thread, inference mode), if installed.

Per engine: p50 / p99 of one call at batch 1 and 64 (microseconds), candidates a second at
batch 1024 and 4096 (batch / p50), and the largest difference from numpy's Q. Then the time
the refinement adds per decision (LLM time excluded), through ``Critic``: scoring one
proposal (ReAd-S local advantage, ReAd-J joint advantage, OOD guard included), scoring every
action of one agent and picking the best, and every joint action of the team.

Targets (issue 14): >= 2,000,000 candidates/s batched and batch-1 p99 < 20 us on one core.
Prints tables and writes bench/results/critic.json.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"  # one core for numpy's BLAS too (before numpy is imported)

import argparse  # noqa: E402
import itertools  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from _common import ROOT, environment, verdict, write_results  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from onboard.collab.card import CriticCard, Metrics, OodRange, Training, write_card  # noqa: E402
from onboard.collab.critic import Critic, QModel, file_sha256  # noqa: E402
from onboard.collab.mlp import MlpWeights, to_onnx  # noqa: E402

GOAL_RATE = 2_000_000  # candidates a second, batched
GOAL_P99_US = 20.0  # batch 1
LATENCY_BATCHES = (1, 64)
RATE_BATCHES = (1024, 4096)
Engine = Callable[[np.ndarray, np.ndarray], Any]


def timed(fn: Callable[[], object], reps: int) -> np.ndarray:
    for _ in range(min(reps, 50)):  # warm up
        fn()
    out = np.empty(reps)
    for k in range(reps):
        began = time.perf_counter_ns()
        fn()
        out[k] = time.perf_counter_ns() - began
    return out / 1000.0  # microseconds


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def iobinding_engine(path: Path) -> Callable[[int], Callable[[np.ndarray, np.ndarray], Any]]:
    """Per batch size: inputs and output preallocated and bound once; a call copies the
    batch into the bound buffers, runs, and reads the bound output."""
    sess = session(path)

    def for_batch(batch: int) -> Callable[[np.ndarray, np.ndarray], Any]:
        state = np.zeros((batch, sess.get_inputs()[0].shape[1]), np.float32)
        names = {i.name: i for i in sess.get_inputs()}
        actions = np.zeros((batch, names["actions"].shape[1]), np.int64)
        q = np.zeros(batch, np.float32)
        binding = sess.io_binding()
        binding.bind_ortvalue_input("state", ort.OrtValue.ortvalue_from_numpy(state))
        binding.bind_ortvalue_input("actions", ort.OrtValue.ortvalue_from_numpy(actions))
        binding.bind_ortvalue_output("q", ort.OrtValue.ortvalue_from_numpy(q))

        def run(s: np.ndarray, a: np.ndarray) -> np.ndarray:
            np.copyto(state, s)
            np.copyto(actions, a)
            sess.run_with_iobinding(binding)
            return q

        return run

    return for_batch


def torch_engine(weights: MlpWeights) -> Engine | str:
    try:
        import torch
    except ImportError:
        return "not installed"
    from onboard.collab.train import torch_module

    torch.set_num_threads(1)
    net = torch_module(weights)

    def run(s: np.ndarray, a: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            out: np.ndarray = net(torch.from_numpy(s), torch.from_numpy(a)).numpy()
            return out

    return run


def measure(engines: dict[str, Engine | str], iob: Callable[[int], Engine], weights: MlpWeights,
            reps: dict[int, int]) -> dict[str, Any]:  # fmt: skip
    rng = np.random.default_rng(0)
    rows: dict[str, Any] = {}
    for name, engine in {**engines, "onnxruntime IOBinding": "iobinding"}.items():
        if isinstance(engine, str) and engine != "iobinding":
            rows[name] = {"status": engine}
            continue
        row: dict[str, Any] = {"status": "ok", "max_diff_vs_numpy": 0.0}
        for batch in LATENCY_BATCHES + RATE_BATCHES:
            states = rng.random((batch, weights.state_size), dtype=np.float32)
            actions = rng.integers(0, weights.vocabulary_size, (batch, weights.n_agents))
            actions = actions.astype(np.int64)
            run = iob(batch) if engine == "iobinding" else engine
            assert not isinstance(run, str)
            q = np.asarray(run(states, actions))
            diff = float(np.abs(q - weights.forward(states, actions)).max())
            row["max_diff_vs_numpy"] = max(row["max_diff_vs_numpy"], diff)
            us = timed(lambda r=run, s=states, a=actions: r(s, a), reps[batch])
            p50, p99 = (float(v) for v in np.percentile(us, [50, 99]))
            row[f"b{batch}"] = {"p50_us": p50, "p99_us": p99, "per_s": batch / p50 * 1e6}
        rows[name] = row
    return rows


def decision_costs(critic: Critic, reps: int) -> dict[str, Any]:
    """What the refinement adds to one decision, LLM excluded."""
    rng = np.random.default_rng(1)
    state = rng.random(critic.model.state_size, dtype=np.float32)
    n, v = critic.n_agents, len(critic.vocabulary)
    actions = list(range(1, v))
    joints = np.array(list(itertools.product(actions, repeat=n)), np.int64)
    cases: dict[str, tuple[Callable[[], object], int, int]] = {
        "ReAd-S: score one proposal (local advantage)": (
            lambda: critic.local_advantage(state, [2] * (n - 1), 3), 1, reps),
        "ReAd-J: score one joint proposal (joint advantage)": (
            lambda: critic.joint_advantage(state, [2] * n), 1, reps),
        f"ReAd-S: every action of the last agent ({v - 1}), pick the best": (
            lambda: int(np.argmax(critic.local_advantages(state, [2] * (n - 1), actions).values)),
            v - 1, reps // 4),
        f"ReAd-J: every joint action ({len(joints)}), pick the best": (
            lambda: int(np.argmax(critic.joint_advantages(state, joints).values)),
            len(joints), max(10, reps // 2000)),
    }  # fmt: skip
    out = {}
    for name, (fn, candidates, count) in cases.items():
        us = timed(fn, count)
        p50, p99 = (float(x) for x in np.percentile(us, [50, 99]))
        out[name] = {"candidates": candidates, "p50_us": p50, "p99_us": p99}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=int, default=40, help="state features S")
    parser.add_argument("--agents", type=int, default=3, help="agent slots N")
    parser.add_argument("--vocabulary", type=int, default=40, help="actions per slot V")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()
    console = Console(width=160)
    scale = 10 if args.quick else 1
    reps = {1: 20000 // scale, 64: 5000 // scale, 1024: 600 // scale, 4096: 200 // scale}

    weights = MlpWeights.random(args.state, args.agents, args.vocabulary, tuple(args.hidden), 0)
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "critic.onnx"
        to_onnx(weights, model)
        write_card(_card(model, weights), model.with_suffix(".toml"))
        qmodel = QModel(model)
        public = session(model)
        engines: dict[str, Engine | str] = {
            "onnxruntime (QModel, the runtime's)": qmodel,
            "onnxruntime InferenceSession.run": lambda s, a: public.run(
                ["q"], {"state": s, "actions": a}
            )[0],
            "numpy": weights.forward,
            "torch": torch_engine(weights),
        }
        rows = measure(engines, iobinding_engine(model), weights, reps)
        decisions = decision_costs(Critic.load(model), reps[1] // 2)

    shape = {"state": args.state, "agents": args.agents, "vocabulary": args.vocabulary,
             "hidden": args.hidden}  # fmt: skip
    ours = rows["onnxruntime (QModel, the runtime's)"]
    best_rate = max(ours[f"b{b}"]["per_s"] for b in RATE_BATCHES)
    goals = {
        "candidates_per_s": best_rate,
        "candidates_per_s_met": best_rate >= GOAL_RATE,
        "batch1_p99_us": ours["b1"]["p99_us"],
        "batch1_p99_met": ours["b1"]["p99_us"] < GOAL_P99_US,
    }
    show(console, shape, rows, decisions, goals)
    results = {"environment": environment(), "shape": shape, "engines": rows,
               "decision": decisions, "goals": goals, "quick": args.quick}  # fmt: skip
    path = write_results("critic", results)
    console.print(f"wrote {path.relative_to(ROOT)}")


def _card(model: Path, weights: MlpWeights) -> CriticCard:
    s, n, v = weights.state_size, weights.n_agents, weights.vocabulary_size
    return CriticCard(
        task="bench", level="random", agents=[f"agent{i}" for i in range(n)],
        vocabulary=["ABSENT", "WAIT", *(f"ACT {k}" for k in range(v - 2))],
        features=[f"f{k}" for k in range(s)], gamma=0.95, sha256=file_sha256(model),
        ood=OodRange(low=[0.0] * s, high=[1.0] * s),
        training=Training(data="none (random weights)", episodes=1, heldout_episodes=0,
                          transitions=1, behaviour="none", augmentation=0.0, seed=0),
        metrics=Metrics(heldout_transitions=0, advantage_pairs=0),
    )  # fmt: skip


def show(console: Console, shape: dict[str, Any], rows: dict[str, Any],
         decisions: dict[str, Any], goals: dict[str, Any]) -> None:  # fmt: skip
    title = (f"Critic scoring, one core: S={shape['state']}, N={shape['agents']},"
             f" V={shape['vocabulary']}, hidden {shape['hidden']}")  # fmt: skip
    table = Table(title=title)
    for col in ("engine", "batch 1 p50 / p99 us", "batch 64 p50 / p99 us",
                "cand/s @1024", "cand/s @4096", "max |dQ| vs numpy"):  # fmt: skip
        table.add_column(col, justify="left" if col == "engine" else "right")
    for name, row in rows.items():
        if row["status"] != "ok":
            table.add_row(name, row["status"], "", "", "", "")
            continue
        table.add_row(
            name,
            f"{row['b1']['p50_us']:.1f} / {row['b1']['p99_us']:.1f}",
            f"{row['b64']['p50_us']:.1f} / {row['b64']['p99_us']:.1f}",
            f"{row['b1024']['per_s'] / 1e6:.2f} M",
            f"{row['b4096']['per_s'] / 1e6:.2f} M",
            f"{row['max_diff_vs_numpy']:.1e}",
        )
    console.print(table)
    table = Table(title="What the refinement adds per decision (Critic API, LLM excluded)")
    for col in ("decision", "candidates", "p50 us", "p99 us"):
        table.add_column(col, justify="left" if col == "decision" else "right")
    for name, row in decisions.items():
        table.add_row(name, str(row["candidates"]), f"{row['p50_us']:.1f}", f"{row['p99_us']:.1f}")
    console.print(table)
    console.print(
        f"targets: {goals['candidates_per_s'] / 1e6:.2f} M candidates/s batched (goal >= 2 M):"
        f" {verdict(goals['candidates_per_s_met'])}; batch-1 p99 {goals['batch1_p99_us']:.1f} us"
        f" (goal < 20 us): {verdict(goals['batch1_p99_met'])}"
    )


if __name__ == "__main__":
    main()
