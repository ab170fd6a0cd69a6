"""The wire protocol of the served twin camera (``onboard sim serve --camera-port``), version 1.

Both ends import it: :mod:`onboard.drivers.emulators.camera_server` (the server) and
:mod:`onboard.drivers.camera.served_camera` (the driver, ``kind = "sim-serve"``). It needs
nothing but numpy, so the driver runs where PyBullet is not installed.

TCP; one connection per client, several clients at once. On a connection, requests and replies
take turns, one request answered before the next is read:

**request**: one line of JSON, UTF-8, ending in ``\\n``, at most :data:`MAX_REQUEST` bytes::

    {"v": 1, "get": "frame"}   a frame of the twin as it is now, rendered for this request
    {"v": 1, "get": "info"}    the image size and intrinsics, no pixels (a connect check)

**reply**: one line of JSON, the header, at most :data:`MAX_HEADER` bytes, then exactly the
bytes it announces. A frame's header::

    {"v": 1, "ok": true, "width": W, "height": H,
     "intrinsics": {"fx": ..., "fy": ..., "cx": ..., "cy": ...},
     "index": N, "twin_time": T, "twin_step": S,
     "color": "rgb8", "color_bytes": W*H*3, "depth": "float32le-m", "depth_bytes": W*H*4}

then ``color_bytes`` of colour (H x W x 3 uint8 RGB, row-major), then ``depth_bytes`` of
depth (H x W little-endian float32, metres along the optical axis, 0 where nothing was hit),
aligned to colour. ``index`` counts the frames the server rendered (for any client: a client
sees it grow, not by one); ``twin_time`` is the twin's simulated seconds at the frame,
``twin_step`` its physics step. Intrinsics are pinhole, in pixels, pixel centres at integer
coordinates (as RealSense). An ``info`` reply carries ``v``, ``ok``, ``width``, ``height``
and ``intrinsics`` only, and no bytes follow.

**error**: ``{"v": 1, "ok": false, "error": "one line"}``, no bytes follow. The connection
stays open, except after a request line over :data:`MAX_REQUEST` bytes and when the server
already serves :data:`MAX_CLIENTS` connections: it then closes after the error line.

A newer version changes ``v``; a reader refuses a header whose ``v`` it does not speak.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from onboard.drivers.camera.base import Intrinsics

__all__ = [
    "COLOR",
    "DEPTH",
    "MAX_CLIENTS",
    "MAX_HEADER",
    "MAX_REQUEST",
    "MAX_SIDE",
    "VERSION",
    "FrameHeader",
    "decode_images",
    "encode_error",
    "encode_frame_header",
    "encode_info",
    "encode_request",
    "parse_header",
    "parse_info",
    "parse_request",
]

VERSION = 1
MAX_REQUEST = 1024  # bytes of a request line, its line break included
MAX_HEADER = 8192  # bytes of a reply's header line, its line break included
MAX_SIDE = 4096  # pixels: a width or height past this is a garbled header
MAX_CLIENTS = 8  # connections a server serves at once
COLOR = "rgb8"
DEPTH = "float32le-m"
REQUESTS = ("frame", "info")


@dataclass(frozen=True)
class FrameHeader:
    """What a frame's header announces."""

    intrinsics: Intrinsics
    index: int
    twin_time: float
    twin_step: int

    @property
    def color_bytes(self) -> int:
        return self.intrinsics.width * self.intrinsics.height * 3

    @property
    def depth_bytes(self) -> int:
        return self.intrinsics.width * self.intrinsics.height * 4


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, allow_nan=False).encode() + b"\n"


def encode_request(get: str) -> bytes:
    return _line({"v": VERSION, "get": get})


def encode_error(message: str) -> bytes:
    return _line({"v": VERSION, "ok": False, "error": " ".join(message.split())[:500]})


def encode_info(intrinsics: Intrinsics) -> bytes:
    return _line({"v": VERSION, "ok": True, **_size(intrinsics)})


def encode_frame_header(header: FrameHeader) -> bytes:
    return _line(
        {
            "v": VERSION,
            "ok": True,
            **_size(header.intrinsics),
            "index": header.index,
            "twin_time": header.twin_time,
            "twin_step": header.twin_step,
            "color": COLOR,
            "color_bytes": header.color_bytes,
            "depth": DEPTH,
            "depth_bytes": header.depth_bytes,
        }
    )


def _size(i: Intrinsics) -> dict[str, Any]:
    return {
        "width": i.width,
        "height": i.height,
        "intrinsics": {"fx": i.fx, "fy": i.fy, "cx": i.cx, "cy": i.cy},
    }


def parse_request(line: bytes) -> str:
    """What a request line asks for (``"frame"`` or ``"info"``); ValueError saying what is
    wrong with it."""
    request = _object(line, "request")
    _check_version(request)
    get = request.get("get")
    if get not in REQUESTS:
        raise ValueError(f"'get' must be one of {list(REQUESTS)}, not {_show(get)}")
    return str(get)


def parse_info(line: bytes) -> Intrinsics:
    """The intrinsics an info reply announces; ValueError (a garbled or refused reply)."""
    return _intrinsics(_reply(line))


def parse_header(line: bytes) -> FrameHeader:
    """A frame header, every field checked; ValueError saying what is wrong with it."""
    reply = _reply(line)
    intrinsics = _intrinsics(reply)
    header = FrameHeader(
        intrinsics=intrinsics,
        index=_int(reply, "index", 0, 2**62),
        twin_time=_number(reply, "twin_time"),
        twin_step=_int(reply, "twin_step", 0, 2**62),
    )
    for key, word, size in (
        ("color", COLOR, header.color_bytes),
        ("depth", DEPTH, header.depth_bytes),
    ):
        if reply.get(key) != word:
            raise ValueError(f"{key} is {_show(reply.get(key))}, this driver reads {word!r}")
        announced = reply.get(f"{key}_bytes")
        if announced != size:
            raise ValueError(
                f"{key}_bytes is {_show(announced)}, but {intrinsics.width}x"
                f"{intrinsics.height} {word} takes {size}"
            )
    return header


def decode_images(
    header: FrameHeader, payload: bytes | bytearray
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]:
    """Colour (H, W, 3) and depth (H, W) from the bytes after ``header``."""
    expected = header.color_bytes + header.depth_bytes
    if len(payload) != expected:
        raise ValueError(f"payload is {len(payload)} bytes, the header announced {expected}")
    h, w = header.intrinsics.height, header.intrinsics.width
    color = np.frombuffer(payload, np.uint8, header.color_bytes).reshape(h, w, 3)
    depth = np.frombuffer(payload, np.dtype("<f4"), h * w, header.color_bytes).reshape(h, w)
    return color, depth.astype(np.float32, copy=False)


def _object(line: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ValueError(f"the {what} is not a line of JSON: {_show(line)}") from None
    if not isinstance(value, dict):
        raise ValueError(f"the {what} is not a JSON object: {_show(line)}")
    return value


def _check_version(obj: dict[str, Any]) -> None:
    version = obj.get("v")
    if isinstance(version, bool) or version != VERSION:
        raise ValueError(f"protocol version {_show(obj.get('v'))}; this end speaks {VERSION}")


def _reply(line: bytes) -> dict[str, Any]:
    reply = _object(line, "reply header")
    _check_version(reply)
    if reply.get("ok") is not True:
        error = reply.get("error")
        if reply.get("ok") is False and isinstance(error, str):
            raise ValueError(f"the server refused: {' '.join(error.split())[:300]}")
        raise ValueError(f"the reply header has no ok: true: {_show(line)}")
    return reply


def _intrinsics(reply: dict[str, Any]) -> Intrinsics:
    width = _int(reply, "width", 1, MAX_SIDE)
    height = _int(reply, "height", 1, MAX_SIDE)
    pinhole = reply.get("intrinsics")
    if not isinstance(pinhole, dict):
        raise ValueError(f"intrinsics is {_show(pinhole)}, not an object")
    fx, fy, cx, cy = (_number(pinhole, k) for k in ("fx", "fy", "cx", "cy"))
    if fx <= 0 or fy <= 0:
        raise ValueError(f"focal lengths fx={fx}, fy={fy} must be positive")
    return Intrinsics(width, height, fx, fy, cx, cy)


def _int(obj: dict[str, Any], key: str, low: int, high: int) -> int:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{key} is {_show(value)}, not a whole number in {low}..{high}")
    return value


def _number(obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key} is {_show(value)}, not a finite number")
    return float(value)


def _show(value: object) -> str:
    """A value in an error line: printable, one line, short."""
    text = repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= 80 else text[:77] + "..."
