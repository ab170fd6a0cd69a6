"""Settings of each camera driver, selected by ``kind`` under ``[drivers.camera]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CameraConfig", "RealSenseConfig", "SimCameraConfig"]


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


CameraConfig = Annotated[RealSenseConfig | SimCameraConfig, Field(discriminator="kind")]
