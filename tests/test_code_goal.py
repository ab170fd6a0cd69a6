"""A code skill's goal (runtime/replan/goal.py): the goal reader's reply is read by tidy's
rules (words of the request, objects seen, cued relations, every mention used), and what it
cannot say is left judged, for the Extra Bot; relations are checked against a perceived
scene state. No network, no twin: the states are written as perception gives them."""

from __future__ import annotations

import json

import pytest

from onboard.loop.engine import Verdict
from onboard.replan.goal import CodeGoal
from onboard.replan.kind import CodeObservation
from onboard.replan.scene_state import ObjectState, SceneState
from onboard.testing.vlm_standin.goals import read_goal
from onboard.testing.vlm_standin.seeing import from_text

TABLE = SceneState(
    (
        ObjectState("box", "box", (0.45, 0.28, 0.03), on="table"),
        ObjectState("blue block", "blue block", (0.51, -0.13, 0.09), on="red block"),
        ObjectState("red block", "red block", (0.52, -0.13, 0.02), on="table"),
        ObjectState("plate", "plate", (0.3, 0.0, 0.01), on="table"),
        ObjectState("plate 2", "plate", (0.3, 0.2, 0.01), on="table"),
    )
)
RED_IN_BOX = {"relation": "in", "object": "red block", "target": "box"}


def look(state: SceneState = TABLE) -> CodeObservation:
    return CodeObservation(0.0, state)


def read(request: str, reply: object) -> CodeGoal:
    goal = CodeGoal(request)
    text = reply if isinstance(reply, str) else json.dumps(reply)
    assert goal.read(text, look()) == Verdict(True, score=1.0)  # never ends the episode
    return goal


def test_a_relation_the_request_asks_for_is_read_and_checked_against_what_is_seen() -> None:
    goal = read("Put the red block into the box.",
                {"mentions": ["the red block", "box"], "relations": [RED_IN_BOX]})  # fmt: skip
    assert not goal.judged and goal.to_record() == {"relations": [RED_IN_BOX]}
    # what is missing, and where the camera sees it instead: what a planner needs
    missing = "the red block in the box (it is on the table, with the blue block on it)"
    assert goal.met(look()).feedback == f"not yet: {missing}"
    inside = ObjectState("red block", "red block", (0.45, 0.28, 0.05), on="box", inside="box")
    after = SceneState((TABLE.objects[0], TABLE.objects[1], inside))
    assert goal.met(look(after)).ok
    held = SceneState((TABLE.objects[0], inside), held="red block")
    assert not goal.met(look(held)).ok  # still in the gripper over the box: not let go


@pytest.mark.parametrize(
    ("request_", "reply", "why"),
    [
        ("Put the red block into the box.", "the red block goes in the box",
         "the reply has no mentions and relations"),
        ("Put the red block into the box.", {"mentions": ["green block", "box"],
         "relations": [RED_IN_BOX]}, "'green block' is not words of the request"),
        ("Put the toy into the box.", {"mentions": ["toy", "box"], "relations": []},
         "no toy is seen"),
        ("Put the plate into the box.", {"mentions": ["plate", "box"], "relations": []},
         "no relation says what must hold"),
        ("Put the block into the box.", {"mentions": ["block", "box"],
         "relations": [RED_IN_BOX]}, "no block is seen"),
        ("Move the red block away from the box.", {"mentions": ["red block", "box"],
         "relations": [RED_IN_BOX]}, "no word of the request asks for in"),
        ("Put the red block and the blue block into the box.",
         {"mentions": ["red block", "blue block", "box"], "relations": [RED_IN_BOX]},
         "nothing is asked of blue block"),
        ("Put the red block into the box.", {"mentions": ["red block", "box"],
         "relations": [{"relation": "in", "object": "red block", "target": "none"}]},
         "in needs a target"),
        ("I'm hungry.", {"mentions": [], "relations": []}, "no relation says what must hold"),
    ],
)  # fmt: skip
def test_a_reply_the_request_does_not_support_leaves_the_goal_to_the_extra_bot(
    request_: str, reply: object, why: str
) -> None:
    goal = read(request_, reply)
    assert goal.judged and why in goal.why
    assert goal.to_record()["judged"] is True
    assert not goal.met(look()).ok  # judged: never met by the relations


def test_a_kind_names_the_one_object_of_that_kind_and_not_one_of_two() -> None:
    on_plate = {"relation": "on", "object": "red block", "target": "plate"}
    goal = read("Put the red block onto the plate.",
                {"mentions": ["red block", "plate"], "relations": [on_plate]})  # fmt: skip
    assert not goal.judged  # "plate" is the name of one object seen (the other is "plate 2")
    two = SceneState((TABLE.objects[2], TABLE.objects[3], TABLE.objects[4]))
    renamed = SceneState((*two.objects[:1], ObjectState("plate 1", "plate", (0.3, 0.0, 0.01))))
    both = SceneState((*renamed.objects, two.objects[2]))
    ambiguous = CodeGoal("Put the red block onto the plate.")
    reply = {"mentions": ["red block", "plate"],
             "relations": [{**on_plate, "target": "plate 1"}]}  # fmt: skip
    ambiguous.read(json.dumps(reply), look(both))
    assert ambiguous.judged and ambiguous.why == "the plate could be any of plate 1, plate 2"


def test_the_stand_in_reads_a_put_into_request_and_leaves_the_rest_to_the_extra_bot() -> None:
    view = from_text(TABLE.text())
    put = read_goal("Put the red block into the box.", view)
    assert put == {"mentions": ["red block", "box"], "relations": [RED_IN_BOX]}
    assert read("Put the red block into the box.", put).relations  # read by the runtime
    for request in ("I'm hungry.", "Stack the blocks as in the picture.",
                    "Put the toy that looks like a bird into the box."):  # fmt: skip
        reply = read_goal(request, view)
        assert reply["relations"] == [] and read(request, reply).judged
