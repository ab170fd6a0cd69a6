"""Stand-in chat server: policy table, noise, faults, HTTP surface (real HTTP, no mocks)."""

from __future__ import annotations

import ast
import json
import random
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from onboard.testing.standin_policy import ACTIONS, OFF_SET_ACTIONS, PARAPHRASES
from onboard.testing.standin_server import GARBAGE_CONTENT, StandInServer

ROOT = Path(__file__).resolve().parents[1]
SKILL: dict[str, Any] = tomllib.loads((ROOT / "skills" / "engage.toml").read_text())
INTRO: str = SKILL["prompt"]["intro"]
ACK: str = SKILL["prompt"]["ack"]
GOAL = "Initiate a conversation at a facility."
REFERENCES: list[str] = [r for a in SKILL["actions"].values() for r in a["references"]]

OLD_ACTIVITY = "The person is talking on the phone."
ACTION_TEXT: dict[str, str | None] = {
    "APPROACHING": "The robot is approaching the person.",
    "WAITING_ACTIVITY": f'The robot is waiting for the human to finish "{OLD_ACTIVITY}".',
    "WAITING_CUE": "The robot is waiting for an eye contact from the person.",
    "EYE_CONTACT_DONE": "The robot made eye contact.",
    "PAUSED": "The robot paused its approach.",
    "UNKNOWN": None,
}
ACTIVITY_TEXT = {
    "busy": "The person is talking on the phone.",
    "moving": "The person is walking past the entrance.",
    "finished": "The person has finished eating.",  # "finished" beats "eating"
    "idle": "The person is standing near the counter.",
}
LOOKING = "The person is looking at the robot."
NOT_LOOKING = "The person is not looking at the robot."
NOT_VISIBLE = "The person is not visible."


def situation(state: str, activity: str = "idle", gaze: str = "not") -> str:
    """``"<U> <X>"``; gaze is "yes", "not" or "lost"."""
    action = ACTION_TEXT[state]
    u = GOAL if action is None else f"{GOAL} {action}"
    if gaze == "lost":
        return f"{u} {NOT_VISIBLE}"
    return f"{u} {ACTIVITY_TEXT[activity]} {LOOKING if gaze == 'yes' else NOT_LOOKING}"


def first_stage(text: str, **extra: Any) -> dict[str, Any]:
    messages = [
        {"role": "user", "content": INTRO},
        {"role": "assistant", "content": ACK},
        {"role": "user", "content": text},
    ]
    body = {"model": "gpt-4o", "messages": messages, "temperature": 0.0, "max_tokens": 128}
    return {**body, **extra}


def second_stage(question: str, activity: str, seconds: float = 3.0) -> dict[str, Any]:
    template = SKILL["prompt"]["second_stage"][question]
    text = template.replace("$X_a", activity).replace("$T", str(seconds))
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


def post(client: httpx.Client, server: StandInServer, body: Any) -> httpx.Response:
    return client.post(f"{server.base_url}/chat/completions", json=body)


def content_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    text = response.json()["choices"][0]["message"]["content"]
    assert isinstance(text, str)
    return text


def extract(content: str) -> dict[str, Any]:
    """Lenient parse of a reply: plain JSON, fenced, prose-wrapped or Python dict."""
    snippet = content[content.find("{") : content.rfind("}") + 1]
    try:
        parsed = json.loads(snippet)
    except json.JSONDecodeError:
        parsed = ast.literal_eval(snippet)
    assert isinstance(parsed, dict)
    return parsed


def decode_intent(sentence: str) -> tuple[str, ...]:
    """Recover the action sequence of a free-text action sentence from the phrase bank."""
    low = sentence.lower()
    hits = sorted(
        (low.find(p.lower()), action)
        for action, phrases in PARAPHRASES.items()
        for p in phrases
        if p.lower() in low
    )
    return tuple(action for _, action in hits)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as c:
        yield c


@pytest.fixture(scope="module")
def exact() -> Iterator[StandInServer]:
    """No intent noise, no format noise."""
    with StandInServer(seed=1, noise=0.0, format_noise=0.0) as server:
        yield server


# ------------------------------------------------------------------ policy table

ALL_STATES = tuple(ACTION_TEXT)
OTHERS_THAN_APPROACHING = tuple(s for s in ALL_STATES if s != "APPROACHING")
TABLE: list[tuple[str, str, str, tuple[str, ...]]] = [
    *[(s, "idle", "lost", ("approach",)) for s in ALL_STATES],
    ("APPROACHING", "busy", "yes", ("pause", "eye contact", "speak")),
    *[(s, "idle", "yes", ("eye contact", "speak")) for s in ("WAITING_CUE", "PAUSED")],
    ("WAITING_ACTIVITY", "finished", "yes", ("eye contact", "speak")),
    ("EYE_CONTACT_DONE", "moving", "yes", ("speak",)),
    ("UNKNOWN", "idle", "yes", ("speak",)),
    ("APPROACHING", "busy", "not", ("pause", "wait")),
    *[(s, "busy", "not", ("wait",)) for s in OTHERS_THAN_APPROACHING],
    ("APPROACHING", "moving", "not", ("pause", "wait for cue")),
    *[(s, "moving", "not", ("speak",)) for s in ("WAITING_CUE", "EYE_CONTACT_DONE")],
    *[(s, "moving", "not", ("wait for cue",)) for s in ("WAITING_ACTIVITY", "PAUSED", "UNKNOWN")],
    *[("APPROACHING", a, "not", ("pause", "wait for cue")) for a in ("finished", "idle")],
    *[
        (s, a, "not", ("speak",))
        for s in ("WAITING_CUE", "EYE_CONTACT_DONE")
        for a in ("finished", "idle")
    ],
    *[
        (s, a, "not", ("wait for cue",))
        for s in ("WAITING_ACTIVITY", "PAUSED", "UNKNOWN")
        for a in ("finished", "idle")
    ],
]


@pytest.mark.parametrize(("state", "activity", "gaze", "expected"), TABLE)
def test_policy_table_free_text(
    client: httpx.Client,
    exact: StandInServer,
    state: str,
    activity: str,
    gaze: str,
    expected: tuple[str, ...],
) -> None:
    for _ in range(3):  # several paraphrases, same intent
        reply = json.loads(
            content_of(post(client, exact, first_stage(situation(state, activity, gaze))))
        )
        assert set(reply) == {"action", "reason"}
        assert decode_intent(reply["action"]) == expected, reply["action"]
        assert reply["reason"]


def test_phrase_bank_is_unambiguous_and_rich() -> None:
    assert set(PARAPHRASES) == set(ACTIONS)
    phrases = [(a, p.lower()) for a, ps in PARAPHRASES.items() for p in ps]
    assert all(len(ps) >= 6 for ps in PARAPHRASES.values())
    for _, p in phrases:
        assert not [b for b, q in phrases if q != p and p in q], p
    speak_quotes = [p for p in PARAPHRASES["speak"] if '"' in p]
    assert len(speak_quotes) >= 2


def test_phrase_bank_never_reproduces_references() -> None:
    refs = {r.lower() for r in REFERENCES}
    for phrases in PARAPHRASES.values():
        for p in phrases:
            assert f"the robot should {p}.".lower() not in refs
            assert f"{p}.".lower() not in refs


# ------------------------------------------------------------------ constrained mode

ENUM_SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "reason": {"type": "string"},
    },
    "required": ["action", "reason"],
}


@pytest.mark.parametrize(
    "response_format",
    [
        {"type": "json_object", "schema": ENUM_SCHEMA},
        {"type": "json_schema", "json_schema": {"name": "engage", "schema": ENUM_SCHEMA}},
    ],
)
def test_constrained_mode_answers_enum_member(
    client: httpx.Client, response_format: dict[str, Any]
) -> None:
    with StandInServer(seed=3, noise=0.0, format_noise=1.0) as server:
        body = first_stage(situation("APPROACHING", "busy", "not"), response_format=response_format)
        reply = json.loads(
            content_of(post(client, server, body))
        )  # plain JSON despite format noise
    assert reply["action"] == "pause"
    assert reply["action"] in ACTIONS
    assert isinstance(reply["reason"], str)


def test_constrained_mode_picks_first_intent_action_in_enum(client: httpx.Client) -> None:
    schema = {"properties": {"action": {"enum": ["speak", "wait"]}}}
    body = first_stage(
        situation("APPROACHING", "busy", "not"),
        response_format={"type": "json_object", "schema": schema},
    )
    with StandInServer(noise=0.0) as server:
        assert json.loads(content_of(post(client, server, body)))["action"] == "wait"


# ------------------------------------------------------------------ noise and determinism


def random_requests(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    bodies = []
    for _ in range(n):
        gaze = rng.choice(["yes", "not", "not", "lost"])
        text = situation(rng.choice(ALL_STATES), rng.choice(list(ACTIVITY_TEXT)), gaze)
        bodies.append(first_stage(text))
    return bodies


def contents(
    client: httpx.Client, server: StandInServer, bodies: list[dict[str, Any]]
) -> list[str]:
    return [content_of(post(client, server, b)) for b in bodies]


def test_same_seed_same_answers(client: httpx.Client) -> None:
    bodies = random_requests(40, seed=11)
    kwargs: dict[str, Any] = {"noise": 0.5, "format_noise": 0.5, "off_set_rate": 0.1}
    with StandInServer(seed=5, **kwargs) as a, StandInServer(seed=5, **kwargs) as b:
        first, second = contents(client, a, bodies), contents(client, b, bodies)
    with StandInServer(seed=6, **kwargs) as c:
        other = contents(client, c, bodies)
    assert first == second
    assert first != other


def test_full_noise_gives_alternative_intent(client: httpx.Client) -> None:
    with StandInServer(noise=1.0, format_noise=0.0) as server:
        looking = json.loads(
            content_of(post(client, server, first_stage(situation("APPROACHING", "idle", "yes"))))
        )
        busy = json.loads(
            content_of(post(client, server, first_stage(situation("PAUSED", "busy", "not"))))
        )
    assert decode_intent(looking["action"]) == ("speak",)
    assert decode_intent(busy["action"]) == ("wait for cue",)


def test_format_noise_variants_stay_parseable(client: httpx.Client) -> None:
    with StandInServer(seed=2, noise=0.0, format_noise=1.0) as server:
        replies = contents(client, server, [first_stage(situation("UNKNOWN", "idle", "yes"))] * 30)
    assert all(not r.startswith("{") or r.startswith("{'") for r in replies)
    assert any(r.startswith("```json") for r in replies)
    assert any(r.startswith("{'") for r in replies)
    assert any('{"action"' in r and not r.startswith("```") for r in replies)
    assert all(decode_intent(extract(r)["action"]) == ("speak",) for r in replies)


def test_off_set_rate_emits_out_of_set_actions(client: httpx.Client) -> None:
    with StandInServer(off_set_rate=1.0, format_noise=0.0) as server:
        replies = contents(client, server, random_requests(10, seed=4))
    assert all(json.loads(r)["action"] in OFF_SET_ACTIONS for r in replies)


def test_no_reply_reproduces_a_reference(client: httpx.Client) -> None:
    bodies = random_requests(300, seed=99)
    with StandInServer(seed=8, noise=0.3, format_noise=0.3, off_set_rate=0.05) as server:
        replies = contents(client, server, bodies)
    for reply in replies:
        assert reply not in REFERENCES
        assert extract(reply)["action"] not in REFERENCES
        assert not [ref for ref in REFERENCES if ref in reply], reply


# ------------------------------------------------------------------ second stage


@pytest.mark.parametrize(
    ("activity", "expected"),
    [
        ("The person is talking on the phone", 20.0),
        ("The person is eating a sandwich", 20.0),
        ("The person's friend has finished the call", 2.0),
        ("The person is walking by", 2.0),
        ("The person is standing still", 2.0),
    ],
)
def test_second_stage_wait_time(
    client: httpx.Client, exact: StandInServer, activity: str, expected: float
) -> None:
    reply = json.loads(content_of(post(client, exact, second_stage("wait_time", activity))))
    assert reply["wait_time"] == expected
    assert reply["reason"]


@pytest.mark.parametrize(
    ("activity", "expected"),
    [
        ("The person is walking toward the exit", "yes"),
        ("The person is leaving the building", "yes"),
        ("The person is reading a newspaper", "no"),
        ("The person is standing still", "no"),
    ],
)
def test_second_stage_lose(
    client: httpx.Client, exact: StandInServer, activity: str, expected: str
) -> None:
    reply = json.loads(content_of(post(client, exact, second_stage("lose_person", activity, 4.5))))
    assert reply["answer"] == expected
    assert reply["reason"]


def test_intro_alone_gets_acknowledgement(client: httpx.Client, exact: StandInServer) -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": INTRO}]}
    reply = content_of(post(client, exact, body))
    assert reply and reply != ACK and not reply.startswith("{")


# ------------------------------------------------------------------ HTTP surface


def test_response_shape_usage_and_timing(client: httpx.Client, exact: StandInServer) -> None:
    before = len(exact.requests)
    body = first_stage(situation("APPROACHING", "idle", "yes"))
    response = post(client, exact, body)
    data = response.json()
    assert data["object"] == "chat.completion" and data["id"] and isinstance(data["created"], int)
    assert data["model"] == "gpt-4o"
    choice = data["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["role"] == "assistant"
    usage = data["usage"]
    assert usage["completion_tokens"] == len(choice["message"]["content"].split())
    assert usage["prompt_tokens"] == sum(len(m["content"].split()) for m in body["messages"])
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert response.headers["server-timing"].startswith("policy;dur=")
    assert exact.requests[before:] == [body]


def test_latency_is_real_and_reported(client: httpx.Client) -> None:
    with StandInServer(latency=0.2) as server:
        start = time.perf_counter()
        response = post(client, server, first_stage(situation("UNKNOWN")))
        elapsed = time.perf_counter() - start
    assert elapsed >= 0.2
    assert float(response.headers["server-timing"].split("dur=")[1]) >= 200.0


def test_models_endpoint(client: httpx.Client, exact: StandInServer) -> None:
    data = client.get(f"{exact.base_url}/models").json()
    assert [m["id"] for m in data["data"]] == ["standin"]
    assert exact.base_url.startswith("http://127.0.0.1:") and exact.base_url.endswith("/v1")


def test_unknown_paths_404(client: httpx.Client, exact: StandInServer) -> None:
    for response in (
        client.get(f"{exact.base_url}/nothing"),
        client.post(f"{exact.base_url}/completions", json={"prompt": "hi"}),
    ):
        assert response.status_code == 404
        assert "error" in response.json()


def test_malformed_bodies_400(client: httpx.Client, exact: StandInServer) -> None:
    url = f"{exact.base_url}/chat/completions"
    bad = [b"{not json", b"[1, 2]", b'{"model": "x"}', b"\xff\xfe"]
    for raw in bad:
        response = client.post(url, content=raw, headers={"Content-Type": "application/json"})
        assert response.status_code == 400
        assert response.json()["error"]["code"] == 400


def test_faults_500_then_ok(client: httpx.Client) -> None:
    body = first_stage(situation("UNKNOWN"))
    with StandInServer(faults=["500", "ok"]) as server:
        statuses = [post(client, server, body).status_code for _ in range(3)]
        assert len(server.requests) == 3
    assert statuses == [500, 200, 200]


def test_faults_429_garbage_timeout(client: httpx.Client) -> None:
    body = first_stage(situation("UNKNOWN"))
    with StandInServer(faults=["429", "garbage", "timeout", "timeout"], fault_sleep=2.0) as server:
        limited = post(client, server, body)
        garbage = content_of(post(client, server, body))
        start = time.perf_counter()
        slow = post(client, server, body)
        elapsed = time.perf_counter() - start
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"{server.base_url}/chat/completions", json=body, timeout=0.1)
        start = time.perf_counter()
        quick = post(client, server, body)  # not blocked behind the sleeping request
        quick_elapsed = time.perf_counter() - start
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert garbage == GARBAGE_CONTENT
    assert elapsed >= 2.0 and slow.status_code == 200
    # behind the sleeping request it would take the rest of its 2 s
    assert quick.status_code == 200 and quick_elapsed < 1.5


def test_unknown_fault_rejected() -> None:
    with pytest.raises(ValueError):
        StandInServer(faults=["boom"])


def test_cli_main_serves_until_sigterm() -> None:
    cmd = [sys.executable, "-m", "onboard.testing.standin_server", "--seed", "3", "--noise", "0"]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            base_url = proc.stdout.readline().strip()
            assert base_url.startswith("http://127.0.0.1:")
            assert httpx.get(f"{base_url}/models", timeout=5.0).status_code == 200
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
