"""A Foxglove WebSocket client written from the protocol's public specification
(foxglove/ws-protocol, docs/spec.md), for the live view's tests and benchmark.

The server's first text message is ``serverInfo``; ``advertise`` lists its channels (at once,
then again for each new one); the client sends ``subscribe`` with subscription ids of its own
choosing; each message comes as a binary frame, opcode 0x01 (message data), then the
subscription id (u32), the log time (u64, ns since the epoch) and the payload, little-endian.
The foxglove-sdk server (0.30) names the protocol ``foxglove.sdk.v1`` in the WebSocket
handshake, no longer ``foxglove.websocket.v1``: the client offers both. The ``websockets``
package (the dev extra) does the WebSocket framing.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

__all__ = ["MESSAGE_DATA", "SUBPROTOCOLS", "Received", "SpecClient"]

SUBPROTOCOLS = [Subprotocol("foxglove.sdk.v1"), Subprotocol("foxglove.websocket.v1")]
#: the opcode of a binary message-data frame
MESSAGE_DATA = 0x01


@dataclass(frozen=True)
class Received:
    topic: str
    subscription: int
    ns: int
    data: bytes
    #: time.monotonic() when the frame was read
    at: float


class SpecClient:
    """A Foxglove WebSocket client from the spec: it subscribes to every channel advertised
    and keeps every message, read on its own thread."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        #: how long :meth:`wait` and the first message wait, s: a failure guard
        self.timeout = timeout
        self._connection = contextlib.ExitStack()
        self.ws: ClientConnection = self._connection.enter_context(
            connect(url, subprotocols=SUBPROTOCOLS, max_size=None)
        )
        self.server_info = json.loads(self.ws.recv(timeout=timeout))
        #: each channel as advertised, by its id; the ids of the first advertise
        self.channels: dict[int, dict[str, Any]] = {}
        self.first_advertised: set[str] = set()
        self.subscriptions: dict[int, int] = {}  # subscription id -> channel id
        self.received: list[Received] = []
        self.statuses: list[dict[str, Any]] = []
        #: subscriptions the server refused for a channel it had just advertised
        self.refused = 0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):  # the server stopped: what came stays
            self._frames()

    def _frames(self) -> None:
        for frame in self.ws:
            at = time.monotonic()
            if isinstance(frame, str):
                message = json.loads(frame)
                if message["op"] == "advertise":
                    self._advertised(message["channels"])
                elif message["op"] == "status":
                    self.statuses.append(message)
                    self._refused(message["message"])
            elif frame[0] == MESSAGE_DATA:
                subscription, ns = struct.unpack_from("<IQ", frame, 1)
                topic = self.channels[self.subscriptions[subscription]]["topic"]
                with self._changed:
                    self.received.append(Received(topic, subscription, ns, frame[13:], at))
            with self._changed:
                self._changed.notify_all()

    def _advertised(self, channels: list[dict[str, Any]]) -> None:
        subscribe = []
        for channel in channels:
            if not self.channels:
                self.first_advertised.update(c["topic"] for c in channels)
            self.channels[channel["id"]] = channel
            subscription = 100 + len(self.subscriptions)  # the client's own ids
            self.subscriptions[subscription] = channel["id"]
            subscribe.append({"id": subscription, "channelId": channel["id"]})
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": subscribe}))

    def _refused(self, status: str) -> None:
        """The SDK's server sends an advertise before it can take a subscription to the
        channel (foxglove-sdk 0.30.3, ConnectedClient::advertise_channels): a subscription
        sent at once may come back as "Unknown channel ID: N". It is sent again."""
        unknown = re.fullmatch(r"Unknown channel ID: (\d+)", status)
        if unknown is None:
            return
        channel = int(unknown[1])
        subscription = next(s for s, c in self.subscriptions.items() if c == channel)
        self.refused += 1
        again = {"id": subscription, "channelId": channel}
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": [again]}))

    def wait(self, done: Callable[[], bool]) -> bool:
        """Wait until ``done()`` (checked at each frame read), :attr:`timeout` s at most."""
        with self._changed:
            return self._changed.wait_for(done, self.timeout)

    def on(self, topic: str) -> list[Received]:
        """The messages received on ``topic``, in order."""
        with self._changed:
            return [r for r in self.received if r.topic == topic]

    def close(self) -> None:
        self._connection.close()
        self._reader.join(self.timeout)
