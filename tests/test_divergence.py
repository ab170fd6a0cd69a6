"""A replay that diverges says what differs: the field and both values (for a prompt, the
first differing line with a line of context each side). One function serves every replay."""

from __future__ import annotations

from onboard.loop.divergence import request_difference


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


PROMPT = "You are a robot.\nThe person is reading.\nThey look away.\nChoose an action."


def test_the_same_request_has_no_difference() -> None:
    recorded = {"purpose": "plan", "messages": [user(PROMPT)], "schema": {"type": "object"}}
    assert request_difference(recorded, [user(PROMPT)], "plan") is None
    assert request_difference(recorded, [user(PROMPT)], schema={"type": "object"},
                              check_schema=True) is None  # fmt: skip


def test_a_prompt_line_is_shown_with_a_line_of_context_each_side() -> None:
    replayed = PROMPT.replace("reading", "juggling knives")
    what = request_difference({"purpose": "plan", "messages": [user(PROMPT)]}, [user(replayed)])
    assert what == (
        "message 1 (user), line 2: recorded 'The person is reading.', replayed 'The person is"
        " juggling knives.' (context: line 1 'You are a robot.'; line 3 'They look away.')"
    )
    longer = request_difference({"messages": [user(PROMPT)]}, [user(PROMPT + "\nNow.")])
    assert longer is not None and "line 5: recorded (no such line), replayed 'Now.'" in longer


def test_the_purpose_the_count_the_role_and_the_schema_are_named() -> None:
    recorded = {"purpose": "plan", "messages": [user("a")], "schema": None}
    assert request_difference(recorded, [user("a")], "goal") == (
        "its purpose: recorded 'plan', replayed 'goal'"
    )
    assert request_difference(recorded, [user("a"), user("b")]) == (
        "the number of messages: recorded 1, replayed 2"
    )
    assert request_difference(recorded, [{"role": "system", "content": "a"}]) == (
        "message 1's 'role': recorded 'user', replayed 'system'"
    )
    schema = {"type": "object"}
    assert request_difference(recorded, [user("a")], schema=schema, check_schema=True) == (
        "its schema: recorded None, replayed {'type': 'object'}"
    )


def test_a_message_in_parts_names_the_part() -> None:
    def parts(text: str, url: str) -> dict[str, object]:
        image = {"type": "image_url", "image_url": {"url": url}}
        return {"role": "user", "content": [{"type": "text", "text": text}, image]}

    recorded = {"messages": [parts("What is on the table?", "data:image/png;base64,AAAA")]}
    image = request_difference(
        recorded, [parts("What is on the table?", "data:image/jpeg;base64,/9j")]
    )
    assert image is not None and image.startswith("message 1 (user), part 2 (image_url): recorded")
    assert "image/png" in image and "image/jpeg" in image
    text = request_difference(recorded, [parts("What is under it?", "data:image/png;base64,AAAA")])
    assert text == (
        "message 1 (user), part 1 (text), line 1: recorded 'What is on the table?', replayed"
        " 'What is under it?'"
    )


def test_a_long_line_is_shown_from_a_little_before_its_first_difference() -> None:
    head = "Initiate a conversation at a facility. The robot is approaching the person. "
    was = head + "The person is reading a book. The person is looking at the robot."
    now = head + "The person is reading a book. The person is not looking at the robot."
    recorded = {"purpose": "plan", "messages": [{"role": "user", "content": was}]}
    what = request_difference(recorded, [{"role": "user", "content": now}], "plan")
    assert what is not None and "from character 88: " in what
    assert "'is reading a book. The person is looking at the robot.'" in what
    assert "'is reading a book. The person is not looking at the robot.'" in what
