"""Where the files shipped inside the package are: skills, scenarios, models, the example robot.

The repository's ``skills/`` and ``models/`` folders install as the data packages
``onboard.skills`` and ``onboard.models`` (pyproject.toml), so the same lookup works in the
editable install (the checkout's folders) and from a wheel (files under site-packages).
onnxruntime and tokenizers want real file paths, which both installs give; anything else (a
zipped install, a file left out) fails with one line naming the missing file.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from onboard.base.errors import ModelError

__all__ = [
    "DETECTOR_DIR_ENV",
    "EXAMPLE_ROBOT",
    "detector_dir",
    "embedder_dir",
    "example_robot",
    "package_path",
    "skills_dir",
]

#: the commented, minimal robot.toml that ``onboard init`` writes and that runs when no
#: robot.toml is found (package data of ``onboard``)
EXAMPLE_ROBOT = "example-robot.toml"

#: a folder holding ``model.onnx`` and ``classes.json`` that stands in for the shipped detector
#: wherever onboard loads it (a candidate under test: ``models/detector/gate.py``)
DETECTOR_DIR_ENV = "ONBOARD_DETECTOR_DIR"


def package_path(package: str) -> Path:
    """The folder of an installed package, unchecked (``onboard.models``, ``onboard.skills``)."""
    return Path(str(files(package)))


def _shipped(package: str, folder: str, names: tuple[str, ...]) -> Path:
    path = package_path(package) / folder if folder else package_path(package)
    name = _first_missing(path, names)
    if name is not None:
        raise ModelError(
            f"bundled file {path / name} is missing: reinstall onboard "
            f"(it ships in the {package} package)"
        )
    return path


def _first_missing(folder: Path, names: tuple[str, ...]) -> str | None:
    return next((name for name in names if not (folder / name).is_file()), None)


def skills_dir() -> Path:
    """The shipped skills folder (``engage.toml``, ``scenarios/*.toml``)."""
    return _shipped("onboard.skills", "", ("engage.toml",))


def embedder_dir() -> Path:
    """The shipped sentence model: all-MiniLM-L6-v2, int8-stored (``models/minilm``)."""
    return _shipped("onboard.models", "minilm", ("model.onnx", "tokenizer.json"))


def detector_dir() -> Path:
    """The YOLOv8-layout detector and its class names: the shipped one (``models/detector``),
    or the folder ``ONBOARD_DETECTOR_DIR`` names when it is set."""
    names = ("model.onnx", "classes.json")
    override = os.environ.get(DETECTOR_DIR_ENV)
    if not override:
        return _shipped("onboard.models", "detector", names)
    name = _first_missing(Path(override), names)
    if name is not None:
        raise ModelError(f"{DETECTOR_DIR_ENV}={override}: no {name} in that folder")
    return Path(override)


def example_robot() -> Path:
    """The bundled example robot.toml (the template of ``onboard init``)."""
    return _shipped("onboard", "", (EXAMPLE_ROBOT,)) / EXAMPLE_ROBOT
