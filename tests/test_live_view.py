"""The live Foxglove view (issue 33, item 3): ``onboard up --foxglove PORT`` serves each
episode over Foxglove's WebSocket protocol on loopback, on the channels, with the schemas and
bytes its MCAP recording holds, each message within 1 s of its record; a client that stops
reading holds up neither the recorder nor the other clients.

The client (onboard.testing.foxglove_client) is written from the protocol's public
specification: serverInfo, advertise, subscribe with its own ids, binary message data (opcode
0x01, u32 subscription id, u64 log time in ns, payload); the SDK's server names the protocol
``foxglove.sdk.v1`` in the handshake, no longer ``foxglove.websocket.v1``.

A code step (camera frames sent to the bots) run by ``onboard up`` in process against the
stand-in on loopback, with the test's own recorder subscribers around the view's: one stamps
when each record reaches the subscribers, one holds the episode at a kind's first record
until the clients have subscribed to its new channel (the virtual clock outruns any client:
no race decides what they see).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcap.reader import make_reader
from test_cli import robot_copy, up_robot_copy
from waits import GUARD, until
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import connect

from onboard.base.dropqueue import DropOldestQueue
from onboard.base.errors import MissingExtraError, UsageError
from onboard.cli.main import main
from onboard.loop.channels import FOXGLOVE_CHANNELS, record_topic
from onboard.loop.live import LiveView
from onboard.loop.mcapfile import export_mcap
from onboard.loop.recorder import Published, Recorder, read_recording, subscribe_every
from onboard.testing.foxglove_client import SUBPROTOCOLS, Received, SpecClient

MISSION = """\
name = "watched"

[[steps]]
name = "feed"
skill = "code"
goal = "I'm hungry."
scene = "hungry"
timeout = 300
"""


def mcap_of(recording: Path, folder: Path) -> tuple[dict[str, Any], list[tuple[str, int, bytes]]]:
    """The channels (by topic) and messages (topic, log time, data) of the recording as MCAP."""
    exported = folder / "episode.mcap"
    export_mcap(recording, exported)
    with exported.open("rb") as file:
        reader = make_reader(file)
        summary = reader.get_summary()
        assert summary is not None
        channels = {
            c.topic: {"encoding": c.message_encoding, "metadata": dict(c.metadata),
                      "schemaName": summary.schemas[c.schema_id].name,
                      "schemaEncoding": summary.schemas[c.schema_id].encoding,
                      "schema": summary.schemas[c.schema_id].data.decode("utf-8")}
            for c in summary.channels.values()
        }  # fmt: skip
        found = reader.iter_messages(log_time_order=False)
        messages = [
            (channel.topic, message.log_time, message.data) for _, channel, message in found
        ]
    return channels, messages


def test_up_serves_each_record_live_on_the_recordings_channels_within_a_second(
    tmp_path: Path,
) -> None:
    robot = up_robot_copy(tmp_path)
    mission = tmp_path / "watched.toml"
    mission.write_text(MISSION, encoding="utf-8")
    reached: dict[str, float] = {}  # a record's JSON line -> when it reached the subscribers
    image_reached: dict[str, float] = {}  # an image's sha256 -> when its record did
    problems: list[str] = []
    clients: list[SpecClient] = []
    kinds: set[str] = set()

    def stamp(published: Published) -> None:
        now = time.monotonic()
        reached[published.line] = now
        for image in published.images:
            image_reached.setdefault(image.sha256, now)

    with LiveView(0) as live:

        def hold(published: Published) -> None:
            """At a kind's first record, until every client has its channel; at the second
            transition, until a client connecting mid-episode has subscribed."""
            record = published.record
            transitions = sum(json.loads(line)["kind"] == "transition" for line in reached)
            waits = []
            if record["kind"] == "transition" and transitions == 2:
                clients.append(SpecClient(live.url))
                waits += ["/camera", record_topic("transition")]
            if record["kind"] not in kinds:
                kinds.add(record["kind"])
                waits.append(record_topic(record["kind"]))
            for topic in waits:
                if not until(functools.partial(everyone, topic)):
                    problems.append(f"{topic}: {live.subscribers(topic)} subscribers")

        def everyone(topic: str) -> bool:
            return live.subscribers(topic) == len(clients)

        clients.append(SpecClient(live.url))
        early = clients[0]
        assert until(lambda: all(live.subscribers(c.topic) == 1 for c in FOXGLOVE_CHANNELS))
        began = time.monotonic()
        with (
            subscribe_every(lambda: stamp),
            subscribe_every(live.episode),
            subscribe_every(lambda: hold),
        ):
            code = main(["--robot", str(robot), "up", "--once", "--mission", str(mission),
                         "--llm", "standin", "--clock", "virtual"])  # fmt: skip
        assert code == 0 and not problems, problems
        assert len(clients) == 2, "the late client connected"
        late = clients[1]
        (recording,) = (tmp_path / "recordings").glob("*.jsonl")
        records = list(read_recording(recording))
        last_transition = next(r for r in reversed(records) if r["kind"] == "transition")
        lines: dict[str, list[bytes]] = {}
        for line in recording.read_bytes().splitlines():
            lines.setdefault(record_topic(json.loads(line)["kind"]), []).append(line)

        def every_record() -> bool:
            """Each record on its kind's channel, the first perhaps not: it may be logged
            before a client can subscribe to the channel it opens."""
            got: dict[str, list[bytes]] = {}
            for r in early.received:
                got.setdefault(r.topic, []).append(bytes(r.data))
            return all(got.get(topic, []) in (every, every[1:]) for topic, every in lines.items())

        assert early.wait(every_record)
        assert late.wait(lambda: any(json.loads(r.data)["seq"] == last_transition["seq"]
                                     for r in late.on(record_topic("transition"))))  # fmt: skip
        seconds = time.monotonic() - began
        assert live.dropped == 0
        for client in clients:
            client.close()
    assert early.server_info["op"] == "serverInfo" and early.ws.subprotocol == "foxglove.sdk.v1"

    # the very channels and bytes of the recording as MCAP
    channels, messages = mcap_of(recording, tmp_path)
    in_mcap = Counter(messages)
    for client in clients:
        for channel in client.channels.values():
            assert channel["encoding"] == "json" and channel["schemaEncoding"] == "jsonschema"
            if channel["topic"] in channels:
                advertised = {k: channel.get(k, {}) for k in channels[channel["topic"]]}
                assert advertised == channels[channel["topic"]], channel["topic"]
        got = Counter((r.topic, r.ns, bytes(r.data)) for r in client.received)
        assert not got - in_mcap, "a live message the recording does not hold"
        assert all(client.subscriptions[r.subscription] in client.channels for r in client.received)

    # the early client: every record (above), every frame
    transitions = [r for r in records if r["kind"] == "transition"]
    frames = [m for m in messages if m[0] == "/camera"]
    assert len(transitions) >= 3 and len(frames) >= 2
    assert len(early.on(record_topic("transition"))) >= len(transitions) - 1
    assert [(r.ns, bytes(r.data)) for r in early.on("/camera")] == [m[1:] for m in frames]

    # the late client: every channel made before it came, then what came after
    assert {record_topic(k) for k in ("header", "observation", "request")} <= late.first_advertised
    assert [json.loads(r.data)["seq"] for r in late.on(record_topic("transition"))][-1] == (
        last_transition["seq"]
    )
    assert late.on("/camera"), "a frame after it connected"

    # within 1 s of the record, from its reaching the subscribers to the client's read
    latency: dict[str, list[float]] = {"transition": [], "camera": []}
    for client in clients:
        for r in client.on(record_topic("transition")):
            latency["transition"].append(r.at - reached[r.data.decode("utf-8")])
        for r in client.on("/camera"):
            image = base64.b64decode(json.loads(r.data)["data"])
            latency["camera"].append(r.at - image_reached[hashlib.sha256(image).hexdigest()])
    print(
        f"live view: {seconds:.2f} s for the episode; record -> client, s: "
        + ", ".join(f"{k} max {max(v):.4f} (n={len(v)})" for k, v in latency.items())
    )
    assert all(0 <= s < 1.0 for values in latency.values() for s in values), latency


def test_a_client_that_stops_reading_holds_up_neither_the_recorder_nor_another_client(
    tmp_path: Path,
) -> None:
    """Frames of 96 kB, far more than a stalled client's socket and its backlog hold: every
    write returns, and the client that reads gets the last frame."""
    frames = 300
    with LiveView(0, backlog=16) as live:
        reading = SpecClient(live.url)
        stalled = contextlib.ExitStack()
        silent = stalled.enter_context(
            connect(live.url, subprotocols=SUBPROTOCOLS, max_queue=1, close_timeout=0.1)
        )
        silent.recv(timeout=GUARD)  # serverInfo
        advertised = json.loads(silent.recv(timeout=GUARD))["channels"]
        silent.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": i, "channelId": c["id"]} for i, c in enumerate(advertised)]}))  # fmt: skip
        assert until(lambda: live.subscribers("/camera") == 2)
        recorder = Recorder(tmp_path / "episode.jsonl")
        recorder.subscribe(live.episode())
        last = ""
        for n in range(frames):
            data = n.to_bytes(4, "big") + bytes(96_000)
            last = hashlib.sha256(data).hexdigest()
            url = f"data:image/png;base64,{base64.b64encode(data).decode('ascii')}"
            content = [{"type": "image_url", "image_url": {"url": url}}]
            recorder.write("observation", image=last, objects=[])
            recorder.write("request", purpose="look", messages=[{"role": "user",
                                                                 "content": content}])  # fmt: skip
        recorder.close()

        def shown(r: Received) -> bool:
            image = base64.b64decode(json.loads(r.data)["data"])
            return hashlib.sha256(image).hexdigest() == last

        assert reading.wait(lambda: any(shown(r) for r in reading.on("/camera")))
        print(
            f"stalled client: the live view dropped {live.dropped} records; the reading "
            f"client got {len(reading.on('/camera'))} of {frames} frames"
        )
        reading.close()
        live.stop(timeout=0.5)  # returns, the stalled client still connected
    with contextlib.suppress(ConnectionClosed):  # the server stopped with the view
        stalled.close()
    assert len(list(read_recording(tmp_path / "episode.jsonl"))) == 2 * frames


def test_the_queue_drops_its_oldest_and_never_waits() -> None:
    queue: DropOldestQueue[int] = DropOldestQueue(3)
    assert [queue.put(n) for n in range(5)] == [True, True, True, False, False]
    assert queue.dropped == 2 and len(queue) == 3
    assert [queue.get(), queue.get()] == [2, 3]
    queue.close()
    assert queue.get() == 4 and queue.get() is None
    assert queue.put(5) is False and queue.dropped == 3
    with pytest.raises(ValueError):
        DropOldestQueue(0)


def test_up_foxglove_serves_on_loopback_while_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--robot", str(robot_copy(tmp_path)), "up", "--check", "--foxglove", "0"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("onboard: Foxglove live view on ws://127.0.0.1:"), line
    # stopped with the service: refused, or (the SDK closes its listener just after its stop
    # returns) closed before a first message
    with (
        pytest.raises((OSError, WebSocketException)),
        connect(line.rpartition(" ")[2], subprotocols=SUBPROTOCOLS, open_timeout=2) as ws,
    ):
        ws.recv(timeout=GUARD)


def test_a_foxglove_port_in_use_is_one_line() -> None:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"^--foxglove: cannot listen on 127\.0\.0\.1:"
                           rf"{port}: the port is in use"):  # fmt: skip
            LiveView(port)


def test_without_foxglove_sdk_up_foxglove_is_one_line_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "foxglove", None)  # makes the import fail
    with pytest.raises(MissingExtraError, match=r"pip install 'onboard\[live\]'"):
        LiveView(0)
    code = main(["--robot", str(robot_copy(tmp_path)), "up", "--check", "--foxglove", "0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "the live extra" in err, err
