"""What recording as MCAP costs against JSON lines, per record and on disk.

Three real episodes are recorded first (Engage against the stand-in on the virtual clock, a
tidy scene episode, a code episode whose looks send frames to the bots); then every record of
each is written again by ``Recorder.write`` (its images back as data URLs, so the recorder
splits them as in the episode) to four sinks:

- ``jsonl``: a JSON-lines recording (the default);
- ``mcap``: a recording made as MCAP (``--record x.mcap``: unchunked, flushed per record);
- ``jsonl + mcap subscriber``: JSON lines with the MCAP writer subscribed (as a live view or
  a second sink would be);
- ``jsonl + metrics``: JSON lines with the Prometheus subscriber (``onboard up --metrics``).

Best of 5 rounds, µs per record; the bytes on disk (the recording with its images folder),
and the MCAP that ``onboard export --mcap`` writes (chunked, zstd).

    .venv/bin/python bench/recording_formats.py
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import RECORDED_EPISODES, environment, recorded_episodes, write_results
from rich.console import Console
from rich.table import Table

from onboard.loop.mcapfile import McapWriter, export_mcap
from onboard.loop.metrics import RecordMetrics
from onboard.loop.recorder import Recorder
from onboard.loop.recording import images_dir

ROUNDS = 5


def size(path: Path) -> int:
    folder = images_dir(path)
    extra = sum(p.stat().st_size for p in folder.iterdir()) if folder.is_dir() else 0
    return path.stat().st_size + extra


def jsonl(path: Path) -> Recorder:
    return Recorder(path.with_suffix(".jsonl"))


def mcap(path: Path) -> Recorder:
    return Recorder(path.with_suffix(".mcap"))


class WithMcap(Recorder):
    """JSON lines, and the MCAP writer as an ordinary subscriber."""

    def __init__(self, path: Path) -> None:
        super().__init__(path.with_suffix(".jsonl"))
        self.writer = McapWriter.create(path.with_suffix(".mcap"))
        self.subscribe(self.writer)

    def close(self) -> None:
        super().close()
        self.writer.close()


def with_metrics(path: Path) -> Recorder:
    recorder = Recorder(path.with_suffix(".jsonl"))
    recorder.subscribe(RecordMetrics())
    return recorder


SINKS: dict[str, Callable[[Path], Recorder]] = {
    "jsonl": jsonl,
    "mcap": mcap,
    "jsonl + mcap subscriber": WithMcap,
    "jsonl + metrics": with_metrics,
}


def rewrite(records: list[dict[str, Any]], make: Callable[[Path], Recorder], folder: Path) -> float:
    """Seconds to write ``records`` through a new recorder in an empty ``folder``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    stamp = ("seq", "t", "wall", "kind")
    fields = [{k: v for k, v in r.items() if k not in stamp} for r in records]
    began = time.perf_counter()
    recorder = make(folder / "episode")
    for record, rest in zip(records, fields, strict=True):
        recorder.write(record["kind"], **rest)
    recorder.close()
    return time.perf_counter() - began


def main() -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
        base = Path(tmp)
        for name, source, records in recorded_episodes(base):
            exported = base / f"{name}-exported.mcap"
            export_mcap(source, exported)
            base_us = None
            for sink, make in SINKS.items():
                folder = base / f"{name}-{sink.replace(' ', '')}"
                best = min(rewrite(records, make, folder) for _ in range(ROUNDS))
                us = 1e6 * best / len(records)
                base_us = us if base_us is None else base_us
                written = next(folder.glob("episode.mcap" if sink == "mcap" else "episode.jsonl"))
                rows.append({"episode": name, "records": len(records), "sink": sink,
                             "us_per_record": us, "overhead_us": us - base_us,
                             "bytes": size(written), "exported_mcap_bytes":
                             exported.stat().st_size})  # fmt: skip
    table = Table(title=f"Recording an episode again, best of {ROUNDS}: µs per record")
    for column in ("episode", "records", "sink", "µs/record", "over jsonl", "bytes on disk"):
        table.add_column(column, justify="left" if column in ("episode", "sink") else "right")
    for row in rows:
        table.add_row(row["episode"], str(row["records"]), row["sink"],
                      f"{row['us_per_record']:.0f}", f"{row['overhead_us']:+.0f}",
                      f"{row['bytes']:,}")  # fmt: skip
    Console(width=120).print(table)
    for name in RECORDED_EPISODES:
        first = next(r for r in rows if r["episode"] == name)
        print(f"{name}: exported MCAP (chunked, zstd) {first['exported_mcap_bytes']:,} bytes, "
              f"JSON lines with images {first['bytes']:,}")  # fmt: skip
    path = write_results("recording_formats", {"environment": environment(), "rounds": ROUNDS,
                                               "rows": rows})  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
