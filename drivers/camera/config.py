"""Settings of each camera driver, selected by ``kind`` under ``[drivers.camera]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CameraConfig", "RealSenseConfig", "SimCameraConfig", "SimServeCameraConfig"]


class RealSenseConfig(BaseModel):
    """``[drivers.camera]`` with ``kind = "realsense"``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["realsense"] = "realsense"
    serial: str | None = Field(
        default=None, description="serial number; None takes the only camera connected"
    )
    width: Annotated[int, Field(gt=0, description="live only; playback uses the file's")] = 640
    height: Annotated[int, Field(gt=0, description="live only; playback uses the file's")] = 480
    fps: Annotated[int, Field(gt=0, description="live only; playback uses the file's")] = 30
    depth_units: Annotated[
        float | None, Field(gt=0, description="metres per depth unit; None keeps the camera's")
    ] = 0.001
    warmup: Annotated[
        int, Field(ge=0, description="framesets dropped after start (auto-exposure); live only")
    ] = 30
    playback: Path | None = Field(default=None, description="a .db3/.bag recording to play")
    playback_repeat: bool = False
    playback_real_time: bool = Field(
        default=False,
        description="False: no frame dropped, paced at the recorded fps; True: SDK real time",
    )
    frame_timeout: Annotated[
        float, Field(gt=0, description="read() gives up (StaleFrame) after this many seconds")
    ] = 5.0
    start_timeout: Annotated[float, Field(gt=0, description="seconds to the first frame")] = 10.0


class SimCameraConfig(BaseModel):
    """``[drivers.camera]`` with ``kind = "sim"``: the physics twin's camera."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sim"] = "sim"
    timeout: Annotated[float, Field(gt=0, description="read() gives up after this many s")] = 2.0


class SimServeCameraConfig(BaseModel):
    """``[drivers.camera]`` with ``kind = "sim-serve"``: the camera of the twin that
    ``onboard sim serve`` runs, over loopback TCP (its ``--camera-port``), so perception sees
    the world the served arm moves."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["sim-serve"] = "sim-serve"
    host: str = Field(default="127.0.0.1", description="where onboard sim serve runs")
    port: Annotated[int, Field(ge=1, le=65535, description="its --camera-port")] = 10002
    timeout: Annotated[
        float, Field(gt=0, description="seconds for any socket step and for read()")
    ] = 2.0


CameraConfig = Annotated[
    RealSenseConfig | SimCameraConfig | SimServeCameraConfig, Field(discriminator="kind")
]
