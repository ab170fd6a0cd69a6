"""What the Engage critic adds to one decision, beside what the mapper already costs there.

    python bench/engage_critic.py [--n 400]

Per checked proposal the critic builds the state (the activity's MiniLM embedding, gaze,
distance, the running action and its age) and scores the first action against WAIT in one
ONNX batch (``Q(s, a) - Q(s, wait) / gamma``, the range check included). The embedding is
computed once per activity text and then cached: a person's activity seldom changes between
two decisions, so most checks find it cached ("warm"); the first check after a change pays
for it ("cold", a text never seen before). The reference, measured in the same run, is the
mapper turning a free-text LLM reply into actions (its own embedding of a new reply and
matching), the other local cost of a decision. Everything runs on one core, one thread.

Prints a table (p50 / p99 / max, milliseconds) and writes bench/results/engage_critic.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from _common import environment, fmt_ms, robot_and_skill, summary, write_results
from rich.console import Console
from rich.table import Table

from onboard.catalog import make_mapper
from onboard.hri.critic import open_skill_critic

ACTIVITIES = (
    "The person is talking on a phone.",
    "The person is sitting on a chair, waiting.",
    "A woman is filling in a long form at the counter.",
    "The person is walking out of the room.",
    "A man looks around the lobby as if searching for someone to ask.",
)
REPLIES = (
    "The robot should wait until the person finishes the call.",
    "The robot should greet the person and offer help.",
    "The robot should move a little closer and make eye contact.",
    "The robot should hold back and watch for a glance.",
)


def timed(n: int, call: Callable[[int], Any]) -> list[float]:
    out = []
    for i in range(n):
        began = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - began)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="calls per row")
    args = parser.parse_args()
    robot, skill = robot_and_skill("engage")
    critic = open_skill_critic(skill, robot.embedder_dir, threads=1)
    if critic is None:
        raise SystemExit(f"{skill.path}: no [critic]")
    mapper = make_mapper(robot, skill)
    check = critic.check(lambda: ("wait", 3.0))
    steps: Any = [SimpleNamespace(action="speak")]

    def seen(text: str) -> Any:
        return SimpleNamespace(visible=True, activity=text, toward=False, distance=2.0, t=9.0)

    def cold(i: int) -> str:
        return f"{ACTIVITIES[i % len(ACTIVITIES)]} (seen {i} times)"

    for text in ACTIVITIES:  # load and warm every session once
        check.check(steps, seen(text))
    mapper.map(REPLIES[0])

    def cached(i: int) -> Any:
        return seen(ACTIVITIES[i % len(ACTIVITIES)])

    cases: dict[str, Callable[[int], Any]] = {
        "state, activity cached": lambda i: critic.features.vector(cached(i), "wait", 3.0),
        "state, new activity (embedding)": lambda i: critic.features.vector(
            seen(cold(i)), "wait", 3.0
        ),
        "score: Q(s,a), Q(s,wait), range": lambda i: check.score("speak", cached(i)),
        "critic check, activity cached": lambda i: check.check(steps, cached(i)),
        "critic check, new activity": lambda i: check.check(steps, seen(cold(args.n + i))),
        "reference: mapper, new reply": lambda i: mapper.map(f"{REPLIES[i % len(REPLIES)]} ({i})"),
    }
    n = args.n
    rows = {name: summary(timed(n, call)) for name, call in cases.items()}
    table = Table(title=f"Engage critic per decision, one core ({n} calls a row)")
    table.add_column("what")
    table.add_column("p50 / p99 / max")
    for name, stats in rows.items():
        table.add_row(name, fmt_ms(stats))
    Console().print(table)
    path = write_results("engage_critic", {"environment": environment(), "rows": rows,
                                           "model": str(critic.path), "n": n})  # fmt: skip
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
