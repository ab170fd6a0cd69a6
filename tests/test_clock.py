"""runtime/loop/clock.py: the virtual (discrete-event) clock and the wall clock."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from onboard.loop.clock import Interrupted, VirtualClock, WallClock

# ---------------------------------------------------------------------------- VirtualClock


def test_virtual_timers_run_in_time_order_and_fifo_at_equal_times() -> None:
    clock = VirtualClock()
    seen: list[tuple[str, float]] = []

    def note(name: str) -> Callable[[], None]:
        return lambda: seen.append((name, clock.now()))

    clock.call_at(2.0, note("late"))
    clock.call_at(1.0, note("first"))
    clock.call_later(1.0, note("second"))
    clock.call_at(1.0, note("third"))
    clock.call_at(0.5, note("early"))
    clock.run(until=10.0)
    assert seen == [("early", 0.5), ("first", 1.0), ("second", 1.0), ("third", 1.0), ("late", 2.0)]


def test_virtual_post_runs_after_callbacks_already_due_now() -> None:
    clock = VirtualClock()
    seen: list[str] = []

    def a() -> None:
        seen.append("a")
        clock.post(lambda: seen.append("posted by a"))

    clock.call_at(1.0, a)
    clock.call_at(1.0, lambda: seen.append("b"))
    clock.run(until=5.0)
    assert seen == ["a", "b", "posted by a"]


def test_virtual_call_later_from_a_callback_counts_from_its_time() -> None:
    clock = VirtualClock(start=10.0)
    seen: list[float] = []
    clock.call_later(1.0, lambda: clock.call_later(2.5, lambda: seen.append(clock.now())))
    clock.call_later(-3.0, lambda: seen.append(clock.now()))  # negative delay = now
    clock.run(until=100.0)
    assert seen == [10.0, 13.5]


def test_virtual_cancel() -> None:
    clock = VirtualClock()
    seen: list[str] = []
    doomed = clock.call_at(2.0, lambda: seen.append("doomed"))
    clock.call_at(1.0, doomed.cancel)  # cancelled by an earlier callback
    gone = clock.call_at(0.5, lambda: seen.append("gone"))
    gone.cancel()
    gone.cancel()  # idempotent
    clock.call_at(3.0, lambda: seen.append("kept"))
    clock.run(until=10.0)
    assert seen == ["kept"]
    assert doomed.cancelled and gone.cancelled


def test_virtual_run_until_stops_there_and_resumes() -> None:
    clock = VirtualClock()
    seen: list[float] = []
    for when in (1.0, 3.0, 3.0, 7.0):
        clock.call_at(when, lambda: seen.append(clock.now()))
    clock.run(until=3.0)
    assert seen == [1.0, 3.0, 3.0]  # a timer due exactly at `until` runs
    assert clock.now() == 3.0
    clock.run(until=5.0)
    assert seen == [1.0, 3.0, 3.0]
    assert clock.now() == 5.0  # time advances to `until` even with nothing due
    clock.run(until=8.0)
    assert seen == [1.0, 3.0, 3.0, 7.0]
    assert clock.now() == 8.0


def test_virtual_run_until_in_the_past_keeps_time() -> None:
    clock = VirtualClock(start=5.0)
    clock.run(until=2.0)
    assert clock.now() == 5.0


def test_virtual_stop_from_a_callback() -> None:
    clock = VirtualClock()
    seen: list[float] = []
    clock.call_at(1.0, lambda: seen.append(clock.now()))
    clock.call_at(2.0, clock.stop)
    clock.call_at(4.0, lambda: seen.append(clock.now()))
    clock.run(until=10.0)
    assert seen == [1.0]
    assert clock.now() == 2.0
    clock.run(until=10.0)  # stop is sticky: a stop is never lost, even before run()
    assert seen == [1.0]


def test_stop_before_run_is_not_lost() -> None:
    clock = VirtualClock()
    seen: list[float] = []
    clock.call_at(1.0, lambda: seen.append(clock.now()))
    clock.stop()
    clock.run(until=10.0)
    assert seen == []


def test_virtual_submit_delivers_after_the_configured_latency() -> None:
    clock = VirtualClock()
    ran_at: list[float] = []
    delivered: list[tuple[object, float, float]] = []

    def work() -> str:
        ran_at.append(clock.now())
        return "answer"

    def done(result: object, took: float) -> None:
        delivered.append((result, took, clock.now()))

    clock.call_at(1.0, lambda: clock.submit(work, done, latency=2.0))
    clock.call_at(2.9, lambda: delivered.append(("probe", 0.0, clock.now())))
    clock.run(until=10.0)
    assert ran_at == [1.0]  # the work runs at once, while virtual time stands still
    assert delivered == [("probe", 0.0, 2.9), ("answer", 2.0, 3.0)]


def test_virtual_submit_with_no_latency_uses_the_measured_time() -> None:
    clock = VirtualClock()
    delivered: list[tuple[object, float, float]] = []

    def slow() -> int:
        time.sleep(0.05)
        return 42

    clock.submit(slow, lambda r, took: delivered.append((r, took, clock.now())))
    clock.run(until=10.0)
    [(result, took, at)] = delivered
    assert result == 42
    assert 0.05 <= took < 30.0
    assert at == pytest.approx(took)


def test_virtual_submit_delivers_exceptions_to_done() -> None:
    clock = VirtualClock()
    delivered: list[object] = []

    def broken() -> None:
        raise ValueError("no model")

    clock.submit(broken, lambda r, took: delivered.append(r), latency=0.5)
    clock.run(until=1.0)
    [error] = delivered
    assert isinstance(error, ValueError)
    assert str(error) == "no model"


# ---------------------------------------------------------------------------- WallClock


@pytest.fixture
def wall() -> Iterator[WallClock]:
    clock = WallClock()
    try:
        yield clock
    finally:
        clock.close()


def _later(seconds: float, action: Callable[[], None]) -> threading.Thread:
    """Run ``action`` on another thread after ``seconds``."""
    thread = threading.Thread(target=lambda: (time.sleep(seconds), action()), daemon=True)
    thread.start()
    return thread


def test_wall_call_later_fires_roughly_on_time(wall: WallClock) -> None:
    fired: list[float] = []
    wall.call_later(0.1, lambda: fired.append(wall.now()))
    wall.call_later(0.2, lambda: fired.append(wall.now()))
    wall.run(until=0.35)
    # never early, in order; the upper bounds only say "not stuck" (a loaded machine is slow)
    assert len(fired) == 2
    assert 0.1 <= fired[0] <= fired[1] < 5.0
    assert fired[1] >= 0.2
    assert 0.35 <= wall.now() < 5.0  # run returns at `until`


def test_wall_cancelled_timer_does_not_fire(wall: WallClock) -> None:
    fired: list[str] = []
    wall.call_later(0.05, lambda: fired.append("x")).cancel()
    wall.run(until=0.15)
    assert fired == []


def test_wall_post_from_another_thread_wakes_run(wall: WallClock) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[int, float]] = []

    def on_loop() -> None:
        seen.append((threading.get_ident(), wall.now()))
        wall.stop()

    wall.call_later(30.0, lambda: None)  # the loop sleeps towards this timer
    poster = _later(0.1, lambda: wall.post(on_loop))
    began = time.monotonic()
    wall.run(until=60.0)
    poster.join()
    assert time.monotonic() - began < 20.0, "the post woke the loop, not the 30 s timer"
    [(ident, at)] = seen
    assert ident == loop_thread
    assert 0.1 <= at < 20.0


def test_wall_run_with_no_end_and_nothing_due_waits_for_a_post(wall: WallClock) -> None:
    """``onboard up`` runs its loop until a stop signal; with its queue empty nothing is due
    (a wait of inf seconds overflowed: the service exited 70 once idle)."""
    seen: list[str] = []

    def on_loop() -> None:
        seen.append("posted")
        wall.stop()

    poster = _later(0.1, lambda: wall.post(on_loop))
    wall.run(until=math.inf)
    poster.join()
    assert seen == ["posted"]


def test_wall_stop_from_another_thread_ends_run_promptly(wall: WallClock) -> None:
    wall.call_later(30.0, lambda: None)
    began = time.monotonic()  # before the stopper starts its 0.1 s, so took >= 0.1
    stopper = _later(0.1, wall.stop)
    wall.run(until=60.0)
    took = time.monotonic() - began
    stopper.join()
    assert 0.1 <= took < 20.0  # woken by stop(), well before the 30 s timer


def test_wall_submit_runs_work_off_the_loop_and_done_on_it(wall: WallClock) -> None:
    loop_thread = threading.get_ident()
    idents: dict[str, int] = {}
    delivered: list[tuple[object, float]] = []

    def work() -> str:
        idents["work"] = threading.get_ident()
        time.sleep(0.05)
        return "reply"

    def done(result: object, took: float) -> None:
        idents["done"] = threading.get_ident()
        delivered.append((result, took))
        wall.stop()

    wall.submit(work, done)
    wall.run(until=5.0)
    assert idents["work"] != loop_thread
    assert idents["done"] == loop_thread
    [(result, took)] = delivered
    assert result == "reply"
    assert 0.05 <= took < 30.0


def test_wall_slow_work_does_not_delay_a_timer(wall: WallClock) -> None:
    events: list[tuple[str, float]] = []

    def slow() -> str:
        time.sleep(1.0)
        return "late reply"

    def done(result: object, took: float) -> None:
        events.append((f"done {result}", wall.now()))
        wall.stop()

    wall.submit(slow, done)
    wall.call_later(0.1, lambda: events.append(("timer", wall.now())))
    wall.run(until=5.0)
    # the order is the behaviour: a loop blocked by the work would fire the timer after it
    assert [name for name, _ in events] == ["timer", "done late reply"]
    assert 0.1 <= events[0][1] < events[1][1]
    assert events[1][1] >= 1.0


def test_wall_submit_delivers_exceptions_to_done(wall: WallClock) -> None:
    delivered: list[object] = []

    def broken() -> None:
        raise ConnectionError("endpoint down")

    def done(result: object, took: float) -> None:
        delivered.append(result)
        wall.stop()

    wall.submit(broken, done)
    wall.run(until=5.0)
    [error] = delivered
    assert isinstance(error, ConnectionError)
    assert str(error) == "endpoint down"


def test_virtual_interrupt_starts_no_more_work() -> None:
    clock = VirtualClock()
    ran: list[str] = []
    got: list[object] = []
    clock.interrupt()
    clock.submit(lambda: ran.append("work"), lambda result, took: got.append(result))
    clock.run(until=1.0)
    assert ran == []
    assert len(got) == 1 and isinstance(got[0], Interrupted)


def test_wall_time_on_the_loop_is_each_callback_s_due_time_whatever_runs_late(
    wall: WallClock,
) -> None:
    # the first callback holds the loop past the second's due time: the second still runs
    # at its own time, after the first, and what it schedules counts from that time
    seen: list[tuple[str, float]] = []
    release = threading.Event()

    def slow() -> None:
        seen.append(("slow", wall.now()))
        release.wait(timeout=30.0)

    def due() -> None:
        seen.append(("due", wall.now()))
        wall.call_later(0.05, lambda: seen.append(("next", wall.now())))

    wall.call_at(0.05, slow)
    wall.call_at(0.1, due)
    _later(0.3, release.set)  # only when real time is well past 0.1
    wall.run(until=0.5)
    assert seen == [("slow", 0.05), ("due", 0.1), ("next", pytest.approx(0.15))]


def test_wall_run_leaves_what_falls_due_after_until(wall: WallClock) -> None:
    # a loop that got to `until` late runs nothing that fell due after it
    ran: list[str] = []
    release = threading.Event()
    wall.call_at(0.01, lambda: release.wait(timeout=30.0))
    wall.call_at(0.2, lambda: ran.append("after until"))
    _later(0.4, release.set)
    wall.run(until=0.1)
    assert ran == []


def test_wall_submitted_work_runs_at_the_time_it_was_submitted(wall: WallClock) -> None:
    # as on the virtual clock: what the work reads of the episode clock does not depend on
    # how long a loaded worker took to get to it
    seen: list[tuple[str, float]] = []

    def work() -> float:
        time.sleep(0.2)
        return wall.now()

    def submit() -> None:
        seen.append(("submitted", wall.now()))
        wall.submit(work, lambda result, took: (seen.append(("read", result)), wall.stop()))

    wall.call_at(0.05, submit)
    wall.run(until=30.0)
    assert seen == [("submitted", 0.05), ("read", 0.05)]
