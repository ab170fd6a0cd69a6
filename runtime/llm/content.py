"""Chat message contents: plain text, or OpenAI content parts (text and base64 images).

A message is ``{"role": ..., "content": str}`` or ``{"role": ..., "content": [part, ...]}``
with parts ``{"type": "text", "text": ...}`` and ``{"type": "image_url", "image_url":
{"url": "data:image/png;base64,..."}}``, the form OpenAI-compatible servers (vLLM,
llama.cpp's server with a vision model, OpenAI) read. Images are encoded as PNG here, with
zlib alone, so the controller needs no imaging library.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["image_part", "message_text", "png_bytes", "text_part", "user_message"]

ContentPart = dict[str, Any]


def text_part(text: str) -> ContentPart:
    return {"type": "text", "text": text}


def image_part(png: bytes, detail: str | None = None) -> ContentPart:
    """An image as a base64 data URL (PNG bytes, as :func:`png_bytes` makes them)."""
    url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
    image: dict[str, str] = {"url": url}
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def user_message(text: str, images: Sequence[bytes] = ()) -> dict[str, Any]:
    """A user message: plain text, or text then images as content parts."""
    if not images:
        return {"role": "user", "content": text}
    return {"role": "user", "content": [text_part(text), *(image_part(i) for i in images)]}


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message, its text parts joined; images left out."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return "\n".join(str(t) for t in texts if t)
    return ""


def png_bytes(rgb: npt.NDArray[np.uint8]) -> bytes:
    """An (H, W, 3) uint8 RGB image as PNG (8-bit truecolour, no filter, zlib level 6)."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"png_bytes needs (H, W, 3) uint8 RGB, not {rgb.shape} {rgb.dtype}")
    height, width = rgb.shape[:2]
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, -1)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
        + chunk(b"IEND", b"")
    )
