"""The team prompts (contract section 4) and the reading of replies, on their own."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from onboard.base.errors import LLMReplyError
from onboard.collab.prompts import (
    HistoryEntry,
    Situation,
    agent_request,
    joint_request,
    read_reply,
    reply_schema,
)
from onboard.llm.structured import reply_problem
from onboard.loop.kind import Attempt

VOCABULARY = ("ABSENT", "WAIT", "DUMP", "MOVE blue_cube", "MOVE red_cube", "SWEEP red_cube")


@dataclass(frozen=True)
class Agent:
    name: str
    role: str
    reach: tuple[str, ...]


@dataclass(frozen=True)
class Task:
    description: str
    agents: tuple[Agent, ...]


TASK = Task(
    "Sweep the red cube into the bin.",
    (Agent("Alice", "holds the broom", ("left", "middle")), Agent("Bob", "holds the dustpan.", ())),
)
SITUATION = Situation(TASK, "red_cube: left. blue_cube: right. dustpan: empty.", VOCABULARY)


def headers(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_agent_request_has_every_section_in_order() -> None:
    messages = agent_request(
        SITUATION,
        "Bob",
        history=[HistoryEntry(0, "Alice: MOVE red_cube", "score 0.40, accepted")],
        history_note="Scores are advantages.",
        chosen={"Alice": "MOVE red_cube"},
        refused=[
            Attempt("Bob: DUMP", "score -0.31 (under the threshold 0.00)", -0.31),
            Attempt("Bob: SWEEP red_cube", "infeasible: Bob cannot reach red_cube"),
        ],
        feedback=["DUMP did nothing: the dustpan is empty"],
    )
    assert messages[0]["role"] == "system" and messages[1]["role"] == "user"
    user = messages[1]["content"]
    sections = ["Task", "Agents", "Actions", "History", "State", "Chosen this step"]
    assert headers(user) == [*sections, "Refused this step", "Feedback", "Reply"]
    agents = "Alice: holds the broom. Can reach: left, middle.\nBob: holds the dustpan. Can reach"
    assert f"{agents}: nothing." in user
    assert "Bob: WAIT, DUMP, MOVE blue_cube, MOVE red_cube, SWEEP red_cube" in user
    assert "ABSENT" not in user
    assert "Scores are advantages.\nstep 0: Alice: MOVE red_cube -> score 0.40, accepted" in user
    assert "## Chosen this step\nAlice: MOVE red_cube\n" in user
    assert "Bob: DUMP -> score -0.31 (under the threshold 0.00)\n" in user
    assert "Bob: SWEEP red_cube -> infeasible: Bob cannot reach red_cube\n" in user
    assert user.endswith(
        "## Reply\nPlan the next action for Bob only. Reply exactly as:\nNAME Bob ACTION <action>"
    )


def test_optional_sections_are_left_out_when_empty() -> None:
    user = agent_request(SITUATION, "Alice")[1]["content"]
    assert headers(user) == ["Task", "Agents", "Actions", "State", "Reply"]


def test_joint_request_asks_for_execute_or_json() -> None:
    free = joint_request(SITUATION, ["Alice", "Bob"])[1]["content"]
    assert free.endswith(
        "Plan one action for each of Alice, Bob. Reply exactly as:\nEXECUTE\n"
        "NAME Alice ACTION <action>\nNAME Bob ACTION <action>"
    )
    constrained = joint_request(SITUATION, ["Alice", "Bob"], constrained=True)[1]["content"]
    assert constrained.endswith(
        "Plan one action for each of Alice, Bob. Reply exactly as JSON:\n"
        '{"Alice": "<action>", "Bob": "<action>"}'
    )


def test_schema_is_an_enum_of_the_actions_per_agent() -> None:
    schema = reply_schema({"Alice": VOCABULARY, "Bob": ["WAIT", "SWEEP red_cube"]})
    assert schema["required"] == ["Alice", "Bob"]
    assert schema["properties"]["Alice"]["enum"] == list(VOCABULARY[1:])  # ABSENT left out
    assert schema["properties"]["Bob"]["enum"] == ["WAIT", "SWEEP red_cube"]
    assert reply_problem('{"Alice": "DUMP", "Bob": "WAIT"}', schema) is None
    assert reply_problem('{"Alice": "DUMP", "Bob": "DUMP"}', schema) is not None
    assert reply_problem('{"Alice": "ABSENT", "Bob": "WAIT"}', schema) is not None
    assert reply_problem('{"Alice": "DUMP"}', schema) is not None


def test_execute_text_is_read() -> None:
    text = "Sure.\nEXECUTE\nNAME Alice ACTION move  RED_cube.\nNAME Bob ACTION `WAIT`\n"
    assert read_reply(text, ["Alice", "Bob"], VOCABULARY) == {
        "Alice": "MOVE red_cube",
        "Bob": "WAIT",
    }
    # one line, a fence, and a line for an agent not asked
    one_line = "```\nEXECUTE NAME Alice ACTION DUMP NAME Bob ACTION SWEEP red_cube\n```"
    assert read_reply(one_line, ["Bob"], VOCABULARY) == {"Bob": "SWEEP red_cube"}


def test_json_is_read() -> None:
    reply = json.dumps({"alice": "MOVE blue_cube", "Bob": "DUMP", "Carol": "WAIT"})
    assert read_reply(reply, ["Alice", "Bob"], VOCABULARY) == {
        "Alice": "MOVE blue_cube",
        "Bob": "DUMP",
    }


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("NAME Alice ACTION DUMP", "no ACTION for Bob"),
        ("NAME Alice ACTION JUMP\nNAME Bob ACTION WAIT", "unknown action 'JUMP' for Alice"),
        ("NAME Alice ACTION MOVE purple_cube\nNAME Bob ACTION WAIT",
         "unknown object 'purple_cube' for Alice (MOVE takes: blue_cube, red_cube)"),
        ("NAME Alice ACTION MOVE\nNAME Bob ACTION WAIT",
         "incomplete action 'MOVE' for Alice (MOVE takes: blue_cube, red_cube)"),
        ("NAME Alice ACTION ABSENT\nNAME Bob ACTION WAIT", "unknown action 'ABSENT' for Alice"),
        ("NAME Alice ACTION DUMP\nNAME Alice ACTION WAIT\nNAME Bob ACTION WAIT",
         "two actions for Alice: 'DUMP' and 'WAIT'"),
        ('{"Alice": "DUMP", "Bob": 3}', "action for Bob is int, not text"),
        ('{"Alice": "DUMP", ', "reply is not JSON"),
        ("[1, 2]", "no ACTION for Alice"),
        ("  ", "empty reply"),
    ],
)  # fmt: skip
def test_unusable_replies_say_why(reply: str, reason: str) -> None:
    with pytest.raises(LLMReplyError) as caught:
        read_reply(reply, ["Alice", "Bob"], VOCABULARY)
    assert str(caught.value).startswith(reason)
    assert "\n" not in str(caught.value)


def test_a_proposal_refused_again_for_the_same_reason_is_counted_not_repeated() -> None:
    low = Attempt("Bob: DUMP", "score -0.31 (under the threshold 0.00)", -0.31)
    other = Attempt("Bob: WAIT", "score 0.00 (under the threshold 0.10)", 0.0)
    user = agent_request(SITUATION, "Bob", refused=[low, other, low, low])[1]["content"]
    assert (
        "## Refused this step\nBob: DUMP -> score -0.31 (under the threshold 0.00) (3 times)\n"
        "Bob: WAIT -> score 0.00 (under the threshold 0.10)\n## Reply"
    ) in user
