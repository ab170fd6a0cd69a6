"""The live Foxglove view (the ``live`` extra: foxglove-sdk): ``onboard up --foxglove PORT``.

Foxglove's own WebSocket server (the SDK's; the Foxglove WebSocket protocol, subprotocol
``foxglove.sdk.v1``) on loopback, serving the channels of runtime/loop/channels.py: the same
topics, schemas and message bytes, stamped with the same times, as an MCAP recording of the
episode holds, each record's messages logged as its recorder publishes it.

The control loop never waits for the view. A recording's subscriber (:meth:`LiveView.episode`)
only appends the record to a bounded queue that drops its oldest record when full
(:class:`DropOldestQueue`, counted in :attr:`LiveView.dropped`); one worker thread turns the
records into messages and logs them to the server, which keeps a backlog per client and drops
a slow client's oldest messages (``message_backlog_size``). A client that connects
mid-episode is advertised every channel made so far: the Foxglove ones from the start, a
record kind's from its first record on.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from onboard.base.dropqueue import DropOldestQueue
from onboard.base.errors import MissingExtraError, UsageError
from onboard.base.listen import check_listen
from onboard.loop.channels import (
    FOXGLOVE_CHANNELS,
    MESSAGE_ENCODING,
    SCHEMA_ENCODING,
    ChannelMessage,
    ChannelSpec,
    RecordChannels,
)
from onboard.loop.recorder import Published, Subscriber

if TYPE_CHECKING:
    import foxglove
    from foxglove.websocket import ChannelView, Client, ServerListener

__all__ = ["EXTRA", "LiveView"]

log = logging.getLogger(__name__)

EXTRA = "pip install 'onboard[live]' (the live extra: foxglove-sdk)"
#: records waiting for the worker; a record carries at most a few camera frames
QUEUE = 256
#: messages the server holds for one client that reads too slowly (frames are ~100 kB each)
BACKLOG = 256


class LiveView:
    """Foxglove's WebSocket server on ``host:port`` (0: a free one, :attr:`port`), fed by
    recorder subscribers; :meth:`stop` (or leaving a ``with``) stops it."""

    def __init__(
        self,
        port: int,
        host: str = "127.0.0.1",
        *,
        queue: int = QUEUE,
        backlog: int = BACKLOG,
        name: str = "--foxglove",
    ) -> None:
        try:
            import foxglove
        except ImportError as exc:
            raise MissingExtraError(f"the live view needs foxglove-sdk: {EXTRA}") from exc
        check_listen(name, host, {name: port})
        self.host = host
        self._foxglove = foxglove
        self._context = foxglove.Context()
        self._subscribed: dict[str, int] = {}
        self._lock = threading.Lock()
        try:
            self._server = foxglove.start_server(
                name="onboard", host=host, port=port, context=self._context,
                server_listener=_listener(self), message_backlog_size=backlog,
            )  # fmt: skip
        except RuntimeError as exc:  # the SDK's FoxgloveError: a port taken since the check
            raise UsageError(f"{name}: cannot listen on {host}:{port}: {exc}") from exc
        self._channels: dict[ChannelSpec, foxglove.Channel] = {}
        for spec in FOXGLOVE_CHANNELS:
            self._channel(spec)
        self._queue: DropOldestQueue[tuple[RecordChannels, Published]] = DropOldestQueue(queue)
        self._warned = False
        self._stopped = False
        self._worker = threading.Thread(target=self._run, name="onboard-live-view", daemon=True)
        self._worker.start()

    @property
    def port(self) -> int:
        return self._server.port

    @property
    def url(self) -> str:
        """What Foxglove opens: ``ws://HOST:PORT``."""
        return f"ws://{self.host}:{self.port}"

    @property
    def dropped(self) -> int:
        """Records dropped because the worker fell behind the recordings."""
        return self._queue.dropped

    def episode(self) -> Subscriber:
        """A subscriber for one more recording (``subscribe_every(view.episode)``): each
        recording needs its own, as a frame waits for its bytes within its recording."""
        return _Feed(self._queue, RecordChannels())

    def subscribers(self, topic: str) -> int:
        """How many clients are subscribed to ``topic`` now."""
        with self._lock:
            return self._subscribed.get(topic, 0)

    def _count(self, topic: str, change: int) -> None:
        with self._lock:
            self._subscribed[topic] = max(0, self._subscribed.get(topic, 0) + change)

    def _channel(self, spec: ChannelSpec) -> foxglove.Channel:
        channel = self._channels.get(spec)
        if channel is None:
            schema = self._foxglove.Schema(name=spec.schema_name, encoding=SCHEMA_ENCODING,
                                           data=spec.schema)  # fmt: skip
            channel = self._foxglove.Channel(spec.topic, schema=schema, context=self._context,
                                             message_encoding=MESSAGE_ENCODING,
                                             metadata=dict(spec.metadata))  # fmt: skip
            self._channels[spec] = channel
        return channel

    def _log(self, message: ChannelMessage) -> None:
        self._channel(message.channel).log(message.data, log_time=message.ns)

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            channels, published = item
            try:
                for message in channels.messages(published.line, published.record,
                                                 published.images):  # fmt: skip
                    self._log(message)
            except Exception as exc:  # one bad record must not end the view
                log.warning("the live view could not show record %s (%s): %s: %s",
                            published.record.get("seq"), published.record.get("kind"),
                            type(exc).__name__, exc)  # fmt: skip
            if self._queue.dropped and not self._warned:
                self._warned = True
                log.warning("the live view fell behind the recordings and dropped their "
                            "oldest records (%d so far); the recordings hold them all",
                            self._queue.dropped)  # fmt: skip

    def stop(self, timeout: float = 2.0) -> None:
        """Show what is queued, then stop the server, each within ``timeout`` s.

        The SDK's ``stop`` waits for every client's connection to close, and a client that
        stopped reading holds it until its own keepalive gives up (tens of seconds): past
        ``timeout`` the server is left to finish stopping on a daemon thread. Once only."""
        if self._stopped:
            return
        self._stopped = True
        self._queue.close()
        self._worker.join(timeout)
        stopping = threading.Thread(target=self._server.stop, name="onboard-live-stop",
                                    daemon=True)  # fmt: skip
        stopping.start()
        stopping.join(timeout)
        if stopping.is_alive():
            log.warning("the live view's server is still closing a client that stopped "
                        "reading; onboard goes on without waiting")  # fmt: skip

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


class _Feed:
    """One recording's subscriber: hands each record to the worker, never waiting."""

    def __init__(self, queue: DropOldestQueue[tuple[RecordChannels, Published]],
                 channels: RecordChannels) -> None:  # fmt: skip
        self._queue = queue
        self._channels = channels

    def __call__(self, published: Published) -> None:
        self._queue.put((self._channels, published))


def _listener(view: LiveView) -> ServerListener:
    """The server's listener: counts the subscriptions of each topic."""
    from foxglove.websocket import ServerListener

    class Listener(ServerListener):  # the protocol's other callbacks do nothing
        def on_subscribe(self, client: Client, channel: ChannelView) -> None:
            view._count(channel.topic, 1)

        def on_unsubscribe(self, client: Client, channel: ChannelView) -> None:
            view._count(channel.topic, -1)

    return Listener()
