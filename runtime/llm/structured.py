"""Structured output: the shape in which each kind of server reads a JSON schema, and the check
of every constrained reply against that schema on our side, whatever the server claims.

``[llm] structured_output`` names the shape (the *form*) of ``response_format``:

``"llama-cpp"``
    ``{"type": "json_object", "schema": S}``. llama-cpp-python's server (the embedded local
    model) reads only this: its ``response_format.type`` is ``Literal["text", "json_object"]``
    (llama_cpp/llama_types.py; the ``schema`` key came with abetlen/llama-cpp-python#1122, and
    #1677, to accept ``json_schema``, is unmerged), so the OpenAI form is refused with HTTP 500
    (seen with 0.3.36; ggml-org/llama.cpp#23463 reports it for 0.3.23).
``"openai"``
    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": S, "strict": true}}``:
    OpenAI's Structured Outputs, which the servers people run copy: vLLM
    (vllm/entrypoints/openai/protocol.py: ``json_schema`` becomes its guided JSON), llama.cpp's
    ``llama-server`` (tools/server: reads ``response_format.json_schema.schema``, and the
    llama-cpp form too; ggml-org/llama.cpp#9522), Ollama's ``/v1`` since 0.5.0
    (ollama/ollama openai/openai.go, ``FromChatRequest``: the schema becomes its native
    ``format``) and LM Studio (lmstudio.ai/docs/api/structured-output). All but llama-server
    read ``{"type": "json_object"}`` as plain JSON mode, any schema beside it ignored: valid
    JSON, no enum enforced (vLLM: ``guided_json_object``; Ollama: ``format = "json"``; OpenAI:
    "JSON mode doesn't guarantee that the output will match your schema", an OpenAI engineer
    at community.openai.com/t/json-mode-vs-function-calling/476994/5).
``"none"``
    no ``response_format``: a server without constrained decoding.
``"auto"`` (the default)
    llama-cpp for the embedded local model (``base_url = "local"`` or ``--llm local``), openai
    for every other URL.

OpenAI's strict mode takes only schemas whose every object has ``additionalProperties: false``
and lists every property in ``required``; onboard.llm.prompts writes its schemas so.

:func:`reply_problem` checks a reply against the schema: the subset of JSON Schema the
prompts use (``type``, ``properties``, ``required``, ``additionalProperties: false``,
``enum``, ``minLength``/``maxLength``, ``minimum``/``maximum``). A schema with any other
keyword is refused (ValueError), so a keyword added to a prompt's schema is never silently
unchecked. A validator of our own rather than the ``jsonschema`` package: that package brings
four more distributions, one of them compiled (rpds-py) and needed on every controller's
platform, to check the few keywords of schemas this package writes itself.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from onboard.config import StructuredOutput

__all__ = ["Form", "reply_problem", "resolve", "response_format"]

#: a resolved ``[llm] structured_output``
Form = Literal["llama-cpp", "openai", "none"]


def resolve(setting: StructuredOutput, *, local: bool) -> Form:
    """The form to send: ``setting``, or for ``"auto"`` the one the server is known to read
    (``local``: the embedded llama-cpp-python server)."""
    if setting == "auto":
        return "llama-cpp" if local else "openai"
    return setting


def response_format(form: Form, schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """The request's ``response_format`` asking for ``schema`` in ``form`` (None: send none)."""
    if form == "llama-cpp":
        return {"type": "json_object", "schema": dict(schema)}
    if form == "openai":
        return {
            "type": "json_schema",
            "json_schema": {"name": "reply", "schema": dict(schema), "strict": True},
        }
    return None


def reply_problem(text: str, schema: Mapping[str, Any]) -> str | None:
    """Why ``text`` is not one JSON document matching ``schema``; None when it is."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        start = " ".join(text.split())[:40]
        return f"not JSON ({exc}): {start!r}" if start else "empty"
    return _problem(value, schema, "")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "enum", "minLength",
     "maxLength", "minimum", "maximum", "title", "description", "items", "minItems",
     "maxItems"}
)  # fmt: skip


def _problem(value: object, schema: Mapping[str, Any], where: str) -> str | None:
    unknown = sorted(set(schema) - _KEYWORDS)
    if unknown or not isinstance(schema.get("additionalProperties", False), bool):
        raise ValueError(f"schema at {where or 'the top'}: {unknown or 'additionalProperties'} "
                         "not checked by onboard.llm.structured")  # fmt: skip
    name = f"{where!r}" if where else "the reply"
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_is(value, kind) for kind in kinds):
            return f"{name} is {_kind_of(value)}, not {' or '.join(kinds)}"
    enum = schema.get("enum")
    if enum is not None and not any(_same(value, option) for option in enum):
        options = ", ".join(_show(option) for option in enum)
        return f"{name} is {_show(value)}, not one of {options}"
    if isinstance(value, str):
        if len(value) > schema.get("maxLength", math.inf):
            return f"{name} is {len(value)} characters, over maxLength {schema['maxLength']}"
        if len(value) < schema.get("minLength", 0):
            return f"{name} is {len(value)} characters, under minLength {schema['minLength']}"
    if _is(value, "number"):
        number = float(value)  # type: ignore[arg-type]
        if number < schema.get("minimum", -math.inf):
            return f"{name} is {_show(value)}, under minimum {schema['minimum']}"
        if number > schema.get("maximum", math.inf):
            return f"{name} is {_show(value)}, over maximum {schema['maximum']}"
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", math.inf):
            return f"{name} has {len(value)} items, over maxItems {schema['maxItems']}"
        if len(value) < schema.get("minItems", 0):
            return f"{name} has {len(value)} items, under minItems {schema['minItems']}"
        for i, item in enumerate(value):
            problem = _problem(item, schema.get("items", {}), f"{where}[{i}]")
            if problem:
                return problem
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        missing = [key for key in schema.get("required", ()) if key not in value]
        if missing:
            return f"{name} lacks {', '.join(map(repr, missing))}"
        if schema.get("additionalProperties") is False:
            extra = sorted(set(value) - set(properties))
            if extra:
                return f"{name} has keys the schema does not allow: {', '.join(map(repr, extra))}"
        for key, sub in properties.items():
            if key in value:
                problem = _problem(value[key], sub, f"{where}.{key}" if where else key)
                if problem:
                    return problem
    return None


_PYTHON: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def _is(value: object, kind: str) -> bool:
    """JSON Schema's types: a boolean is no number, 1.0 is an integer."""
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "integer":
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    python = _PYTHON.get(kind)
    if python is None:
        raise ValueError(f"schema type {kind!r} not checked by onboard.llm.structured")
    return isinstance(value, python)


def _same(value: object, option: object) -> bool:
    return isinstance(value, bool) == isinstance(option, bool) and value == option


_NAMES = {
    "boolean": "a boolean",
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "object": "an object",
    "array": "an array",
    "null": "null",
}


def _kind_of(value: object) -> str:
    return next(name for kind, name in _NAMES.items() if _is(value, kind))


def _show(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
