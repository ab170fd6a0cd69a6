"""One place, one object (runtime/perception/readings.py): the readings the wider detectors
were seen to add in the twin (a stacked block's box scored also as the block on it, a box
straddling two queued blocks), with the positions the scene observer measured, and the stacks
that must stay unsure."""

from __future__ import annotations

import numpy as np

from onboard.perception.readings import Reading, one_place, second_readings

UP = np.array([0.0, 0.0, 1.0])


def reading(label: str, score: float, x: float, z: float = 0.025, size: float = 0.04) -> Reading:
    return Reading(label, score, np.array([x, 0.0, z]), size)


def test_the_lower_block_of_a_pair_read_also_as_the_upper_one_is_one_block() -> None:
    pair = [
        reading("red block", 0.89, 0.45, 0.065),  # on the blue block
        reading("blue block", 0.79, 0.45),
        reading("red block", 0.38, 0.451),  # the blue block's place, read as red
    ]
    assert second_readings(pair, UP) == {2}


def test_a_box_between_two_queued_blocks_is_neither() -> None:
    # measured in the belt queue: the weak green box is at one place with the red block and
    # with the green one (its centre between them), the green block 3.8 cm from the red one
    queue = [
        reading("red block", 0.75, 0.546, size=0.041),
        reading("green block", 0.63, 0.508, size=0.045),
        reading("green block", 0.35, 0.534, size=0.044),
    ]
    assert one_place(queue[2], queue[0], UP) and one_place(queue[2], queue[1], UP)
    assert second_readings(queue, UP) == {2}


def test_a_weaker_box_of_the_same_class_at_one_place_is_the_same_object() -> None:
    twice = [reading("blue block", 0.92, 0.217, 0.022), reading("blue block", 0.34, 0.233, 0.0)]
    assert second_readings(twice, UP) == {1}


def test_a_block_seen_only_at_another_ones_place_stays_and_the_stack_is_unsure() -> None:
    # a tower facing the camera whose boxes merge: the red block has no other reading, so it
    # may be the one on top, placed where the blue one is
    tower = [reading("blue block", 0.8, 0.45), reading("red block", 0.5, 0.452)]
    assert second_readings(tower, UP) == set()
    # the stronger red one is at the blue block's place too: nothing accounts for the weak one
    both = [*tower, reading("red block", 0.6, 0.449)]
    assert second_readings(both, UP) == {1}
    apart = [reading("red block", 0.3, 0.30), reading("red block", 0.9, 0.45)]
    assert second_readings(apart, UP) == set()


def test_a_block_read_at_the_place_of_the_one_under_it_accounts_for_nothing() -> None:
    # the shipped model on task 2's tower facing the camera, the arm over the table
    # (bench/arm_phantoms.py): the yellow block is read weakly where it is, also as blue, and
    # more strongly at the red block's place, where it is not; it is kept
    tower = [
        reading("blue block", 0.90, 0.498, 0.101),
        reading("red block", 0.79, 0.506, 0.021),
        reading("yellow block", 0.35, 0.506, 0.022),
        reading("blue block", 0.28, 0.507, 0.072),
        reading("yellow block", 0.26, 0.508, 0.075),
    ]
    assert second_readings(tower, UP) == set()


def test_containers_share_their_place_with_what_is_in_them() -> None:
    box = [
        Reading("box", 0.9, np.array([0.5, 0.0, 0.03]), 0.12),
        reading("duck", 0.4, 0.5, 0.03),
        reading("duck", 0.8, 0.3),
    ]
    assert second_readings(box, UP, containers={"box"}) == set()
    assert second_readings(box, UP) == {1}
