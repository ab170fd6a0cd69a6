"""Does onboard install on an aarch64 controller (Jetson Orin, Raspberry Pi 5) from binary
wheels alone? ``python tools/aarch64_check.py`` (or ``make aarch64-check``) asks pip to
resolve the core install, then the core with each extra, for manylinux aarch64 and CPython
3.11 with ``--only-binary=:all:`` and the pins of constraints.txt, downloading nothing it
does not need to decide. A requirement with no such wheel shows here, named, before a user
finds it on the robot.

    python tools/aarch64_check.py [--extras service mcap ...] [--json FILE]

Needs the package index (PyPI). Prints one row per install (what was resolved, how many
wheels, their size, the first requirement without an aarch64 wheel) and exits 1 when an
install that should work on a controller does not. The ``local-llm``, ``realsense`` and
``sim`` extras are expected to fail: PyPI has no aarch64 wheels of llama-cpp-python,
pyrealsense2 or pybullet (docs/service.md says what to do instead).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: glibc 2.17 (manylinux2014) up to 2.35: JetPack 6 is Ubuntu 22.04 (2.35), Raspberry Pi OS
#: bookworm Debian 12 (2.36)
PLATFORMS = (
    "manylinux2014_aarch64",
    *(f"manylinux_2_{minor}_aarch64" for minor in range(17, 36)),
)
#: what runs on a controller (train and dev never do; overcooked is evaluation only)
CONTROLLER_EXTRAS = ("service", "local-llm", "sim", "realsense", "mcap", "metrics")
#: extras PyPI has no aarch64 wheel for: built on the controller, or run elsewhere
#: (docs/service.md: llama-cpp-python and librealsense's bindings are built there; the
#: physics twin, pybullet, runs on a development machine, not on the robot)
BUILT_ON_THE_CONTROLLER = frozenset({"local-llm", "realsense", "sim"})
_MISSING = re.compile(
    r"(?:Could not find a version that satisfies the requirement|No matching distribution "
    r"found for) ([A-Za-z0-9_.\-\[\]]+)"
)
#: pip's conflict report names the packages it found no distribution of, one a line
_NO_DISTRIBUTION = re.compile(
    r"no matching distributions available for your environment:\n((?:[ \t]+\S+\n)+)"
)


@dataclass(frozen=True)
class Resolved:
    install: str  # "core" or "core + EXTRA"
    ok: bool
    expected: bool  # the outcome the docs promise (a source-only extra fails)
    wheels: int
    megabytes: float
    missing: str | None  # the first requirement pip found no binary wheel for


def requirements(pyproject: Path, extra: str | None) -> list[str]:
    """The core requirements, plus ``extra``'s (KeyError: no such extra)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    found = list(project["dependencies"])
    if extra is not None:
        found += project["optional-dependencies"][extra]
    return found


def resolve(
    install: str,
    wanted: list[str],
    constraints: Path,
    pip_args: list[str],
    folder: Path,
) -> Resolved:
    """``pip download`` of ``wanted`` for aarch64, binary wheels only, into ``folder``."""
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    # not --quiet: pip then leaves out the lines that name what has no distribution
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
               "--only-binary=:all:", *platforms, "--implementation", "cp",
               "--python-version", "3.11", "-c", str(constraints), "-d", str(folder),
               *pip_args, *wanted]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(folder.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 1e6
    missing = None
    if done.returncode != 0:
        said = done.stdout + done.stderr  # pip reports a conflict on stdout, the error on stderr
        found = _MISSING.search(said)
        listed = _NO_DISTRIBUTION.search(said)
        lines = [ln for ln in said.splitlines() if ln.startswith("ERROR")]
        if listed:
            missing = ", ".join(listed.group(1).split())
        elif found:
            missing = found.group(1)
        else:
            missing = lines[-1] if lines else "pip failed"
    extra = install.removeprefix("core + ")
    ok = done.returncode == 0
    expected = ok != (extra in BUILT_ON_THE_CONTROLLER)
    return Resolved(install, ok, expected, len(wheels), round(size, 1), missing)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", nargs="*", default=list(CONTROLLER_EXTRAS))
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument("--constraints", type=Path, default=ROOT / "constraints.txt")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    parser.add_argument("--pip-arg", action="append", default=[],
                        help="passed to pip download (e.g. --pip-arg=--no-index)")  # fmt: skip
    args = parser.parse_args(argv)
    rows: list[Resolved] = []
    for extra in [None, *args.extras]:
        install = "core" if extra is None else f"core + {extra}"
        try:
            wanted = requirements(args.pyproject, extra)
        except KeyError:
            print(f"aarch64 check: {args.pyproject} has no extra {extra!r}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="onboard-aarch64-") as folder:
            rows.append(resolve(install, wanted, args.constraints, args.pip_arg, Path(folder)))
    _print(rows)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0 if all(r.expected for r in rows) else 1


def _print(rows: list[Resolved]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="binary wheels for manylinux aarch64, CPython 3.11")
    for column in ("install", "resolves", "wheels", "MB", "no aarch64 wheel", "as documented"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.install, "yes" if r.ok else "no", str(r.wheels), f"{r.megabytes:.1f}",
                      r.missing or "", "yes" if r.expected else "NO")  # fmt: skip
    Console(width=120).print(table)


if __name__ == "__main__":
    raise SystemExit(main())
