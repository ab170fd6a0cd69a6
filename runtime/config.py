"""robot.toml: this robot's name, LLM endpoint, models, folders, drivers and clock."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_serializer, field_validator

from onboard import bundled
from onboard.base.errors import ConfigError, Problem, UsageError
from onboard.base.tomlfile import load_model
from onboard.base.urls import public_url, url_problem
from onboard.drivers.arm.config import ArmConfig
from onboard.drivers.arm.safety import SafetyLimits
from onboard.drivers.camera.config import CameraConfig
from onboard.fleet.settings import FleetMemberConfig
from onboard.perception.pose import HandEyeConfig
from onboard.perception.self_filter import HandZone
from onboard.service.settings import ServiceConfig

__all__ = [
    "CodeConfig",
    "DriversConfig",
    "EvalConfig",
    "LLMConfig",
    "ModelsConfig",
    "RobotConfig",
    "SimDriverConfig",
    "StructuredOutput",
    "load_example_robot",
    "load_robot",
]

Perception = Literal["activity", "gaze"]
#: how a constrained request carries its JSON schema (onboard.llm.structured)
StructuredOutput = Literal["auto", "llama-cpp", "openai", "none"]


class _Strict(BaseModel):
    # inf and nan are no limit, deadline or quota: each is refused where robot.toml sets it
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _http_url(value: str) -> str:
    problem = url_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value.rstrip("/")


class LLMConfig(_Strict):
    """An OpenAI-compatible chat endpoint. ``base_url = "local"`` starts the embedded model."""

    base_url: str = "local"
    model: str = "smollm2-135m-instruct"
    api_key_env: str | None = Field(
        default=None, description="name of the environment variable holding the API key"
    )
    connect_timeout: Annotated[float, Field(gt=0)] = 2.0
    read_timeout: Annotated[float, Field(gt=0)] = 10.0
    retries: Annotated[int, Field(ge=0, le=10)] = 2
    deadline: Annotated[float, Field(gt=0)] = 8.0
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.7
    max_tokens: Annotated[int, Field(gt=0)] = 160
    decoding: Literal["free", "constrained"] = "constrained"
    structured_output: StructuredOutput = Field(
        default="auto",
        description="the response_format shape this server reads (llama-cpp, openai) or none; "
        "auto: llama-cpp for the embedded local model, openai for any other URL",
    )
    max_reply_bytes: Annotated[
        int, Field(ge=1024, description="bytes read per reply; more is a failed exchange")
    ] = 262_144
    breaker_failures: Annotated[
        int, Field(ge=0, description="failed exchanges in a row that open the breaker; 0: off")
    ] = 3
    breaker_cooldown: Annotated[
        float, Field(ge=0, description="episode-clock seconds the open breaker skips asking")
    ] = 10.0
    requests_per_minute: Annotated[
        int | None, Field(gt=0, description="requests sent per minute; None: no limit")
    ] = None
    tokens_per_hour: Annotated[
        int | None, Field(gt=0, description="prompt + completion tokens per hour; None: no limit")
    ] = None

    @field_validator("base_url")
    @classmethod
    def _url_or_local(cls, value: str) -> str:
        if value == "local":
            return value
        if not value.startswith(("http://", "https://")):
            raise ValueError('must be "local" or an http(s) URL')
        return _http_url(value)

    @field_serializer("base_url")
    def _public(self, value: str) -> str:
        """Dumped (a recording's header) without its userinfo: a password is a secret."""
        return public_url(value)

    def api_key(self) -> str | None:
        """The key from the environment, never from the file; never logged."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class ModelsConfig(_Strict):
    embedder: Path | None = Field(
        default=None, description="sentence model folder; None: the one shipped with onboard"
    )
    threads: Annotated[int, Field(ge=1, le=8)] = 1


class MappingConfig(_Strict):
    """Free-text to action mapping: accept a clause only when it is clearly one action."""

    threshold: Annotated[float, Field(gt=0, lt=1)] = 0.5
    margin: Annotated[float, Field(ge=0, lt=1)] = 0.05
    ambiguity: Annotated[float, Field(gt=0, le=1, description="warn above this cosine")] = 0.9
    near_tie: Annotated[
        float,
        Field(
            ge=0,
            lt=1,
            description="refuse a clause this close to a decision boundary (the second action, "
            "threshold, margin); above the embedder's measured int8-vs-fp32 gap (CARD.md)",
        ),
    ] = 0.01
    second_stage: Literal["none", "lexicon"] = Field(
        default="lexicon",
        description="who decides among the actions the embeddings shortlist: nobody (the "
        "best action) or the skill's lexicon",
    )
    shortlist: Annotated[
        float,
        Field(ge=0, lt=1, description="actions this close to the best one are shortlisted"),
    ] = 0.0
    lexicon_threshold: Annotated[
        float | None,
        Field(gt=0, lt=1, description="threshold for an action the lexicon names; None: threshold"),
    ] = None
    top_k: Annotated[
        int, Field(ge=1, le=5, description="an action scores the mean of its k best references")
    ] = 1


class SimDriverConfig(_Strict):
    """The simulated robot: a mobile base with a head and a speaker."""

    kind: Literal["sim"] = "sim"
    speed: Annotated[float, Field(gt=0, description="approach speed, m/s")] = 0.5
    camera_range: Annotated[float, Field(gt=0, description="metres")] = 8.0
    stop_time: Annotated[float, Field(ge=0, description="seconds to stop the base")] = 0.5
    look_time: Annotated[float, Field(ge=0, description="seconds to turn the head")] = 1.0
    words_per_second: Annotated[float, Field(gt=0)] = 2.5
    notice_time: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = Field(
        default=0.5,
        description="seconds a person free to talk (labelled ok-to-engage or ready) takes to "
        "look back at the robot that looks at them (eye contact); a busy person does not "
        "(None, from Python: the person follows the scenario's gaze only, as before issue 27)",
    )
    speech: Literal["record", "espeak-ng"] = "record"
    speech_wav_dir: Path | None = Field(
        default=None, description="espeak-ng writes WAV files here instead of playing"
    )
    perception: tuple[Perception, ...] = ("activity", "gaze")


class DriversConfig(_Strict):
    """``robot``: the mobile base, head and speaker the skills drive; ``arm`` and ``camera``:
    the manipulator and the RGB-D camera, each chosen by ``kind``."""

    robot: SimDriverConfig = SimDriverConfig()
    arm: ArmConfig | None = None
    camera: CameraConfig | None = None


class EvalConfig(_Strict):
    """Evaluation on the virtual clock."""

    standin_latency: Annotated[
        float, Field(ge=0, description="virtual seconds a stand-in reply takes")
    ] = 1.0
    standin_noise: Annotated[float, Field(ge=0, le=1)] = 0.15
    seed: int = 0


Finite = Annotated[float, Field(allow_inf_nan=False)]


class BotConfig(_Strict):
    """``[code.decision]``, ``[code.inner]``, ``[code.extra]``: one ReplanVLM bot's model. A
    key left out is ``[llm]``'s (the endpoint, the model, the key's variable)."""

    base_url: str | None = Field(default=None, description="None: [llm] base_url")
    model: str | None = Field(default=None, description="None: [llm] model")
    api_key_env: str | None = Field(default=None, description="None: [llm] api_key_env")
    max_tokens: Annotated[int, Field(gt=0)] = 1024
    deadline: Annotated[float, Field(gt=0, description="seconds per exchange, retries in")] = 120.0
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.2

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)

    @field_serializer("base_url")
    def _public(self, value: str | None) -> str | None:
        return None if value is None else public_url(value)

    def llm(self, base: LLMConfig) -> LLMConfig:
        """``base`` (``[llm]``) with this bot's endpoint, model, limits and free decoding."""
        update: dict[str, object] = {
            "max_tokens": self.max_tokens,
            "deadline": self.deadline,
            "read_timeout": max(base.read_timeout, self.deadline),
            "temperature": self.temperature,
            "max_reply_bytes": max(base.max_reply_bytes, 64 * self.max_tokens),
        }
        for key in ("base_url", "model", "api_key_env"):
            if getattr(self, key) is not None:
                update[key] = getattr(self, key)
        return base.model_copy(update=update)


class CodeConfig(_Strict):
    """``[code]``: generated code (``onboard code run``): where ``give_me()`` holds things out,
    whether a run on a real arm asks first, and the sandbox's limits."""

    handover: tuple[Finite, Finite, Finite] = Field(
        default=(0.35, -0.25, 0.3), description="x, y, z (m, base frame) of the hand-over pose"
    )
    confirm: bool | None = Field(
        default=None,
        description="ask before running code on the arm; None: yes for a real arm, no for sim",
    )
    steps: Annotated[int, Field(gt=0, description="statements a program may run")] = 10_000
    memory_mb: Annotated[int, Field(gt=0, description="address space of the child, MB")] = 256
    cpu_seconds: Annotated[float, Field(gt=0, description="CPU time of the child")] = 10.0
    wall_seconds: Annotated[float, Field(gt=0, description="wall time of a run")] = 600.0
    #: the ReplanVLM bots (runtime/replan/bots.py): plan and code; the internal check; the
    #: external (before/after) check
    decision: BotConfig = BotConfig(max_tokens=1536, deadline=180.0)
    inner: BotConfig = BotConfig(max_tokens=256, deadline=60.0)
    extra: BotConfig = BotConfig(max_tokens=256, deadline=60.0)
    cycles: Annotated[
        int, Field(ge=1, le=20, description="inner corrections before the task fails")
    ] = 5
    replans: Annotated[
        int, Field(ge=0, le=20, description="external corrections (replans) after a run")
    ] = 3
    image_format: Literal["png", "jpeg"] = Field(
        default="png", description="how camera frames travel in a bot's prompt"
    )

    def confirm_on(self, arm_kind: str | None) -> bool:
        """Whether a run on an arm of ``arm_kind`` asks first."""
        return self.confirm if self.confirm is not None else arm_kind not in (None, "sim")


class RobotConfig(_Strict):
    name: str = Field(min_length=1)
    clock: Literal["wall", "virtual"] = "wall"
    skills: Path = Path("skills")
    recordings: Path = Path("recordings")
    recordings_max_mb: Annotated[
        float,
        Field(
            gt=0,
            description="quota of the recordings folder: the oldest episodes are deleted when "
            "a new recording starts and the folder holds more",
        ),
    ] = 1000.0
    state: Path | None = Field(
        default=None,
        description="onboard up's SQLite state (the mission queue, steps, the recordings' "
        "index); default: state.sqlite in the recordings folder",
    )
    llm: LLMConfig = LLMConfig()
    models: ModelsConfig = ModelsConfig()
    mapping: MappingConfig = MappingConfig()
    drivers: DriversConfig = DriversConfig()
    safety: SafetyLimits = SafetyLimits()
    hand_eye: HandEyeConfig | None = None
    hand_zone: HandZone = Field(
        default=HandZone(),
        description="the robot's hand around its tool axis: a box the depth puts there is "
        "unknown, not an object (runtime/perception/self_filter.py)",
    )
    eval: EvalConfig = EvalConfig()
    code: CodeConfig = CodeConfig()
    service: ServiceConfig = ServiceConfig()
    fleet: FleetMemberConfig | None = Field(
        default=None, description="an agent of a fleet: onboard up runs its controller"
    )
    root: Path = Field(default=Path("."), exclude=True)
    _example: bool = PrivateAttr(default=False)

    @property
    def example(self) -> bool:
        """This is the bundled example robot (no robot.toml was found): its skills are
        onboard's own, not to be edited."""
        return self._example

    def with_arm_scene(self, scene: str | Path) -> RobotConfig:
        """This robot with its simulated arm in ``scene`` (a shipped scene's name or a file);
        a usage error for an arm that is not simulated."""
        arm = self.drivers.arm
        if arm is None or arm.kind != "sim":
            raise UsageError(f'--scene {scene}: only a simulated arm (kind = "sim") has a scene')
        drivers = self.drivers.model_copy(
            update={"arm": arm.model_copy(update={"scene": Path(scene)})}
        )
        return self.model_copy(update={"drivers": drivers})

    def resolve(self, path: Path) -> Path:
        """A path from robot.toml, relative to the folder that holds robot.toml."""
        return path if path.is_absolute() else self.root / path

    @property
    def skills_dir(self) -> Path:
        return self.resolve(self.skills)

    @property
    def recordings_dir(self) -> Path:
        return self.resolve(self.recordings)

    @property
    def embedder_dir(self) -> Path:
        """``[models] embedder``, else the model shipped with onboard (onboard.bundled)."""
        if self.models.embedder is None:
            return bundled.embedder_dir()
        return self.resolve(self.models.embedder)


def load_robot(path: Path) -> RobotConfig:
    """Load and validate robot.toml; raises ConfigError naming file, key and line."""
    config, lines = load_model(path, RobotConfig)
    config = config.model_copy(update={"root": path.resolve().parent})
    folder = config.recordings_dir
    if folder.exists() and not folder.is_dir():  # /dev/full, a file: no episode could record
        line = lines.line_of(("recordings",))
        raise ConfigError([Problem(path, "recordings", line, f"{folder} is not a folder")])
    return config


def load_example_robot() -> RobotConfig:
    """The bundled example robot (the robot.toml ``onboard init`` writes), for a folder without
    robot.toml: the shipped skills and scenarios, recordings under ./recordings."""
    config, _ = load_model(bundled.example_robot(), RobotConfig)
    example = config.model_copy(
        update={
            "skills": bundled.skills_dir(),
            "recordings": Path("recordings"),
            "root": Path.cwd(),
        }
    )
    example._example = True
    return example
