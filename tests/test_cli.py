"""The ``onboard`` command: exit codes, output, files it writes (in this process; as a real
process where signals or start-up are the subject)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from onboard.grounding.candidates import CandidateStore

ROOT = Path(__file__).resolve().parent.parent
ONBOARD = Path(sys.executable).parent / "onboard"
SCENARIOS = ROOT / "skills" / "scenarios"
SEED_SCENARIOS = ["person-robot", "person-object", "person-environment", "person-person"]
ACTIONS = ["approach", "wait", "wait for cue", "eye contact", "pause", "speak"]
ERROR_LINE = re.compile(r"^onboard: error: \S+:\d+: \[[^\]]+\] .+$")


@dataclass
class Result:
    code: int
    out: str
    err: str
    seconds: float


def onboard(
    *args: str | Path, cwd: Path = ROOT, timeout: float = 60.0, process: bool = False
) -> Result:
    """``onboard ARGS`` run from ``cwd``: in this process by default, as the console script
    runs it (``main``'s return value, or argparse's exit, is the exit code; stdout, stderr
    and stdin are the command's own), or as a real process (``process=True``) where the
    process is the subject: signals, start-up, the installed script, the raw exit."""
    began = time.monotonic()
    if process:
        done = subprocess.run(
            [str(ONBOARD), *map(str, args)],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr, time.monotonic() - began)
    from onboard.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    saved_cwd, saved_stdin = os.getcwd(), sys.stdin
    try:
        os.chdir(cwd)
        sys.stdin = io.StringIO("")
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse: --help, a bad command line
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.stdin = saved_stdin
        os.chdir(saved_cwd)
    return Result(code, out.getvalue(), err.getvalue(), time.monotonic() - began)


@dataclass
class Signalled(Result):
    #: time.time() when the signal was sent (records' "wall" is on that clock)
    signalled_at: float


def signal_when(
    *args: str | Path,
    ready: Callable[[], bool],
    cwd: Path,
    sig: signal.Signals = signal.SIGTERM,
    waiting_for: str = "the episode to start",
) -> Signalled:
    """Start `onboard ARGS`, wait (bounded) until ``ready()``, send ``sig``, wait for the exit;
    ``seconds`` runs from the signal to the exit."""
    process = subprocess.Popen(
        [str(ONBOARD), *map(str, args)],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20.0
        while not ready():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, f"onboard {args[0]}: no sign of {waiting_for}"
            time.sleep(0.05)
        signalled_at = time.time()
        process.send_signal(sig)
        began = time.monotonic()
        out, err = process.communicate(timeout=10.0)
        seconds = time.monotonic() - began
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return Signalled(process.returncode, out, err, seconds, signalled_at)


def started(record: Path) -> Callable[[], bool]:
    """The recording shows the episode running (the signal handlers are installed by then)."""
    return lambda: record.exists() and '"kind": "start"' in record.read_text(encoding="utf-8")


def one_line_error(result: Result) -> str:
    """The run failed with exactly one ``onboard: error:`` line and no traceback."""
    assert result.code != 0, result
    assert "Traceback" not in result.err + result.out, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("onboard: error: "), result.err
    return lines[0]


def robot_copy(
    tmp_path: Path,
    *,
    skills: Path | None = None,
    replace: Sequence[tuple[str, str]] = (),
    name: str = "robot.toml",
) -> Path:
    """robot.toml in tmp_path: skills by absolute path, recordings in tmp_path."""
    text = (ROOT / "robot.toml").read_text(encoding="utf-8")
    edits = [
        ('skills = "skills"', f'skills = "{skills or ROOT / "skills"}"'),
        ('recordings = "recordings"', f'recordings = "{tmp_path / "recordings"}"'),
        *replace,
    ]
    if 'scene = "drivers/' in text:  # the arm's scene, by a path from the repository root
        edits.append(('scene = "drivers/', f'scene = "{ROOT}/drivers/'))
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def up_robot_copy(tmp_path: Path, service: str = "") -> Path:
    """robot_copy for ``onboard up``: its control API on any free port (tests run side by
    side, and the default 8470 would collide), and ``service``'s lines in the same table."""
    path = robot_copy(tmp_path)
    with path.open("a", encoding="utf-8") as toml:
        toml.write(f"\n[service]\nport = 0\n{service}")
    return path


def skills_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "skills"
    shutil.copytree(ROOT / "skills", folder)
    return folder


def line_of(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if line.startswith(text))


# -- check -------------------------------------------------------------------------------------


def test_check_passes_on_the_repository() -> None:
    result = onboard("check")
    assert result.code == 0, result.err
    assert result.out.strip().splitlines()[-1] == "ok"
    assert "skill engage: 6 actions, start 'approach', end 'speak'" in result.out
    assert "4 scenarios" in result.out
    assert result.err == ""


def test_check_reports_every_problem_of_a_broken_skill(tmp_path: Path) -> None:
    skills = skills_copy(tmp_path)
    engage = skills / "engage.toml"
    text = engage.read_text(encoding="utf-8")
    text = text.replace('start = "approach"', 'start = "aproach"', 1)
    text = text.replace('command = "base.stop"', 'command = "base.fly"', 1)
    engage.write_text(text, encoding="utf-8")
    result = onboard("--robot", robot_copy(tmp_path, skills=skills), "check")
    assert result.code == 2
    assert "Traceback" not in result.err and "ok" not in result.out.split()
    lines = result.err.strip().splitlines()
    assert len(lines) == 2, result.err
    assert all(ERROR_LINE.match(line) for line in lines), lines
    start, command = lines
    assert start.startswith(
        f"onboard: error: {engage}:{line_of(engage, 'start = ')}: [skill.start]"
    )
    assert "unknown action 'aproach'" in start
    fly = line_of(engage, 'command = "base.fly"')
    assert command.startswith(f"onboard: error: {engage}:{fly}: [actions.pause.command]")
    assert "unknown command 'base.fly'" in command


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ('clock = "wall"', 'clock = "wall"\ncolour = "red"', "colour", "unknown key"),
        ('base_url = "local"', 'base_url = "ftp://llm.example"', "llm.base_url", "http(s) URL"),
        ("[mapping]", "[mapping]\nthreshhold = 0.4", "mapping.threshhold", "unknown key"),
    ],
    ids=["unknown-key", "bad-base-url", "misspelt-nested-key"],
)
def test_a_bad_robot_toml_is_one_line_naming_file_key_and_line(
    tmp_path: Path, old: str, new: str, key: str, words: str
) -> None:
    robot = robot_copy(tmp_path, replace=[(old, new)])
    line = one_line_error(onboard("--robot", robot, "check"))
    wrong = new.splitlines()[-1].split(" =")[0]
    number = line_of(robot, wrong)
    assert line.startswith(f"onboard: error: {robot}:{number}: [{key}] "), line
    assert words in line
    assert robot.name == "robot.toml"


# -- graph and map -----------------------------------------------------------------------------


def test_graph_prints_a_mermaid_state_diagram() -> None:
    result = onboard("graph", "engage")
    assert result.code == 0, result.err
    lines = result.out.strip().splitlines()
    assert lines[0] == "stateDiagram-v2"
    states = re.findall(r'^\s+state "(.+) \((.+)\)" as (\S+)$', result.out, re.MULTILINE)
    assert [s[0] for s in states] == ACTIONS
    assert dict((s[0], s[1]) for s in states)["speak"] == "end"
    assert "    [*] --> approach" in lines and "    speak --> [*]" in lines
    edges = re.findall(r"^\s+(\w+) --> (\w+)$", result.out, re.MULTILINE)
    assert ("pause", "speak") in edges and ("approach", "wait_for_cue") in edges
    assert not any(source == "speak" for source, _ in edges)


def test_map_a_wait_reply_as_json() -> None:
    reply = "The robot should wait until the person finishes the call."
    result = onboard("map", "engage", reply, "--json")
    assert result.code == 0, result.err
    mapped = json.loads(result.out)
    assert mapped["actions"] == ["wait"]
    assert mapped["reply"] == reply
    assert mapped["clauses"][0]["action"] == "wait"


def test_map_an_out_of_set_reply_is_no_match() -> None:
    result = onboard("map", "engage", "The robot should fetch a cup of water.")
    assert result.code == 1
    assert result.out.strip().splitlines()[-1] == "no match"
    assert "Traceback" not in result.err


# -- eval --------------------------------------------------------------------------------------


def test_eval_scenarios_are_selected_by_repeating_the_option() -> None:
    result = onboard(
        "eval", "engage", "--trials", "1", "--json",
        "--scenario", SCENARIOS / "person-person.toml",
        "--scenario", SCENARIOS / "person-robot.toml",
    )  # fmt: skip
    assert result.code == 0, result.err
    report = json.loads(result.out)
    assert [s["name"] for s in report["scenarios"]] == ["person-person", "person-robot"]
    assert report["action_text"] is True


def test_eval_without_action_text_prints_table_v() -> None:
    result = onboard(
        "eval", "engage", "--trials", "1", "--no-action-text",
        "--scenario", SCENARIOS / "person-robot.toml",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "Table V:" in result.out and "Table VI:" in result.out
    assert "Table III" not in result.out and "without action text" in result.out
    assert "person-robot" in result.out and "person-object" not in result.out


def test_eval_ten_trials_prints_tables_iii_and_iv() -> None:
    result = onboard("eval", "engage", "--trials", "10")
    assert result.code == 0, result.err
    assert "Table III:" in result.out and "Table IV:" in result.out
    for name in SEED_SCENARIOS:
        assert re.search(rf"{name}\s+│\s+\d+ / 10", result.out), name
    assert "10 trials per scenario" in result.out


# -- bottom-up actions -------------------------------------------------------------------------


def test_a_candidate_becomes_an_action_of_the_skill(tmp_path: Path) -> None:
    skills = skills_copy(tmp_path)
    robot = robot_copy(tmp_path, skills=skills)
    original = (ROOT / "skills" / "engage.toml").read_bytes()
    store = CandidateStore(tmp_path / "recordings" / "candidates.jsonl")
    reply = "The robot should wave at the person."
    candidate = store.add("engage", reply, "The person is walking by.")
    store.add("other", "The robot should sing.", "The person is sitting.")

    listed = onboard("--robot", robot, "actions", "list", "--skill", "engage")
    assert listed.code == 0, listed.err
    assert listed.out.startswith(f"{candidate.id}  [engage] {reply!r}")
    assert "(candidate)" in listed.out and "sing" not in listed.out

    added = onboard(
        "--robot", robot, "actions", "add", "engage", candidate.id[:5], "--name", "wave"
    )
    assert added.code == 0, added.err
    assert "added action 'wave'" in added.out
    skill_text = (skills / "engage.toml").read_text(encoding="utf-8")
    assert "[actions.wave]" in skill_text
    wave = skill_text.split("[actions.wave]", 1)[1]
    assert f'references = ["{reply}"]' in wave and 'command = "none"' in wave
    assert skill_text.startswith("# Engage:")  # comments kept
    assert (ROOT / "skills" / "engage.toml").read_bytes() == original

    # the skill's critic was trained on six actions: check names the mismatch until it is
    # rebuilt, or [critic] is removed
    assert "has never seen 'wave'" in added.out
    stale = one_line_error(onboard("--robot", robot, "check"))
    assert "[critic.model]" in stale and "the task adds ['wave']" in stale
    text = (skills / "engage.toml").read_text(encoding="utf-8")
    critic = text.index("\n[critic]")
    after_critic = text.index("\n[", critic + 1) if "\n[" in text[critic + 1 :] else len(text)
    skill_text = text[:critic] + text[after_critic:]
    (skills / "engage.toml").write_text(skill_text, encoding="utf-8")
    checked = onboard("--robot", robot, "check")
    assert checked.code == 0, checked.err
    assert "skill engage: 7 actions" in checked.out and checked.out.strip().endswith("ok")

    after = onboard("--robot", robot, "actions", "list")
    assert "registered as 'wave'" in after.out and "sing" in after.out

    again = one_line_error(onboard("--robot", robot, "actions", "add", "engage", candidate.id,
                                   "--name", "wave"))  # fmt: skip
    assert "exists already" in again
    unknown = one_line_error(onboard("--robot", robot, "actions", "add", "engage", "zz",
                                     "--name", "wave2"))  # fmt: skip
    assert "no candidate with id 'zz'" in unknown
    assert (skills / "engage.toml").read_text(encoding="utf-8") == skill_text


# -- run and replay ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("run")
    path = tmp_path / "episode.jsonl"
    result = onboard(
        "--robot", robot_copy(tmp_path), "run", "engage", "--llm", "standin",
        "--clock", "virtual", "--record", path,
        "--scenario", SCENARIOS / "person-object.toml",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert "success: spoke at" in result.out and f"recorded: {path}" in result.out
    return path


def records_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_run_records_a_complete_episode(recording: Path) -> None:
    records = records_of(recording)
    assert records[0]["kind"] == "header" and records[-1]["kind"] == "end"
    assert records[0]["options"]["clock"] == "virtual"
    assert records[-1]["finished"] is True
    assert any(r["kind"] == "reply" and r["purpose"] == "plan" for r in records)


def test_replay_reproduces_a_recording(recording: Path, tmp_path: Path) -> None:
    result = onboard("replay", recording, cwd=tmp_path)
    assert result.code == 0, result.err
    assert "reproduces" in result.out
    recorded = [a for _, a in records_of(recording)[-1]["actions"]]
    assert f"replayed: {' -> '.join(recorded)}" in result.out


def test_replay_of_a_tampered_recording_diverges(recording: Path, tmp_path: Path) -> None:
    records = records_of(recording)
    plan = next(r for r in records if r["kind"] == "reply" and r["purpose"] == "plan")
    greeting = {"action": "The robot should greet the person.", "reason": "Tampered."}
    assert plan["text"] != json.dumps(greeting)
    plan["text"] = json.dumps(greeting)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = onboard("replay", tampered, cwd=tmp_path)
    assert result.code == 1
    assert "Traceback" not in result.err + result.out
    if result.err:
        one_line_error(result)
    else:
        assert "DIVERGED" in result.out
        assert "replayed: approach -> speak" in result.out


def test_replay_notices_a_request_that_differs(recording: Path, tmp_path: Path) -> None:
    records = records_of(recording)
    request = next(r for r in records if r["kind"] == "request")
    assert request["purpose"] == "lose_person"
    assert "talking on a phone" in request["messages"][0]["content"]
    request["messages"][0]["content"] = request["messages"][0]["content"].replace(
        "talking on a phone", "juggling knives"
    )
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = onboard("replay", tampered, cwd=tmp_path)
    assert "Traceback" not in result.err
    assert result.code == 1 and "reproduces" not in result.out
    # the divergence names the request, the message, the line and both values
    assert f"request {request['id']} (lose_person) differs from the recording: message 1" in (
        result.err
    )
    line = next(k for k in result.err.splitlines() if "differs from the recording" in k)
    assert "juggling knives" in line and "talking on a phone" in line and ", line " in line


def _garbage(recording: Path, kind: str) -> str:
    text = recording.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    return {
        "not-json": "this is not\na recording\n",
        "empty": "",
        "first-half": "".join(lines[: len(lines) // 2]),
        # past the header (which holds the skill's text), torn inside a later record
        "torn-mid-line": text[: (len(lines[0]) + len(text)) // 2],
        "no-header": "".join(lines[1:]),
    }[kind]


@pytest.mark.parametrize("kind", ["not-json", "empty", "first-half", "torn-mid-line", "no-header"])
def test_replay_of_garbage_is_one_error_line(recording: Path, tmp_path: Path, kind: str) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_garbage(recording, kind), encoding="utf-8")
    result = onboard("replay", bad, cwd=tmp_path)
    # a recording cut short (a header, no end record) is what a killed process leaves
    killed = kind in ("first-half", "torn-mid-line")
    assert result.code == (4 if killed else 2)  # ExitCode.INCOMPLETE / INPUT_ERROR
    assert str(bad) in one_line_error(result)


def test_replay_of_a_missing_file_is_one_error_line(tmp_path: Path) -> None:
    line = one_line_error(onboard("replay", tmp_path / "nope.jsonl", cwd=tmp_path))
    assert "cannot read recording" in line


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"[1, 2]\n{}\n", id="json-but-not-records"),
        pytest.param(b'{"kind": "header"}\n{"kind": "end", "actions": []}\n', id="header-no-robot"),
        pytest.param(b"\x00\xff\xfe not text\n", id="not-utf8"),
    ],
)
def test_replay_of_malformed_records_is_one_error_line(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content)
    one_line_error(onboard("replay", bad, cwd=tmp_path))


# -- the command scheme and what check covers --------------------------------------------------


def test_help_lists_every_command_once_in_its_group() -> None:
    import argparse

    from onboard.cli.main import GROUPS, _parser

    commands = next(
        a.choices for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    grouped = [name for _, group in GROUPS for name, _ in group]
    assert sorted(grouped) == sorted(commands), "every command in exactly one group"
    result = onboard("--help")
    assert result.code == 0
    listing = result.out.split("commands:", 1)[1]
    for title, group in GROUPS:
        assert f"  {title}:" in listing
        for name, summary in group:
            assert re.search(rf"^    {name}\s+{re.escape(summary)}$", listing, re.MULTILINE), name


def test_check_validates_the_scene_the_arm_is_built_from(tmp_path: Path) -> None:
    broken = tmp_path / "scene.toml"
    broken.write_text('[table]\nsize = "big"\n', encoding="utf-8")
    robot = robot_copy(tmp_path)
    text = re.sub(r'^scene = ".*"$', f'scene = "{broken}"', robot.read_text(encoding="utf-8"),
                  count=1, flags=re.MULTILINE)  # fmt: skip
    assert str(broken) in text
    robot.write_text(text, encoding="utf-8")
    result = onboard("--robot", robot, "check")
    assert result.code == 2
    assert "Traceback" not in result.err
    lines = result.err.strip().splitlines()
    assert lines and all(line.startswith(f"onboard: error: {broken}") for line in lines), lines


def test_check_lists_the_shipped_scenes() -> None:
    result = onboard("check")
    assert result.code == 0, result.err
    assert re.search(r"^  \d+ scenes: .*\bblocks\b", result.out, re.MULTILINE)


def test_a_path_recorded_to_twice_keeps_both_and_replay_says_it_holds_two(
    recording: Path, tmp_path: Path
) -> None:
    twice = tmp_path / "twice.jsonl"
    once = recording.read_text(encoding="utf-8")
    twice.write_text(once + once, encoding="utf-8")  # what two runs with one --record path leave
    result = onboard("replay", twice, cwd=tmp_path)
    assert result.code == 2
    assert result.err.strip().endswith(
        f"{twice}: holds 2 episodes (the same --record path was used 2 times; each run "
        "appends); a replay takes one: record each run to its own path"
    )
