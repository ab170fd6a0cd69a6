"""The wheel installs one importable name: ``onboard/`` and its dist-info, nothing else.

Inside it: every module, and the package data onboard needs at run time (the skills and
scenarios, the run-time model files, the twin's scenes, the example robot.toml), but not the
scripts that build or train the models nor the RealSense recording.

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
# folder -> place in the wheel: the code, and the data packages onboard.skills and onboard.models
SOURCES = {
    "runtime": "onboard",
    "drivers": "onboard/drivers",
    "skills": "onboard/skills",
    "models": "onboard/models",
    "tasks": "onboard/tasks",
}
CODE = ("runtime", "drivers")
# the package data: what onboard needs at run time (onboard.bundled), relative to the repository
DATA = (
    "runtime/example-robot.toml",
    "runtime/service/page.html",
    "drivers/twin/scenes/*.toml",
    "skills/__init__.py",
    "skills/*.toml",
    "skills/scenarios/*.toml",
    "skills/scenarios/heldout/*.toml",
    "skills/tasks/*.toml",
    "skills/tasks/code/*.py",
    "models/__init__.py",
    "tasks/__init__.py",
    "tasks/*.toml",
    "models/minilm/model.onnx",
    "models/minilm/tokenizer.json",
    "models/minilm/CARD.md",
    "models/detector/model.onnx",
    "models/detector/classes.json",
    "models/detector/CARD.md",
    "models/critics/*/*.onnx",
    "models/critics/*/*.toml",
)
# in the repository, never in the wheel: model build and training scripts, the recording
NOT_SHIPPED = (
    "models/minilm/build.py",
    "models/detector/train.py",
    "models/realsense/*",
    "models/critics/build.py",
)


def build_wheel(tmp: Path) -> Path:
    """Build the wheel from a copy of the sources into ``tmp / "dist"``; its path."""
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
    return built


def in_wheel(path: Path) -> str:
    """Where a repository file lands in the wheel."""
    folder, *rest = path.relative_to(ROOT).parts
    return "/".join([SOURCES[folder], *rest])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel")))


def test_the_wheel_holds_only_onboard(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and next(iter(dist_info)).startswith("onboard-")
    assert tops - dist_info == {"onboard"}


def test_every_module_and_data_file_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    modules = {
        in_wheel(path)
        for folder in CODE
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    data = {in_wheel(path) for pattern in DATA for path in ROOT.glob(pattern)}
    assert "onboard/drivers/twin/scenes/calibration.toml" in data
    assert {"onboard/skills/engage.toml", "onboard/models/minilm/model.onnx"} <= data
    assert "onboard/skills/scenarios/person-object.toml" in data
    assert "onboard/skills/scenarios/heldout/heldout-coins.toml" in data
    assert sorted(modules - names) == []
    assert sorted(data - names) == []


def test_the_wheel_holds_no_model_scripts_or_recordings(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    left_out = {in_wheel(path) for pattern in NOT_SHIPPED for path in ROOT.glob(pattern)}
    assert "onboard/models/realsense/tabletop.db3" in left_out
    assert sorted(left_out & names) == []
    models = {n for n in names if n.startswith("onboard/models/")}
    assert {n.rsplit("/", 1)[-1] for n in models if n.endswith(".py")} == {"__init__.py"}


def test_the_console_script_is_onboard_cli_main(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = (n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt"))
    text = wheel.read(entry_points).decode()
    assert "onboard = onboard.cli.main:main" in text
