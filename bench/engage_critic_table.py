"""The Engage critic's table from evaluation runs: one row per run and group, side by side.

    python bench/engage_critic_table.py LABEL=EVAL.json[:RECORDINGS] ...

Each argument is a label, the ``--json`` output of ``onboard eval engage`` and, optionally,
the ``--record`` folder of the same run (then the LLM's reply latency p50/p99 and the
requests past robot.toml's deadline are counted from it: the local model's latency becomes
virtual time, so a slow reply is a late decision). Prints a markdown table and writes
bench/results/engage_critic_table.json. The runs themselves are minutes (random) to an hour
(SmolLM2 with the critic, whose vetoes are re-asks): this only reads them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from _common import summary, write_results

KINDS = ("success", "spoke_not_ready", "never_spoke")


def latencies(folder: Path) -> dict[str, Any]:
    """Reply latency (s) of every LLM request in the recordings, and how many were late."""
    seconds, late, deadline = [], 0, None
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["kind"] == "header":
                deadline = record["robot"]["llm"]["deadline"]
            elif record["kind"] == "reply":
                seconds.append(record["latency"])
                late += deadline is not None and record["latency"] > deadline
    stats = summary(seconds)
    return {
        "requests": len(seconds),
        "late": late,
        "deadline_s": deadline,
        "p50_s": stats.get("p50_ms", 0) / 1000,
        "p99_s": stats.get("p99_ms", 0) / 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="LABEL=EVAL.json[:RECORDINGS]")
    args = parser.parse_args()
    rows = []
    for run in args.runs:
        label, _, where = run.partition("=")
        report_path, _, folder = where.partition(":")
        report = json.loads(Path(report_path).read_text(encoding="utf-8"))
        timing = latencies(Path(folder)) if folder else None
        for group, totals in report["groups"].items():
            kinds = {k: totals["kinds"][k] for k in KINDS}
            rows.append({"run": label, "group": group, "trials": totals["trials"], **kinds,
                         **totals["per_episode"], "critic": report["critic"],
                         "llm": report["llm"], "timing": timing})  # fmt: skip
    print("| run | group | successes | spoke while not ready | never spoke | vetoes / episode |"
          " fallbacks / episode | LLM reply p50 / p99, late |")  # fmt: skip
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        t = r["timing"]
        timing = (
            f"{t['p50_s']:.2f} / {t['p99_s']:.2f} s, {t['late']} of {t['requests']}" if t else ""
        )
        print(f"| {r['run']} | {r['group']} | {r['success']}/{r['trials']} |"
              f" {r['spoke_not_ready']} | {r['never_spoke']} | {r['vetoes']:.1f} |"
              f" {r['fallbacks']:.1f} | {timing} |")  # fmt: skip
    print(f"wrote {write_results('engage_critic_table', {'rows': rows})}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
