"""Stand-ins for the LLM servers users run, as each treats ``response_format`` (stdlib only).

Each is a real threaded HTTP server on loopback that sees only the HTTP request, as the real
server would, and answers ``POST /v1/chat/completions`` the way its real counterpart treats
the request's ``response_format`` (the sources are in onboard.llm.structured). Its "model"
would like to say ``wish``; what reaches the client depends on whether the server was asked,
in the shape it reads, to constrain the reply:

================== ============================================ ===============================
dialect            constrains a reply to a schema given as       otherwise
================== ============================================ ===============================
llama-cpp-python   ``{"type": "json_object", "schema": S}``      ``json_object`` without a
                   (the embedded local model)                    schema: JSON mode; any other
                                                                 type: HTTP 500 naming
                                                                 response_format, as its
                                                                 request validation answers
openai             ``{"type": "json_schema", "json_schema":      ``json_object`` (a ``schema``
                   {"schema": S}}`` (OpenAI, vLLM, Ollama /v1,   beside it ignored): JSON mode
                   LM Studio)
llama-server       either shape above (llama.cpp's server)       another type: HTTP 400
plain              nothing: ``response_format`` is ignored       free text
================== ============================================ ===============================

* constrained: a JSON object made from the schema alone: every property; an enum's value is
  the first of ``prefer`` the enum offers, else its first; a string ``"constrained"``; a
  number or integer 5 (within its minimum and maximum); a boolean ``true``;
* JSON mode: ``{"action": wish, "reason": ...}``: valid JSON the schema never bounded (the
  action is the model's own words, not one of the enum);
* free text: ``wish`` itself.

With ``max_chars`` a reply is cut there and ends with ``finish_reason = "length"``, as a reply
cut at ``max_tokens`` does. ``requests`` keeps every request body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal, cast

from onboard.testing.loopback import LoopbackServer, OwnedHTTPServer
from onboard.testing.standin_server import completion_json

__all__ = ["DIALECTS", "Dialect", "SchemaServer", "constrained_reply"]

Dialect = Literal["llama-cpp-python", "openai", "llama-server", "plain"]
DIALECTS: tuple[Dialect, ...] = ("llama-cpp-python", "openai", "llama-server", "plain")


class SchemaServer(LoopbackServer):
    """One server of ``dialect`` on 127.0.0.1; ``base_url`` ends in ``/v1``."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        wish: str = "The robot should walk up to the person and say hello.",
        prefer: Sequence[str] = (),
        max_chars: int | None = None,
    ) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}; one of {', '.join(DIALECTS)}")
        self.dialect = dialect
        self.wish = wish
        self.prefer = list(prefer)
        self.max_chars = max_chars
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__()

    def answer(self, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) for one chat-completion request body."""
        with self._lock:
            self.requests.append(dict(body))
        given = body.get("response_format")
        fmt: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        kind = fmt.get("type", "text") if self.dialect != "plain" else "text"
        flat, nested = fmt.get("schema"), fmt.get("json_schema")
        wrapped = nested.get("schema") if isinstance(nested, Mapping) else None
        reads = {
            "llama-cpp-python": {"json_object": flat},
            "openai": {"json_schema": wrapped, "json_object": None},
            "llama-server": {"json_object": flat, "json_schema": wrapped},
            "plain": {},
        }[self.dialect]
        if kind != "text" and kind not in reads:
            return _refused(self.dialect, str(kind))
        schema = reads.get(kind)
        if isinstance(schema, Mapping):
            content = json.dumps(constrained_reply(schema, self.prefer))
        elif kind != "text":
            content = json.dumps({"action": self.wish, "reason": "It seems friendly."})
        else:
            content = self.wish
        reply = completion_json(str(body.get("model") or self.dialect), content, 1)
        if self.max_chars is not None and len(content) > self.max_chars:
            choice = reply["choices"][0]
            choice["message"]["content"] = content[: self.max_chars]
            choice["finish_reason"] = "length"
        return 200, reply


def constrained_reply(schema: Mapping[str, Any], prefer: Sequence[str] = ()) -> Any:
    """A value that matches ``schema``, as a server's constrained decoding would produce."""
    enum = schema.get("enum")
    if enum:
        return next((option for option in prefer if option in enum), enum[0])
    kind = schema.get("type")
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties", {})
        return {key: constrained_reply(sub, prefer) for key, sub in properties.items()}
    if kind in ("number", "integer"):
        return min(max(5, schema.get("minimum", 5)), schema.get("maximum", 5))
    if kind == "boolean":
        return True
    return "constrained"[: schema.get("maxLength", 11)]


def _refused(dialect: Dialect, kind: str) -> tuple[int, dict[str, Any]]:
    if dialect == "llama-cpp-python":
        message = (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
            f"'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\", "
            f"'input': '{kind}'}}"
        )
        return 500, {"error": {"message": message, "type": "internal_server_error"}}
    message = f'response_format type must be one of "text" or "json_object", but got: {kind}'
    return 400, {"error": {"code": 400, "message": message, "type": "invalid_request_error"}}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            body = None
        if self.path != "/v1/chat/completions" or not isinstance(body, dict):
            status, reply = 400, {"error": {"message": "not a chat completion request"}}
        else:
            status, reply = cast(SchemaServer, cast(OwnedHTTPServer, self.server).owner).answer(
                body
            )
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


SchemaServer.handler = _Handler
