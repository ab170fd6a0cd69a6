"""runtime/llm/replies.py: reading what an LLM meant from what it wrote."""

from __future__ import annotations

import contextlib
import math
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from onboard.base.errors import LLMError, LLMReplyError
from onboard.llm.replies import (
    parse_reply,
    reply_action,
    reply_answer,
    reply_phrase,
    reply_wait_time,
)

# ---------------------------------------------------------------------------- parse_reply


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            '```json\n{"action": "Wave at the person.", "reason": "friendly"}\n```',
            {"action": "Wave at the person.", "reason": "friendly"},
            id="json-fence",
        ),
        pytest.param(
            '```\n{"action": "Stop."}\n```',
            {"action": "Stop."},
            id="bare-fence",
        ),
        pytest.param(
            'Here is what I think: ```python\n{"action": "Stop."}\n``` Good luck!',
            {"action": "Stop."},
            id="fence-inside-prose",
        ),
        pytest.param(
            'Sure! Here is my answer: {"action": "Wait.", "reason": "busy"} Hope that helps.',
            {"action": "Wait.", "reason": "busy"},
            id="prose-around-json",
        ),
        pytest.param(
            "Here's my answer: {'action': 'Wait.', 'reason': 'busy'}",
            {"action": "Wait.", "reason": "busy"},
            id="python-dict-after-apostrophe",
        ),
        pytest.param(
            "{'action': 'Greet them.', 'reason': 'they are ready'}",
            {"action": "Greet them.", "reason": "they are ready"},
            id="single-quoted-dict",
        ),
        pytest.param(
            "{“action”: “Look at the person.”, “reason”: “politeness”}",
            {"action": "Look at the person.", "reason": "politeness"},
            id="curly-double-quotes",
        ),
        pytest.param(
            "{‘action’: ‘Stop.’}",
            {"action": "Stop."},
            id="curly-single-quotes",
        ),
        pytest.param(
            '{"action": "Say {hello} now.", "reason": "a } and a { inside"}',
            {"action": "Say {hello} now.", "reason": "a } and a { inside"},
            id="braces-inside-strings",
        ),
        pytest.param(
            'Options like {this} aside, {"action": "Stop."}',
            {"action": "Stop."},
            id="non-dict-braces-before-json",
        ),
        pytest.param(
            '{"Action": "Stop.", "REASON": "x"}',
            {"action": "Stop.", "reason": "x"},
            id="keys-lower-cased",
        ),
        pytest.param(
            '{"action": "Stop.", "detail": {"speed": 0}}',
            {"action": "Stop.", "detail": {"speed": 0}},
            id="nested-dict-kept-whole",
        ),
    ],
)
def test_parse_reply_finds_the_dictionary(text: str, expected: dict[str, Any]) -> None:
    assert parse_reply(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "The robot should wait for the person to finish.",
        "Wait, then greet them.",
        "[1, 2, 3]",
        "{ not a dictionary at all",
    ],
)
def test_parse_reply_falls_back_to_the_text(text: str) -> None:
    assert parse_reply(f"  {text}\n") == {"action": text}


@pytest.mark.parametrize("text", ["", "   \n\t", "``````", "```json\n```"])
def test_parse_reply_empty_raises(text: str) -> None:
    with pytest.raises(LLMReplyError, match="empty"):
        parse_reply(text)


def test_reply_error_is_an_llm_error() -> None:
    # the engine catches LLMError around parse_reply; the reply error must be one
    with pytest.raises(LLMError):
        parse_reply("")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_parse_reply_arbitrary_text_raises_only_reply_errors(text: str) -> None:
    try:
        parsed = parse_reply(text)
    except LLMReplyError:
        assert not text.strip() or "```" in text  # only an empty reply is refused
        return
    assert isinstance(parsed, dict)
    assert all(isinstance(key, str) for key in parsed)


_JSONISH = st.lists(
    st.sampled_from(["{", "}", "[", "]", "(", ")", '"', "'", ":", ",", "1", "a", " ", "\\", "`"]),
    max_size=40,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_JSONISH)
@example("{[]: 1}")
@example('{"a": ' + "[" * 5000 + "]" * 5000 + "}")
def test_parse_reply_jsonish_text_raises_only_reply_errors(text: str) -> None:
    with contextlib.suppress(LLMReplyError):
        parse_reply(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{[]: 1}", id="unhashable-list-key"),
        pytest.param("{{}: 'x'}", id="unhashable-dict-key"),
        pytest.param('{"a": ' + "[" * 5000 + "]" * 5000 + "}", id="deep-nesting"),
    ],
)
def test_parse_reply_odd_structures_do_not_crash(text: str) -> None:
    assert isinstance(parse_reply(text), dict)


def test_parse_reply_string_ending_in_backslash() -> None:
    text = r'Answer: {"action": "Stop.\\", "reason": "}"}'
    assert parse_reply(text) == {"action": "Stop.\\", "reason": "}"}


# ---------------------------------------------------------------------------- reply_action


def test_reply_action_string_is_stripped() -> None:
    assert reply_action({"action": "  Stop moving. \n"}) == "Stop moving."


def test_reply_action_list_is_joined_in_order() -> None:
    reply = {"action": ["Stop", "look at the person", "greet them"]}
    assert reply_action(reply) == "Stop, then look at the person, then greet them"


@pytest.mark.parametrize(
    "reply", [{}, {"action": ""}, {"action": "  "}, {"action": 3}, {"reason": "x"}]
)
def test_reply_action_unusable_raises(reply: dict[str, Any]) -> None:
    with pytest.raises(LLMReplyError, match="action"):
        reply_action(reply)


def test_reply_action_from_parsed_text() -> None:
    assert reply_action(parse_reply("```json\n{'action': ['Wait', 'greet']}\n```")) == (
        "Wait, then greet"
    )


# ---------------------------------------------------------------------------- reply_phrase


@pytest.mark.parametrize(
    ("reply", "phrase"),
    [
        ({"action": "x", "phrase": "  Hi, can I help?  "}, "Hi, can I help?"),
        ({"action": "x", "speech": "Hello!"}, "Hello!"),
        ({"action": "x", "say": "Good morning."}, "Good morning."),
        ({"action": "x", "utterance": "Welcome."}, "Welcome."),
        ({"action": 'The robot should say "Hello, can I help you?"'}, "Hello, can I help you?"),
        ({"action": "The robot should say “Hello there!” and smile."}, "Hello there!"),
        (
            {"action": "The robot should say 'Excuse me, do you need help?'"},
            "Excuse me, do you need help?",
        ),
        ({"action": 'Greet them with "welcome to the desk"'}, "welcome to the desk"),
        (
            {"action": "Wait until the person's done, then say 'Hi, need any help?'"},
            "Hi, need any help?",
        ),
    ],
)
def test_reply_phrase_found(reply: dict[str, Any], phrase: str) -> None:
    assert reply_phrase(reply) == phrase


def test_reply_phrase_key_wins_over_quoted_action() -> None:
    assert reply_phrase({"action": 'Say "Hello there."', "phrase": "Good day."}) == "Good day."


@pytest.mark.parametrize(
    "reply",
    [
        {"action": "The robot should greet the person."},
        {"action": "The robot shouldn't move until the person's done."},
        {"action": ["Say 'Hello there.'"]},
        {"phrase": "   ", "action": "Stop."},
        {},
    ],
)
def test_reply_phrase_none(reply: dict[str, Any]) -> None:
    assert reply_phrase(reply) is None


def test_reply_phrase_single_quoted_with_apostrophe() -> None:
    reply = {"action": "The robot should say 'Hello, I'm here to help.'"}
    assert reply_phrase(reply) == "Hello, I'm here to help."


# ---------------------------------------------------------------------------- reply_wait_time


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (3, 3.0),
        (2.5, 2.5),
        (0, 0.0),
        ("4", 4.0),
        ("3 seconds", 3.0),
        ("about 10.5 s", 10.5),
        ("+7", 7.0),
    ],
)
def test_reply_wait_time_numbers(value: object, seconds: float) -> None:
    assert reply_wait_time({"wait_time": value}) == seconds


@pytest.mark.parametrize("value", ["inf", "Infinity", "INF", None, math.inf])
def test_reply_wait_time_unbounded(value: object) -> None:
    assert math.isinf(reply_wait_time({"wait_time": value}))


def test_reply_wait_time_falls_back_to_action_text() -> None:
    assert reply_wait_time({"action": "Wait 5 seconds."}) == 5.0
    assert math.isinf(reply_wait_time({"reason": "no key at all"}))


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (-1, "not a duration"),
        ("-2 seconds", "not a duration"),
        (math.nan, "not a duration"),
        ("a while", "holds no number"),
        (True, "boolean"),
        ([3], "type list"),
    ],
)
def test_reply_wait_time_errors(value: object, match: str) -> None:
    with pytest.raises(LLMReplyError, match=match):
        reply_wait_time({"wait_time": value})


def test_reply_wait_time_inf_inside_a_word() -> None:
    assert reply_wait_time({"wait_time": "Given the information, wait 5 seconds"}) == 5.0


# ---------------------------------------------------------------------------- reply_answer


@pytest.mark.parametrize(
    ("value", "answer"),
    [
        (True, True),
        (False, False),
        ("yes", True),
        ("Yes, the person is leaving.", True),
        ("  YES", True),
        ("no", False),
        ("No.", False),
    ],
)
def test_reply_answer(value: object, answer: bool) -> None:
    assert reply_answer({"answer": value}) is answer


def test_reply_answer_falls_back_to_action_text() -> None:
    assert reply_answer({"action": "Yes."}) is True
    assert reply_answer(parse_reply("No, they will stay.")) is False


@pytest.mark.parametrize("value", ["maybe", "", None, 1, ["yes"]])
def test_reply_answer_neither(value: object) -> None:
    with pytest.raises(LLMReplyError, match="neither yes nor no"):
        reply_answer({"answer": value})
