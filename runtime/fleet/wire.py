"""What a fleet says over Zenoh: the key expressions and the payloads, version 1.

Key expressions (``<fleet>`` and ``<agent>`` are names: letters, digits, ``_`` and ``-``)::

    onboard/v1/<fleet>/coordinator/heartbeat   Heartbeat  the coordinator, every period
    onboard/v1/<fleet>/<agent>/heartbeat       Heartbeat  each controller, every period
    onboard/v1/<fleet>/<agent>/state           State      a controller, on every change
    onboard/v1/<fleet>/<agent>/action          Action     the coordinator to one controller
    onboard/v1/<fleet>/<agent>/result          Result     the controller's answer to an action

Every payload is one JSON object with ``"v": 1`` and its ``"kind"``; a reader refuses
another version or a payload that does not validate in one line naming the key, and reads
on (a bad message never stops a controller). A new field with a default is compatible; a
renamed or retyped one is version 2, on ``onboard/v2/...``.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from onboard.base.errors import UsageError

__all__ = [
    "COORDINATOR",
    "VERSION",
    "Action",
    "BadPayload",
    "Heartbeat",
    "Payload",
    "Result",
    "State",
    "check_name",
    "decode",
    "encode",
    "key",
]

VERSION = 1
#: the coordinator's name in key expressions (no agent may take it)
COORDINATOR = "coordinator"
Topic = Literal["heartbeat", "state", "action", "result"]
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
Point = tuple[float, float, float]


def check_name(name: str, what: str) -> str:
    """``name`` as a key expression's chunk: letters, digits, ``_`` and ``-`` only."""
    if not _NAME.fullmatch(name):
        raise UsageError(f"{what} {name!r}: letters, digits, _ and - only (a key expression's "
                         "chunk)")  # fmt: skip
    return name


def key(fleet: str, sender: str, topic: Topic | Literal["*"]) -> str:
    """The key expression of ``sender``'s ``topic`` in ``fleet`` (``*`` for every agent or
    topic in a subscription)."""
    return f"onboard/v{VERSION}/{fleet}/{sender}/{topic}"


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1
    #: who sent it: an agent's name, or "coordinator"
    sender: str
    #: wall-clock time of sending (seconds since the epoch; the fleet's hosts keep NTP time)
    sent: float


class Heartbeat(_Payload):
    """I am alive: every ``period`` seconds; a reader that hears none for its timeout
    treats the sender as lost."""

    kind: Literal["heartbeat"] = "heartbeat"
    seq: Annotated[int, Field(ge=0)]
    period: Annotated[float, Field(gt=0)]
    #: a controller's: its arm is stopped and latched (until a reset)
    latched: bool = False
    #: the sender's last heartbeat: it leaves in order (a coordinator done with its
    #: episode), so a reader stops watching it rather than treating its silence as a loss
    closing: bool = False


class State(_Payload):
    """A controller's state, on every change: ``idle`` (ready for an action), ``busy`` (an
    action running), ``stopped`` (the arm stopped and latched; ``reason`` says why)."""

    kind: Literal["state"] = "state"
    status: Literal["idle", "busy", "stopped"]
    reason: str = ""
    #: the action running (busy), or the last one
    action_id: int | None = None
    #: the tool's pose in the arm's base frame: x, y, z (m), roll, pitch, yaw (rad)
    pose: tuple[float, float, float, float, float, float] | None = None


class Action(_Payload):
    """The coordinator to one controller. ``act``: run ``action`` (``PICK <cube> PLACE
    <panel>``) with the fleet's belief of where each cube rests (``cubes``: world frame, m);
    ``stop``: stop the arm and latch it; ``reset``: clear the latch (a deliberate decision
    to move again)."""

    kind: Literal["action"] = "action"
    id: Annotated[int, Field(ge=0)]
    command: Literal["act", "stop", "reset"]
    action: str = ""
    cubes: dict[str, Point] = Field(default_factory=dict)
    reason: str = ""


class Result(_Payload):
    """A controller's answer to the action ``id``: done (``ok``) or not (``error``, one
    line), where it put the cube (``placed``), when it received the action and how long it
    ran (wall seconds)."""

    kind: Literal["result"] = "result"
    id: Annotated[int, Field(ge=0)]
    ok: bool
    error: str = ""
    placed: dict[str, Point] = Field(default_factory=dict)
    received: float
    seconds: Annotated[float, Field(ge=0)]


Payload = Heartbeat | State | Action | Result
P = TypeVar("P", Heartbeat, State, Action, Result)


class BadPayload(ValueError):
    """A payload that is not this version's, or does not validate: its one line."""


def encode(payload: Payload) -> bytes:
    return payload.model_dump_json().encode()


def decode(model: type[P], data: bytes, where: str) -> P:
    """``data`` read as ``model``; BadPayload naming ``where`` (the key expression) and the
    first problem."""
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        place = ".".join(str(p) for p in error["loc"]) or "payload"
        if place == "v":
            found = error.get("input")
            raise BadPayload(f"{where}: payload version {found!r}, this reader reads "
                             f"v{VERSION}") from None  # fmt: skip
        raise BadPayload(f"{where}: {place}: {error['msg']}") from None
