"""The stand-in VLM's HTTP server: ``POST /v1/chat/completions`` and ``GET /v1/models`` on
loopback, answering the five requests of :mod:`onboard.replan.prompts` (told apart by the
system message's first line) from the request alone: its text and its images' pixels.

A request it cannot read gets HTTP 400 with a one-line JSON error naming what is wrong
(``{"error": {"message": ..., "type": "invalid_request_error", "code": 400}}``).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from onboard.llm.content import decode_image, message_text
from onboard.replan.allowlist import check
from onboard.replan.names import API_NAMES
from onboard.replan.prompts import (
    DECISION_ROLE,
    ERRORS,
    EXTRA_ROLE,
    GOAL_ROLE,
    INSTRUCTION,
    MATCH_ROLE,
    SAYCAN_ROLE,
    SCENE,
    read_proposal,
)
from onboard.testing.chat_standin import BadRequest, ChatHandler, SeededStandIn, response_schema
from onboard.testing.vlm_standin import planting
from onboard.testing.vlm_standin.goals import read_goal
from onboard.testing.vlm_standin.judging import done, saycan_step
from onboard.testing.vlm_standin.matching import match
from onboard.testing.vlm_standin.programs import write
from onboard.testing.vlm_standin.seeing import View, from_image, from_text, goal_order
from onboard.testing.vlm_standin.tasks import recognise

__all__ = ["MODEL_NAME", "BadRequest", "VLMStandIn"]

MODEL_NAME = "vlm-standin"
ROLES = {
    DECISION_ROLE: "decision",
    MATCH_ROLE: "match",
    EXTRA_ROLE: "extra",
    SAYCAN_ROLE: "saycan",
    GOAL_ROLE: "goal",
}
_DATA_URL = re.compile(r"^data:image/(?:png|jpeg|jpg);base64,(?P<data>.+)$", re.S)


@dataclass(frozen=True)
class Request:
    bot: str
    text: str  # the last user message's text
    images: list[npt.NDArray[np.uint8]]
    messages: list[Mapping[str, Any]]
    schema: Mapping[str, Any] | None
    episode: str | None = None  # the body's "user" field: the episode that sent it


def read_request(body: Any) -> Request:
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise BadRequest("the body is not a JSON object with a 'messages' list")
    messages = body["messages"]
    if not all(isinstance(m, dict) for m in messages):
        raise BadRequest("a message is not a JSON object")
    system = next((m for m in messages if m.get("role") == "system"), None)
    if system is None:
        raise BadRequest("no system message: its first line names the bot")
    first = message_text(system).strip().split("\n", 1)[0].strip()
    if first not in ROLES:
        raise BadRequest(f"the system message's first line names no bot I play: {first[:80]!r}")
    user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if user is None:
        raise BadRequest("no user message")
    episode = body.get("user") if isinstance(body.get("user"), str) else None
    return Request(
        ROLES[first], message_text(user), _images(user), messages, response_schema(body), episode
    )


def _images(message: Mapping[str, Any]) -> list[npt.NDArray[np.uint8]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    images: list[npt.NDArray[np.uint8]] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "image_url":
            continue
        n = len(images) + 1
        image_url = part.get("image_url")
        url = image_url.get("url") if isinstance(image_url, dict) else None
        found = _DATA_URL.match(url) if isinstance(url, str) else None
        if found is None:
            raise BadRequest(f"image {n}: not a base64 data URL of a PNG or JPEG image")
        try:
            data = base64.b64decode(found.group("data"), validate=True)
            images.append(decode_image(data))
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(f"image {n}: {' '.join(str(exc).split())}") from None
    return images


def _line_after(text: str, heading: str) -> str:
    for line in text.splitlines():
        if line.startswith(heading):
            return line[len(heading) :].strip()
    return ""


def _section(text: str, heading: str, ends: Sequence[str]) -> str:
    """The lines after the line ``heading`` up to the first line starting with one of
    ``ends``."""
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == heading) + 1
    except StopIteration:
        return ""
    out = []
    for line in lines[start:]:
        if any(line.startswith(e) for e in ends):
            break
        out.append(line)
    return "\n".join(out)


def _errors(text: str) -> list[str]:
    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(ERRORS)), None)
    if at is None:
        return []
    out = []
    for line in lines[at + 1 :]:
        if not line.startswith("- "):
            break
        out.append(line[2:])
    return out


class VLMStandIn(SeededStandIn):
    """The stand-in VLM, served from a thread (the process runs it: ``__main__``)."""

    def __init__(
        self,
        seed: int = 0,
        competence: float = planting.DEFAULT_COMPETENCE,
        log: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(seed, competence, log, host, port)

    def _draws(self, request: Request) -> planting.Draws:
        """Seeded by the request and how many times it came before: in its episode when the
        request names one (so an episode's draws do not depend on what ran before it on this
        server), else in the server's life."""
        digest = planting.request_hash(request.messages)
        key = digest if request.episode is None else f"{request.episode}/{digest}"
        return planting.Draws(self.seed, digest, self.count(key), self.competence)

    def answer(self, body: Any) -> str:
        """The reply's content for a request body; BadRequest when it cannot be read."""
        request = read_request(body)
        draws = self._draws(request)
        if request.bot == "decision":
            return self._decision(request, draws)
        if request.bot == "match":
            return self._match(request)
        if request.bot == "extra":
            return self._extra(request, draws)
        if request.bot == "goal":
            return self._goal(request)
        return self._saycan(request)

    def _goal(self, request: Request) -> str:
        instruction = _line_after(request.text, INSTRUCTION)
        if not instruction:
            raise BadRequest(f"the user message has no {INSTRUCTION!r} line")
        view = from_text(_section(request.text, SCENE, ()))
        return json.dumps(read_goal(instruction, view))

    def _decision(self, request: Request, draws: planting.Draws) -> str:
        text = request.text
        instruction = _line_after(text, INSTRUCTION)
        if not instruction:
            raise BadRequest(f"the user message has no {INSTRUCTION!r} line")
        errors = _errors(text)
        task = recognise(instruction)
        if request.images:
            view, mode = from_image(request.images[0]), "image"
        else:
            view, mode = from_text(_section(text, SCENE, ("Images:",))), "text"
        goal = goal_order(request.images[1]) if task == 3 and len(request.images) > 1 else []
        named = planting.named_kinds(errors)
        planted = draws.planted(task, named)
        draft = write(task, view, instruction, planted, goal)
        drop = None
        if "mismatch" in planted:
            options = draft.droppable()
            if options:
                drop = draws.choice(options)
            else:
                planted.remove("mismatch")
        reply = draft.reply(drop, fenced="format" not in planted)
        refused = check(draft.program(drop), API_NAMES)
        if refused:  # the templates are the stand-in's own: a refusal is its bug
            raise RuntimeError(f"the stand-in wrote a program the check refuses: {refused[0]}")
        self.write_log(
            {
                "bot": "decision",
                "episode": request.episode,
                "hash": draws.digest,
                "n": draws.seen,
                "task": task,
                "mode": mode,
                "seen": view.names(),
                "planted": planted,
                "named": named,
            }
        )
        return reply

    def _match(self, request: Request) -> str:
        proposal = read_proposal(request.text)
        if isinstance(proposal, str):
            verdict, reason = False, proposal
        else:
            verdict, reason = match(proposal.plan, proposal.code)
        return json.dumps({"match": verdict, "reason": reason[:300]})

    def _extra(self, request: Request, draws: planting.Draws) -> str:
        text = request.text
        instruction = _line_after(text, INSTRUCTION)
        task = recognise(instruction)
        ended = _line_after(text, "How the run ended:") or "ok"
        before = from_text(_section(text, "Before the run:", ("After the run:",)))
        after = from_text(_section(text, "After the run:", ("Changes:",)))
        goal = goal_order(request.images[2]) if task == 3 and len(request.images) > 2 else []
        judged, reason = done(task, instruction, after, before, goal, ended)
        if task == 3 and not judged and goal and len(request.images) > 1:
            # the text may miss a block the stack hides from the detector: look at the picture
            seen = goal_order(request.images[1])
            if seen[: len(goal)] == goal:
                judged, reason = True, "the after image shows the blocks stacked as in the picture"
        planted = []
        if not judged and draws.chance(planting.rate("extra_false_done", self.competence)):
            planted, reason = ["extra_false_done"], "the task looks done"
        self.write_log(
            {
                "bot": "extra",
                "episode": request.episode,
                "hash": draws.digest,
                "n": draws.seen,
                "task": task,
                "done": judged or bool(planted),
                "judged": judged,
                "planted": planted,
            }
        )
        return json.dumps({"done": judged or bool(planted), "reason": reason[:300]})

    def _saycan(self, request: Request) -> str:
        text = request.text
        instruction = _line_after(text, INSTRUCTION)
        scene: View = from_text(_section(text, SCENE, ("Steps taken so far:",)))
        taken = [
            re.sub(r"^\d+\.\s*", "", line)
            for line in _section(
                text, "Steps taken so far:", ("Steps to choose from:",)
            ).splitlines()
            if line.strip() and line.strip() != "none yet"
        ]
        steps = [
            line[2:]
            for line in _section(text, "Steps to choose from:", ("The next step:",)).splitlines()
            if line.startswith("- ")
        ]
        enum = _enum(request.schema)
        if enum:
            steps = enum
        if not steps:
            raise BadRequest("the request lists no steps to choose from")
        step = saycan_step(recognise(instruction), instruction, scene, taken, steps)
        return json.dumps({"step": step})


def _enum(schema: Mapping[str, Any] | None) -> list[str]:
    if schema is None:
        return []
    step = schema.get("properties", {}).get("step", {})
    values = step.get("enum") if isinstance(step, dict) else None
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


class _Handler(ChatHandler):
    server_version = "VLMStandIn/1.0"
    model_name = MODEL_NAME


VLMStandIn.handler = _Handler
