"""Constrained decoding on the servers users run.

Each form of ``response_format`` (``[llm] structured_output``) is sent to loopback stand-ins
that read only their real server's shape (runtime/testing/schema_servers.py): the right form
gives a constrained reply the robot uses; a wrong one gives a reply the client's own check
refuses, so the exchange fails and the fallback runs, never an action the schema excludes.
The embedded llama-cpp-python server itself is in tests/test_local_llm.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli import ERROR_LINE, ROOT, line_of, onboard, one_line_error, robot_copy

from onboard.base.errors import LLMError, LLMReplyError
from onboard.config import LLMConfig, RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import Scenario, load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm import prompts
from onboard.llm.client import ChatClient
from onboard.llm.prompts import answer_schema, plan_schema, wait_time_schema
from onboard.llm.structured import reply_problem, resolve
from onboard.loop.engine import Outcome
from onboard.loop.exitcodes import ExitCode
from onboard.loop.recorder import MemoryRecorder, read_recording
from onboard.loop.skill import Skill
from onboard.testing.schema_servers import Dialect, SchemaServer, constrained_reply

ACTIONS = ["approach", "wait", "wait for cue", "eye contact", "pause", "speak"]
SCHEMA = plan_schema(ACTIONS)
MESSAGES = [{"role": "user", "content": "The person is looking at the robot. What now?"}]
#: what the stand-ins' model would say unconstrained: words that map onto "speak"
WISH = "The robot should say hello to the person."
SCENARIO = ROOT / "skills" / "scenarios" / "person-object.toml"

LLAMA_CPP = {"type": "json_object", "schema": SCHEMA}
OPENAI = {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA, "strict": True}}


def config(form: str, **more: Any) -> LLMConfig:
    return LLMConfig.model_validate({"structured_output": form, "deadline": 5.0, **more})


def ask(form: str, server: SchemaServer, schema: dict[str, Any] = SCHEMA) -> str:
    with ChatClient(config(form), base_url=server.base_url) as client:
        return client.complete(MESSAGES, schema).text


# -- the forms, client and server ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("form", "dialect", "sent"),
    [
        ("llama-cpp", "llama-cpp-python", LLAMA_CPP),
        ("openai", "openai", OPENAI),
        ("auto", "openai", OPENAI),
        ("openai", "llama-server", OPENAI),
        ("llama-cpp", "llama-server", LLAMA_CPP),
    ],
)
def test_the_form_the_server_reads_gives_a_constrained_reply(
    form: str, dialect: Dialect, sent: dict[str, Any]
) -> None:
    with SchemaServer(dialect, wish=WISH, prefer=["eye contact"]) as server:
        text = ask(form, server)
    assert json.loads(text) == {"action": "eye contact", "reason": "constrained"}
    [body] = server.requests
    assert body["response_format"] == sent


@pytest.mark.parametrize(
    ("form", "dialect", "error", "words"),
    [
        # OpenAI, vLLM, Ollama: json_object is JSON mode; the schema beside it is ignored
        ("llama-cpp", "openai", LLMReplyError, f'\'action\' is "{WISH}", not one of "approach"'),
        # llama-cpp-python validates the type: HTTP 500, not worth asking again
        ("openai", "llama-cpp-python", LLMError, "refused the openai response_format"),
        ("none", "openai", LLMReplyError, "not JSON"),
        ("openai", "plain", LLMReplyError, "not JSON"),
        ("llama-cpp", "plain", LLMReplyError, "not JSON"),
    ],
)
def test_a_form_the_server_does_not_read_is_a_failed_exchange(
    form: str, dialect: Dialect, error: type[LLMError], words: str
) -> None:
    with SchemaServer(dialect, wish=WISH) as server, pytest.raises(error) as caught:
        url = server.base_url
        ask(form, server)
    message = str(caught.value)
    assert message.startswith(f"LLM at {url}: ") and "\n" not in message
    assert words in message
    assert "[llm] structured_output" in message
    assert len(server.requests) == 1  # a refusal or a bad reply is not asked again


def test_none_sends_no_response_format_and_still_checks_the_reply() -> None:
    good = '{"action": "speak", "reason": "The person is ready."}'
    with SchemaServer("plain", wish=good) as server:
        assert json.loads(ask("none", server))["action"] == "speak"
    assert "response_format" not in server.requests[0]
    bad = '{"action": "dance", "reason": "Why not."}'
    with SchemaServer("plain", wish=bad) as server, pytest.raises(LLMReplyError) as caught:
        ask("none", server)
    assert "'action' is \"dance\", not one of" in str(caught.value)
    assert 'structured_output = "none"' in str(caught.value)


def test_a_reply_cut_at_max_tokens_says_so() -> None:
    with SchemaServer("openai", max_chars=20) as server, pytest.raises(LLMReplyError) as caught:
        ask("openai", server)
    assert "not JSON" in str(caught.value)
    assert "cut off at [llm] max_tokens = 160" in str(caught.value)


def test_without_a_schema_no_form_is_sent_and_nothing_is_checked() -> None:
    with (
        SchemaServer("openai", wish=WISH) as server,
        ChatClient(config("openai"), base_url=server.base_url) as client,
    ):
        assert client.complete(MESSAGES).text == WISH
    assert "response_format" not in server.requests[0]


def test_auto_is_llama_cpp_for_the_embedded_model_and_openai_for_any_url() -> None:
    assert resolve("auto", local=True) == "llama-cpp"
    assert resolve("auto", local=False) == "openai"
    assert resolve("none", local=True) == "none"
    # no embedded server of this process serves these URLs (tests/test_local_llm.py: one does)
    for url in ("https://api.openai.com/v1", "http://127.0.0.1:11434/v1"):
        with ChatClient(LLMConfig(), base_url=url) as client:
            assert client.structured_output == "openai"


# -- the check of a reply against the schema ----------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "text", "words"),
    [
        (SCHEMA, '{"action": "speak"}', "the reply lacks 'reason'"),
        (SCHEMA, '{"action": "dance", "reason": "r"}', "'action' is \"dance\", not one of"),
        (SCHEMA, '{"action": 3, "reason": "r"}', "'action' is an integer, not string"),
        (SCHEMA, '{"action": "speak", "reason": "r", "phrase": "Hi"}', "does not allow: 'phrase'"),
        (SCHEMA, '[{"action": "speak", "reason": "r"}]', "the reply is an array, not object"),
        (SCHEMA, '```json\n{"action": "speak", "reason": "r"}\n```', "not JSON"),
        (SCHEMA, '{"action": "speak", "reason": "r', "not JSON (Unterminated string"),
        (SCHEMA, "   ", "empty"),
        (wait_time_schema(), '{"wait_time": true, "reason": "r"}', "is a boolean, not number"),
        (wait_time_schema(), '{"wait_time": "5", "reason": "r"}', "is a string, not number"),
        (wait_time_schema(), '{"wait_time": NaN, "reason": "r"}', "NaN is not JSON"),
        (answer_schema(), '{"answer": "maybe", "reason": "r"}', 'not one of "yes", "no"'),
        (answer_schema(), '{"answer": true, "reason": "r"}', "is a boolean, not string"),
    ],
)
def test_a_reply_that_breaks_the_schema_says_how(
    schema: dict[str, Any], text: str, words: str
) -> None:
    problem = reply_problem(text, schema)
    assert problem is not None and words in problem, problem


def test_a_reply_within_the_schema_passes() -> None:
    for schema in (SCHEMA, wait_time_schema(), answer_schema()):
        assert reply_problem(json.dumps(constrained_reply(schema)), schema) is None
    assert reply_problem('\n {"action": "wait for cue", "reason": ""}\n', SCHEMA) is None
    bounded = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 3},
            "s": {"type": ["string", "null"], "maxLength": 2},
        },
    }
    assert reply_problem('{"n": 2.0, "s": null}', bounded) is None
    assert "over maximum 3" in (reply_problem('{"n": 4}', bounded) or "")
    assert "under minimum 1" in (reply_problem('{"n": 0}', bounded) or "")
    assert "is a number, not integer" in (reply_problem('{"n": 1.5}', bounded) or "")
    assert "over maxLength 2" in (reply_problem('{"s": "abc"}', bounded) or "")
    listed = {"type": "array", "items": {"type": "string", "enum": ["on", "in"]}, "maxItems": 2}
    assert reply_problem('["on", "in"]', listed) is None
    assert "over maxItems 2" in (reply_problem('["on", "in", "on"]', listed) or "")
    assert "'[1]' is \"off\"" in (reply_problem('["on", "off"]', listed) or "")


def test_the_skill_bounds_or_drops_the_reason_and_lists_the_waits(skill: Skill) -> None:
    """[prompt] reason and [prompt.second_stage] wait_times of the skill TOML (engage.toml:
    no reason, waits of 2, 5, 10, 20 or 40 s), checked by the client as the server enforces them."""
    short = {"type": "string", "maxLength": 12}
    plan = plan_schema(ACTIONS, short)
    assert plan["required"] == ["action", "reason"]
    assert reply_problem('{"action": "speak", "reason": "short enough"}', plan) is None
    long = '{"action": "speak", "reason": "thirteen char"}'
    assert "over maxLength 12" in (reply_problem(long, plan) or "")
    none = answer_schema(None)
    assert none["required"] == ["answer"] and "reason" not in none["properties"]
    extra = reply_problem('{"answer": "no", "reason": ""}', none)
    assert "does not allow: 'reason'" in (extra or "")
    waits = wait_time_schema(None, [5.0, 10.0, 20.0, 40.0])
    assert waits["properties"]["wait_time"]["enum"] == [5, 10, 20, 40]
    assert reply_problem('{"wait_time": 10.0}', waits) is None
    assert "not one of 5, 10, 20, 40" in (reply_problem('{"wait_time": 144}', waits) or "")
    assert prompts.reason_schema(skill) is None
    asked = prompts.wait_time(skill, "reading a book")[0]["content"]
    assert "one of 2, 5, 10, 20 or 40 seconds" in asked


def test_a_schema_keyword_the_check_does_not_know_is_refused() -> None:
    """A keyword added to a prompt's schema must be taught to the check, never skipped."""
    with pytest.raises(ValueError, match="pattern"):
        reply_problem('{"a": "x"}', {"type": "object", "properties": {"a": {"pattern": "x"}}})
    with pytest.raises(ValueError, match="additionalProperties"):
        reply_problem("{}", {"type": "object", "additionalProperties": {"type": "string"}})


# -- episodes: the robot acts on a checked reply, or falls back ---------------------------------


def shortened(end: float) -> Scenario:
    data = load_scenario(SCENARIO).model_dump(by_alias=True)
    data["scenario"]["end"] = end
    data["label"] = [{**lb, "to": min(lb["to"], end)} for lb in data["label"] if lb["from"] < end]
    return Scenario.model_validate(data)


def episode(
    robot: RobotConfig, skill: Skill, mapper: ActionMapper, form: str, server: SchemaServer
) -> tuple[Outcome, list[dict[str, Any]]]:
    llm = robot.llm.model_copy(update={"structured_output": form})
    robot = robot.model_copy(update={"llm": llm})
    options = EpisodeOptions(latency=1.0, constrained=True, keep_candidates=False)
    recorder = MemoryRecorder()
    with ChatClient(robot.llm, base_url=server.base_url) as client:
        outcome = run_episode(
            robot, skill, shortened(14.0), HttpAsk(client), mapper, recorder, options
        )
    return outcome, recorder.records


def test_with_the_right_form_the_constrained_action_runs(
    robot: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    with SchemaServer("openai", wish=WISH, prefer=["eye contact"]) as server:
        outcome, records = episode(robot, skill, mapper, "openai", server)
    requests = [r for r in records if r["kind"] == "request"]
    assert requests and all(r["structured_output"] == "openai" for r in requests)
    assert all(b["response_format"]["type"] == "json_schema" for b in server.requests)
    assert not [r for r in records if r["kind"] in ("error", "fallback")]
    plans = [r for r in records if r["kind"] == "mapping"]
    assert plans and all(r["actions"] == ["eye contact"] for r in plans)
    assert "eye contact" in [a for _, a in outcome.actions]


def test_with_the_wrong_form_the_check_catches_the_reply_and_the_fallback_runs(
    robot: RobotConfig, skill: Skill, mapper: ActionMapper
) -> None:
    assert mapper.map(WISH).actions == ["speak"]  # what the robot would do, unchecked
    with SchemaServer("openai", wish=WISH) as server:
        outcome, records = episode(robot, skill, mapper, "llama-cpp", server)
    errors = [r for r in records if r["kind"] == "error"]
    assert errors and all("does not match the JSON schema" in r["message"] for r in errors)
    assert [r for r in records if r["kind"] == "fallback"]
    assert not [r for r in records if r["kind"] == "mapping"]  # no reply reached the mapper
    assert {a for _, a in outcome.actions} <= {"approach", "pause"}
    assert outcome.llm_failures == len(errors) and outcome.llm_replies == 0


# -- robot.toml, onboard run, the recording and its replay -------------------------------------


def test_a_bad_structured_output_is_one_line_naming_file_key_and_line(tmp_path: Path) -> None:
    robot = robot_copy(tmp_path, replace=[('structured_output = "auto"',
                                           'structured_output = "vllm"')])  # fmt: skip
    line = one_line_error(onboard("--robot", robot, "check"))
    number = line_of(robot, "structured_output")
    assert ERROR_LINE.match(line)
    assert line.startswith(f"onboard: error: {robot}:{number}: [llm.structured_output] "), line
    assert "'auto', 'llama-cpp', 'openai' or 'none'" in line


def test_check_names_the_form_auto_picks(tmp_path: Path) -> None:
    result = onboard("--robot", robot_copy(tmp_path), "check")
    assert "llm local (constrained, llama-cpp form)" in result.out, result.err
    url = robot_copy(tmp_path, replace=[('base_url = "local"',
                                         'base_url = "https://api.openai.com/v1"')])  # fmt: skip
    assert "(constrained, openai form)" in onboard("--robot", url, "check").out


# the stand-in always picks eye contact, so a verdict is reached (never speaking: task failed);
# with the wrong form no request gets a usable reply
@pytest.mark.parametrize(
    ("form", "code"),
    [("openai", ExitCode.TASK_FAILED), ("llama-cpp", ExitCode.LLM_UNREACHABLE)],
    ids=["right-form", "wrong-form"],
)
def test_the_recording_shows_the_form_and_replays(
    tmp_path: Path, form: str, code: ExitCode
) -> None:
    robot = robot_copy(tmp_path, replace=[('structured_output = "auto"',
                                           f'structured_output = "{form}"')])  # fmt: skip
    record = tmp_path / "episode.jsonl"
    with SchemaServer("openai", wish=WISH, prefer=["eye contact"]) as server:
        url = server.base_url
        run = onboard("--robot", robot, "run", "engage", "--llm", url, "--clock", "virtual",
                      "--record", record, "--scenario", SCENARIO, cwd=tmp_path)  # fmt: skip
    assert run.code == code, run.out + run.err
    assert f"LLM {url} (constrained, {form} form)" in run.out
    records = list(read_recording(record))
    requests = [r for r in records if r["kind"] == "request"]
    assert requests and all(r["constrained"] and r["structured_output"] == form for r in requests)
    replayed = onboard("replay", record, cwd=tmp_path)
    assert replayed.code == ExitCode.SUCCESS, replayed.out + replayed.err
    assert "reproduces" in replayed.out
