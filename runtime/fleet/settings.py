"""robot.toml's ``[fleet]`` table: this robot is one agent of a fleet, and ``onboard up`` runs
its controller (docs/fleet.md). Read without Zenoh: checking a robot.toml needs no extra."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from onboard.base.errors import UsageError

__all__ = ["FleetMemberConfig"]

_NAME = r"^[A-Za-z0-9_-]{1,64}$"  # a key expression's chunk (onboard.fleet.wire.check_name)


class FleetMemberConfig(BaseModel):
    """This robot's place in a fleet: which agent of which team task its arm is, in which
    scene (the arm's frame and home), and how it reaches the coordinator over Zenoh."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    agent: str = Field(pattern=_NAME, description="the task file's agent this arm is")
    task: str = Field(default="sort_cubes", min_length=1, description="the team task")
    scene: str = Field(
        default="sort_cubes", min_length=1, description="the scene the arm stands in"
    )
    name: str = Field(default="fleet", pattern=_NAME, description="the fleet's name in keys")
    listen: tuple[str, ...] = Field(default=(), description="Zenoh endpoints, tcp/HOST:PORT")
    connect: tuple[str, ...] = Field(default=(), description="Zenoh endpoints, tcp/HOST:PORT")
    period: Annotated[float, Field(gt=0, description="heartbeat period, s")] = 0.1
    timeout: Annotated[float, Field(gt=0, description="silent longer is lost, s")] = 0.5

    @field_validator("listen", "connect")
    @classmethod
    def _endpoints(cls, endpoints: tuple[str, ...]) -> tuple[str, ...]:
        from onboard.fleet.bus import check_endpoint

        for endpoint in endpoints:
            try:
                check_endpoint(endpoint)
            except UsageError as exc:
                raise ValueError(str(exc)) from None
        return endpoints

    @model_validator(mode="after")
    def _reachable(self) -> FleetMemberConfig:
        if not self.listen and not self.connect:
            raise ValueError("a fleet member needs an endpoint: connect = "
                             '["tcp/HOST:PORT"] (the coordinator\'s) or listen')  # fmt: skip
        if self.timeout < 2 * self.period:
            raise ValueError(f"timeout {self.timeout} s is under two periods ({self.period} s): "
                             "one late heartbeat would be a loss")  # fmt: skip
        if self.agent == "coordinator":
            raise ValueError("agent 'coordinator': the coordinator's name in key expressions")
        return self
