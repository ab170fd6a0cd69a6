"""One harness for the tests that stop or fault a motion, and bounded waits for all arm tests.

:func:`interrupt` starts a long move in a thread, waits for the event that proves the move is
under way, injects the stop or the fault, joins the move and checks what must follow: the
move raised, the twin's arm reports stopped and not moving, and it holds still while the
physics runs on. Every wait is bounded by :data:`BOUND` and fails naming what did not happen,
so a race fails fast instead of hanging CI.

Why it cannot race. With the twin behind the arm (directly, or behind an emulator), the
harness holds the physics at a step a little way into the move (:meth:`Twin.hold_at`): the
thread running the motion blocks inside ``Twin.step`` at that step, so the move cannot reach
its goal however fast the CPU is, and the harness knows the move is under way when the gate
is reached (and, behind an emulator, that the controller began the motion:
``worker.wait_started``). The stop or fault is injected while the physics is held; the
harness waits until the twin's SimArm has latched the stop (every injected stop and fault
ends in ``BackendWorker.stop`` or ``SimArm.stop``), and only then releases the gate. The
SimArm checks its latch before every physics step, so the move ends at the very next step:
the outcome depends on the order of events, never on how fast the machine is. On hardware
(no twin) it waits for ``state().moving`` instead.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from onboard.drivers.arm.base import Arm, Pose
from onboard.drivers.arm.twin_arm import SimArm
from onboard.drivers.emulators import BackendWorker
from onboard.drivers.twin import SCENES, Twin

BOUND = 30.0  # seconds any wait may take before the test fails
BLOCKS = SCENES / "blocks.toml"
HOLD_AFTER = 24  # physics steps (0.1 s simulated) into the move before the gate holds it


@contextlib.contextmanager
def twin_arm(scene: Path = BLOCKS) -> Iterator[SimArm]:
    """A connected SimArm on a fresh twin of ``scene``: what the emulators drive in tests."""
    with Twin(scene) as twin:
        arm = SimArm(twin)
        arm.connect()
        try:
            yield arm
        finally:
            arm.close()


def unnumbered(line: str) -> str:
    """A G-code line as written before its line number and checksum (``N5 G1 X1*42``)."""
    match = re.fullmatch(r"N\d+ (.*)\*\d+", line.strip())
    return match.group(1) if match else line.strip()


def require(happened: bool, what: str, timeout: float = BOUND) -> None:
    """Fail the test unless ``happened``; ``what`` says what was awaited."""
    if not happened:
        pytest.fail(f"timed out after {timeout:.0f} s waiting until {what}", pytrace=False)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = BOUND) -> None:
    """Poll ``condition`` every 5 ms until it holds; fail naming ``what`` after ``timeout``.
    For states no event announces; prefer an event (a step, a started job) when there is one."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            require(False, what, timeout)
        time.sleep(0.005)


@dataclass
class Behind:
    """The twin and its SimArm behind the arm under test, and the emulator's worker between
    them (None when the arm under test is that SimArm, or wraps it directly)."""

    twin: Twin
    arm: SimArm
    worker: BackendWorker | None = None

    def wait_idle(self) -> None:
        """Wait until the emulator has no motion queued or running."""
        if self.worker is not None:
            require(self.worker.wait_idle(BOUND), "the emulator's motions ended")


@dataclass(frozen=True)
class Interrupted:
    raised: Exception  # what the move raised
    stopped_at: Pose  # where the tool stopped (the twin's, when there is one)


class Mover(threading.Thread):
    """A motion run in its own thread: what it raised, and whether it has ended."""

    def __init__(self, move: Callable[[], object]) -> None:
        super().__init__(name="harness-move", daemon=True)
        self.move = move
        self.raised: Exception | None = None
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.move()
        except Exception as exc:
            self.raised = exc
        finally:
            self.done.set()


def interrupt(
    arm: Arm,
    move: Callable[[], object],
    inject: Callable[[], object],
    behind: Behind | None,
    *,
    hold_after: int = HOLD_AFTER,
) -> Interrupted:
    """Run ``move`` (a long motion of ``arm``) in a thread, ``inject`` the stop or fault once
    it is under way, and check that the move raised and the arm holds still, not moving."""
    mover = Mover(move)
    if behind is None:
        mover.start()
        wait_until(lambda: mover.done.is_set() or arm.state().moving, "the arm reports moving")
        _require_running(mover)
        inject()
    else:
        twin, worker = behind.twin, behind.worker
        begun = worker.started if worker is not None else 0
        with twin.hold_at(twin.snapshot.step + hold_after) as gate:
            mover.start()
            if worker is not None:
                began = _first(worker.wait_started, begun + 1, mover)
                _require_running(mover)
                require(began, "the emulator began the motion")
            wait_until(
                lambda: gate.reached or mover.done.is_set(), f"the twin reached step {gate.at}"
            )
            _require_running(mover)
            inject()
            require(behind.arm.wait_stopped(BOUND), "the twin's arm latched the stop")
            gate.release()
    mover.join(BOUND)
    require(not mover.is_alive(), "the move ended after the stop or fault")
    if mover.raised is None:
        pytest.fail("the move finished although the stop or fault came while it ran")
    if behind is None:
        wait_until(lambda: not arm.state().moving, "the arm reports not moving")
        return Interrupted(mover.raised, arm.state().pose)
    behind.wait_idle()
    assert behind.twin.snapshot.step == gate.at, "the motion stepped on after the stop"
    return Interrupted(mover.raised, holds_still(behind))


def holds_still(behind: Behind, seconds: float = 0.5, tolerance: float = 0.005) -> Pose:
    """The twin's arm reports stopped and not moving, and stays put while the physics runs
    on for ``seconds``; returns where it is."""
    state = behind.arm.state()
    assert state.stopped, "the twin's arm did not latch the stop"
    assert not state.moving, "the twin's arm still reports moving"
    at = behind.twin.snapshot.ee_pose
    behind.twin.step(seconds)
    drift = math.dist(behind.twin.snapshot.ee_pose.position(), at.position())
    assert drift < tolerance, f"the arm drifted {drift * 1000:.1f} mm after the stop"
    return at


def _first(wait: Callable[[int, float], bool], count: int, mover: Mover) -> bool:
    """``wait(count, ...)`` in short slices, giving up early if the move has already ended."""
    deadline = time.monotonic() + BOUND
    while time.monotonic() < deadline:
        if wait(count, 0.05):
            return True
        if mover.done.is_set():
            return False
    return False


def _require_running(mover: Mover) -> None:
    if mover.done.is_set():
        outcome = f"raised {mover.raised!r}" if mover.raised else "finished"
        pytest.fail(f"the move {outcome} before the stop or fault was injected", pytrace=False)
