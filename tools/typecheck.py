"""mypy (strict, as configured in pyproject.toml) over every module of the ``onboard`` package.

mypy names a file's module after its folders and cannot see through setuptools' editable
import hook, so on its own it would call ``runtime/loop/engine.py`` ``runtime.loop.engine``
and find no ``onboard`` to resolve the imports against. This gives mypy each file under the
name it is installed as, from ``[tool.setuptools]`` ``packages`` and ``package-dir``
(``runtime/`` is ``onboard``, ``drivers/`` is ``onboard.drivers``), and runs it with the
``[tool.mypy]`` settings. It uses mypy's own ``process_options`` and ``run_build`` (mypy is
pinned in constraints.txt). Extra arguments go to mypy: ``python tools/typecheck.py -v``.
"""

from __future__ import annotations

import os
import sys
import time
import tomllib
from pathlib import Path

from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent


def package_folder(package: str, package_dir: dict[str, str]) -> Path:
    """The folder setuptools installs ``package`` from (the longest package-dir prefix)."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in package_dir:
            return ROOT.joinpath(package_dir[prefix], *parts[n:])
    return ROOT.joinpath(package_dir.get("", "."), *parts)


def sources() -> list[BuildSource]:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    packages: list[str] = setup["setuptools"]["packages"]
    package_dir: dict[str, str] = setup["setuptools"]["package-dir"]
    found = []
    for package in packages:
        for path in sorted(package_folder(package, package_dir).glob("*.py")):
            module = package if path.stem == "__init__" else f"{package}.{path.stem}"
            found.append(BuildSource(str(path.relative_to(ROOT)), module))
    return found


def main(argv: list[str]) -> int:
    began = time.time()
    os.chdir(ROOT)
    fscache = FileSystemCache()
    _, options = process_options(
        ["--config-file", "pyproject.toml", *argv], require_targets=False, fscache=fscache
    )
    checked = sources()
    _, messages, blockers = run_build(checked, options, fscache, began, sys.stdout, sys.stderr)
    errors = [m for m in messages if ": error:" in m]
    if errors or blockers:
        files = len({m.split(":", 1)[0] for m in errors})
        print(f"Found {len(errors)} errors in {files} files (checked {len(checked)} source files)")
        return 1
    print(f"Success: no issues found in {len(checked)} source files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
