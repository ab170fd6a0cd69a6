"""A fleet controller: one arm, its actions from the coordinator over Zenoh, its state,
results and heartbeat back (keys and payloads: :mod:`onboard.fleet.wire`).

Safety first: once the controller has heard the coordinator, a silence longer than
``timeout`` stops the arm (from the watchdog's thread, mid-motion if need be) and latches
it: no action runs until the coordinator sends ``reset`` (a deliberate decision to move
again), and the state says ``stopped`` with the reason. A ``stop`` action does the same, and
so does the e-stop of the process (``onboard up``'s: it stops the arm itself; the watchdog
latches it within half a period, and a reset is refused until the e-stop is reset).
Actions run one at a time on a worker thread, never on Zenoh's.

The log is JSON lines on stdout (:class:`~onboard.service.log.JsonLog`), each with ``t``
(seconds since the epoch): ``ready``, ``coordinator`` (first heard, or heard again),
``coordinator_left`` (its last heartbeat said it leaves in order: not a loss), ``action``,
``result``, ``stopped``, ``reset``, ``bad_payload``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from onboard.base.errors import OnboardError
from onboard.collab.twin_sort import Frames, Panel, put
from onboard.drivers.arm.safety import STOP_LINE, SafeArm
from onboard.fleet.bus import Bus
from onboard.fleet.wire import (
    COORDINATOR,
    Action,
    BadPayload,
    Heartbeat,
    P,
    Result,
    State,
    decode,
    encode,
    key,
)
from onboard.service.log import JsonLog

__all__ = ["Controller"]


@dataclass
class Controller:
    """``agent``'s controller in ``fleet``: its ``arm`` (connected, behind its SafeArm
    limits) in the scene ``frames`` describes, with the task's ``panels``."""

    fleet: str
    agent: str
    arm: SafeArm
    frames: Frames
    panels: Mapping[str, Panel]
    bus: Bus
    period: float = 0.1
    timeout: float = 0.5
    log: JsonLog = field(default_factory=JsonLog)
    latched: str = ""  # why the arm is stopped and latched; "" when it may move
    _heard: float | None = None  # monotonic time of the coordinator's last heartbeat
    _status: str = "idle"
    _action: int | None = None
    _jobs: queue.Queue[Action | None] = field(default_factory=queue.Queue)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done: threading.Event = field(default_factory=threading.Event)

    def run(self, stop: threading.Event) -> None:
        """Serve until ``stop`` is set: subscribe, beat, run actions; the arm is stopped on
        the way out."""
        self.bus.subscribe(key(self.fleet, COORDINATOR, "heartbeat"), self._on_heartbeat)
        self.bus.subscribe(key(self.fleet, self.agent, "action"), self._on_action)
        worker = threading.Thread(target=self._work, name=f"fleet-{self.agent}", daemon=True)
        worker.start()
        self._publish_state()
        self.log.event("ready", t=time.time(), agent=self.agent, fleet=self.fleet,
                       period=self.period, timeout=self.timeout)  # fmt: skip
        seq = 0
        try:
            while not stop.is_set():
                self.bus.put(key(self.fleet, self.agent, "heartbeat"), encode(Heartbeat(
                    sender=self.agent, sent=time.time(), seq=seq, period=self.period,
                    latched=bool(self.latched))))  # fmt: skip
                seq += 1
                self._watch()
                stop.wait(self.period / 2)  # the watchdog's resolution: half a period
                if not stop.is_set():
                    self._watch()
                    stop.wait(self.period / 2)
        finally:
            self._jobs.put(None)
            self.arm.stop()
            worker.join(timeout=5.0)

    # -- the watchdog ----------------------------------------------------------------------

    def _watch(self) -> None:
        engaged = STOP_LINE.reason  # the e-stop stopped the arm already, from its own thread
        if engaged is not None and not self.latched:
            self._stop(f"e-stop: {engaged}")
            return
        with self._lock:
            heard = self._heard
        if heard is None or self.latched:
            return
        silent = time.monotonic() - heard
        if silent > self.timeout:
            self._stop(f"coordinator heartbeat lost ({silent:.2f} s > {self.timeout} s)",
                       silent=silent)  # fmt: skip

    def _stop(self, reason: str, **fields: float) -> None:
        self.arm.stop()  # first: from this thread, at once, whatever the worker does
        with self._lock:
            self.latched = reason
            self._heard = None  # armed again by the coordinator's next heartbeat
            self._status = "stopped"
        self.log.event("stopped", level="warning", t=time.time(), agent=self.agent,
                       reason=reason, **fields)  # fmt: skip
        self._publish_state()

    # -- messages ----------------------------------------------------------------------------

    def _decoded(self, kind: type[P], where: str, data: bytes) -> P | None:
        """The payload, or None when it does not read (logged: the controller reads on)."""
        try:
            return decode(kind, data, where)
        except BadPayload as exc:
            self.log.event("bad_payload", level="warning", t=time.time(), error=str(exc))
            return None

    def _on_heartbeat(self, where: str, data: bytes) -> None:
        if (beat := self._decoded(Heartbeat, where, data)) is None:
            return
        if beat.closing:
            with self._lock:
                self._heard = None  # it left in order: nothing to watch until it is back
            self.log.event("coordinator_left", t=time.time(), agent=self.agent)
            return
        with self._lock:
            first = self._heard is None
            self._heard = time.monotonic()
        if first:
            self.log.event("coordinator", t=time.time(), agent=self.agent,
                           latched=bool(self.latched))  # fmt: skip
            self._publish_state()  # a coordinator (re)joining hears where this arm is

    def _on_action(self, where: str, data: bytes) -> None:
        if (action := self._decoded(Action, where, data)) is None:
            return
        if action.command == "stop":
            self._stop(f"stopped by the coordinator: {action.reason or 'no reason given'}")
            self._answer(action, time.time(), time.monotonic(), "")
            return
        self._jobs.put(action)

    # -- the worker --------------------------------------------------------------------------

    def _work(self) -> None:
        while (action := self._jobs.get()) is not None:
            received, began = time.time(), time.monotonic()
            self.log.event("action", t=received, agent=self.agent, id=action.id,
                           command=action.command, action=action.action)  # fmt: skip
            if action.command == "reset":
                self._answer(action, received, began, self._reset())
                continue
            error, placed = self._act(action)
            self._answer(action, received, began, error, placed)

    def _reset(self) -> str:
        """The latch cleared, the gripper opened (what it held is let go where the stop left
        it) and the arm homed; the error, "" when done."""
        try:
            self.arm.resume()  # refused while the e-stop is engaged: the latch stays
        except OnboardError as exc:
            return f"{self.agent}: reset: {exc}"
        with self._lock:
            self.latched, self._status = "", "idle"
        try:
            self.arm.grip(False)
            self.arm.home()
        except OnboardError as exc:
            self._stop(f"reset failed: {exc}")
            return f"{self.agent}: reset: {exc}"
        self.log.event("reset", t=time.time(), agent=self.agent)
        self._publish_state()
        return ""

    def _act(self, action: Action) -> tuple[str, dict[str, tuple[float, float, float]]]:
        if self.latched:
            return f"{self.agent} is stopped (latched): {self.latched}", {}
        words = action.action.split()
        if len(words) != 4 or words[0] != "PICK" or words[2] != "PLACE":
            return f"{self.agent}: no action {action.action!r} (PICK <cube> PLACE <panel>)", {}
        _, cube, _, panel = words
        if panel not in self.panels:
            return f"{self.agent}: no panel {panel!r}", {}
        with self._lock:
            self._status, self._action = "busy", action.id
        self._publish_state()
        where = {c: tuple(p) for c, p in action.cubes.items()}
        try:
            goal = put(self.frames, self.arm, self.agent, self.panels, where, cube, panel)  # type: ignore[arg-type]
        except OnboardError as exc:
            error = f"{self.agent}: {action.action}: {exc}"
            if self.latched:
                error += f" (stopped: {self.latched})"
            return error, {}
        finally:
            with self._lock:
                self._status = "stopped" if self.latched else "idle"
            self._publish_state()
        return "", {cube: goal}

    def _answer(
        self,
        action: Action,
        received: float,
        began: float,
        error: str,
        placed: dict[str, tuple[float, float, float]] | None = None,
    ) -> None:
        result = Result(sender=self.agent, sent=time.time(), id=action.id, ok=not error,
                        error=error, placed=placed or {}, received=received,
                        seconds=time.monotonic() - began)  # fmt: skip
        self.log.event("result", t=result.sent, agent=self.agent, id=action.id, ok=result.ok,
                       error=error)  # fmt: skip
        self.bus.put(key(self.fleet, self.agent, "result"), encode(result))

    def _publish_state(self) -> None:
        with self._lock:
            status, reason, action = self._status, self.latched, self._action
        try:
            p = self.arm.state().pose
            pose: tuple[float, float, float, float, float, float] | None = (
                p.x, p.y, p.z, p.rx, p.ry, p.rz)  # fmt: skip
        except OnboardError:
            pose = None
        state = State(sender=self.agent, sent=time.time(), status=status,  # type: ignore[arg-type]
                      reason=reason, action_id=action, pose=pose)  # fmt: skip
        self.bus.put(key(self.fleet, self.agent, "state"), encode(state))
