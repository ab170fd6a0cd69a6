"""What Foxglove draws from a recording: camera frames, detections on them, and poses.

Three of Foxglove's published message types, their JSON schemas written from the public
specification (docs.foxglove.dev, "Message schemas"), and :class:`Projector`, which turns the
records of an episode into messages of those types:

- ``foxglove.CompressedImage`` on ``/camera``: each frame an observation names by hash
  (``png`` in a scene look, ``image`` in a code look) once its bytes are known (a frame is
  recorded when a request sends it to an LLM, so its image may come after the look);
- ``foxglove.ImageAnnotations`` on ``/detections``: a scene look's detections, each box a
  closed polygon with its label and score, stamped with the look's time (Foxglove's image
  panel pairs annotations with the frame of the same time);
- ``foxglove.FrameTransform`` on ``/tf``: each located object of a look as a frame in the
  look's frame (``base`` or ``camera``; a code look's objects are in ``base``). Records carry
  the objects' positions, not the arm's: the arm's own pose is not recorded today.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["SCHEMAS", "TOPICS", "Projector", "stamp"]

_TIME = {
    "type": "object",
    "title": "time",
    "properties": {
        "sec": {"type": "integer", "minimum": 0},
        "nsec": {"type": "integer", "minimum": 0, "maximum": 999_999_999},
    },
}
_COLOR = {
    "title": "foxglove.Color",
    "type": "object",
    "properties": {c: {"type": "number"} for c in "rgba"},
    "required": list("rgba"),
}
_POINT2 = {
    "title": "foxglove.Point2",
    "type": "object",
    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
    "required": ["x", "y"],
}
_KEY_VALUES = {
    "type": "array",
    "items": {
        "title": "foxglove.KeyValuePair",
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": {"type": "string"}},
        "required": ["key", "value"],
    },
}

#: each Foxglove type's JSON schema, by its name
SCHEMAS: dict[str, dict[str, Any]] = {
    "foxglove.CompressedImage": {
        "title": "foxglove.CompressedImage",
        "description": "A compressed image",
        "type": "object",
        "properties": {
            "timestamp": _TIME,
            "frame_id": {"type": "string"},
            "data": {"type": "string", "contentEncoding": "base64"},
            "format": {"type": "string", "description": "jpeg, png, webp or avif"},
        },
        "required": ["timestamp", "frame_id", "data", "format"],
    },
    "foxglove.ImageAnnotations": {
        "title": "foxglove.ImageAnnotations",
        "description": "Array of annotations for a 2D image",
        "type": "object",
        "properties": {
            "circles": {"type": "array", "items": {"type": "object"}},
            "points": {
                "type": "array",
                "items": {
                    "title": "foxglove.PointsAnnotation",
                    "type": "object",
                    "properties": {
                        "timestamp": _TIME,
                        "type": {
                            "title": "foxglove.PointsAnnotationType",
                            "oneOf": [
                                {"title": name, "const": value}
                                for value, name in enumerate(
                                    ("UNKNOWN", "POINTS", "LINE_LOOP", "LINE_STRIP", "LINE_LIST")
                                )
                            ],
                        },
                        "points": {"type": "array", "items": _POINT2},
                        "outline_color": _COLOR,
                        "outline_colors": {"type": "array", "items": _COLOR},
                        "fill_color": _COLOR,
                        "thickness": {"type": "number"},
                        "metadata": _KEY_VALUES,
                    },
                    "required": [
                        "timestamp",
                        "type",
                        "points",
                        "outline_color",
                        "outline_colors",
                        "fill_color",
                        "thickness",
                        "metadata",
                    ],
                },
            },
            "texts": {
                "type": "array",
                "items": {
                    "title": "foxglove.TextAnnotation",
                    "type": "object",
                    "properties": {
                        "timestamp": _TIME,
                        "position": _POINT2,
                        "text": {"type": "string"},
                        "font_size": {"type": "number"},
                        "text_color": _COLOR,
                        "background_color": _COLOR,
                        "metadata": _KEY_VALUES,
                    },
                    "required": [
                        "timestamp",
                        "position",
                        "text",
                        "font_size",
                        "text_color",
                        "background_color",
                        "metadata",
                    ],
                },
            },
        },
        "required": ["circles", "points", "texts"],
    },
    "foxglove.FrameTransform": {
        "title": "foxglove.FrameTransform",
        "description": "A transform between two reference frames in 3D space",
        "type": "object",
        "properties": {
            "timestamp": _TIME,
            "parent_frame_id": {"type": "string"},
            "child_frame_id": {"type": "string"},
            "translation": {
                "title": "foxglove.Vector3",
                "type": "object",
                "properties": {a: {"type": "number"} for a in "xyz"},
                "required": list("xyz"),
            },
            "rotation": {
                "title": "foxglove.Quaternion",
                "type": "object",
                "properties": {a: {"type": "number"} for a in "xyzw"},
                "required": list("xyzw"),
            },
        },
        "required": ["timestamp", "parent_frame_id", "child_frame_id", "translation", "rotation"],
    },
}

#: the topic of each Foxglove type
TOPICS = {
    "foxglove.CompressedImage": "/camera",
    "foxglove.ImageAnnotations": "/detections",
    "foxglove.FrameTransform": "/tf",
}

_BOX = {"r": 0.1, "g": 0.9, "b": 0.2, "a": 1.0}
_CLEAR = {"r": 0.0, "g": 0.0, "b": 0.0, "a": 0.0}
_WHITE = {"r": 1.0, "g": 1.0, "b": 1.0, "a": 1.0}
_SHADE = {"r": 0.0, "g": 0.0, "b": 0.0, "a": 0.6}
_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/webp": "webp", "image/avif": "avif"}


def stamp(ns: int) -> dict[str, int]:
    """A Foxglove time from nanoseconds since the epoch."""
    return {"sec": ns // 1_000_000_000, "nsec": ns % 1_000_000_000}


def wall_ns(record: Mapping[str, Any]) -> int:
    """A record's wall time (``wall``, seconds since the epoch) in nanoseconds; 0 without."""
    wall = record.get("wall")
    if isinstance(wall, int | float) and not isinstance(wall, bool) and wall >= 0:
        return round(wall * 1e9)
    return 0


class Projector:
    """The Foxglove messages of each record, in the order the records come.

    ``feed(record, images)`` yields ``(type name, time in ns, message)``; ``images`` are the
    record's images as ``(sha256, media type, bytes)``. A look's frame waits for its bytes:
    it is yielded, stamped with the look's time, when the record that carries them comes.
    """

    def __init__(self) -> None:
        self._bytes: dict[str, tuple[str, bytes]] = {}
        self._waiting: dict[str, list[int]] = {}

    def feed(
        self, record: Mapping[str, Any], images: list[tuple[str, str, bytes]]
    ) -> Iterator[tuple[str, int, dict[str, Any]]]:
        for sha256, media_type, data in images:
            if sha256 in self._bytes:
                continue
            self._bytes[sha256] = (media_type, data)
            for ns in self._waiting.pop(sha256, []):
                yield from self._frame(sha256, ns)
        if record.get("kind") != "observation":
            return
        ns = wall_ns(record)
        frame = record.get("png", record.get("image"))
        if isinstance(frame, str):
            if frame in self._bytes:
                yield from self._frame(frame, ns)
            else:
                self._waiting.setdefault(frame, []).append(ns)
        boxes = list(_boxes(record))
        if boxes:
            yield "foxglove.ImageAnnotations", ns, _annotations(boxes, ns)
        for parent, name, position in _positions(record):
            x, y, z = position
            yield (
                "foxglove.FrameTransform",
                ns,
                {
                    "timestamp": stamp(ns),
                    "parent_frame_id": parent,
                    "child_frame_id": name,
                    "translation": {"x": x, "y": y, "z": z},
                    "rotation": {"x": 0.0, "y": 0.0, "z": 0.0, "w": 1.0},
                },
            )

    def _frame(self, sha256: str, ns: int) -> Iterator[tuple[str, int, dict[str, Any]]]:
        media_type, data = self._bytes[sha256]
        yield (
            "foxglove.CompressedImage",
            ns,
            {
                "timestamp": stamp(ns),
                "frame_id": "camera",
                "data": base64.b64encode(data).decode("ascii"),
                "format": _FORMATS.get(media_type, media_type.partition("/")[2]),
            },
        )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _boxes(record: Mapping[str, Any]) -> Iterator[tuple[list[float], str]]:
    objects = record.get("objects")
    for obj in objects if isinstance(objects, list) else []:
        box = obj.get("box") if isinstance(obj, Mapping) else None
        if isinstance(box, list) and len(box) == 4 and all(_number(v) for v in box):
            label = str(obj.get("label", obj.get("name", "")))
            score = obj.get("score")
            yield [float(v) for v in box], f"{label} {score:.2f}" if _number(score) else label


def _annotations(boxes: list[tuple[list[float], str]], ns: int) -> dict[str, Any]:
    points, texts = [], []
    for (x1, y1, x2, y2), text in boxes:
        corners = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
        points.append({
            "timestamp": stamp(ns),
            "type": 2,  # LINE_LOOP: a closed polygon
            "points": [{"x": x, "y": y} for x, y in corners],
            "outline_color": _BOX,
            "outline_colors": [],
            "fill_color": _CLEAR,
            "thickness": 2.0,
            "metadata": [],
        })  # fmt: skip
        texts.append({
            "timestamp": stamp(ns),
            "position": {"x": x1, "y": max(0.0, y1 - 2.0)},
            "text": text,
            "font_size": 12.0,
            "text_color": _WHITE,
            "background_color": _SHADE,
            "metadata": [],
        })  # fmt: skip
    return {"circles": [], "points": points, "texts": texts}


def _positions(record: Mapping[str, Any]) -> Iterator[tuple[str, str, tuple[float, ...]]]:
    """(parent frame, object name, position) of each located object of a look."""
    state = record.get("state")
    if isinstance(state, Mapping):  # a code look: its scene state, in the base frame
        objects, parent = state.get("objects"), "base"
    else:
        objects, parent = record.get("objects"), record.get("frame", "base")
    for obj in objects if isinstance(objects, list) else []:
        if not isinstance(obj, Mapping):
            continue
        position, name = obj.get("position"), obj.get("name")
        if (isinstance(name, str) and isinstance(position, list) and len(position) == 3
                and all(_number(v) for v in position)):  # fmt: skip
            yield str(parent), name, tuple(float(v) for v in position)
