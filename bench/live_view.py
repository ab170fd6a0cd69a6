"""What the live Foxglove view (``onboard up --foxglove``) costs the recorder, and how late
its messages reach a client.

Three real episodes are recorded first (Engage against the stand-in on the virtual clock, a
tidy scene episode, a code episode whose looks send frames to the bots); then every record of
each is written again by ``Recorder.write`` (its images back as data URLs) to:

- ``jsonl``: a JSON-lines recording;
- ``jsonl + live view``: with the live view subscribed, no client connected;
- ``jsonl + live view, 1 client``: a client (onboard.testing.foxglove_client) subscribed to
  every channel.

Best of 5 rounds, µs per record on the writer's thread, as fast as it writes. The view's own
cost there is a queue append; its worker thread's work competes for the interpreter.

Then once more with the client, each record written at the episode's own pace (the gaps of
its recorded wall times): the latency from a record reaching the recorder's subscribers to
the client reading its message, for the records' channels and the camera frames.

    .venv/bin/python bench/live_view.py
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import environment, recorded_episodes, write_results
from rich.console import Console
from rich.table import Table

from onboard.loop.live import LiveView
from onboard.loop.recorder import Published, Recorder
from onboard.testing.foxglove_client import SpecClient

ROUNDS = 5
STAMP = ("seq", "t", "wall", "kind")


def rewrite(
    records: list[dict[str, Any]],
    folder: Path,
    subscribers: list[Callable[[Published], None]],
    pace: bool = False,
) -> float:
    """Seconds to write ``records`` through a new recorder in an empty ``folder``, with
    ``subscribers``; ``pace``: each record after its recorded wall-time gap."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    fields = [{k: v for k, v in r.items() if k not in STAMP} for r in records]
    recorder = Recorder(folder / "episode.jsonl")
    for subscriber in subscribers:
        recorder.subscribe(subscriber)
    spent = 0.0
    previous = records[0]["wall"]
    for record, rest in zip(records, fields, strict=True):
        if pace:
            time.sleep(max(0.0, record["wall"] - previous))
            previous = record["wall"]
        began = time.perf_counter()
        recorder.write(record["kind"], **rest)
        spent += time.perf_counter() - began
    recorder.close()
    return spent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def latencies(records: list[dict[str, Any]], folder: Path, view: LiveView) -> dict[str, Any]:
    """Record -> client seconds for every message the client read, by channel family."""
    reached: dict[bytes, float] = {}
    image_reached: dict[str, float] = {}

    def stamp(published: Published) -> None:
        now = time.monotonic()
        reached[published.line.encode("utf-8")] = now
        for image in published.images:
            image_reached.setdefault(image.sha256, now)

    client = SpecClient(view.url)
    try:
        rewrite(records, folder, [stamp, view.episode()], pace=True)
        last = (folder / "episode.jsonl").read_bytes().splitlines()[-1]
        client.wait(lambda: any(bytes(r.data) == last for r in client.received))
    finally:
        client.close()
    found: dict[str, list[float]] = {"records": [], "camera": []}
    for r in client.received:
        if r.topic.startswith("/onboard/"):
            found["records"].append(r.at - reached[bytes(r.data)])
        elif r.topic == "/camera":
            image = base64.b64decode(json.loads(r.data)["data"])
            found["camera"].append(r.at - image_reached[hashlib.sha256(image).hexdigest()])
    return {
        family: {"n": len(v), "median_ms": 1e3 * statistics.median(v),
                 "p95_ms": 1e3 * percentile(v, 0.95), "max_ms": 1e3 * max(v)}
        for family, v in found.items() if v
    }  # fmt: skip


def main() -> None:
    rows: list[dict[str, Any]] = []
    delays: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-live-") as tmp, LiveView(0) as view:
        base = Path(tmp)
        for name, _recording, records in recorded_episodes(base):
            folder = base / name
            base_us = None
            for sink in ("jsonl", "jsonl + live view", "jsonl + live view, 1 client"):
                client = SpecClient(view.url) if sink.endswith("client") else None
                subscribers = [] if sink == "jsonl" else [view.episode()]
                dropped = view.dropped
                best = min(rewrite(records, folder, subscribers) for _ in range(ROUNDS))
                if client is not None:
                    client.close()
                us = 1e6 * best / len(records)
                base_us = us if base_us is None else base_us
                rows.append({"episode": name, "records": len(records), "sink": sink,
                             "us_per_record": us, "overhead_us": us - base_us,
                             "dropped": view.dropped - dropped})  # fmt: skip
            delays[name] = latencies(records, folder, view)
    table = Table(title=f"Writing an episode again, best of {ROUNDS}: µs per record")
    for column in ("episode", "records", "sink", "µs/record", "over jsonl", "dropped"):
        table.add_column(column, justify="left" if column in ("episode", "sink") else "right")
    for row in rows:
        table.add_row(row["episode"], str(row["records"]), row["sink"],
                      f"{row['us_per_record']:.0f}", f"{row['overhead_us']:+.0f}",
                      str(row["dropped"]))  # fmt: skip
    console = Console(width=120)
    console.print(table)
    late = Table(title="Record -> client, the episode at its own pace: ms")
    for column in ("episode", "channels", "messages", "median", "p95", "max"):
        late.add_column(column, justify="left" if column in ("episode", "channels") else "right")
    for name, families in delays.items():
        for family, d in families.items():
            late.add_row(name, family, str(d["n"]), f"{d['median_ms']:.1f}", f"{d['p95_ms']:.1f}",
                         f"{d['max_ms']:.1f}")  # fmt: skip
    console.print(late)
    path = write_results("live_view", {"environment": environment(), "rounds": ROUNDS,
                                       "rows": rows, "latency": delays})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
