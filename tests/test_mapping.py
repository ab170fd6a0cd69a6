"""runtime/mapping.py: free-text replies onto the engage action set, with the real embedder.

The replies here are written for these tests; none comes from the evaluation sets.
"""

from __future__ import annotations

import pytest

from runtime.embedder import Embedder
from runtime.mapping import OUT_OF_SET, ActionMapper, normalise, split_clauses
from runtime.skill import Skill

# ---------------------------------------------------------------------------- normalise


@pytest.mark.parametrize(
    ("reply", "normalised"),
    [
        ("The robot should wave at the person.", "wave at the person"),
        ("  The   humanoid robot should now   wave!  ", "wave"),
        ("I would suggest that the robot wave.", "wave"),
        ("It would be best for the robot to stop.", "stop"),
        ("In this situation, the robot should wait.", "wait"),
        ("First, it should stop; ", "stop"),
        ("Since she is on the phone, the robot should wait.", "wait"),
        ("The robot should wait because the person is busy.", "wait"),
        ("The robot should wait, so that they can finish.", "wait"),
        ("The robot should approach the customer.", "approach the person"),
        ("The robot should smile at him.", "smile at the person"),
        ('The robot should say "Hello there!" to her.', "say something to the person"),
        ("WAIT FOR CUE.", "wait for cue"),
    ],
)
def test_normalise(reply: str, normalised: str) -> None:
    assert normalise(reply) == normalised


def test_split_clauses_keeps_order_and_weak_parts() -> None:
    assert split_clauses("The robot should stop; then it should greet her.") == [
        ["stop"],
        ["greet the person"],
    ]
    assert split_clauses("Stop and look at the person.") == [
        ["stop and look at the person", "stop", "look at the person"]
    ]
    # a leading "Before X, Y" is Y first, then X
    assert split_clauses("Before greeting, the robot should stop.") == [["stop"], ["greeting"]]
    # a quoted phrase is never split at its own commas or "and"
    assert split_clauses('Say "hi, and welcome" to them.') == [["say something to the person"]]


# ---------------------------------------------------------------------------- map


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("The robot should stop moving right away.", "pause"),
        ("I would suggest that the robot halt right away.", "pause"),
        ("The robot should greet the visitor warmly.", "speak"),
        ("The robot should say hi to the guest.", "speak"),
        ("The robot should keep walking toward the person.", "approach"),
        ("The robot should roll closer to the customer.", "approach"),
        ("The robot should hang back until he is off the phone.", "wait"),
        ("The robot should let her wrap up her phone call first.", "wait"),
        ("The robot should wait until the man glances at it.", "wait for cue"),
        ("The robot should wait until the lady spots it.", "wait for cue"),
        ("The robot should hold its gaze on the visitor.", "eye contact"),
    ],
)
def test_single_replies_map(mapper: ActionMapper, reply: str, action: str) -> None:
    result = mapper.map(reply)
    assert result.actions == [action], result.to_record()
    assert result.matched
    [clause] = result.clauses
    assert clause.action == action
    assert clause.score >= mapper.threshold
    assert clause.runner_up != action
    assert clause.runner_up_score <= clause.score


def test_multi_action_reply_keeps_order(mapper: ActionMapper) -> None:
    result = mapper.map("Stop, look at the person, and then greet them.")
    assert result.actions == ["pause", "eye contact", "speak"], result.to_record()


def test_then_with_a_trailing_reason(mapper: ActionMapper) -> None:
    reply = "The robot should approach the person, and then greet them, because they look lost."
    assert mapper.map(reply).actions == ["approach", "speak"]


@pytest.mark.parametrize(
    ("reply", "actions"),
    [
        ("Before greeting, the robot should look the man in the eye.", ["eye contact", "speak"]),
        ("Before saying hello, the robot should come to a halt.", ["pause", "speak"]),
    ],
)
def test_leading_before_is_reordered(mapper: ActionMapper, reply: str, actions: list[str]) -> None:
    assert mapper.map(reply).actions == actions


def test_repeated_action_is_collapsed(mapper: ActionMapper) -> None:
    assert mapper.map("The robot should stop. Then it should stop moving.").actions == ["pause"]


@pytest.mark.parametrize(
    "reply",
    [
        "The robot should water the plants.",
        "The robot should do a backflip.",
        "The robot should recharge its batteries.",  # nearest to a reject anchor
    ],
)
def test_out_of_set_reply_is_no_match(mapper: ActionMapper, reply: str) -> None:
    result = mapper.map(reply)
    assert result.actions == []
    assert not result.matched
    assert [c.action for c in result.clauses] == [None]


def test_reject_anchor_refuses_a_reply_above_threshold(
    mapper: ActionMapper, embedder: Embedder, skill: Skill
) -> None:
    reply = "The robot should take a photo of the person."
    references = {name: list(a.spec.references) for name, a in skill.actions.items()}
    without = ActionMapper(embedder, references, mapper.threshold, mapper.margin)
    assert without.map(reply).actions == ["eye contact"]  # near enough to an action alone
    [clause] = mapper.map(reply).clauses
    assert clause.score >= mapper.threshold
    assert clause.action is None  # ... but nearer to the reject anchor "take a photo"


def test_one_unmatched_clause_makes_the_whole_reply_no_match(mapper: ActionMapper) -> None:
    result = mapper.map("The robot should stop, then sing a song.")
    assert result.actions == []
    assert [c.action for c in result.clauses] == ["pause", None]


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param("The robot should stop, then dance.", id="then-dance"),
        pytest.param("The robot should stop, then leave.", id="then-leave"),
        pytest.param("Before speaking, make eye contact with the person.", id="before-speaking"),
    ],
)
def test_short_unmatched_clause_is_not_silently_dropped(mapper: ActionMapper, reply: str) -> None:
    result = mapper.map(reply)
    matched = [c for c in result.clauses if c.action is not None]
    # either every requested step is acted on, or none (a bottom-up candidate)
    assert result.actions == [] or len(matched) == len(result.clauses), result.to_record()


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("pause", "pause"),
        ("wait for cue", "wait for cue"),
        ("Eye Contact", "eye contact"),
        ("The robot should speak.", "speak"),
        ("  Wait  for   cue ", "wait for cue"),
    ],
)
def test_exact_action_name_maps_with_score_one(
    mapper: ActionMapper, reply: str, action: str
) -> None:
    result = mapper.map(reply)
    assert result.actions == [action]
    [clause] = result.clauses
    assert clause.score == 1.0
    assert clause.runner_up is None


@pytest.mark.parametrize("reply", ["", "   ", "...", "Hmm.", "I don't know."])
def test_contentless_reply_is_no_match(mapper: ActionMapper, reply: str) -> None:
    assert mapper.map(reply).actions == []


@pytest.mark.parametrize("reply", ["The robot should.", "The robot should"])
def test_bare_frame_is_no_match(mapper: ActionMapper, reply: str) -> None:
    assert mapper.map(reply).actions == []


def test_result_record_is_rounded_and_complete(mapper: ActionMapper) -> None:
    record = mapper.map("Stop, look at the person, and then greet them.").to_record()
    assert record["actions"] == ["pause", "eye contact", "speak"]
    clauses = record["clauses"]
    assert isinstance(clauses, list) and len(clauses) == 3
    for clause in clauses:
        assert set(clause) == {"clause", "action", "score", "runner_up", "runner_up_score"}
        assert round(clause["score"], 4) == clause["score"]


# ---------------------------------------------------------------------------- ambiguities


def test_ambiguities_report_near_identical_references_of_different_actions(
    embedder: Embedder,
) -> None:
    mapper = ActionMapper(
        embedder,
        {
            "greet": ["The robot should say hello to the person."],
            "welcome": ["The robot should say hello to that person."],
            "halt": ["The robot should stop moving."],
        },
        reject=["The robot should clean the floor."],
    )
    [(first, second, text_a, text_b, score)] = mapper.ambiguities()
    assert (first, second) == ("greet", "welcome")
    assert (text_a, text_b) == ("say hello to the person", "say hello to that person")
    assert mapper.ambiguity <= score <= 1.0 + 1e-6


def test_ambiguities_ignore_references_of_one_action(embedder: Embedder) -> None:
    mapper = ActionMapper(
        embedder,
        {
            "greet": [
                "The robot should say hello to the person.",
                "The robot should say hello to that person.",
            ],
            "halt": ["The robot should stop moving."],
        },
    )
    assert mapper.ambiguities() == []


def test_ambiguities_include_reject_anchors_and_respect_the_bound(embedder: Embedder) -> None:
    references = {
        "photograph": ["The robot should take a picture."],
        "halt": ["The robot should stop moving."],
    }
    anchors = ["The robot should take a photo."]
    [pair] = ActionMapper(embedder, references, reject=anchors).ambiguities()
    assert pair[:4] == ("photograph", OUT_OF_SET, "take a picture", "take a photo")
    assert ActionMapper(embedder, references, reject=anchors, ambiguity=1.0).ambiguities() == []


def test_engage_skill_has_no_ambiguous_references(mapper: ActionMapper) -> None:
    assert mapper.ambiguities() == []
