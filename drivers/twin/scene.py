"""Scene files of the physics twin: a table, the arm (or several), objects and a camera, in TOML.

A scene has one arm, ``[arm]`` (named ``"arm"``), or several, ``[[arms]]``, each with a
``name`` and its own base position and yaw; never both.

World frame: metres, z up, ``z = 0`` is the table top. Angles in scene files are degrees
(``yaw``, ``fov``); the Python API is SI (radians). Errors name file, key and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from onboard.base.tomlfile import load_model

__all__ = [
    "ARM",
    "SCENES",
    "ArmSpec",
    "CameraSpec",
    "Kind",
    "MarkerSpec",
    "NamedArmSpec",
    "ObjectSpec",
    "Scene",
    "TableSpec",
    "default_scene",
    "find_scene",
    "load_scene",
]

#: the scenes shipped with the twin
SCENES = Path(__file__).resolve().parent / "scenes"

Kind = Literal[
    "block",
    "bar",
    "apple",
    "orange",
    "lemon",
    "banana",
    "plate",
    "box",
    "duck",
    "teddy",
    "drawer",
    "conveyor",
    "panel",
]
KINDS: tuple[str, ...] = get_args(Kind)
#: kinds whose shape is a box given by ``extent``; every other kind takes one ``size``
EXTENT_KINDS = ("drawer", "conveyor", "panel")
#: the name of a single-arm scene's arm (``[arm]``)
ARM = "arm"

Unit = Annotated[float, Field(ge=0, le=1)]
Positive = Annotated[float, Field(gt=0)]
RGBA = tuple[Unit, Unit, Unit, Unit]
Vec3 = tuple[float, float, float]
#: Panda "ready" pose: tool pointing down, 0.3 m in front of the base
PANDA_READY = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
#: SO-101 home: the tool 18 cm out, 10 cm up, pointing down (the driver's default home)
SO101_HOME = (0.0, 0.4173, 1.3222, 1.4021, 0.0)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TableSpec(_Strict):
    """A box whose top is the plane z = 0."""

    size: tuple[Positive, Positive] = (1.2, 0.9)
    center: tuple[float, float] = (0.35, 0.0)
    thickness: Positive = 0.04
    color: RGBA = (0.72, 0.6, 0.45, 1.0)


class MarkerSpec(_Strict):
    """``[arm.marker]``: a sphere rigidly carried by the hand, for hand-eye calibration.

    ``offset`` (metres) places its centre relative to the tool point, in the tool frame (z
    along the fingers: ``[0, 0, 0.05]`` is 5 cm beyond the finger tips). It follows the arm
    through physics, shows in renders and segmentation, and collides with nothing.
    """

    color: RGBA = (1.0, 0.0, 1.0, 1.0)
    radius: Positive = 0.02
    offset: Vec3 = (0.0, 0.0, 0.05)


class ArmSpec(_Strict):
    """The arm, fixed at ``position`` and turned by ``yaw``: the Franka Panda from
    pybullet_data, or (``model = "so101"``) the SO-101 of :mod:`onboard.drivers.twin.so101`."""

    model: Literal["panda", "so101"] = "panda"
    position: Vec3 = (0.0, 0.0, 0.0)
    yaw: float = Field(default=0.0, description="degrees about z")
    home: tuple[float, ...] = Field(
        default=PANDA_READY,
        description="radians, one per joint (7 for the Panda, 5 for the SO-101); the "
        "SO-101's default: the tool 18 cm out, 10 cm up, pointing down",
    )
    gripper_force: Positive = Field(default=20.0, description="newtons per finger")
    visual: Literal["simple", "detailed"] = Field(
        default="simple",
        description="simple draws the collision meshes: renders about twice as fast",
    )
    weld: bool = Field(
        default=True,
        description="fix a grasped object to the hand once both fingers press on it",
    )
    marker: MarkerSpec | None = Field(default=None, description="a calibration marker")

    @model_validator(mode="before")
    @classmethod
    def _home_of_the_model(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("model") == "so101" and "home" not in data:
            return data | {"home": SO101_HOME}
        return data

    @model_validator(mode="after")
    def _one_angle_per_joint(self) -> ArmSpec:
        count = 5 if self.model == "so101" else 7
        if len(self.home) != count:
            raise ValueError(f"home: the {self.model} has {count} joints, got {len(self.home)}")
        return self


class NamedArmSpec(ArmSpec):
    """One of ``[[arms]]``: an arm with its name (unique in the scene)."""

    name: str = Field(min_length=1)


class CameraSpec(_Strict):
    """A pinhole camera looking from ``position`` at ``target``; ``fov`` is vertical."""

    position: Vec3 = (1.0, 0.0, 0.85)
    target: Vec3 = (0.38, 0.0, 0.05)
    up: Vec3 = (0.0, 0.0, 1.0)
    fov: float = Field(default=45.0, gt=1, lt=170, description="vertical, degrees")
    width: int = Field(default=320, ge=8, le=1920)
    height: int = Field(default=240, ge=8, le=1080)
    near: Positive = 0.05
    far: Positive = 3.0

    @model_validator(mode="after")
    def _near_before_far(self) -> CameraSpec:
        if self.near >= self.far:
            raise ValueError(f"near ({self.near}) must be less than far ({self.far})")
        return self


class ObjectSpec(_Strict):
    """One object. ``position`` [x, y] rests it on the table; [x, y, z] places its centre.

    ``size`` (metres) is the edge of a block, the length of a bar or banana, the diameter of
    fruit and plates, the outer width of a box and the largest extent of a toy. Drawers,
    conveyors and panels (a thin fixed slab on the table) take ``extent`` = [x, y, z]
    instead; a conveyor moves what rests on it at
    ``speed`` m/s along its own x axis (``end_stop``: a wall across its downstream end, where
    what it carries queues instead of falling off), and a drawer starts ``opening`` metres open.
    """

    name: str = Field(min_length=1)
    kind: Kind
    position: tuple[float, ...]
    yaw: float = Field(default=0.0, description="degrees about z")
    color: RGBA | None = None
    size: Positive | None = None
    extent: tuple[Positive, Positive, Positive] | None = None
    mass: float | None = Field(default=None, ge=0, description="kg; 0 = fixed in place")
    speed: float | None = None
    end_stop: bool | None = None
    opening: float | None = Field(default=None, ge=0)

    @field_validator("position")
    @classmethod
    def _xy_or_xyz(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if len(value) not in (2, 3):
            raise ValueError("position is [x, y] (resting on the table) or [x, y, z] (centre)")
        return value

    @field_validator("size")
    @classmethod
    def _size_for_simple_kinds(cls, value: float | None, info: ValidationInfo) -> float | None:
        _only_for(info, [k for k in KINDS if k not in EXTENT_KINDS], "size", "extent")
        return value

    @field_validator("extent")
    @classmethod
    def _extent_for_boxes(cls, value: Vec3 | None, info: ValidationInfo) -> Vec3 | None:
        _only_for(info, EXTENT_KINDS, "extent", "size")
        return value

    @field_validator("speed")
    @classmethod
    def _speed_for_conveyor(cls, value: float | None, info: ValidationInfo) -> float | None:
        _only_for(info, ("conveyor",), "speed")
        return value

    @field_validator("end_stop")
    @classmethod
    def _stop_for_conveyor(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        _only_for(info, ("conveyor",), "end_stop")
        return value

    @field_validator("mass")
    @classmethod
    def _mass_for_loose_kinds(cls, value: float | None, info: ValidationInfo) -> float | None:
        _only_for(info, [k for k in KINDS if k not in EXTENT_KINDS], "mass")
        return value

    @field_validator("opening")
    @classmethod
    def _opening_for_drawer(cls, value: float | None, info: ValidationInfo) -> float | None:
        _only_for(info, ("drawer",), "opening")
        return value


def _only_for(
    info: ValidationInfo, kinds: list[str] | tuple[str, ...], key: str, *alt: str
) -> None:
    kind = info.data.get("kind")
    if kind is not None and kind not in kinds:
        hint = f"; use {alt[0]!r}" if alt else ""
        raise ValueError(f"{key!r} does not apply to kind {kind!r}{hint}")


class Scene(_Strict):
    description: str = ""
    table: TableSpec = TableSpec()
    arm: ArmSpec = ArmSpec()
    arms: list[NamedArmSpec] = []
    camera: CameraSpec = CameraSpec()
    objects: list[ObjectSpec] = []

    @model_validator(mode="after")
    def _one_arm_table(self) -> Scene:
        if self.arms and "arm" in self.model_fields_set:
            raise ValueError("give [arm] (one arm) or [[arms]] (several, named), not both")
        names = [a.name for a in self.arms]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two arms are named {twice[0]!r}; arm names must be unique")
        return self

    def arm_specs(self) -> dict[str, ArmSpec]:
        """The arms by name, in the file's order: ``{"arm": arm}`` for a one-arm scene."""
        if not self.arms:
            return {ARM: self.arm}
        return {a.name: a for a in self.arms}

    @field_validator("objects")
    @classmethod
    def _unique_names(cls, objects: list[ObjectSpec]) -> list[ObjectSpec]:
        seen: set[str] = set()
        for spec in objects:
            if spec.name in seen:
                raise ValueError(f"two objects are named {spec.name!r}; names must be unique")
            seen.add(spec.name)
        return objects


def load_scene(path: Path | str) -> Scene:
    """Load and validate a scene file; raises ConfigError naming file, key and line."""
    scene, _ = load_model(Path(path), Scene)
    return scene


def default_scene() -> Path:
    """The mixed tabletop scene used when none is named."""
    return SCENES / "tabletop.toml"


def find_scene(scene: Path | str, root: Path | None = None) -> Path:
    """A scene file's path, or a shipped scene's name (``"calibration"``: ``SCENES``).

    A relative path starts from ``root`` (the folder of robot.toml; None: the working folder).
    An existing file wins; else a bare name (no folder, no suffix) whose ``SCENES/NAME.toml``
    exists names that shipped scene; else the path is returned as given, for
    :func:`load_scene` to report.
    """
    path = Path(scene)
    if root is not None and not path.is_absolute():
        path = root / path
    if path.exists():
        return path
    name = Path(scene)
    if len(name.parts) == 1 and not name.suffix and (SCENES / f"{name}.toml").is_file():
        return SCENES / f"{name}.toml"
    return path
