"""Chat message contents: plain text, or OpenAI content parts (text and base64 images).

A message is ``{"role": ..., "content": str}`` or ``{"role": ..., "content": [part, ...]}``
with parts ``{"type": "text", "text": ...}`` and ``{"type": "image_url", "image_url":
{"url": "data:image/png;base64,..."}}``, the form OpenAI-compatible servers (vLLM,
llama.cpp's server with a vision model, OpenAI) read. Images are encoded with Pillow (a core
dependency): PNG, lossless, for what is recorded and compared; JPEG where a remote model's
upload size matters more than exact pixels.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from PIL import Image

__all__ = [
    "decode_image",
    "encode_image",
    "image_part",
    "media_type",
    "message_text",
    "png_bytes",
    "text_part",
    "user_message",
]

ContentPart = dict[str, Any]


def text_part(text: str) -> ContentPart:
    return {"type": "text", "text": text}


def media_type(data: bytes) -> str:
    """``image/png`` or ``image/jpeg``, from the bytes' signature."""
    return "image/jpeg" if data[:3] == b"\xff\xd8\xff" else "image/png"


def image_part(data: bytes, detail: str | None = None) -> ContentPart:
    """An image (PNG or JPEG bytes, as :func:`encode_image` makes them) as a base64 data URL."""
    url = f"data:{media_type(data)};base64," + base64.b64encode(data).decode("ascii")
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
    """An (H, W, 3) uint8 RGB image as PNG."""
    return encode_image(rgb, "png")


def encode_image(
    rgb: npt.NDArray[np.uint8], form: Literal["png", "jpeg"] = "png", quality: int = 90
) -> bytes:
    """An (H, W, 3) uint8 RGB image as PNG (zlib level 6) or JPEG (``quality``)."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"images must be (H, W, 3) uint8 RGB, not {rgb.shape} {rgb.dtype}")
    out = io.BytesIO()
    picture = Image.fromarray(np.ascontiguousarray(rgb), mode="RGB")
    if form == "png":
        picture.save(out, format="PNG", compress_level=6)
    else:
        picture.save(out, format="JPEG", quality=quality)
    return out.getvalue()


def decode_image(data: bytes) -> npt.NDArray[np.uint8]:
    """PNG or JPEG bytes as an (H, W, 3) uint8 RGB array; ValueError when unreadable."""
    try:
        with Image.open(io.BytesIO(data)) as picture:
            return np.asarray(picture.convert("RGB"), dtype=np.uint8)
    except (OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"not a readable image: {exc}") from None
