"""The coordinator's side of the wire: its heartbeat, each agent's heartbeat, state and
results heard, an action sent to one controller and its result awaited.

An agent is *lost* when its heartbeat has not been heard for ``timeout`` seconds (or was
never heard): :meth:`FleetLink.act` raises :class:`~onboard.base.errors.AgentLost` as soon
as the agent it waits on is lost, never later than ``timeout`` after its last heartbeat. The
controller on the other side stops its own arm when it stops hearing the coordinator, so a
partition stops the cut-off arm from both ends.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from onboard.base.errors import AgentLost, FleetError
from onboard.fleet.bus import Bus
from onboard.fleet.wire import (
    COORDINATOR,
    Action,
    BadPayload,
    Heartbeat,
    P,
    Point,
    Result,
    State,
    decode,
    encode,
    key,
)

__all__ = ["Agent", "FleetLink"]


@dataclass
class Agent:
    """What the coordinator has heard of one agent."""

    name: str
    heard: float | None = None  # monotonic time of its last heartbeat
    latched: bool = False
    state: State | None = None
    results: dict[int, Result] = field(default_factory=dict)
    lost: str = ""  # why it was reported lost ("" while it is heard)


class FleetLink:
    """The coordinator's link to ``agents`` of ``fleet`` over ``bus``; :meth:`start` before
    use, :meth:`close` after (the bus is the caller's). ``say`` gets one line per event
    (an agent lost, rejoined, a bad payload)."""

    def __init__(
        self,
        bus: Bus,
        fleet: str,
        agents: Sequence[str],
        *,
        period: float = 0.1,
        timeout: float = 0.5,
        say: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.bus, self.fleet, self.period, self.timeout, self.say = bus, fleet, period, timeout, say
        self.agents = {a: Agent(a) for a in agents}
        self._cond = threading.Condition()
        self._ids = itertools.count()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        #: per action: seconds from its put to its controller taking it (one host, one clock)
        self.hops: list[float] = []

    def start(self) -> FleetLink:
        for topic, handler in (("heartbeat", self._on_heartbeat), ("state", self._on_state),
                               ("result", self._on_result)):  # fmt: skip
            self.bus.subscribe(key(self.fleet, "*", topic), handler)  # type: ignore[arg-type]
        self._beat = threading.Thread(target=self._beating, name="fleet-heartbeat", daemon=True)
        self._beat.start()
        return self

    def close(self) -> None:
        """Stop beating, with a last heartbeat saying so (the controllers stop watching)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=2.0)

    def _beating(self) -> None:
        for seq in itertools.count():
            closing = self._stop.is_set()
            beat = Heartbeat(sender=COORDINATOR, sent=time.time(), seq=seq, period=self.period,
                             closing=closing)  # fmt: skip
            self.bus.put(key(self.fleet, COORDINATOR, "heartbeat"), encode(beat))
            if closing:
                return
            self._stop.wait(self.period)

    # -- what is heard -------------------------------------------------------------------

    def _agent(self, where: str) -> Agent | None:
        parts = where.split("/")
        return self.agents.get(parts[3]) if len(parts) == 5 else None

    def _heard(self, where: str, data: bytes, kind: type[P]) -> tuple[Agent, P] | None:
        """The agent a message is from and its payload; None for the coordinator's own, an
        agent of no concern here, or a payload that does not decode (said in one line)."""
        agent = self._agent(where)
        if agent is None:
            return None
        try:
            return agent, decode(kind, data, where)
        except BadPayload as exc:
            self.say(f"fleet: {exc}")
            return None

    def _on_heartbeat(self, where: str, data: bytes) -> None:
        heard = self._heard(where, data, Heartbeat)
        if heard is None:
            return
        agent, beat = heard
        with self._cond:
            agent.heard, agent.latched = time.monotonic(), beat.latched
            if agent.lost:
                how = "stopped, latched" if beat.latched else "ready"
                self.say(f"fleet: {agent.name} rejoined ({how})")
                agent.lost = ""
            self._cond.notify_all()

    def _on_state(self, where: str, data: bytes) -> None:
        heard = self._heard(where, data, State)
        if heard is not None:
            with self._cond:
                heard[0].state = heard[1]
                self._cond.notify_all()

    def _on_result(self, where: str, data: bytes) -> None:
        heard = self._heard(where, data, Result)
        if heard is not None:
            with self._cond:
                heard[0].results[heard[1].id] = heard[1]
                self._cond.notify_all()

    # -- asking ------------------------------------------------------------------------------

    def _why_lost(self, agent: Agent) -> str | None:
        if agent.heard is None:
            return f"{agent.name}: no heartbeat heard"
        silent = time.monotonic() - agent.heard
        if silent > self.timeout:
            return f"{agent.name}: no heartbeat for {silent:.2f} s (timeout {self.timeout} s)"
        return None

    def lost(self, agent: str) -> str | None:
        """Why ``agent`` is lost, or None while it is heard."""
        with self._cond:
            return self._why_lost(self.agents[agent])

    def wait_ready(self, timeout: float, *, latched_ok: bool = False) -> None:
        """Every agent heard and (unless ``latched_ok``) none latched; FleetError naming
        those that are not, after ``timeout`` seconds at most."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                missing = [a for a in self.agents.values() if self._why_lost(a) is not None]
                latched = [a for a in self.agents.values()
                           if a.latched and a not in missing and not latched_ok]  # fmt: skip
                if not missing and not latched:
                    return
                left = deadline - time.monotonic()
                told = all(a.state is not None and a.state.status == "stopped" for a in latched)
                if left <= 0 or (not missing and told):  # a latch waits for a reset, not time
                    break
                self._cond.wait(min(left, self.period))
        if missing:
            names = ", ".join(a.name for a in missing)
            raise FleetError(f"fleet {self.fleet}: no heartbeat from {names} within "
                             f"{timeout} s (is its controller running, on this fleet and "
                             "endpoint?)")  # fmt: skip
        reasons = "; ".join(f"{a.name}: {a.state.reason if a.state else 'latched'}"
                            for a in latched)  # fmt: skip
        raise FleetError(f"fleet {self.fleet}: stopped and latched: {reasons} (onboard fleet "
                         "reset clears the latch)")  # fmt: skip

    def act(self, agent: str, action: str, cubes: Mapping[str, Point]) -> Result:
        """Run ``action`` on ``agent``'s arm; its Result. AgentLost as soon as the agent's
        heartbeat is older than the timeout while the result is awaited."""
        return self._send(agent, "act", action=action, cubes=dict(cubes))

    def command(self, agent: str, command: str, reason: str = "") -> Result:
        """``stop`` or ``reset`` ``agent``; its Result (AgentLost as :meth:`act`)."""
        return self._send(agent, command, reason=reason)

    def stop_all(self, reason: str, but: str = "") -> list[str]:
        """Stop and latch every agent but ``but`` that is heard (those lost stopped
        themselves); the names stopped."""
        stopped = []
        for name in self.agents:
            if name != but and self.lost(name) is None:
                try:
                    self.command(name, "stop", reason)
                    stopped.append(name)
                except AgentLost:
                    pass  # lost meanwhile: it stops itself
        return stopped

    def _send(self, agent: str, command: str, **fields: object) -> Result:
        if agent not in self.agents:
            raise FleetError(f"fleet {self.fleet}: no agent {agent!r}")
        ident = next(self._ids)
        message = Action(sender=COORDINATOR, sent=time.time(), id=ident, command=command,  # type: ignore[arg-type]
                         **fields)  # type: ignore[arg-type]  # fmt: skip
        self.bus.put(key(self.fleet, agent, "action"), encode(message))
        known = self.agents[agent]
        with self._cond:
            while ident not in known.results:
                why = self._why_lost(known)
                if why is not None:
                    known.lost = why
                    self.say(f"fleet: {why}: lost")
                    raise AgentLost(agent, f"fleet {self.fleet}: {why}: lost")
                self._cond.wait(self.period / 2)
            result = known.results.pop(ident)
        self.hops.append(result.received - message.sent)
        return result
