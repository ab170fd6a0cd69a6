"""The decision loop's own cost, in one run: overhead per decision, client cost, mapping,
cold start and memory, for onboard's httpx client beside the official ``openai`` client.

    python bench/decision_loop.py

Decisions go through the real loop (a SkillRunner on the virtual clock, the four seed
scenarios over and over) against the stand-in LLM served from its own process, so the
runner's ``decision_overhead`` holds everything but the LLM: prompt, request building,
recording, reply parsing, mapping, checks and the driver command start.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from _common import (
    DEV_SET,
    HELDOUT_SET,
    ROOT,
    children,
    environment,
    fmt_ms,
    read_jsonl,
    robot_and_skill,
    rss_mb,
    summary,
    verdict,
    write_results,
)
from rich.console import Console
from rich.table import Table

from onboard.config import LLMConfig, RobotConfig
from onboard.grounding.mapping import ActionMapper, MappingResult, normalise, split_clauses
from onboard.hri.evaluate import SEED_SCENARIOS
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import (
    EpisodeOptions,
    HttpAsk,
    make_mapper,
    run_episode,
)
from onboard.llm.client import ChatClient, ChatResult, Message, server_timing, timing_hooks
from onboard.llm.prompts import first_stage, plan_schema
from onboard.loop.engine import Ask, SkillRunner
from onboard.loop.recorder import Recorder
from onboard.loop.skill import Skill

MIN_DECISIONS = 1000
COLD_RUNS = 7
MAPPING_REPEATS = 20
GOAL_OVERHEAD_P99_MS = 3.0
GOAL_COLD_START_S = 1.0
ONBOARD = "onboard (httpx)"
REFERENCE = "reference: openai client"
# the LLM's time is 0 virtual seconds; `onboard eval` and `onboard run` use these options
OPTIONS = EpisodeOptions(clock="virtual", latency=0.0, keep_candidates=False)


# -- the two clients ----------------------------------------------------------------------


class OpenAIAsk:
    """The same exchange over the official ``openai`` client, stamped like ChatClient."""

    def __init__(self, config: LLMConfig, base_url: str) -> None:
        import openai  # imported here: its memory is measured apart from the runtime's

        self.config = config
        timeout = httpx.Timeout(config.read_timeout, connect=config.connect_timeout)
        self.http = httpx.Client(
            timeout=timeout,
            limits=httpx.Limits(max_keepalive_connections=4, max_connections=8),
            event_hooks=timing_hooks(),
        )
        self.client = openai.OpenAI(
            base_url=base_url,
            api_key="unused",
            max_retries=0,
            timeout=timeout,
            http_client=self.http,
        )

    def close(self) -> None:
        self.client.close()

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        began = time.monotonic()
        extra = {"response_format": {"type": "json_object", "schema": schema}} if schema else None
        raw = self.client.chat.completions.with_raw_response.create(
            model=self.config.model,
            messages=[dict(m) for m in messages],
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            extra_body=extra,
        )
        completion = raw.parse()
        usage = completion.usage
        return ChatResult(
            text=completion.choices[0].message.content or "",
            latency=time.monotonic() - began,
            attempts=1,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            model=completion.model,
            timings=server_timing(raw.headers.get("server-timing", "")),
            sent_at=raw.http_response.request.extensions.get("onboard_sent", 0.0),
            received_at=raw.http_response.extensions.get("onboard_received", 0.0),
        )


class MeasuredAsk:
    """Keeps, per plan exchange, the client-side cost: round trip minus the server's time."""

    def __init__(self, ask: Ask) -> None:
        self.ask = ask
        self.client_cost: list[float] = []

    def __call__(
        self, purpose: str, messages: Sequence[Message], schema: dict[str, Any] | None
    ) -> ChatResult:
        result = self.ask(purpose, messages, schema)
        if purpose == "plan" and result.sent_at and "policy" in result.timings:
            round_trip = result.received_at - result.sent_at
            self.client_cost.append(round_trip - result.timings["policy"])
        return result


class MeasuredMapper:
    """An ActionMapper that logs each ``map``: the reply and how long it took."""

    def __init__(self, mapper: ActionMapper) -> None:
        self.mapper = mapper
        self.calls: list[tuple[str, float]] = []
        self._taken = 0

    def map(self, reply: str) -> MappingResult:
        began = time.perf_counter()
        result = self.mapper.map(reply)
        self.calls.append((reply, time.perf_counter() - began))
        return result

    def take(self) -> int | None:
        """Index of the latest call not yet taken (None when there was none)."""
        if len(self.calls) == self._taken:
            return None
        self._taken = len(self.calls)
        return self._taken - 1


class DecisionLog(list[tuple[float, float]]):
    """A runner's ``decision_overhead`` that also notes which mapping each decision waited for.

    The runner only appends to it; the tagging happens after its timing was taken.
    """

    def __init__(self, mapper: MeasuredMapper) -> None:
        super().__init__()
        self.mapper = mapper
        self.mapped: list[int | None] = []

    def append(self, item: tuple[float, float]) -> None:
        super().append(item)
        self.mapped.append(self.mapper.take())


def new_clause_counts(skill: Skill, replies: Sequence[str]) -> list[int]:
    """Per reply, the clause texts the embedder had not embedded before (its cache misses).

    Mirrors ActionMapper.map: an exact action name embeds nothing; otherwise every text of
    split_clauses goes through the embedder, whose cache already holds the references.
    """
    names = {" ".join(n.lower().split()) for n in skill.actions}
    refs = [r for a in skill.actions.values() for r in a.spec.references] + list(skill.reject)
    seen = {normalise(r) for r in refs}
    counts = []
    for reply in replies:
        if " ".join(normalise(reply).split()) in names:
            counts.append(0)
            continue
        texts = {t for segment in split_clauses(reply) for t in segment}
        counts.append(len(texts - seen))
        seen |= texts
    return counts


@dataclass
class Subject:
    """One client under test, with its own stand-in, mapper (and embedder cache) and log."""

    name: str
    ask: MeasuredAsk
    mapper: MeasuredMapper
    recording: Path
    overhead: list[tuple[float, float]] = field(default_factory=list)
    mapped: list[int | None] = field(default_factory=list)
    sequences: list[list[str]] = field(default_factory=list)

    def reset(self) -> None:
        """Forget the warm-up round (the mapper's log stays: it is its cache's history)."""
        self.ask.client_cost.clear()
        self.overhead.clear()
        self.mapped.clear()
        self.sequences.clear()


@contextmanager
def standin_process(seed: int, noise: float) -> Iterator[str]:
    """The stand-in LLM in a process of its own (as a real server is); yields its base URL."""
    options = {"--port": "0", "--seed": str(seed), "--noise": str(noise)}
    command = [
        sys.executable,
        "-m",
        "onboard.testing.standin_server",
        *(x for kv in options.items() for x in kv),
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            raise RuntimeError(f"stand-in did not start: {url!r}")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


# -- the loop -----------------------------------------------------------------------------


def run_decisions(robot: RobotConfig, skill: Skill, scenario: Scenario, subject: Subject) -> None:
    """One episode through onboard.hri.session.run_episode, keeping the runner's timings."""
    log = DecisionLog(subject.mapper)

    def keep_timings(runner: SkillRunner) -> None:
        runner.decision_overhead = log

    with Recorder(subject.recording) as recorder:
        outcome = run_episode(
            robot, skill, scenario, subject.ask, subject.mapper,  # duck-typed: .map only
            recorder, OPTIONS, on_runner=keep_timings,
        )  # fmt: skip
    subject.overhead += log
    subject.mapped += log.mapped
    subject.sequences.append([a for _, a in outcome.actions])


def decision_loop(robot: RobotConfig, skill: Skill) -> dict[str, Any]:
    scenarios = [
        load_scenario(robot.skills_dir / "scenarios" / f"{n}.toml") for n in SEED_SCENARIOS
    ]
    seed, noise = robot.eval.seed, robot.eval.standin_noise
    with (
        tempfile.TemporaryDirectory(prefix="onboard-bench-") as tmp,
        standin_process(seed, noise) as url_a,
        standin_process(seed, noise) as url_b,
        ChatClient(robot.llm, base_url=url_a) as chat,
    ):
        reference = OpenAIAsk(robot.llm, url_b)
        subjects = [
            Subject(
                ONBOARD,
                MeasuredAsk(HttpAsk(chat)),
                MeasuredMapper(make_mapper(robot, skill)),
                Path(tmp) / "httpx.jsonl",
            ),
            Subject(
                REFERENCE,
                MeasuredAsk(reference),
                MeasuredMapper(make_mapper(robot, skill)),
                Path(tmp) / "openai.jsonl",
            ),
        ]
        try:
            _rounds(robot, skill, scenarios, subjects, min_decisions=1)  # warm-up
            first = {s.name: [round(x * 1000, 3) for x in s.overhead[0]] for s in subjects}
            for subject in subjects:
                subject.reset()
            episodes = _rounds(robot, skill, scenarios, subjects, MIN_DECISIONS)
        finally:
            reference.close()
    return {
        "loadavg_after": os.getloadavg(),
        "episodes_per_client": episodes,
        "warmup_first_decision": first,
        "paired": subjects[0].sequences == subjects[1].sequences,
        "clients": {s.name: _loop_stats(skill, s) for s in subjects},
    }


def _rounds(
    robot: RobotConfig,
    skill: Skill,
    scenarios: list[Scenario],
    subjects: list[Subject],
    min_decisions: int,
) -> int:
    """Rounds of the four scenarios, the clients alternating, until enough decisions."""
    episodes = 0
    while min(len(s.overhead) for s in subjects) < min_decisions:
        for scenario in scenarios:
            for subject in subjects if episodes % 2 == 0 else subjects[::-1]:
                run_decisions(robot, skill, scenario, subject)
            episodes += 1
    return episodes


def _loop_stats(skill: Skill, subject: Subject) -> dict[str, Any]:
    calls = subject.mapper.calls
    new = new_clause_counts(skill, [reply for reply, _ in calls])
    total, mapping, rest, cached, embedded, raw = [], [], [], [], [], []
    for (before, after), index in zip(subject.overhead, subject.mapped, strict=True):
        took = 0.0 if index is None else calls[index][1]
        fresh = 0 if index is None else new[index]
        total.append(before + after)
        rest.append(before + after - took)
        if index is not None:
            mapping.append(took)
        (embedded if fresh else cached).append(before + after)
        raw.append([round(x * 1000, 4) for x in (before, after, took)] + [fresh])
    return {
        "decisions": len(total),
        "stimulus_to_request_sent": summary([b for b, _ in subject.overhead]),
        "reply_received_to_action_started": summary([a for _, a in subject.overhead]),
        "total": summary(total),
        "of_which_mapping": summary(mapping),
        "total_without_mapping": summary(rest),
        "total_all_clauses_cached": summary(cached),
        "total_new_clauses_embedded": summary(embedded),
        "client_cost": summary(subject.ask.client_cost),
        "clause_texts_embedded_in_run": sum(new),
        "raw_columns": ["before_ms", "after_ms", "mapping_ms", "new_clauses"],
        "raw": raw,
    }


# -- mapping, cold start, memory ----------------------------------------------------------


def mapping_latency(mapper: ActionMapper) -> dict[str, Any]:
    """Each reply mapped MAPPING_REPEATS times: the first time (embedder cache cold), repeats."""
    replies = [row["reply"] for path in (DEV_SET, HELDOUT_SET) for row in read_jsonl(path)]
    first, repeats = [], []
    for reply in replies:
        for i in range(MAPPING_REPEATS):
            began = time.perf_counter()
            mapper.map(reply)
            (repeats if i else first).append(time.perf_counter() - began)
    return {"replies": len(replies), "first": summary(first), "repeat": summary(repeats)}


def cold_start() -> dict[str, Any]:
    onboard = ROOT / ".venv" / "bin" / "onboard"
    commands = {
        "onboard check": [str(onboard), "check"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    for _ in range(COLD_RUNS):
        for name, command in commands.items():  # interleaved, so both see the same machine
            began = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, capture_output=True)
            walls[name].append(time.perf_counter() - began)
            codes[name].add(done.returncode)
    return {
        name: {
            "runs": [round(w, 4) for w in ws],
            "min_s": min(ws),
            "median_s": statistics.median(ws),
            "exit_codes": sorted(codes[name]),
        }
        for name, ws in walls.items()
    }


def local_llm_rss(robot: RobotConfig, skill: Skill) -> dict[str, Any]:
    """RSS of the llama.cpp server process: once ready, and after one (constrained) decision."""
    if importlib.util.find_spec("llama_cpp") is None:
        return {"skipped": "n/a (local-llm extra not installed)"}
    from onboard.llm.local_server import local_server

    with local_server() as url:
        pids = children(os.getpid())
        if len(pids) != 1:
            return {"skipped": f"n/a (expected one server child, found {pids})"}
        ready = rss_mb(pids[0])
        messages = first_stage(
            skill,
            f"{skill.goal} The robot is approaching the person.",
            "The person is talking on a phone. The person is not looking at the robot.",
        )
        with ChatClient(robot.llm, base_url=url) as chat:
            chat.complete(messages, plan_schema(list(skill.actions)), deadline=60.0)
        return {"pid": pids[0], "ready_mb": ready, "after_one_decision_mb": rss_mb(pids[0])}


# -- report -------------------------------------------------------------------------------


def table(results: dict[str, Any]) -> Table:
    clients = results["loop"]["clients"]
    ours, ref = clients[ONBOARD], clients[REFERENCE]
    out = Table(title="Decision loop: runtime cost per decision (ms: p50 / p99 / max) and at start")
    out.add_column("metric")
    for name in (ONBOARD, REFERENCE, "goal"):
        out.add_column(name, justify="right")
    out.add_column("onboard")

    def row(
        metric: str, key: str, goal: str = "", ok: bool | None = None, p99: bool = False
    ) -> None:
        keys = ("p50_ms", "p99_ms") if p99 else ("p50_ms", "p99_ms", "max_ms")
        status = verdict(ok) if goal else ""
        out.add_row(metric, fmt_ms(ours[key], keys), fmt_ms(ref[key], keys), goal, status)

    def pair(metric: str, a: str, b: str, goal: str = "", status: str = "") -> None:
        out.add_row(metric, a, b, goal, status)

    pair(
        "decisions measured (after a warm-up round)", str(ours["decisions"]), str(ref["decisions"])
    )
    row("stimulus -> request sent", "stimulus_to_request_sent")
    row("reply received -> action started", "reply_received_to_action_started")
    goal = f"p99 <= {GOAL_OVERHEAD_P99_MS:g} ms"
    row(
        "overhead per decision (sum)",
        "total",
        goal,
        ours["total"]["p99_ms"] <= GOAL_OVERHEAD_P99_MS,
    )
    row("  of which ActionMapper.map", "of_which_mapping")
    row("  sum without ActionMapper.map", "total_without_mapping")
    for key, what in (
        ("total_all_clauses_cached", "every clause cached"),
        ("total_new_clauses_embedded", "new clauses embedded"),
    ):
        row(f"  sum, decisions with {what} (n={ours[key]['n']})", key)
    row("client cost: round trip - server time (p50 / p99)", "client_cost", p99=True)
    mapping = results["mapping"]
    pair(
        f"mapping a reply, first time ({mapping['replies']} replies; p50 / p99)",
        fmt_ms(mapping["first"], ("p50_ms", "p99_ms")),
        "-",
    )
    pair(
        f"mapping a reply, {MAPPING_REPEATS - 1} repeats, cached (p50 / p99)",
        fmt_ms(mapping["repeat"], ("p50_ms", "p99_ms")),
        "-",
    )
    ob, py = results["cold_start"]["onboard check"], results["cold_start"]["python -c pass"]
    failed = "" if ob["exit_codes"] == [0] else f" (exit codes {ob['exit_codes']}!)"
    pair(
        f"cold start, {COLD_RUNS} runs, min / median (ref: python -c pass){failed}",
        f"{ob['min_s']:.3f} / {ob['median_s']:.3f} s",
        f"{py['min_s']:.3f} / {py['median_s']:.3f} s",
        f"median <= {GOAL_COLD_START_S:g} s",
        verdict(ob["median_s"] <= GOAL_COLD_START_S),
    )
    rss, llm = results["rss"], results["rss"]["local_llm"]
    pair(
        "RSS, bench process with runtime + models (ref: + openai)",
        f"{rss['runtime_mb']:.1f} MiB",
        f"{rss['with_openai_mb']:.1f} MiB",
    )
    pair(
        "RSS, local LLM server (ready / after 1 decision)",
        llm.get("skipped") or f"{llm['ready_mb']:.0f} / {llm['after_one_decision_mb']:.0f} MiB",
        "-",
    )
    first = results["loop"]["warmup_first_decision"]
    pair(
        "first decision of the process (before / after)",
        *[" / ".join(f"{x:.2f}" for x in first[n]) + " ms" for n in (ONBOARD, REFERENCE)],
    )
    return out


def main() -> int:
    began = time.perf_counter()
    robot, skill = robot_and_skill()
    if robot.models.threads != 1:
        print(f"note: robot.toml models.threads = {robot.models.threads}, not 1")
    mapper = make_mapper(robot, skill)
    rss: dict[str, Any] = {"runtime_mb": rss_mb()}
    import openai  # the reference client's own memory

    rss["with_openai_mb"] = rss_mb()
    results: dict[str, Any] = {"environment": environment(), "threads": robot.models.threads}
    results["environment"]["openai"] = openai.__version__
    results["mapping"] = mapping_latency(mapper)
    results["loadavg_before_loop"] = os.getloadavg()
    results["loop"] = decision_loop(robot, skill)
    results["loadavg_before_cold_start"] = os.getloadavg()
    results["cold_start"] = cold_start()
    rss["local_llm"] = local_llm_rss(robot, skill)
    results["rss"] = rss
    results["wall_seconds"] = round(time.perf_counter() - began, 1)
    console = Console(width=max(Console().width, 160))
    console.print(table(results))
    loop = results["loop"]
    load = results["loadavg_before_loop"][0], results["loadavg_before_cold_start"][0]
    console.print(
        f"{loop['episodes_per_client']} episodes per client on the virtual clock (stand-in seed "
        f"{robot.eval.seed}, noise {robot.eval.standin_noise}, its own process); both clients "
        f"made {'the same' if loop['paired'] else 'DIFFERENT'} decisions; "
        f"onnxruntime threads {robot.models.threads}; load average {load[0]:.2f} before the "
        f"loop, {load[1]:.2f} before the cold starts; {results['wall_seconds']} s wall"
    )
    console.print(f"wrote {write_results('decision_loop', results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
