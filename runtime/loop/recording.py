"""Recording format 4: a header that makes a recording replayable on its own, and images
kept once by hash beside it.

The first record of a recording is its header (docs/recordings.md)::

    {"kind": "header", "format": 4, "skill_kind": "person", "onboard": "0.1.0",
     "robot": {...robot.toml, validated...}, "robot_root": "/home/robot",
     "skill": {"name": "engage", "toml": "<the skill file's text>", "file": ".../engage.toml"},
     "scenario": {...},                  # person skills; scene skills carry "task": {...}
     "options": {...}, "latency": 1.0,
     "models": {"llm": "smollm2-135m-instruct",
                "files": {"embedder": {"file": "/.../model.onnx", "sha256": "<64 hex>"}}}}

Replay reads the skill from ``skill.toml`` (``file`` is only where it came from) and checks
each model file of ``models.files`` against the one it would use (:func:`check_models`).
A header without ``format`` is format 1 (every recording made before this module). Format 3
(issue 28) records times to the nanosecond, and a wall-clock run's as the loop's (each
callback at the time it fell due), and runs code episodes as the code skill; format 2
recordings replay, except code episodes, which ran on ReplanVLM's own loop and are refused
(:data:`REPLAYS`). Format 4 records times exactly (a person episode's replay plays its
observations back at them) and a team episode's ``env`` records (its replay plays the
environment's answers back: runtime/collab/playback.py); a format 3 person or team episode
replays by re-simulating its world, as it did.

An image in a chat message (an OpenAI content part whose ``image_url`` is a base64 data URL)
is recorded as a reference, its bytes kept in ``<recording stem>.images/<sha256>.<ext>``::

    {"type": "image_url", "image_url": {"url": "sha256:<64 hex>", "media_type": "image/png"}}

:func:`split_images` makes the references, :func:`restore_images` puts the data URLs back.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from onboard.base.digest import file_sha256
from onboard.base.errors import ModelError, ModelMismatch, RecordingError, RecordingFormatError
from onboard.config import RobotConfig
from onboard.loop.skill import Skill

__all__ = [
    "FORMAT",
    "FORMAT_1_LAST",
    "IMAGE_REF",
    "REPLAYS",
    "SKILL_KINDS",
    "Header",
    "Image",
    "build_header",
    "check_models",
    "image_file",
    "images_dir",
    "model_sha256",
    "read_header",
    "restore_images",
    "split_images",
]

#: the format this onboard writes
FORMAT = 4
#: the formats this onboard replays (a format 2 code episode is refused: replan/replay.py)
REPLAYS = (2, 3, 4)
#: what kind of skill an episode ran: "person" (HRI: a scenario), "scene" (manipulation: a
#: task), "code" (generated code, ReplanVLM: an instruction; its "skill" is the tasks file),
#: "team" (several agents, ReAd: a task level; its "skill" is the team task file)
SKILL_KINDS = ("person", "scene", "code", "team")
#: the last onboard that wrote format 1 (no ``format`` in the header)
FORMAT_1_LAST = "onboard 0.1.0 at commit 3344cdd"
#: an image reference's ``url``: this prefix, then the image's sha256 in hex
IMAGE_REF = "sha256:"

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
    """A header (format 2 or 3), validated (``read_header``)."""

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
    skill: Skill | SkillText,
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
        "skill": (
            skill.model_dump()
            if isinstance(skill, SkillText)
            else {"name": skill.name, "toml": skill.source, "file": str(skill.path)}
        ),
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
            f"{path}: a format 1 recording (made before recording format 2, by "
            f"{FORMAT_1_LAST} or earlier): replay it with that version, or record the "
            f"episode again"
        )
    if version not in REPLAYS:
        made_by = raw.get("onboard") or "another version"
        replays = ", ".join(str(v) for v in REPLAYS[:-1]) + f" and {REPLAYS[-1]}"
        raise RecordingFormatError(
            f"{path}: a format {version!r} recording; this onboard ({_version()}) replays "
            f"formats {replays}: replay it with the onboard that made it ({made_by!s:.40})"
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


def model_sha256(path: Path) -> str:
    """The sha256 of a model file in hex, hashed once per path, mtime and size."""
    try:
        return file_sha256(path)
    except OSError as exc:
        raise ModelError(f"model file {path}: cannot read it: {exc.strerror or exc}") from exc


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


# -- images ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    """An image's bytes, named by their sha256."""

    sha256: str
    media_type: str
    data: bytes


_DATA_URL = re.compile(r"data:(image/[a-z0-9][a-z0-9.+-]{0,63});base64,([A-Za-z0-9+/=]*)")
_MEDIA_TYPE = re.compile(r"image/[a-z0-9][a-z0-9.+-]{0,63}")
_HEX = re.compile(r"[0-9a-f]{64}")
_EXTENSIONS = {"image/jpeg": "jpg", "image/svg+xml": "svg", "image/x-icon": "ico"}


def images_dir(recording: Path) -> Path:
    """The folder beside a recording that holds its images: ``<stem>.images``."""
    return recording.with_name(f"{recording.stem}.images")


def image_file(folder: Path, sha256: str, media_type: str) -> Path:
    """``<folder>/<sha256>.<ext>``, the extension from the media type (``image/png``: png)."""
    subtype = media_type.partition("/")[2]
    extension = _EXTENSIONS.get(media_type) or re.sub(r"[^a-z0-9]", "", subtype)[:16] or "img"
    return folder / f"{sha256}.{extension}"


def split_images(messages: Any) -> tuple[Any, list[Image]]:
    """``messages`` with each base64 image part replaced by a reference, and the images.

    Only a data URL that its bytes give back exactly (canonical base64) becomes a
    reference; any other URL is recorded as it is. Messages without images are returned
    unchanged (the same object)."""
    if not isinstance(messages, list):
        return messages, []
    images: list[Image] = []
    out = [_split_message(m, images) for m in messages]
    return (out, images) if images else (messages, [])


def _split_message(message: Any, images: list[Image]) -> Any:
    content = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(content, list):
        return message
    found = len(images)
    parts = [_split_part(part, images) for part in content]
    return message if len(images) == found else {**message, "content": parts}


def _split_part(part: Any, images: list[Image]) -> Any:
    if not (isinstance(part, Mapping) and part.get("type") == "image_url"):
        return part
    image_url = part.get("image_url")
    if not isinstance(image_url, Mapping) or "media_type" in image_url:
        return part
    url = image_url.get("url")
    matched = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if matched is None:
        return part
    try:
        data = base64.b64decode(matched.group(2), validate=True)
    except (binascii.Error, ValueError):
        return part
    if base64.b64encode(data).decode("ascii") != matched.group(2):
        return part
    image = Image(hashlib.sha256(data).hexdigest(), matched.group(1), data)
    images.append(image)
    ref = {**image_url, "url": IMAGE_REF + image.sha256, "media_type": image.media_type}
    return {**part, "image_url": ref}


def restore_images(messages: Any, load: Callable[[str, str], bytes]) -> Any:
    """``messages`` with each image reference back to its data URL; ``load(sha256,
    media_type)`` gives the image's bytes (checked against the hash by the caller).
    Messages without references are returned unchanged (the same object)."""
    if not isinstance(messages, list) or not any(_refs(m) for m in messages):
        return messages
    return [_restore_message(m, load) if _refs(m) else m for m in messages]


def _refs(message: Any) -> bool:
    content = message.get("content") if isinstance(message, Mapping) else None
    return isinstance(content, list) and any(_reference(p) is not None for p in content)


def _reference(part: Any) -> tuple[str, str] | None:
    """(sha256, media type) of an image reference part, else None."""
    if not (isinstance(part, Mapping) and part.get("type") == "image_url"):
        return None
    image_url = part.get("image_url")
    if not isinstance(image_url, Mapping):
        return None
    url, media_type = image_url.get("url"), image_url.get("media_type")
    if not (isinstance(url, str) and url.startswith(IMAGE_REF) and isinstance(media_type, str)):
        return None
    sha256 = url[len(IMAGE_REF) :]
    if not (_HEX.fullmatch(sha256) and _MEDIA_TYPE.fullmatch(media_type)):
        return None
    return sha256, media_type


def _restore_message(message: Mapping[str, Any], load: Callable[[str, str], bytes]) -> Any:
    parts = []
    for part in message["content"]:
        ref = _reference(part)
        if ref is None:
            parts.append(part)
            continue
        sha256, media_type = ref
        encoded = base64.b64encode(load(sha256, media_type)).decode("ascii")
        image_url = {k: v for k, v in part["image_url"].items() if k != "media_type"}
        image_url["url"] = f"data:{media_type};base64,{encoded}"
        parts.append({**part, "image_url": image_url})
    return {**message, "content": parts}
