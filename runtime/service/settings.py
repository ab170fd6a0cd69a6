"""robot.toml's ``[service]`` table: the control API's address and token, where a call of
the operator is posted, the e-stop's inputs, and what else ``onboard up`` serves (metrics, the
live view, the ROS 2 bridge)."""

from __future__ import annotations

from ipaddress import ip_address
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from onboard.base.errors import UsageError

__all__ = ["EStopConfig", "ServiceConfig", "is_loopback"]


Port = Annotated[int, Field(ge=1, le=65535)]


class EStopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    file: Path | None = Field(default=None, description="the e-stop is pressed while it exists")
    serial: str | None = Field(default=None, description="a serial port: a line `word` stops")
    baudrate: Annotated[int, Field(gt=0)] = 115200
    word: str = Field(default="STOP", min_length=1, pattern=r"^[ -~]+$")
    gpio: Path | None = Field(default=None, description="a GPIO value file (sysfs)")
    gpio_active: str = Field(default="0", pattern=r"^[01]$")


class ServiceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    api: bool = Field(default=True, description="serve the control API and operator page")
    host: str = Field(default="127.0.0.1", min_length=1)
    port: Annotated[int, Field(ge=0, le=65535)] = 8470
    token_env: str = Field(
        default="ONBOARD_API_TOKEN",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the variable holding the API's token (required beyond loopback)",
    )
    operator_url_env: str = Field(
        default="ONBOARD_OPERATOR_URL",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the variable holding a URL each call of the operator is posted to",
    )
    estop: EStopConfig = EStopConfig()
    metrics: Port | None = Field(
        default=None, description="serve Prometheus metrics at http://127.0.0.1:PORT/metrics"
    )
    foxglove: Port | None = Field(
        default=None, description="serve each episode live to Foxglove at ws://127.0.0.1:PORT"
    )
    ros2: str | None = Field(
        default=None, description="publish joint and skill states to this Zenoh router for ROS 2"
    )
    ros2_domain: Annotated[int, Field(ge=0, le=232)] | None = Field(
        default=None, description="the ROS domain id (None: $ROS_DOMAIN_ID, else 0)"
    )

    @field_validator("ros2")
    @classmethod
    def _zenoh_endpoint(cls, endpoint: str | None) -> str | None:
        from onboard.fleet.bus import check_endpoint

        if endpoint is None:
            return None
        try:
            return check_endpoint(endpoint)
        except UsageError as exc:
            raise ValueError(str(exc)) from None


def is_loopback(host: str) -> bool:
    """``host`` binds to this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
