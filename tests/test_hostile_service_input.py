"""Bad input that a long-running service must not die of (issue 32, item 0; docs/hostile-input.md).

Each class through the ``onboard`` command (in this process; a real process only where the
process is the subject: SIGTERM during start-up), or, for the JAKA emulator, over its socket:
deep nesting, a password in ``base_url``, what ``check`` and ``run`` must refuse alike,
escape sequences for the terminal, a recording path into missing folders, a skill with
20,000 references.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from arm_harness import BOUND, twin_arm
from test_cli import ONBOARD, ROOT, SCENARIOS, Result, onboard, one_line_error, robot_copy

from onboard.base.signals import Terminated, on_stop_signals, stop_signal_arrived
from onboard.cli.main import NO_ROBOT, reported
from onboard.drivers.arm.jaka import JsonStream
from onboard.drivers.emulators.jaka_server import JakaServer
from onboard.loop.exitcodes import ExitCode
from onboard.testing.standin_server import StandInServer

PASSWORD = "s3cret-pw"
DEEP = 3000  # levels: past Python's recursion limit (1000), where parsers raise RecursionError
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m"


def run_args(*extra: str | Path) -> list[str | Path]:
    return ["run", "engage", "--llm", "standin", "--clock", "virtual", *extra]


# -- 1. deep nesting: one line naming the file, not a RecursionError --------------------------


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One recorded engage episode (stand-in LLM, virtual clock)."""
    folder = tmp_path_factory.mktemp("recorded")
    path = folder / "episode.jsonl"
    result = onboard("--robot", robot_copy(folder), *run_args("--record", path))
    assert result.code in (ExitCode.SUCCESS, ExitCode.TASK_FAILED), result.err
    return path


def nested_array() -> str:
    return "[" * DEEP + "]" * DEEP


def deep_robot(tmp_path: Path) -> tuple[list[str | Path], Path]:
    path = robot_copy(tmp_path)
    path.write_text(path.read_text(encoding="utf-8").replace(
        "\n[llm]", f"\nextra = {nested_array()}\n[llm]", 1), encoding="utf-8")  # fmt: skip
    return ["--robot", path, "check"], path


def deep_inline_tables(tmp_path: Path) -> tuple[list[str | Path], Path]:
    path = robot_copy(tmp_path)
    tables = "{a = " * DEEP + "1" + "}" * DEEP
    path.write_text(path.read_text(encoding="utf-8").replace(
        "\n[llm]", f"\nextra = {tables}\n[llm]", 1), encoding="utf-8")  # fmt: skip
    return ["--robot", path, "check"], path


def deep_skill(tmp_path: Path) -> tuple[list[str | Path], Path]:
    skills = tmp_path / "skills"
    skills.mkdir()
    path = skills / "deep.toml"
    text = (ROOT / "skills" / "engage.toml").read_text(encoding="utf-8")
    path.write_text(
        text.replace('name = "engage"', 'name = "deep"', 1) + f"\nx = {nested_array()}\n"
    )
    return ["--robot", robot_copy(tmp_path, skills=skills), "check"], path


def deep_scenario(tmp_path: Path) -> tuple[list[str | Path], Path]:
    skills = tmp_path / "skills"
    (skills / "scenarios").mkdir(parents=True)
    (skills / "engage.toml").write_bytes((ROOT / "skills" / "engage.toml").read_bytes())
    path = skills / "scenarios" / "deep.toml"
    text = (SCENARIOS / "person-object.toml").read_text(encoding="utf-8")
    path.write_text(text.replace("[scenario]\n", f"[scenario]\nx = {nested_array()}\n", 1))
    return ["--robot", robot_copy(tmp_path, skills=skills), "check"], path


def deep_record(tmp_path: Path, recording: Path) -> tuple[list[str | Path], Path]:
    path = tmp_path / "deep.jsonl"
    lines = recording.read_text(encoding="utf-8").splitlines()
    lines.insert(1, '{"kind": "x", "a": ' + nested_array() + "}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ["replay", path], path


def deep_recorded_skill(tmp_path: Path, recording: Path) -> tuple[list[str | Path], Path]:
    """A header whose skill text (the TOML replay loads the skill from) nests too deep."""
    path = tmp_path / "deep-skill.jsonl"
    records = [json.loads(line) for line in recording.read_text(encoding="utf-8").splitlines()]
    records[0]["skill"]["toml"] += f"\nx = {nested_array()}\n"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return ["replay", path], path


@pytest.mark.parametrize(
    "case",
    [deep_robot, deep_inline_tables, deep_skill, deep_scenario, deep_record, deep_recorded_skill],
)
def test_deep_nesting_is_one_line_naming_the_file(
    case: Any, tmp_path: Path, recording: Path
) -> None:
    args, path = case(tmp_path, recording) if "record" in case.__name__ else case(tmp_path)
    result = onboard(*args)
    assert result.code == ExitCode.INPUT_ERROR, result.err
    line = one_line_error(result)
    assert str(path) in line and "nested more than 64 levels deep" in line, line


# -- 2. a password in base_url is never printed nor recorded ---------------------------------


def with_password(url: str) -> str:
    return url.replace("http://", f"http://robot:{PASSWORD}@", 1)


def test_a_password_in_base_url_is_never_printed_or_recorded(tmp_path: Path) -> None:
    with StandInServer(seed=0) as server:
        url = with_password(server.base_url)
        robot = robot_copy(tmp_path, replace=[('base_url = "local"', f'base_url = "{url}"')])
        record = tmp_path / "episode.jsonl"
        results = [
            onboard("--robot", robot, "check"),
            onboard("--robot", robot, "run", "engage", "--clock", "virtual", "--record", record),
            onboard(
                "--robot",
                robot,
                "eval",
                "engage",
                "--trials",
                "1",
                "--json",
                "--llm",
                url,
                "--scenario",
                "person-object",
                "--record",
                tmp_path / "eval",
            ),
        ]
    assert [r.code for r in results[:1]] == [ExitCode.SUCCESS], results[0].err
    assert results[1].code in (ExitCode.SUCCESS, ExitCode.TASK_FAILED), results[1].err
    assert results[2].code == ExitCode.SUCCESS, results[2].err
    assert "http://***@127.0.0.1:" in results[1].out  # the endpoint is named, its password not
    results.append(onboard("replay", record))  # replays from the masked header
    assert results[-1].code == ExitCode.SUCCESS, results[-1].err
    files = [record, *sorted((tmp_path / "eval").rglob("*.jsonl"))]
    assert len(files) == 2
    for text in [r.out + r.err for r in results] + [f.read_text(encoding="utf-8") for f in files]:
        assert PASSWORD not in text


def test_an_unreachable_endpoint_with_a_password_is_named_without_it(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://robot:{PASSWORD}@127.0.0.1:{port}/v1"
    robot = robot_copy(tmp_path, replace=[('base_url = "local"', f'base_url = "{url}"'),
                                          ("retries = 2", "retries = 0")])  # fmt: skip
    record = tmp_path / "episode.jsonl"
    result = onboard("--robot", robot, "run", "engage", "--clock", "virtual", "--record", record)
    assert result.code == ExitCode.LLM_UNREACHABLE, result.err
    text = record.read_text(encoding="utf-8")
    assert f"cannot reach http://***@127.0.0.1:{port}/v1" in text
    assert PASSWORD not in result.out + result.err + text


# -- 3. what check accepts, run accepts; robot.toml's key is named, not --llm ------------------

BAD_ROBOT = [
    ('base_url = "local"', 'base_url = "http://example.org\\r\\nX-Evil: 1/v1"', "llm.base_url"),
    ('base_url = "local"', 'base_url = "http://[::1/v1"', "llm.base_url"),
    ('base_url = "local"', 'base_url = "http://example.org:99999/v1"', "llm.base_url"),
    ("deadline = 8.0", "deadline = inf", "llm.deadline"),
    ("max_speed = 0.25", "max_speed = inf", "safety.max_speed"),
    ("wall_seconds = 600", "wall_seconds = inf", "code.wall_seconds"),
    ('recordings = "recordings"', 'recordings = "/dev/full"', "recordings"),
]


@pytest.mark.parametrize(("old", "new", "key"), BAD_ROBOT, ids=[b[1][:24] for b in BAD_ROBOT])
def test_check_refuses_what_run_refuses(old: str, new: str, key: str, tmp_path: Path) -> None:
    text = (ROOT / "robot.toml").read_text(encoding="utf-8").replace(old, new, 1)
    assert new in text
    robot = tmp_path / "robot.toml"
    robot.write_text(text.replace('skills = "skills"', f'skills = "{ROOT / "skills"}"', 1))
    checked = onboard("--robot", robot, "check")
    ran = onboard("--robot", robot, "run", "engage", "--clock", "virtual", cwd=tmp_path)
    lines = [one_line_error(checked), one_line_error(ran)]
    assert checked.code == ran.code == ExitCode.INPUT_ERROR
    assert lines[0] == lines[1]
    assert f"{robot}:" in lines[0] and f"[{key}]" in lines[0] and "--llm" not in lines[0]
    assert not (tmp_path / "recordings").exists()


def test_a_non_finite_skill_argument_is_refused_by_check_and_run(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    text = (ROOT / "skills" / "engage.toml").read_text(encoding="utf-8")
    (skills / "engage.toml").write_text(text.replace("stop_distance = 1.5", "stop_distance = nan"))
    robot = robot_copy(tmp_path, skills=skills)
    lines = [one_line_error(onboard("--robot", robot, *args)) for args in (["check"], run_args())]
    assert lines[0] == lines[1]
    assert "engage.toml:" in lines[0] and "stop_distance] nan: must be a finite number" in lines[0]


# -- 4. escape sequences from files and programs are shown, never sent to the terminal ---------


def test_escape_sequences_in_a_scenario_name_are_shown_not_obeyed(tmp_path: Path) -> None:
    text = (SCENARIOS / "person-object.toml").read_text(encoding="utf-8")
    scenario = tmp_path / "shouting.toml"
    name = json.dumps(f"shouting{ESCAPES}")
    scenario.write_text(text.replace('name = "person-object"', f"name = {name}", 1))
    robot = robot_copy(tmp_path)
    result = onboard("--robot", robot, *run_args("--scenario", scenario))
    assert result.code in (ExitCode.SUCCESS, ExitCode.TASK_FAILED), result.err
    assert "on shouting\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31m, LLM" in result.out
    tables = onboard("--robot", robot, "eval", "engage", "--trials", "1", "--scenario", scenario)
    assert tables.code == ExitCode.SUCCESS, tables.err
    assert "shouting\\x1b]0;pwned" in tables.out  # its row in the rich tables
    for printed in (result.out + result.err, tables.out + tables.err):
        assert "\x1b" not in printed and "\x07" not in printed


def test_a_programs_escape_sequences_are_shown_not_obeyed(tmp_path: Path) -> None:
    program = tmp_path / "shout.py"
    program.write_text(f"print({ESCAPES!r} + 'hello')\nprint('second line')\n", encoding="utf-8")
    result = onboard("--robot", robot_copy(tmp_path), "code", "run", program)
    assert result.code == ExitCode.SUCCESS, result.err
    assert "\x1b" not in result.out and "\x07" not in result.out
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b[31mhello\nsecond line\n" in result.out


# -- 5. a recording path into folders that do not exist ----------------------------------------


def test_record_into_missing_folders_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    record = tmp_path / "missing" / "dir" / "x.jsonl"
    result = onboard("--robot", robot_copy(tmp_path), *run_args("--record", record))
    assert result.code == ExitCode.INPUT_ERROR
    line = one_line_error(result)
    assert f"{record}: cannot record: folder {tmp_path / 'missing'} does not exist" in line
    assert not (tmp_path / "missing").exists()


def test_the_recordings_folder_of_robot_toml_is_created_but_not_its_parents(
    tmp_path: Path,
) -> None:
    robot = robot_copy(tmp_path)  # recordings = tmp_path/recordings, not made yet
    assert onboard("--robot", robot, *run_args()).code in (ExitCode.SUCCESS, ExitCode.TASK_FAILED)
    assert len(list((tmp_path / "recordings").glob("engage-*.jsonl"))) == 1
    deeper = robot_copy(
        tmp_path,
        name="deeper.toml",
        replace=[
            (f'recordings = "{tmp_path / "recordings"}"', f'recordings = "{tmp_path / "a" / "b"}"')
        ],
    )
    lines = [one_line_error(onboard("--robot", deeper, *args)) for args in (["check"], run_args())]
    assert f"folder {tmp_path / 'a'} does not exist" in lines[0]
    assert f"folder {tmp_path / 'a'} does not exist" in lines[1]
    assert not (tmp_path / "a").exists()


# -- 6. SIGTERM during start-up: exit 143, not death by the signal ------------------------------


def test_sigterm_during_start_up_exits_143(tmp_path: Path) -> None:
    """The first stderr line (no robot.toml here) comes before any model or skill loads and
    a second or more before the episode's own handlers: the signal lands in start-up."""
    process = subprocess.Popen([str(ONBOARD), *map(str, run_args())], cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            assert selector.select(BOUND), "onboard printed nothing on stderr"
        first = process.stderr.readline().decode()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=BOUND)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert first.strip() == NO_ROBOT
    assert process.returncode == ExitCode.SIGTERM == 143, err
    assert err.decode().strip() == "onboard: stopped by SIGTERM"
    assert not (tmp_path / "recordings").exists() or not any((tmp_path / "recordings").iterdir())


def signal_now(sig: signal.Signals) -> None:
    """``sig`` to this process; its handler runs before this returns (the main thread)."""
    assert threading.current_thread() is threading.main_thread(), "signals need the main thread"
    signal.raise_signal(sig)


def wrapping_library(sig: signal.Signals) -> Callable[[], int]:
    """What pydantic-core did in a CI run: SIGTERM landed while it built a model's validators,
    and the Terminated the handler raised came out as its own error (a SchemaError, 'Error
    building "literal" validator: Terminated')."""

    def command() -> int:
        try:
            signal_now(sig)
        except (Terminated, KeyboardInterrupt) as exc:
            raise RuntimeError(f'Error building "literal" validator: {exc!r}') from exc
        return ExitCode.SUCCESS

    return command


def swallowing_library(sig: signal.Signals) -> Callable[[], int]:
    def command() -> int:
        with contextlib.suppress(Terminated, KeyboardInterrupt):
            signal_now(sig)
        return ExitCode.SUCCESS

    return command


STOPPED = {
    signal.SIGTERM: (ExitCode.SIGTERM, "onboard: stopped by SIGTERM"),
    signal.SIGINT: (ExitCode.SIGINT, "onboard: interrupted"),
}


@pytest.mark.parametrize("sig", list(STOPPED), ids=lambda s: s.name)
@pytest.mark.parametrize("library", [wrapping_library, swallowing_library])
def test_a_stop_signal_a_library_caught_still_stops_the_command(
    library: Callable[[signal.Signals], Callable[[], int]],
    sig: signal.Signals,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, said = STOPPED[sig]
    assert reported(library(sig)) == code
    assert capsys.readouterr().err.strip() == said


def test_sigterm_swallowed_in_start_up_stops_the_episode_at_once() -> None:
    stops: list[str] = []

    def start_up_then_episode() -> int:
        swallowing_library(signal.SIGTERM)()
        with on_stop_signals(stops.append):
            assert stops == ["SIGTERM"]  # before the episode's first step
        return ExitCode.SUCCESS

    assert reported(start_up_then_episode) == ExitCode.SIGTERM
    assert stops == ["SIGTERM"]


def test_a_command_without_a_stop_signal_keeps_its_code() -> None:
    assert reported(lambda: ExitCode.TASK_FAILED) == ExitCode.TASK_FAILED
    assert stop_signal_arrived() is None


# -- 7. the JAKA emulator refuses what a controller must not run ---------------------------------


@pytest.fixture(scope="module")
def jaka() -> Iterator[JakaServer]:
    with twin_arm() as arm, JakaServer(arm, port=0, status_port=0, powered=True) as server:
        yield server


def ask(server: JakaServer, data: bytes) -> dict[str, Any]:
    with socket.create_connection(server.address, timeout=BOUND) as sock:
        sock.sendall(data + b"\n")
        stream = JsonStream()
        while True:
            chunk = sock.recv(65536)
            assert chunk, "the emulator closed the connection"
            frames = stream.frames(chunk)
            if frames:
                assert isinstance(frames[0], dict)
                return frames[0]


def test_jaka_emulator_refuses_a_wrong_joint_count_a_huge_speed_and_a_repeated_key(
    jaka: JakaServer,
) -> None:
    joints = len(jaka.arm.state().joints)
    here = [0.0] * joints
    commands = {
        "joints": {"cmdName": "joint_move", "jointPosition": [0.0] * (joints + 1), "speed": 10},
        "speed": {"cmdName": "joint_move", "jointPosition": here, "speed": 1e308},
        "linear": {"cmdName": "moveL", "cartPosition": [400, 0, 300, 180, 0, 0], "speed": 1e308},
    }
    started = jaka.worker.started
    replies = {name: ask(jaka, json.dumps(c).encode()) for name, c in commands.items()}
    replies["twice"] = ask(jaka, b'{"cmdName": "get_robot_state", "cmdName": "joint_move", '
                           b'"jointPosition": ' + json.dumps(here).encode() + b"}")  # fmt: skip
    assert {name: r["errorCode"] for name, r in replies.items()} == dict.fromkeys(replies, "1")
    assert f"jointPosition must be {joints} numbers" in replies["joints"]["errorMsg"]
    assert "speed must be above 0 and at most" in replies["speed"]["errorMsg"]
    assert "speed must be above 0 and at most" in replies["linear"]["errorMsg"]
    assert "key 'cmdName' given twice" in replies["twice"]["errorMsg"]
    assert jaka.worker.started == started  # refused before anything was queued
    assert ask(jaka, b'{"cmdName": "get_robot_state"}')["errorCode"] == "0"


# -- 9. a skill with 20,000 references: refused at once, not minutes of embedding ----------------


def test_a_skill_with_20000_references_is_refused_at_once(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    text = (ROOT / "skills" / "engage.toml").read_text(encoding="utf-8")
    many = "".join(f'  "the robot waves hello, number {i}",\n' for i in range(20_000))
    (skills / "engage.toml").write_text(
        text.replace("references = [\n", f"references = [\n{many}", 1)
    )
    began = time.monotonic()
    result: Result = onboard("--robot", robot_copy(tmp_path, skills=skills), "check")
    seconds = time.monotonic() - began
    line = one_line_error(result)
    assert "references] 20085 references, more than 1000 a skill may have" in line
    # the old check embedded every reference and compared every pair: minutes (issue 32)
    assert seconds < 60, seconds
