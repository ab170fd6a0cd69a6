"""How fast the command line starts: ``onboard --help`` and ``onboard check``, each beside
the floor it is judged against, measured in one run.

- ``onboard --help`` against ``python -c pass`` plus the import of ``onboard.cli.main``
  (goal: at most 2x);
- ``onboard check`` against ``python -c "import onnxruntime, numpy, pydantic"`` (goal: at most
  3x), with the embedding cache warm (every start after the first) and cold (a new cache
  folder: the first start after installing, or after a skill's references all changed).

Every command runs ``--runs`` times, interleaved so that a change of load hits all of them
alike; the table gives the median and the minimum of the wall time and the median CPU time
(user + system, which a busy machine inflates less). Ratios are of medians.

Bytecode caching is on for every command, as on a user's machine: a development box that sets
``PYTHONDONTWRITEBYTECODE`` (this one does) would otherwise recompile onboard's own modules at
every start, while the floor's packages keep the ``.pyc`` files pip wrote when it installed
them. The variable is dropped from the commands' environment, and the first, uncounted run
writes the cache.

    .venv/bin/python bench/cli_startup.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PYTHON = sys.executable
ONBOARD = str(Path(sys.executable).parent / "onboard")


@dataclass
class Command:
    name: str
    argv: list[str]
    cold_cache: bool = False
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def run(self, cache: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="onboard-cold-cache-") as cold:
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            self._run({**env, "ONBOARD_CACHE_DIR": cold if self.cold_cache else str(cache)})

    def _run(self, env: dict[str, str]) -> None:
        start = time.perf_counter()
        process = subprocess.Popen(
            self.argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        _, status, usage = os.wait4(process.pid, 0)
        self.wall.append(time.perf_counter() - start)
        self.cpu.append(usage.ru_utime + usage.ru_stime)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"{' '.join(self.argv)} failed: {process.stderr.read().decode()}")
        process.stderr.close()

    @property
    def median(self) -> float:
        return statistics.median(self.wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    commands = {
        "pass": Command("python -c pass", [PYTHON, "-c", "pass"]),
        "import_main": Command(
            "python -c 'import onboard.cli.main'", [PYTHON, "-c", "import onboard.cli.main"]
        ),
        "help": Command("onboard --help", [ONBOARD, "--help"]),
        "floor": Command(
            "python -c 'import onnxruntime, numpy, pydantic'",
            [PYTHON, "-c", "import onnxruntime, numpy, pydantic"],
        ),
        "check": Command("onboard check (embedding cache warm)", [ONBOARD, "check"]),
        "check_cold": Command(
            "onboard check (embedding cache cold)", [ONBOARD, "check"], cold_cache=True
        ),
    }
    with tempfile.TemporaryDirectory(prefix="onboard-bench-cache-") as cache:
        for command in commands.values():  # fills the caches (embeddings, bytecode); not counted
            command.run(Path(cache))
            command.wall.clear()
            command.cpu.clear()
        for _ in range(args.runs):
            for command in commands.values():
                command.run(Path(cache))

    help_ratio = commands["help"].median / commands["import_main"].median
    check_ratio = commands["check"].median / commands["floor"].median
    cold_ratio = commands["check_cold"].median / commands["floor"].median
    table = Table(title=f"CLI start-up, {args.runs} runs each (seconds)")
    for column in ("command", "wall median", "wall min", "CPU median"):
        table.add_column(column, justify="left" if column == "command" else "right")
    for command in commands.values():
        table.add_row(
            command.name,
            f"{command.median:.3f}",
            f"{min(command.wall):.3f}",
            f"{statistics.median(command.cpu):.3f}",
        )
    console = Console()
    console.print(table)
    console.print(
        f"onboard --help / (python -c pass + import onboard.cli.main): {help_ratio:.2f}x "
        "(goal <= 2x; the reference already includes python's own start)\n"
        f"onboard check, cache warm / import floor: {check_ratio:.2f}x (goal <= 3x)\n"
        f"onboard check, cache cold / import floor: {cold_ratio:.2f}x"
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "cli_startup.json"
    out.write_text(
        json.dumps(
            {
                "runs": args.runs,
                "ratios": {
                    "help_over_import_main": help_ratio,
                    "check_warm_over_floor": check_ratio,
                    "check_cold_over_floor": cold_ratio,
                },
                "commands": {
                    key: {"argv": c.argv[1:], "wall": c.wall, "cpu": c.cpu}
                    for key, c in commands.items()
                },
            },
            indent=2,
        )
    )
    console.print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
