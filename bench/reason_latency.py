"""What the free "reason" costs the real local model (SmolLM2-135M on llama.cpp).

    python bench/reason_latency.py [N]

Asks N first-stage, N wait_time and N lose_person questions under constraint three times,
with the reason free, short (``maxLength`` = the skill's ``reason_chars``) and absent, and
reports the reply latency and completion tokens of each. A generous deadline: this measures
how long a reply takes, not whether it meets robot.toml's. Needs the local-llm extra.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from typing import Any

from _common import first_stage_prompts, robot_and_skill, write_results

from onboard.base.errors import OnboardError
from onboard.llm import prompts
from onboard.llm.client import ChatClient, Message

MODES = ("free", "short", "none")
ACTIVITIES = (
    "The person is talking on the phone.",
    "The person is walking toward the exit.",
    "The person is reading a newspaper.",
    "The person is looking at a map on the wall.",
    "The person is typing on a laptop.",
    "The person is standing near the entrance.",
)
DEADLINE = 60.0


def main() -> int:
    if importlib.util.find_spec("llama_cpp") is None:
        print("reason_latency: skipped (local-llm extra not installed)")
        return 0
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    robot, skill = robot_and_skill()
    deadline = robot.llm.deadline
    # one attempt, waited for to the end: a retried request would leave the server busy
    patient = {"read_timeout": DEADLINE, "retries": 0, "deadline": DEADLINE}
    llm = robot.llm.model_copy(update=patient)
    firsts = first_stage_prompts(robot, skill, n, seed=robot.eval.seed)
    activities = [ACTIVITIES[i % len(ACTIVITIES)] for i in range(n)]
    from onboard.llm.local_server import local_server

    rows: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with local_server() as url, ChatClient(llm, base_url=url) as chat:
        chat.complete(firsts[0], prompts.plan_schema(list(skill.actions)), deadline=DEADLINE)
        for mode in MODES:
            reason: dict[str, Any] | None = {
                "free": {"type": "string"},
                "short": {"type": "string", "maxLength": skill.prompt.reason_chars},
                "none": None,
            }[mode]
            asks: dict[str, list[tuple[list[Message], dict[str, Any]]]] = {
                "plan": [(m, prompts.plan_schema(list(skill.actions), reason)) for m in firsts],
                "wait_time": [
                    (
                        prompts.wait_time(skill, a),
                        prompts.wait_time_schema(reason, skill.questions.wait_times),
                    )
                    for a in activities
                ],
                "lose_person": [
                    (prompts.lose_person(skill, a, 5.0), prompts.answer_schema(reason))
                    for a in activities
                ],
            }
            rows[mode] = {}
            for purpose, items in asks.items():
                found = rows[mode].setdefault(purpose, [])
                for messages, schema in items:
                    began = time.perf_counter()
                    try:
                        result = chat.complete(messages, schema, deadline=DEADLINE)
                        found.append(
                            {
                                "seconds": time.perf_counter() - began,
                                "tokens": result.completion_tokens,
                                "text": result.text,
                            }
                        )
                    except OnboardError as exc:
                        found.append({"seconds": time.perf_counter() - began, "error": str(exc)})
    print(f"{n} questions of each kind, constrained; median / max seconds, median tokens")
    print(f"{'reason':8} " + " ".join(f"{p:>26}" for p in ("plan", "wait_time", "lose_person")))
    for mode in MODES:
        cells = []
        for purpose in ("plan", "wait_time", "lose_person"):
            got = rows[mode][purpose]
            secs = [g["seconds"] for g in got]
            toks = [g["tokens"] for g in got if "tokens" in g] or [0]
            over = sum(s > deadline for s in secs)
            cells.append(
                f"{statistics.median(secs):5.2f} / {max(secs):5.2f} s "
                f"{statistics.median(toks):4.0f}t {over}>{deadline:g}s"
            )
        print(f"{mode:8} " + " ".join(f"{c:>26}" for c in cells))
    write_results("reason_latency", {"n": n, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
