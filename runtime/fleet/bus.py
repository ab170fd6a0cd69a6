"""A Zenoh session for a fleet: peer mode, scouting off (multicast and gossip), only the
endpoints given (``tcp/127.0.0.1:7447``), and a lost connection retried every 100-500 ms so
a partitioned controller rejoins soon after the link is back.

``eclipse-zenoh`` is the ``fleet`` extra; without it :func:`open_bus` is one line naming it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from onboard.base.errors import MissingExtraError, UsageError

__all__ = ["EXTRA", "Bus", "check_endpoint", "open_bus"]

EXTRA = "pip install -e '.[fleet]' (eclipse-zenoh)"


def check_endpoint(endpoint: str) -> str:
    """``tcp/HOST:PORT``: the one kind of locator a fleet uses (port 0 listens on a free
    port)."""
    proto, _, address = endpoint.partition("/")
    host, _, port = address.rpartition(":")
    if proto != "tcp" or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"endpoint {endpoint!r}: a Zenoh endpoint is tcp/HOST:PORT "
                         "(tcp/127.0.0.1:7447)")  # fmt: skip
    return endpoint


class Bus:
    """One Zenoh session: publish bytes on a key, subscribe a callback to a key expression
    (called on Zenoh's thread); :meth:`close` undeclares everything and closes the session."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self._publishers: dict[str, Any] = {}
        self._subscribers: list[Any] = []
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            publisher = self._publishers.get(key)
            if publisher is None:
                publisher = self._publishers[key] = self.session.declare_publisher(key)
        publisher.put(data)

    def subscribe(self, key: str, callback: Callable[[str, bytes], None]) -> None:
        def deliver(sample: Any) -> None:
            callback(str(sample.key_expr), sample.payload.to_bytes())

        self._subscribers.append(self.session.declare_subscriber(key, deliver))

    def close(self) -> None:
        for sub in self._subscribers:
            sub.undeclare()
        for pub in self._publishers.values():
            pub.undeclare()
        self._subscribers.clear()
        self._publishers.clear()
        self.session.close()

    def __enter__(self) -> Bus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_bus(listen: Sequence[str] = (), connect: Sequence[str] = ()) -> Bus:
    """A peer session listening on ``listen`` and connecting to ``connect`` (tcp/HOST:PORT
    each), scouting off."""
    try:
        import zenoh
    except ImportError as exc:
        raise MissingExtraError(f"a fleet needs Zenoh: {EXTRA}") from exc
    config = zenoh.Config()
    settings: dict[str, Any] = {
        "mode": "peer",
        "scouting/multicast/enabled": False,
        "scouting/gossip/enabled": False,
        "listen/endpoints": [check_endpoint(e) for e in listen],
        "connect/endpoints": [check_endpoint(e) for e in connect],
        # keep trying: a controller cut off rejoins once its link is back
        "connect/timeout_ms": {"router": -1, "peer": -1, "client": 0},
        "connect/exit_on_failure": {"router": False, "peer": False, "client": True},
        "connect/retry": {
            "period_init_ms": 100,
            "period_max_ms": 500,
            "period_increase_factor": 1.5,
        },
    }
    for path, value in settings.items():
        config.insert_json5(path, json.dumps(value))
    try:
        return Bus(zenoh.open(config))
    except Exception as exc:  # zenoh.ZError: a port in use, a bad endpoint
        # its text names the Rust source it came from (" at /root/.cargo/..."): cut there
        reason = str(exc).splitlines()[0].split(" at /")[0].replace("[", "").strip(" .")
        raise UsageError(f"zenoh: {reason}") from None
