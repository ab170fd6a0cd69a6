"""Where the files shipped inside the package are: skills, scenarios, models, the example robot.

The repository's ``skills/`` and ``models/`` folders install as the data packages
``onboard.skills`` and ``onboard.models`` (pyproject.toml), so the same lookup works in the
editable install (the checkout's folders) and from a wheel (files under site-packages).
onnxruntime and tokenizers want real file paths, which both installs give; anything else (a
zipped install, a file left out) fails with one line naming the missing file.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from onboard.base.errors import ModelError

__all__ = [
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


def package_path(package: str) -> Path:
    """The folder of an installed package, unchecked (``onboard.models``, ``onboard.skills``)."""
    return Path(str(files(package)))


def _shipped(package: str, folder: str, names: tuple[str, ...]) -> Path:
    path = package_path(package) / folder if folder else package_path(package)
    for name in names:
        if not (path / name).is_file():
            raise ModelError(
                f"bundled file {path / name} is missing: reinstall onboard "
                f"(it ships in the {package} package)"
            )
    return path


def skills_dir() -> Path:
    """The shipped skills folder (``engage.toml``, ``scenarios/*.toml``)."""
    return _shipped("onboard.skills", "", ("engage.toml",))


def embedder_dir() -> Path:
    """The shipped sentence model: all-MiniLM-L6-v2, int8-stored (``models/minilm``)."""
    return _shipped("onboard.models", "minilm", ("model.onnx", "tokenizer.json"))


def detector_dir() -> Path:
    """The shipped YOLOv8-layout detector and its class names (``models/detector``)."""
    return _shipped("onboard.models", "detector", ("model.onnx", "classes.json"))


def example_robot() -> Path:
    """The bundled example robot.toml (the template of ``onboard init``)."""
    return _shipped("onboard", "", (EXAMPLE_ROBOT,)) / EXAMPLE_ROBOT
