"""The wheel installs one importable name: ``onboard/`` and its dist-info, nothing else.

Built from a copy of the sources with the venv's own setuptools (``pip wheel
--no-build-isolation``, no index), so it needs no network and leaves no build/ behind.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"runtime": "onboard", "drivers": "onboard/drivers"}  # folder -> place in the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for folder in SOURCES:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(tmp / "dist"), str(src)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = (tmp / "dist").glob("onboard-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_holds_only_onboard(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and next(iter(dist_info)).startswith("onboard-")
    assert tops - dist_info == {"onboard"}


def test_every_module_and_scene_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = {
        f"{place}/{path.relative_to(ROOT / folder).as_posix()}"
        for folder, place in SOURCES.items()
        for pattern in ("*.py", "twin/scenes/*.toml")
        for path in (ROOT / folder).rglob(pattern)
        if "__pycache__" not in path.parts
    }
    assert any(n.startswith("onboard/drivers/twin/scenes/") for n in expected)
    assert sorted(expected - names) == []


def test_the_console_script_is_onboard_cli_main(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = (n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(entry_points).decode()
    assert "onboard = onboard.cli.main:main" in text
