"""The team stand-in's HTTP server and its choice of actions (FEEDBACK.md): ``POST
/v1/chat/completions`` and ``GET /v1/models`` on loopback, answered from the request alone.

Per asked agent: a seeded draw below the competence p takes the solver's first useful action
that is not banned; otherwise a mistake, half the time plausible (feasible, not useful) and
half the time infeasible, drawn uniformly; feedback only bans actions (``ignore_feedback``:
never).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onboard.llm.content import message_text
from onboard.testing.chat_standin import ChatHandler, SeededStandIn, response_schema
from onboard.testing.team_standin.reading import BadRequest, Bans, Prompt, bans, read_prompt
from onboard.testing.team_standin.solvers import WAIT, recognise, solver_for

__all__ = ["MODEL_NAME", "Pick", "TeamStandIn", "choose"]

MODEL_NAME = "team-standin"


@dataclass(frozen=True)
class Pick:
    agent: str
    action: str
    kind: str  # useful, unhelpful, infeasible, fallback


def choose(
    prompt: Prompt, seed: int, seen: int, competence: float, ignore_feedback: bool
) -> list[Pick]:
    """The stand-in's actions for the prompt's asked agents, in order."""
    try:
        task = recognise(prompt.sections.get("Task", ""))
        solver = solver_for(task, prompt.sections["State"], prompt.reach)
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    every = sorted({a for c in prompt.candidates.values() for a in c})
    banned = Bans() if ignore_feedback else bans(prompt, every)
    chosen = dict(prompt.chosen)
    picks = []
    for agent in prompt.asked:
        rng = random.Random(f"{seed}/{prompt.key}/{seen}/{agent}")
        candidates = prompt.candidates[agent]
        out = banned.of(agent, chosen)
        useful = solver.useful(agent, chosen)
        good = [a for a in useful if a in candidates and a not in out]
        if rng.random() < competence and good:
            pick = Pick(agent, good[0], "useful")
        else:
            pick = _mistake(agent, candidates, useful, out, chosen, solver, rng)
        chosen[agent] = pick.action
        picks.append(pick)
    return picks


def _mistake(
    agent: str,
    candidates: list[str],
    useful: list[str],
    out: set[str],
    chosen: Mapping[str, str],
    solver: Any,
    rng: random.Random,
) -> Pick:
    left = [a for a in candidates if a not in useful and a not in out]
    unhelpful = [a for a in left if solver.feasible(agent, a, chosen)]
    infeasible = [a for a in left if a not in unhelpful]
    kinds = [("unhelpful", unhelpful), ("infeasible", infeasible)]
    if rng.random() >= 0.5:
        kinds.reverse()
    for kind, options in kinds:
        if options:
            return Pick(agent, rng.choice(options), kind)
    rest = [a for a in candidates if a not in out]
    return Pick(agent, rng.choice(rest) if rest else WAIT, "fallback")


def reply_text(prompt: Prompt, picks: list[Pick]) -> str:
    if prompt.schema:
        return json.dumps({p.agent: p.action for p in picks})
    lines = [f"NAME {p.agent} ACTION {p.action}" for p in picks]
    return "\n".join(["EXECUTE", *lines]) if len(picks) > 1 else lines[0]


class TeamStandIn(SeededStandIn):
    """The team stand-in, served from a thread (the process runs it: ``__main__``)."""

    def __init__(
        self,
        seed: int = 0,
        competence: float = 1.0,
        ignore_feedback: bool = False,
        log: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.ignore_feedback = ignore_feedback
        super().__init__(seed, competence, log, host, port)

    def answer(self, body: Any) -> str:
        """The reply's content; BadRequest ``team stand-in: why`` (an HTTP 400) for a request
        it cannot read: another task's wording, no state, no agent to plan for."""
        try:
            return self._answer(body)
        except BadRequest as exc:
            raise BadRequest(f"team stand-in: {exc}") from None

    def _answer(self, body: Any) -> str:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise BadRequest("the body is not a JSON object with a 'messages' list")
        user = next((m for m in reversed(body["messages"])
                     if isinstance(m, dict) and m.get("role") == "user"), None)  # fmt: skip
        if user is None:
            raise BadRequest("no user message")
        prompt = read_prompt(message_text(user), response_schema(body))
        seen = self.count(prompt.key)
        picks = choose(prompt, self.seed, seen, self.competence, self.ignore_feedback)
        self.write_log({"key": prompt.key, "n": seen, "asked": prompt.asked,
                        "picks": [[p.agent, p.action, p.kind] for p in picks]})  # fmt: skip
        return reply_text(prompt, picks)


class _Handler(ChatHandler):
    server_version = "TeamStandIn/1.0"
    model_name = MODEL_NAME


TeamStandIn.handler = _Handler
