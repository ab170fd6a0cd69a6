"""End to end on the real embedded model: SmolLM2-135M served by llama.cpp on loopback.

Slow (the server loads in seconds, each decision takes a second or two on 2 cores) but run
by CI, which sets ONBOARD_REQUIRE_LOCAL_LLM=1 so a missing extra fails instead of skipping.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onboard.base.errors import LLMError
from onboard.config import LLMConfig, RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.replay import replay
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm import prompts
from onboard.llm.client import ChatClient
from onboard.llm.prompts import plan_schema
from onboard.loop.engine import Outcome
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.skill import Skill

ROOT = Path(__file__).resolve().parent.parent
# minutes on a loaded 2-core machine: the server starts, then each call can take seconds
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

if importlib.util.find_spec("llama_cpp") is None:
    if os.environ.get("ONBOARD_REQUIRE_LOCAL_LLM") == "1":
        raise RuntimeError("the local-llm extra is required here: pip install -e '.[local-llm]'")
    pytest.skip("the local-llm extra is not installed", allow_module_level=True)


@pytest.fixture
def patient(robot_tmp: RobotConfig) -> RobotConfig:
    """Generous deadlines: CI machines are shared; this test checks function, not speed."""
    llm = robot_tmp.llm.model_copy(update={"deadline": 90.0, "read_timeout": 60.0})
    return robot_tmp.model_copy(update={"llm": llm})


@pytest.fixture(scope="module")
def local_url() -> Iterator[str]:
    from onboard.llm.local_server import local_server

    with local_server() as url:
        yield url


def _episode(
    robot: RobotConfig, skill: Skill, mapper: ActionMapper, url: str, path: Path, *,
    scenario: str, constrained: bool,
) -> tuple[Outcome, list[dict[str, Any]]]:  # fmt: skip
    # a fixed virtual latency: on a loaded machine a real call can outlast the scenario
    options = EpisodeOptions(clock="virtual", constrained=constrained, latency=1.0)
    scene = load_scenario(ROOT / "skills" / "scenarios" / f"{scenario}.toml")
    with ChatClient(robot.llm, base_url=url) as client, Recorder(path) as recorder:
        outcome = run_episode(robot, skill, scene, HttpAsk(client), mapper, recorder, options)
    records = list(read_recording(path))
    assert any(r["kind"] == "reply" for r in records), "the local model answered nothing"
    assert outcome.actions[0][1] == "approach"
    assert records[-1]["kind"] == "end"
    return outcome, records


def test_constrained_episode_records_and_replays(
    patient: RobotConfig, skill: Skill, mapper: ActionMapper, local_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "episode.jsonl"
    _, records = _episode(
        patient, skill, mapper, local_url, path, scenario="person-robot", constrained=True
    )
    assert not [r for r in records if r["kind"] == "error"], "LLM errors in a constrained run"
    # constrained decoding: every plan names an action exactly, so it maps with score 1.0
    for mapping in (r for r in records if r["kind"] == "mapping"):
        assert mapping["actions"], mapping
        assert mapping["actions"][0] in skill.actions
        assert mapping["clauses"][0]["score"] == 1.0
    recorded, replayed = replay(path)
    assert replayed == recorded


def test_the_embedded_server_reads_the_llama_cpp_form_and_refuses_the_openai_one(
    local_url: str, skill: Skill
) -> None:
    """What tests/test_structured_output.py's llama-cpp-python stand-in copies, on the real
    server: "auto" picks the llama-cpp form for it, and the OpenAI form is refused at once."""
    schema = plan_schema(list(skill.actions))
    messages = [{"role": "user", "content": "The person looks at the robot. Answer in JSON."}]
    patient = {"deadline": 90.0, "read_timeout": 60.0, "temperature": 0.0, "max_tokens": 400}
    with ChatClient(LLMConfig.model_validate(patient), base_url=local_url) as client:
        assert client.structured_output == "llama-cpp"
        assert json.loads(client.complete(messages, schema).text)["action"] in skill.actions
    openai = LLMConfig.model_validate({**patient, "structured_output": "openai"})
    with (
        ChatClient(openai, base_url=local_url) as client,
        pytest.raises(LLMError, match="HTTP 500; the server refused the openai") as caught,
    ):
        client.complete(messages, schema)
    assert "after" not in str(caught.value)  # refused once, not retried to the deadline


def test_free_text_reply_is_parsed_or_falls_back(
    patient: RobotConfig, skill: Skill, mapper: ActionMapper, local_url: str, tmp_path: Path
) -> None:
    """Free decoding from a 135M model is weak; the runtime must stay safe either way."""
    _, records = _episode(
        patient, skill, mapper, local_url, tmp_path / "free.jsonl",
        scenario="person-environment", constrained=False,
    )  # fmt: skip
    for plan in (r for r in records if r["kind"] == "mapping"):
        # each plan either mapped onto known actions or became a candidate with a fallback
        assert set(plan["actions"]) <= set(skill.actions)
        if not plan["actions"]:
            assert any(r["kind"] == "candidate" and r["reply"] == plan["reply"] for r in records)


def test_the_embedded_server_keeps_to_the_skills_reason_and_wait_times(
    local_url: str, skill: Skill
) -> None:
    """[prompt] reason and wait_times reach the grammar: a short reason stays under its
    maxLength, no reason means none is written, and wait_time is one of the listed waits, all
    checked by the client (onboard.llm.structured) as well as read back here."""
    patient = {"deadline": 90.0, "read_timeout": 60.0, "temperature": 0.7, "max_tokens": 400}
    waits = skill.prompt.second_stage.wait_times
    assert waits is not None
    short = {"type": "string", "maxLength": 12}
    with ChatClient(LLMConfig.model_validate(patient), base_url=local_url) as client:
        for activity in ("reading a newspaper", "walking toward the exit"):
            asked = prompts.wait_time(skill, activity)
            reply = json.loads(client.complete(asked, prompts.wait_time_schema(None, waits)).text)
            assert set(reply) == {"wait_time"} and reply["wait_time"] in waits
            asked = prompts.lose_person(skill, activity, 5.0)
            reply = json.loads(client.complete(asked, prompts.answer_schema(short)).text)
            assert reply["answer"] in ("yes", "no") and len(reply["reason"]) <= 12


def test_the_embedded_server_answers_saycan_steps_named_after_objects(local_url: str) -> None:
    """The SayCan baseline's steps are an enum; llama.cpp's grammar conversion killed the
    server on an enum string holding a double quote (``pick("apple")``), so the labels are
    bare (``pick(apple)``): the real server answers one of them."""
    from onboard.replan.baselines import candidate_steps
    from onboard.replan.prompts import saycan_schema
    from onboard.replan.scene_state import ObjectState, SceneState

    scene = SceneState(
        tuple(
            ObjectState(name, name.replace(" ", "_"), (0.4, y, 0.02), (0.04, 0.04, 0.04), "table")
            for name, y in (("apple", -0.1), ("red block", 0.1))
        )
    )
    steps = [s.text for s in candidate_steps(scene)]
    messages = [{"role": "user", "content": "I'm hungry. Choose the next step."}]
    patient = {"deadline": 90.0, "read_timeout": 60.0, "temperature": 0.0, "max_tokens": 60}
    with ChatClient(LLMConfig.model_validate(patient), base_url=local_url) as client:
        assert json.loads(client.complete(messages, saycan_schema(steps)).text)["step"] in steps


def test_the_embedded_server_reads_a_team_request_longer_than_2048_tokens(
    local_url: str,
) -> None:
    """A Sort Cubes request late in a ReAd episode: three agents' actions, fifteen steps of
    history and the proposals refused this step. At the 2,048 tokens llama.cpp was first
    served with, such a request was refused (HTTP 400) and every later one in the episode too;
    the reply is JSON naming one of each agent's own actions."""
    from onboard.collab.envs import make_env
    from onboard.collab.prompts import (
        HistoryEntry,
        Situation,
        joint_request,
        read_reply,
        reply_schema,
    )
    from onboard.collab.taskfile import find_team_task
    from onboard.loop.kind import Attempt

    task = find_team_task("sort_cubes")
    env = make_env(task, "level5")
    env.reset(3)
    agents = list(env.agents)
    wasted = ", ".join(f"{a}: {env.agent_actions(a)[-1]}" for a in agents)
    history = [HistoryEntry(step, wasted, "no reward") for step in range(15)]
    refused = [Attempt(f"{a}: {env.agent_actions(a)[k]}", f"scored {k / 10:.2f}, under 0.10")
               for k in range(1, 4) for a in agents]  # fmt: skip
    situation = Situation(task, env.describe(), env.vocabulary)
    feedback = ["Every proposal above was refused."]
    messages = joint_request(
        situation, agents, history=history, refused=refused, feedback=feedback, constrained=True
    )
    schema = reply_schema({a: env.agent_actions(a) for a in agents})
    patient = {"deadline": 120.0, "read_timeout": 120.0, "max_tokens": 96}
    with ChatClient(LLMConfig.model_validate(patient), base_url=local_url) as client:
        result = client.complete(messages, schema)
    assert result.prompt_tokens > 2048
    chosen = read_reply(result.text, agents, env.vocabulary)
    assert all(chosen[a] in env.agent_actions(a) for a in agents)


def test_a_server_that_dies_is_started_again_and_the_client_says_why() -> None:
    """A robot runs headless: when llama.cpp dies, the runtime starts it again on the same
    port, and a request that could not reach it names the death."""
    import signal

    from onboard.llm.local_server import exit_reason, local_server, server_pid

    messages = [{"role": "user", "content": "Say hi."}]
    config = LLMConfig.model_validate({"deadline": 90.0, "read_timeout": 60.0, "max_tokens": 4})
    with local_server() as url, ChatClient(config, base_url=url) as client:
        first = server_pid(url)
        assert first is not None and exit_reason(url) is None
        os.kill(first, signal.SIGKILL)
        while server_pid(url) == first:  # the event: the watcher has started another one
            time.sleep(0.05)
        while not _answers(url):  # and that one serves
            time.sleep(0.2)
        reply = client.complete(messages, None)
        assert reply.text is not None
        assert server_pid(url) not in (None, first)
        reason = exit_reason(url)
        assert reason is not None and "exited with code -9" in reason


def test_the_server_does_not_outlive_a_runtime_that_is_killed(tmp_path: Path) -> None:
    """A controller's runtime stopped by SIGKILL (or a SIGTERM with no handler) runs no
    ``finally``: the model server it started must go with it, not hold its memory and cores."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from onboard.llm.local_server import local_server, server_pid\n"
        "with local_server() as url:\n"
        "    print(server_pid(url), flush=True)\n"
        "    sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-P", "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    ) as runtime:  # fmt: skip
        assert runtime.stdout is not None
        server = int(runtime.stdout.readline())  # the event: the server answers
        assert _alive(server)
        runtime.send_signal(signal.SIGKILL)
        runtime.wait()
    while _alive(server):  # the event: the server is gone (pytest's timeout bounds it)
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    """Running, not gone and not a zombie waiting for init to reap it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return False
    return fields[0] != "Z"


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/models", timeout=5.0).status_code == 200
    except httpx.TransportError:
        return False
