"""Prometheus metrics fed by the recorder (issue 33, item 4): scraped over real HTTP after
real episodes, each counter checked against what the recordings hold.

A mission of a person and a scene step run by ``onboard up`` against the stand-in LLM, and
an episode against the hostile loopback endpoint, whose served modes say what each LLM
failure was; in process (``onboard up`` without ``--once`` cannot idle today: see the
issue 33a note), each scraped over HTTP on loopback.
"""

from __future__ import annotations

import math
import re
import socket
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_cli import robot_copy, up_robot_copy

from onboard.base.errors import UsageError
from onboard.cli.main import main
from onboard.loop.metrics import RecordMetrics, serve
from onboard.loop.recorder import Recorder, read_recording, subscribe_every
from onboard.testing.fault_server import FaultServer

MISSION = """\
name = "watched"

[[steps]]
name = "greet"
skill = "engage"
scenario = "person-object"
timeout = 120

[[steps]]
name = "stack"
skill = "tidy"
goal = "put the red block on the blue block"
timeout = 300
"""


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample at ``url``, by (name, labels), created timestamps left out."""
    text = httpx.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.name.endswith("_created")
    }


def samples(scraped: dict[Any, float], name: str, label: str = "") -> dict[str, float]:
    """``name``'s samples by the value of ``label`` (one unlabelled sample: key "")."""
    return {dict(labels).get(label, ""): v for (n, labels), v in scraped.items() if n == name}


def expected(recordings: list[Path]) -> dict[str, Any]:
    """What each metric must say, read from the recordings directly."""
    kinds: Counter[str] = Counter()
    latency: dict[str, list[float]] = {}
    overhead: list[float] = []
    refused_checks: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    episodes: Counter[str] = Counter()
    reasks = refinements = 0
    for path in recordings:
        records = list(read_recording(path))
        skill = records[0]["skill"]["name"]
        vetoed: set[str] = set()
        last: dict[str, Any] | None = None
        for record in records:
            kinds[record["kind"]] += 1
            if record["kind"] == "reply":
                latency.setdefault(record["purpose"], []).append(record["latency"])
            plan = record["kind"] == "transition" and record.get("reason") == "plan"
            if plan and last is not None and last["kind"] == "reply":
                overhead.append(record["wall"] - last["wall"])
            if record["kind"] in ("request", "reply", "transition"):
                last = record if record["kind"] != "transition" else None
            if record["kind"] == "check" and not record["ok"]:
                refused_checks[record["check"]] += 1
                if record["check"] == "critic":
                    vetoed.add(record["feedback"])
            if record["kind"] == "reask":
                reasks += 1
                refinements += record["feedback"] in vetoed  # it carries the critic's words
            if record["kind"] == "mapping":
                clauses = record.get("mapping", record).get("clauses", [])
                refusals.update(c["refused"] for c in clauses if c["refused"])
            if record["kind"] == "end":
                episodes[f"{skill}/{str(record['finished']).lower()}"] += 1
    return {"kinds": kinds, "latency": latency, "overhead": overhead, "reasks": reasks,
            "refinements": refinements, "checks": refused_checks, "refusals": refusals,
            "episodes": episodes}  # fmt: skip


def test_onboard_up_s_episodes_give_metrics_that_match_their_recordings(tmp_path: Path) -> None:
    """What ``onboard up --metrics`` wires: every recording of the process feeds one
    registry, served on loopback; the mission's two steps, then a scrape."""
    robot = up_robot_copy(tmp_path)
    mission = tmp_path / "watched.toml"
    mission.write_text(MISSION, encoding="utf-8")
    metrics = RecordMetrics()
    server = serve(metrics.registry, 0)
    try:
        with subscribe_every(metrics.episode):
            code = main(["--robot", str(robot), "up", "--once", "--mission", str(mission),
                         "--llm", "standin", "--clock", "virtual"])  # fmt: skip
        scraped = scrape(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0
    recordings = sorted((tmp_path / "recordings").glob("*.jsonl"))
    assert len(recordings) == 2
    want = expected(recordings)
    assert samples(scraped, "onboard_records_total", "kind") == dict(want["kinds"])
    assert want["latency"] and want["overhead"] and want["refinements"] > 0
    counts = samples(scraped, "onboard_llm_latency_seconds_count", "purpose")
    sums = samples(scraped, "onboard_llm_latency_seconds_sum", "purpose")
    assert counts == {purpose: len(v) for purpose, v in want["latency"].items()}
    for purpose, latencies in want["latency"].items():
        assert math.isclose(sums[purpose], sum(latencies), abs_tol=1e-9)
    assert samples(scraped, "onboard_decision_overhead_seconds_count") == {
        "": len(want["overhead"])
    }
    overhead = samples(scraped, "onboard_decision_overhead_seconds_sum")[""]
    assert math.isclose(overhead, sum(want["overhead"]), abs_tol=1e-6)
    assert sum(samples(scraped, "onboard_reasks_total", "check").values()) == want["reasks"]
    assert samples(scraped, "onboard_refinements_total") == {"": want["refinements"]}
    assert samples(scraped, "onboard_critic_vetoes_total") == {"": want["checks"]["critic"]}
    assert samples(scraped, "onboard_check_refusals_total", "check") == dict(want["checks"])
    assert samples(scraped, "onboard_mapping_refusals_total", "reason") == dict(want["refusals"])
    episodes = {f"{dict(k)['skill']}/{dict(k)['finished']}": v for (n, k), v in scraped.items()
                if n == "onboard_episodes_total"}  # fmt: skip
    assert episodes == dict(want["episodes"]) == {"engage/true": 1, "tidy/true": 1}


def test_up_metrics_serves_on_loopback_while_it_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--robot", str(robot_copy(tmp_path)), "up", "--check", "--metrics", "0"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    found = re.fullmatch(r"onboard: metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
    assert found, line
    with pytest.raises(httpx.ConnectError):  # shut down with the service
        httpx.get(f"http://127.0.0.1:{found[1]}/metrics", timeout=5)


def test_llm_failures_are_counted_by_kind(tmp_path: Path) -> None:
    """A 200 that is not JSON and a reply over the byte cap are ``reply`` failures, a 401 an
    ``http`` one; then every reply maps to no action (the mapping refuses it)."""
    robot = robot_copy(tmp_path, replace=[('decoding = "constrained"', 'decoding = "free"')])
    path = tmp_path / "episode.jsonl"
    metrics = RecordMetrics()
    server = serve(metrics.registry, 0)
    try:
        with (
            FaultServer(["malformed", "echo_key_401", "huge"],
                        content='{"action": "Juggle three flaming torches."}') as fault,
            subscribe_every(metrics.episode),
        ):  # fmt: skip
            main(["--robot", str(robot), "run", "engage", "--llm", fault.base_url, "--clock",
                  "virtual", "--record", str(path)])  # fmt: skip
        scraped = scrape(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    records = list(read_recording(path))
    errors = [r for r in records if r["kind"] == "error" and r["source"] == "llm"]
    assert len(errors) == 3, "the three faults, and no more"
    assert samples(scraped, "onboard_llm_errors_total", "kind") == {"reply": 2, "http": 1}
    want = expected([path])
    assert want["refusals"], "the mapping refused the out-of-set replies"
    assert samples(scraped, "onboard_mapping_refusals_total", "reason") == dict(want["refusals"])
    assert sum(samples(scraped, "onboard_reasks_total", "check").values()) == want["reasks"]


def test_recordings_written_at_once_are_each_counted_as_their_own(tmp_path: Path) -> None:
    """A decision's overhead pairs a reply with its own episode's transition, whatever the
    other recordings of the process wrote between."""
    metrics = RecordMetrics()
    with subscribe_every(metrics.episode):
        first, second = Recorder(tmp_path / "a.jsonl"), Recorder(tmp_path / "b.jsonl")
    first.write("reply", purpose="plan", latency=0.5)
    second.write("reply", purpose="plan", latency=0.25)
    second.write("request", purpose="plan")  # the second episode asks again: no decision
    first.write("transition", source="idle", dest="pick", reason="plan")
    second.write("transition", source="idle", dest="pick", reason="plan")
    for recorder in (first, second):
        recorder.close()
    overhead = {s.name: s.value for s in metrics.overhead.collect()[0].samples}
    assert overhead["onboard_decision_overhead_seconds_count"] == 1
    records = list(read_recording(tmp_path / "a.jsonl"))
    expected_sum = records[1]["wall"] - records[0]["wall"]
    assert math.isclose(overhead["onboard_decision_overhead_seconds_sum"], expected_sum,
                        abs_tol=1e-9)  # fmt: skip
    unsubscribed = Recorder(tmp_path / "c.jsonl")  # made after the block: not counted
    unsubscribed.write("reply", purpose="plan", latency=1.0)
    unsubscribed.close()
    latency = {s.name: s.value for s in metrics.llm_latency.collect()[0].samples}
    assert latency["onboard_llm_latency_seconds_count"] == 2


def test_robot_tomls_metrics_port_in_use_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A service under systemd takes its metrics port from robot.toml's ``[service]``."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        robot = up_robot_copy(tmp_path, f"metrics = {port}\n")
        assert main(["--robot", str(robot), "up", "--check"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"onboard: error: [service] metrics: cannot listen on 127.0.0.1:{port}: the port is in "
        "use (another server listens there)"
    )


def test_a_metrics_port_in_use_is_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=rf"^--metrics: cannot listen on 127\.0\.0\.1:"
                           rf"{port}: the port is in use"):  # fmt: skip
            serve(RecordMetrics().registry, port)
