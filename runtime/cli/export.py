"""``onboard export REC --mcap|--jsonl``: a recording in the other format (docs/recordings.md)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["export_command"]


def export_command(source: Path, form: str, output: Path | None = None) -> int:
    from onboard.loop.mcapfile import export_jsonl, export_mcap

    target = output or source.with_suffix(f".{form}")
    count = (export_mcap if form == "mcap" else export_jsonl)(source, target)
    print(f"exported: {count} records of {source} to {target}  (onboard replay {target})")
    return 0
