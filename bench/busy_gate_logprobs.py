"""Could the local model gate "speak" on a yes/no question about the person? (issue 10)

    python bench/busy_gate_logprobs.py

For every activity text of the shipped and held-out Engage scenarios, labelled busy when the
scenario's label over that activity is "not-ready", asks the bundled model three short yes/no
questions about the person alone (busy? free to talk? would speaking interrupt?) under
constraint, and scores each by P(yes) / (P(yes) + P(no)) at the answer token. A gate is only
worth having if that probability ranks busy people apart from free ones: the table gives the
ranking AUC per question and group (0.5 = chance). Needs the local-llm extra.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from typing import Any

from _common import ROOT, environment, write_results, yes_probability
from rich.console import Console
from rich.table import Table

SYSTEM = "You answer questions about a scene with yes or no."
#: each question, and whether "yes" means busy
QUESTIONS = {
    "busy": ("Is the person busy with something right now?", True),
    "free": ("Is the person free to talk to a robot right now?", False),
    "interrupt": ("Would speaking to the person now interrupt what they are doing?", True),
}
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
}


def labelled_activities() -> list[tuple[str, str, bool]]:
    """(group, activity text, busy) for each activity of each scenario, busy by its label."""
    found = []
    folders = {
        "shipped": ROOT / "skills" / "scenarios",
        "held-out": ROOT / "skills" / "scenarios" / "heldout",
    }
    for group, folder in folders.items():
        for path in sorted(folder.glob("*.toml")):
            scenario = tomllib.loads(path.read_text(encoding="utf-8"))
            activities = scenario["activity"]
            end = scenario["scenario"]["end"]
            for i, activity in enumerate(activities):
                until = activities[i + 1]["at"] if i + 1 < len(activities) else end
                middle = (activity["at"] + until) / 2
                state = next(
                    lab["state"] for lab in scenario["label"] if lab["from"] <= middle <= lab["to"]
                )
                found.append((group, activity["text"], state == "not-ready"))
    return found


def ranking_auc(busy: list[float], free: list[float]) -> float:
    pairs = sum((b > f) + 0.5 * (b == f) for b in busy for f in free)
    return pairs / (len(busy) * len(free))


def main() -> int:
    if importlib.util.find_spec("llama_cpp") is None:
        print("busy_gate_logprobs: skipped (local-llm extra not installed)")
        return 0
    from onboard.llm.local_server import local_server

    items = labelled_activities()
    rows: list[dict[str, Any]] = []
    with local_server() as url:
        for name, (question, yes_means_busy) in QUESTIONS.items():
            scores = []
            for group, text, busy in items:
                messages = [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"{text}\n{question} Answer yes or no."},
                ]
                p = yes_probability(url, messages, SCHEMA)
                if p is None:
                    print(f"busy_gate_logprobs: the server returned no logprobs for {name!r}")
                    return 1
                scores.append((group, busy, p if yes_means_busy else 1.0 - p))
            for group in ("shipped", "held-out"):
                busy = [p for g, b, p in scores if g == group and b]
                free = [p for g, b, p in scores if g == group and not b]
                rows.append(
                    {
                        "question": name,
                        "group": group,
                        "busy": len(busy),
                        "free": len(free),
                        "auc": ranking_auc(busy, free),
                        "mean_busy": sum(busy) / len(busy),
                        "mean_free": sum(free) / len(free),
                    }
                )
    table = Table(title="P(busy) from yes/no likelihoods, SmolLM2-135M (AUC 0.5 = chance)")
    for column in ("question", "group", "busy / free texts", "AUC", "mean P(busy): busy", "free"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["question"],
            row["group"],
            f"{row['busy']} / {row['free']}",
            f"{row['auc']:.2f}",
            f"{row['mean_busy']:.2f}",
            f"{row['mean_free']:.2f}",
        )
    Console().print(table)
    path = write_results("busy_gate_logprobs", {"environment": environment(), "rows": rows})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
