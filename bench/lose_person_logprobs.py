"""Does the local model's yes/no likelihood tell moving people from busy ones? (lose_person)

    python bench/lose_person_logprobs.py

Asks the lose_person question under constraint with ``logprobs: true, top_logprobs: 10``
(llama-cpp-python's server returns them, from the model's distribution before the grammar
masks it) and prints P(yes) / (P(yes) + P(no)) at the answer token, the variants "yes", "Yes",
"no", "No" summed. A threshold on it is only worth having if moving activities score above
the others. Needs the local-llm extra.
"""

from __future__ import annotations

import importlib.util
import sys

from _common import robot_and_skill, yes_probability

from onboard.llm import prompts

MOVING = (
    "The person is walking toward the exit.",
    "The person is leaving the room.",
    "The person is walking past the robot.",
    "The person is heading to the elevator.",
)
STAYING = (
    "The person is reading a newspaper.",
    "The person is talking on the phone.",
    "The person is sitting on a bench.",
    "The person is looking at a map on the wall.",
)


def main() -> int:
    if importlib.util.find_spec("llama_cpp") is None:
        print("lose_person_logprobs: skipped (local-llm extra not installed)")
        return 0
    from onboard.llm.local_server import local_server

    _, skill = robot_and_skill()
    schema = prompts.answer_schema(prompts.reason_schema(skill))
    with local_server() as url:
        for group, activities in (("moving", MOVING), ("staying", STAYING)):
            for activity in activities:
                messages = [dict(m) for m in prompts.lose_person(skill, activity, 5.0)]
                p = yes_probability(url, messages, schema)
                shown = "no logprobs" if p is None else f"{p:.2f}"
                print(f"{group:8} P(yes) {shown:>11}  {activity}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
