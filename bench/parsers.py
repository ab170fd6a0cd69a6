"""Parse time against input length for the protocol parsers that face hostile bytes.

Three parsers, each fed as it is on its link: the JAKA emulator's frame splitter
(``JsonStream(lines=True).frames``, in 64 KB reads), the JAKA driver's splitter
(``JsonStream().feed``, the client reading replies, in 64 KB reads) and the GRBL emulator's
reading as its firmware does (``LineFilter.feed`` byte by byte in 4 KB reads, then
``parse_block`` on every line). Inputs of 1 to 256 KB: all ``{``, all ``[``, valid frames (or
G-code lines) back to back, and seeded random bytes (one 1 KB block repeated, so every size
has the same mix). Every parser must be linear: the time
per KB (µs/KB) must stay flat as the input grows, so the last column, (µs/KB at the largest
size) / (µs/KB at 1 KB), stays near 1. The reference is the splitter they replaced
(bench/_old_splitter.py), which rescans the buffer for each stray ``{`` (37 s of a core for
32 KB of ``{``); it stops at the size where the next one would take more than 2 s.

    .venv/bin/python bench/parsers.py
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from _common import environment, write_results
from _old_splitter import OldJsonStream
from rich.console import Console
from rich.table import Table

from onboard.drivers.arm.jaka import JsonStream
from onboard.drivers.emulators.grbl_gcode import LineFilter, ParserState, parse_block

SIZES_KB = (1, 4, 16, 64, 256)
REPEATS = 5  # the minimum of these is reported
VALID_FRAME = b'{"cmdName":"moveL","relFlag":0,"cartPosition":[400.0,0.0,300.0,180.0,0.0,0.0]}'
VALID_LINE = b"G1 X400.000 Y0.000 Z300.000 F6000\n"
GARBAGE = random.Random(0).randbytes(1024) * max(SIZES_KB)  # the same mix at every size
REFERENCE_BUDGET = 2.0  # seconds: the reference is not run on larger inputs past this


def inputs(size: int, valid: bytes) -> dict[str, bytes]:
    return {
        "{": b"{" * size,
        "[": b"[" * size,
        "valid": (valid * (size // len(valid) + 1))[:size],
        "garbage": GARBAGE[:size],
    }


def chunked(feed: Callable[[bytes], object], chunk: int) -> Callable[[bytes], None]:
    def run(data: bytes) -> None:
        for i in range(0, len(data), chunk):
            feed(data[i : i + chunk])

    return run


def emulator_splitter(data: bytes) -> None:
    chunked(JsonStream(lines=True).frames, 65536)(data)


def driver_splitter(data: bytes) -> None:
    chunked(JsonStream().feed, 65536)(data)


def old_splitter(data: bytes) -> None:
    chunked(OldJsonStream().feed, 65536)(data)


def gcode_parser(data: bytes) -> None:
    """The GRBL emulator's reading: its line filter byte by byte, then the block parser."""
    line_filter, state = LineFilter(), ParserState()
    coords = [[0.0, 0.0, 0.0] for _ in range(8)]

    def feed(chunk: bytes) -> None:
        for byte in chunk:
            got = line_filter.feed(byte)
            if got is not None and got[0] and not got[1]:
                parse_block(got[0], state, coords)

    chunked(feed, 4096)(data)


PARSERS: dict[str, tuple[Callable[[bytes], None], bytes]] = {
    "JAKA emulator": (emulator_splitter, VALID_FRAME),
    "JAKA driver": (driver_splitter, VALID_FRAME),
    "G-code emulator (GRBL)": (gcode_parser, VALID_LINE),
    "old splitter (reference)": (old_splitter, VALID_FRAME),
}


def best_of(parse: Callable[[bytes], None], data: bytes, repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        parse(data)
        best = min(best, time.perf_counter() - began)
    return best


def main() -> None:
    rows: list[dict[str, Any]] = []
    for name, (parse, valid) in PARSERS.items():
        for kind in ("{", "[", "valid", "garbage"):
            seconds: dict[int, float] = {}
            for kb in SIZES_KB:
                reference = name.startswith("old")
                if reference and seconds and max(seconds.values()) > REFERENCE_BUDGET / 16:
                    break  # quadratic: the next size would take 16 times as long
                seconds[kb] = best_of(parse, inputs(kb * 1024, valid)[kind], 1 if reference else 5)
            per_kb = {kb: 1e6 * s / kb for kb, s in seconds.items()}
            last = max(seconds)
            rows.append(
                {
                    "parser": name,
                    "input": kind,
                    "ms": {kb: 1e3 * s for kb, s in seconds.items()},
                    "us_per_kb": per_kb,
                    "growth": per_kb[last] / per_kb[SIZES_KB[0]],
                    "growth_to_kb": last,
                }
            )
    table = Table(title="Parse time against input length (best of 5): ms (µs per KB)")
    table.add_column("parser")
    table.add_column("input")
    for kb in SIZES_KB:
        table.add_column(f"{kb} KB", justify="right")
    table.add_column("µs/KB: largest ÷ 1 KB", justify="right")
    for row in rows:
        ms, per_kb = row["ms"], row["us_per_kb"]
        cells = [f"{ms[kb]:.2f} ({per_kb[kb]:.0f})" if kb in ms else "-" for kb in SIZES_KB]
        growth = f"{row['growth']:.2f} (to {row['growth_to_kb']} KB)"
        table.add_row(str(row["parser"]), str(row["input"]), *cells, growth)
    Console(width=160).print(table)
    print(
        "linear: µs/KB stays flat as the input grows (the last column near 1); quadratic: it"
        " grows with the size (the reference stops where the next size would take > 2 s)"
    )
    path = write_results(
        "parsers", {"environment": environment(), "sizes_kb": SIZES_KB, "rows": rows}
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
