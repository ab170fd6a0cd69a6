"""Recording format 2: a header that makes a recording replayable on its own.

The first record of a format 2 recording is its header (README, "Recordings")::

    {"kind": "header", "format": 2, "skill_kind": "person", "onboard": "0.1.0",
     "robot": {...robot.toml, validated...}, "robot_root": "/home/robot",
     "skill": {"name": "engage", "toml": "<the skill file's text>", "file": ".../engage.toml"},
     "scenario": {...},                  # person skills; scene skills carry "task": {...}
     "options": {...}, "latency": 1.0,
     "models": {"llm": "smollm2-135m-instruct",
                "files": {"embedder": {"file": "/.../model.onnx", "sha256": "<64 hex>"}}}}

Replay reads the skill from ``skill.toml`` (``file`` is only where it came from) and checks
each model file of ``models.files`` against the one it would use (:func:`check_models`).
A header without ``format`` is format 1 (every recording made before this module).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from onboard.base.errors import ModelError, ModelMismatch, RecordingError, RecordingFormatError
from onboard.config import RobotConfig
from onboard.loop.skill import Skill

__all__ = [
    "FORMAT",
    "FORMAT_1_LAST",
    "SKILL_KINDS",
    "Header",
    "build_header",
    "check_models",
    "model_sha256",
    "read_header",
]

#: the format this onboard writes and replays
FORMAT = 2
#: what kind of skill an episode ran: "person" (HRI: a scenario), "scene" (manipulation: a task)
SKILL_KINDS = ("person", "scene")
#: the last onboard that wrote format 1 (no ``format`` in the header)
FORMAT_1_LAST = "onboard 0.1.0 at commit 7c0ae66"

Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SkillText(_Strict):
    name: str
    toml: str = Field(description="the skill file's text, loaded by replay")
    file: str = Field(default="", description="where it was loaded from; never read again")


class ModelFile(_Strict):
    file: str
    sha256: Sha256


class Models(_Strict):
    llm: str | None = Field(description="the LLM's model name, as configured ([llm] model)")
    files: dict[str, ModelFile] = Field(description="each model file the episode used, by role")


class Header(_Strict):
    """A format 2 header, validated (``read_header``)."""

    format: int
    skill_kind: str
    onboard: str = ""
    robot: dict[str, Any]
    robot_root: str
    skill: SkillText
    scenario: dict[str, Any] | None = None
    task: dict[str, Any] | None = None
    options: dict[str, Any]
    latency: float | None = None
    models: Models

    @field_validator("skill_kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in SKILL_KINDS:
            raise ValueError(f"unknown skill kind {kind!r} (known: {', '.join(SKILL_KINDS)})")
        return kind

    def robot_config(self) -> RobotConfig:
        """robot.toml as recorded, its relative paths under the recorded ``robot_root``."""
        config = RobotConfig.model_validate(self.robot)
        return config.model_copy(update={"root": Path(self.robot_root)})


def build_header(
    robot: RobotConfig,
    skill: Skill,
    skill_kind: str,
    *,
    options: Mapping[str, Any],
    models: Mapping[str, Path],
    scenario: Mapping[str, Any] | None = None,
    task: Mapping[str, Any] | None = None,
    latency: float | None = None,
) -> dict[str, Any]:
    """The header's fields (for ``Recorder.write("header", **fields)``): a person skill
    gives its ``scenario``, a scene skill its ``task``; ``models`` names each model file the
    episode uses by role (``{"embedder": .../model.onnx}``), hashed here."""
    fields: dict[str, Any] = {
        "format": FORMAT,
        "skill_kind": skill_kind,
        "onboard": _version(),
        "robot": robot.model_dump(mode="json"),
        "robot_root": str(robot.root.resolve()),
        "skill": {"name": skill.name, "toml": skill.source, "file": str(skill.path)},
        "options": dict(options),
        "latency": latency,
        "models": {
            "llm": robot.llm.model,
            "files": {
                role: {"file": str(path), "sha256": model_sha256(path)}
                for role, path in models.items()
            },
        },
    }
    if scenario is not None:
        fields["scenario"] = dict(scenario)
    if task is not None:
        fields["task"] = dict(task)
    Header.model_validate(fields)  # what is written is what read_header accepts
    return fields


def _version() -> str:
    try:
        return metadata.version("onboard")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_header(records: Sequence[Mapping[str, Any]], path: Path) -> Header:
    """The recording's header, validated; a one-line RecordingError otherwise (format 1, a
    newer format, a field of the wrong type)."""
    raw = next((r for r in records if r.get("kind") == "header"), None)
    if raw is None:
        raise RecordingError(f"{path}: not an onboard recording (no header record)")
    version = raw.get("format")
    if version is None:
        raise RecordingFormatError(
            f"{path}: a format 1 recording (made before recording format {FORMAT}, by "
            f"{FORMAT_1_LAST} or earlier): replay it with that version, or record the "
            f"episode again"
        )
    if version != FORMAT:
        made_by = raw.get("onboard") or "another version"
        raise RecordingFormatError(
            f"{path}: a format {version!r} recording; this onboard ({_version()}) replays "
            f"format {FORMAT} only: replay it with the onboard that made it ({made_by!s:.40})"
        )
    fields = {k: v for k, v in raw.items() if k not in ("seq", "t", "wall", "kind")}
    try:
        header = Header.model_validate(fields)
    except ValidationError as exc:
        raise RecordingError(f"{path}: header: {_first_problem(exc)}") from exc
    try:
        header.robot_config()
    except ValidationError as exc:
        raise RecordingError(f"{path}: header: {_first_problem(exc, 'robot')}") from exc
    wanted = "scenario" if header.skill_kind == "person" else "task"
    if getattr(header, wanted) is None:
        raise RecordingError(
            f"{path}: header: a {header.skill_kind} recording without its {wanted!r}; "
            "not a valid onboard recording"
        )
    return header


def _first_problem(exc: ValidationError, *within: str) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(p) for p in (*within, *first["loc"])) or "(the header)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    message = " ".join(str(first["msg"]).split())
    return f"[{where}] {message}{more}; not a valid onboard recording"


# -- model files -------------------------------------------------------------------------------

_hashes: dict[tuple[str, int, int], str] = {}
_hashes_lock = threading.Lock()


def model_sha256(path: Path) -> str:
    """The sha256 of a model file in hex, hashed once per path, mtime and size."""
    try:
        info = path.stat()
        key = (str(path.resolve()), info.st_mtime_ns, info.st_size)
        with _hashes_lock:
            known = _hashes.get(key)
        if known is not None:
            return known
        with path.open("rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as exc:
        raise ModelError(f"model file {path}: cannot read it: {exc.strerror or exc}") from exc
    with _hashes_lock:
        _hashes[key] = digest
    return digest


def check_models(header: Header, local: Mapping[str, Path], path: Path) -> None:
    """Each model file the recording used (by role) must be here with the recorded sha256."""
    for role, recorded in header.models.files.items():
        here = local.get(role)
        if here is None:
            continue
        if not here.is_file():
            raise ModelMismatch(
                f"{path}: the {role} model {here} is not here (recorded sha256 "
                f"{recorded.sha256}): install the model with that sha256, or record the "
                "episode again"
            )
        digest = model_sha256(here)
        if digest != recorded.sha256:
            raise ModelMismatch(
                f"{path}: the {role} model differs from the one recorded: recorded sha256 "
                f"{recorded.sha256}, {here} has sha256 {digest}: replay with the recorded "
                "model ([models] in robot.toml), or record the episode again"
            )
