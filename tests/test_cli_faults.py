"""Faults and hostile input, each class through the ``onboard`` command: one error line, the
docs/exit-codes.md's exit code, no traceback; names from files never leave their folder."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli import (
    ERROR_LINE,
    ONBOARD,
    SCENARIOS,
    Result,
    onboard,
    one_line_error,
    robot_copy,
    skills_copy,
)

from onboard.base.errors import CandidateError, RecordingError
from onboard.grounding.candidates import CandidateStore
from onboard.loop.exitcodes import ExitCode
from onboard.loop.graph import _ids, _label
from onboard.loop.paths import inside, safe_name
from onboard.loop.recorder import read_recording

HOSTILE_NAMES = ["../../evil", "/etc/cron.d/x", "..", "a/../../b", "..\\..\\x", "\u0007\n.bashrc"]


def hostile_scenario(tmp_path: Path, name: str) -> Path:
    text = (SCENARIOS / "person-object.toml").read_text(encoding="utf-8")
    head, rest = text.split("\nname = ", 1)
    path = tmp_path / "hostile.toml"
    path.write_text(
        f"{head}\nname = {json.dumps(name)}\n{rest.split(chr(10), 1)[1]}", encoding="utf-8"
    )
    return path


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


# -- 4. paths from data stay inside their folder ----------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("person-object", "person-object"),
        ("../../evil", "evil"),
        ("/etc/passwd", "etc-passwd"),
        ("..", "unnamed"),
        ("", "unnamed"),
        ("a/../../b", "a-b"),
        ("\x00\n\t", "unnamed"),
        ("wait for cue", "wait-for-cue"),
        ('a"b]\n[x', "a-b-x"),
        ("é" * 3 + "x", "x"),
        ("x" * 300, "x" * 80),
    ],
)
def test_safe_name_is_one_plain_file_name(name: str, expected: str) -> None:
    safe = safe_name(name)
    assert safe == expected
    assert "/" not in safe and not safe.startswith(".") and safe.isprintable()


def test_inside_refuses_a_path_that_resolves_elsewhere(tmp_path: Path) -> None:
    folder = tmp_path / "recordings"
    assert inside(folder, folder / "a.jsonl") == folder / "a.jsonl"
    for escape in (folder / ".." / "a.jsonl", Path("/etc/passwd"), folder / "x" / ".." / ".."):
        with pytest.raises(RecordingError, match="outside its folder"):
            inside(folder, escape)
    (folder).mkdir()
    (folder / "link").symlink_to(tmp_path)
    with pytest.raises(RecordingError):
        inside(folder, folder / "link" / "a.jsonl")


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_run_records_a_hostile_scenario_name_inside_recordings(tmp_path: Path, name: str) -> None:
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    robot = robot_copy(work)
    scenario = hostile_scenario(work, name)
    before = files_under(tmp_path)
    result = onboard("--robot", robot, "run", "engage", "--llm", "standin", "--clock", "virtual",
                     "--scenario", scenario, cwd=work)  # fmt: skip
    assert result.code == ExitCode.SUCCESS, result.err
    new = files_under(tmp_path) - before
    recordings = (work / "recordings").resolve()
    episodes = [p for p in new if p.suffix == ".jsonl" and p.name != "candidates.jsonl"]
    assert len(episodes) == 1, new
    assert all(recordings in p.resolve().parents for p in new), new
    assert episodes[0].name.startswith("engage-") and episodes[0].name.isprintable()


def test_a_hostile_skill_name_is_recorded_inside_recordings(tmp_path: Path) -> None:
    skills = skills_copy(tmp_path)
    engage = skills / "engage.toml"
    text = engage.read_text(encoding="utf-8")
    text = text[: text.index("\n[critic]")]  # the critic's card names the skill engage
    engage.write_text(text.replace('name = "engage"', 'name = "../../../owned"', 1), "utf-8")
    robot = robot_copy(tmp_path, skills=skills)
    result = onboard("--robot", robot, "run", "engage", "--llm", "standin", "--clock", "virtual",
                     "--scenario", SCENARIOS / "person-object.toml", cwd=tmp_path)  # fmt: skip
    assert result.code == ExitCode.SUCCESS, result.err
    [episode] = (tmp_path / "recordings").glob("owned-person-object-*.jsonl")
    assert not list(tmp_path.parent.glob("owned*")) and not list(tmp_path.glob("owned*"))
    assert episode.stat().st_size > 0


def test_eval_records_hostile_scenario_names_inside_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "deep" / "rec"
    folder.parent.mkdir()  # --record DIR creates DIR, never its parents
    scenarios = []
    for i, name in enumerate(["../../escaped", "../x/../../y"]):
        sub = tmp_path / f"s{i}"
        sub.mkdir()
        scenarios += ["--scenario", str(hostile_scenario(sub, name))]
    result = onboard("--robot", robot_copy(tmp_path), "eval", "engage", "--trials", "1",
                     *scenarios, "--record", folder, "--json", cwd=tmp_path)  # fmt: skip
    assert result.code == ExitCode.SUCCESS, result.err
    written = sorted(p.name for p in folder.iterdir())
    assert written == ["escaped-00.jsonl", "x-y-00.jsonl"]
    outside = [p for p in tmp_path.rglob("*.jsonl") if folder not in p.parents]
    assert outside == [], outside


def test_the_recordings_quota_drops_the_oldest_episodes(tmp_path: Path) -> None:
    robot = robot_copy(tmp_path)
    text = robot.read_text(encoding="utf-8")
    robot.write_text(
        text.replace("\nrecordings = ", "\nrecordings_max_mb = 0.01\nrecordings = ", 1)
    )
    folder = tmp_path / "recordings"
    folder.mkdir()
    old = []
    for i in range(3):  # 6 KB each, oldest first; 10 KB hold one of them
        path = folder / f"engage-old-{i}.jsonl"
        path.write_text('{"kind": "header"}\n' * 300, encoding="utf-8")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
        old.append(path)
    candidates = folder / "candidates.jsonl"
    candidates.write_text('{"event": "x"}\n' * 2000, encoding="utf-8")  # not an episode
    result = onboard("--robot", robot, "run", "engage", "--llm", "standin", "--clock", "virtual",
                     "--scenario", SCENARIOS / "person-object.toml", cwd=tmp_path)  # fmt: skip
    assert result.code == ExitCode.SUCCESS, result.err
    lines = result.err.strip().splitlines()
    assert lines == [
        "onboard: recordings over 0.01 MB: deleted the 2 oldest: "
        "engage-old-0.jsonl, engage-old-1.jsonl"
    ]
    assert not old[0].exists() and not old[1].exists() and old[2].exists()
    assert candidates.exists()
    assert len(list(folder.glob("engage-person-object-*.jsonl"))) == 1


@pytest.mark.parametrize("value", ["0", "-5", '"lots"'])
def test_robot_toml_refuses_a_bad_quota(tmp_path: Path, value: str) -> None:
    robot = robot_copy(tmp_path)
    text = robot.read_text(encoding="utf-8")
    quota = f"\nrecordings_max_mb = {value}\nrecordings = "
    robot.write_text(text.replace("\nrecordings = ", quota, 1), encoding="utf-8")
    line = one_line_error(onboard("--robot", robot, "check"))
    assert ERROR_LINE.match(line) and "[recordings_max_mb]" in line


# -- 5. no traceback: full disks, hostile recordings, ports, hosts, numbers, URLs --------------


def run_limited(args: list[str | Path], cwd: Path, fsize: int) -> Result:
    """``onboard`` with a file-size limit: writes past ``fsize`` bytes fail with EFBIG."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    done = subprocess.run([str(ONBOARD), *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=120, check=False, preexec_fn=limit)  # fmt: skip
    return Result(done.returncode, done.stdout, done.stderr, 0.0)


def test_recording_to_a_full_disk_is_one_line_and_incomplete(tmp_path: Path) -> None:
    result = onboard("--robot", robot_copy(tmp_path), "run", "engage", "--llm", "standin",
                     "--clock", "virtual", "--record", "/dev/full", cwd=tmp_path)  # fmt: skip
    assert result.code == ExitCode.INCOMPLETE
    line = one_line_error(result)
    assert line.startswith("onboard: error: /dev/full: cannot write the recording: No space")


def test_a_recording_that_fills_up_mid_episode_keeps_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    args: list[str | Path] = ["--robot", robot_copy(tmp_path), "run", "engage", "--llm",
                              "standin", "--clock", "virtual", "--record", path]  # fmt: skip
    # the header holds the skill's text (about 19 KB); the episode needs some 31 KB in all
    result = run_limited(args, tmp_path, fsize=24_000)
    assert result.code == ExitCode.INCOMPLETE, result.err
    line = one_line_error(result)
    assert f"{path}: cannot write the recording: File too large; the robot was stopped" in line
    records = list(read_recording(path))  # every complete record is intact; a torn one is not
    assert records[0]["kind"] == "header" and len(records) > 5
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert not any(r["kind"] == "end" for r in records)


def test_eval_recording_to_a_full_disk_is_one_line(tmp_path: Path) -> None:
    args: list[str | Path] = ["--robot", robot_copy(tmp_path), "eval", "engage", "--trials", "2",
                              "--record", tmp_path / "rec"]  # fmt: skip
    result = run_limited(args, tmp_path, fsize=12_000)
    assert result.code == ExitCode.INCOMPLETE, result.err
    assert "cannot write the recording: File too large" in one_line_error(result)


def test_a_recording_that_cannot_be_opened_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("", encoding="utf-8")
    result = onboard("--robot", robot_copy(tmp_path), "run", "engage", "--llm", "standin",
                     "--clock", "virtual", "--record", tmp_path / "file" / "x.jsonl")  # fmt: skip
    assert result.code == ExitCode.INPUT_ERROR
    assert "cannot open for recording" in one_line_error(result)


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    tmp_path = tmp_path_factory.mktemp("hostile")
    path = tmp_path / "episode.jsonl"
    result = onboard("--robot", robot_copy(tmp_path), "run", "engage", "--llm", "standin",
                     "--clock", "virtual", "--record", path)  # fmt: skip
    assert result.code == 0, result.err
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    ("kind", "key", "value"),
    [
        ("reply", "text", 42),
        ("reply", "text", None),
        ("reply", "text", ["a"]),
        ("reply", "latency", "fast"),
        ("reply", "virtual_latency", {"s": 1}),
        ("request", "messages", "hello"),
        ("request", "purpose", 7),
        ("header", "robot", 42),
        ("header", "skill", 42),
        ("header", "robot_root", ["x"]),
        ("header", "scenario", "x"),
        ("header", "options", []),
        ("end", "actions", 5),
    ],
)
def test_replay_of_a_recording_with_wrong_types_is_one_line(
    episode: list[dict[str, object]], tmp_path: Path, kind: str, key: str, value: object
) -> None:
    records = [dict(r) for r in episode]
    record = next(r for r in records if r["kind"] == kind)
    record[key] = value
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = onboard("replay", bad, cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR, result.err
    assert str(bad) in one_line_error(result)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def serve(*args: str, cwd: Path) -> Result:
    """A server command that must refuse at once (a timeout here means it started)."""
    return onboard(*args, cwd=cwd, timeout=30)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["standin", "--port", "99999"], "--port 99999: not a port"),
        (["standin", "--port", "-1"], "--port -1: not a port"),
        (["standin", "--port", "65536"], "--port 65536: not a port"),
        (["standin", "--host", "no-such-host.invalid", "--port", "0"], "does not resolve"),
        (["standin", "--host", "x" * 300, "--port", "0"], "does not resolve"),
        (["standin", "--port", "0", "--noise", "nan"], "--noise nan: must be within 0 to 1"),
        (["standin", "--port", "0", "--noise", "-1"], "--noise -1.0: must be within 0 to 1"),
        (["sim", "serve", "--jaka-port", "99999", "--no-gcode"], "--jaka-port 99999: not a"),
        (["sim", "serve", "--status-port", "-1", "--no-gcode"], "--status-port -1: not a"),
        (["sim", "serve", "--jaka-host", "no-such-host.invalid"], "does not resolve"),
    ],
)
def test_a_server_that_cannot_listen_is_one_line(
    tmp_path: Path, args: list[str], words: str
) -> None:
    result = serve(*args, cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    assert words in one_line_error(result)


@pytest.mark.parametrize(
    "args",
    [
        ["standin", "--port", "{port}"],
        ["sim", "serve", "--jaka-port", "{port}", "--no-gcode"],
        ["sim", "serve", "--jaka-port", "0", "--status-port", "{port}", "--no-gcode"],
    ],
)
def test_a_port_in_use_is_one_line(tmp_path: Path, busy_port: int, args: list[str]) -> None:
    result = serve(*[a.format(port=busy_port) for a in args], cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    assert f"cannot listen on 127.0.0.1:{busy_port}: the port is in use" in one_line_error(result)


def test_check_of_a_skills_folder_that_does_not_exist_fails(tmp_path: Path) -> None:
    for skills in (tmp_path / "nope", tmp_path / "a-file"):
        (tmp_path / "a-file").write_text("", encoding="utf-8")
        robot = robot_copy(tmp_path, skills=skills)
        result = onboard("--robot", robot, "check", cwd=tmp_path)
        assert result.code == ExitCode.INPUT_ERROR and "ok" not in result.out.split()
        line = one_line_error(result)
        assert ERROR_LINE.match(line) and f"[skills] {skills} " in line, line


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--trials", "0"], "--trials 0: must be 1 or more"),
        (["--trials", "-3"], "--trials -3: must be 1 or more"),
        (["--latency", "inf"], "--latency inf: must be a finite"),
        (["--latency=-inf"], "--latency -inf: must be a finite"),
        (["--latency", "nan"], "--latency nan: must be a finite"),
        (["--latency", "-1"], "--latency -1.0: must be a finite"),
        (["--llm", "ftp://example.com/v1"], 'must be "local", "standin" or an http(s) URL'),
        (["--llm", "http://localhost:99999/v1"], "not a URL"),
    ],
)
def test_eval_refuses_numbers_and_urls_robot_toml_refuses(
    tmp_path: Path, args: list[str], words: str
) -> None:
    result = onboard("--robot", robot_copy(tmp_path), "eval", "engage", *args, cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    assert words in one_line_error(result)


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "localhost:8080", "http://", "gopher://x", "http://a\nb/"]
)
def test_run_refuses_a_non_http_llm(tmp_path: Path, url: str) -> None:
    result = onboard("--robot", robot_copy(tmp_path), "run", "engage", "--llm", url,
                     "--clock", "virtual", cwd=tmp_path)  # fmt: skip
    assert result.code == ExitCode.INPUT_ERROR
    assert "--llm " in one_line_error(result)
    assert not (tmp_path / "recordings").exists() or not list(
        (tmp_path / "recordings").glob("engage-*")
    )


# -- 10. candidate names -----------------------------------------------------------------------


@pytest.fixture
def candidate_robot(tmp_path: Path) -> tuple[Path, Path, str]:
    skills = skills_copy(tmp_path)
    robot = robot_copy(tmp_path, skills=skills)
    store = CandidateStore(tmp_path / "recordings" / "candidates.jsonl")
    candidate = store.add("engage", "The robot should wave at the person.", "Walking by.")
    return robot, skills / "engage.toml", candidate.id


@pytest.mark.parametrize(
    "name",
    ['a"b]\n[x', "x]", "[x", 'say "hi"', "a\tb", "a\\b", "'", " lead", "trail ", "a  b",
     "a\x07b", "\x1b[31mred", "=", "a.b = 1", "x" * 65],
)  # fmt: skip
def test_actions_add_refuses_a_name_that_is_not_a_name(
    candidate_robot: tuple[Path, Path, str], name: str
) -> None:
    robot, engage, ident = candidate_robot
    before = engage.read_bytes()
    result = onboard("--robot", robot, "actions", "add", "engage", ident, "--name", name)
    assert result.code == ExitCode.INPUT_ERROR
    line = one_line_error(result)
    assert line.startswith(f"onboard: error: {engage}: action name ") and "is not a name" in line
    assert engage.read_bytes() == before
    assert not list(engage.parent.glob(".engage-*"))


def test_actions_add_errors_name_the_skill_file_not_a_temporary_one(
    candidate_robot: tuple[Path, Path, str],
) -> None:
    robot, engage, ident = candidate_robot
    before = engage.read_bytes()
    result = onboard("--robot", robot, "actions", "add", "engage", ident, "--name", "fly",
                     "--command", "base.fly")  # fmt: skip
    assert result.code == ExitCode.INPUT_ERROR
    line = one_line_error(result)
    assert f"{engage}: the new action would break the skill: {engage}:" in line
    assert "[actions.fly.command]" in line and "/.engage-" not in line
    assert engage.read_bytes() == before


def test_a_skill_file_with_a_hostile_action_name_is_refused(tmp_path: Path) -> None:
    skills = skills_copy(tmp_path)
    engage = skills / "engage.toml"
    text = engage.read_text(encoding="utf-8")
    engage.write_text(text.replace("[actions.pause]", '[actions."pa\\"use]\\n[x"]', 1), "utf-8")
    result = onboard("--robot", robot_copy(tmp_path, skills=skills), "check", cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    assert "Traceback" not in result.err
    assert any("is not a name" in line and str(engage) in line for line in result.err.splitlines())


def test_mermaid_labels_and_ids_are_escaped() -> None:
    assert _label('a"b]\n[x') == "a#quot;b] [x"
    assert _label("<b>#1") == "#lt;b#gt;#35;1"
    ids = _ids(["wait for cue", "wait-for-cue", "wait_for_cue", "é"])
    assert list(ids.values()) == ["wait_for_cue", "wait_for_cue_2", "wait_for_cue_3", "_"]


def test_a_candidate_store_on_a_full_disk_is_one_line() -> None:
    with pytest.raises(CandidateError, match=r"^/dev/full: cannot write: No space left"):
        CandidateStore(Path("/dev/full")).add("engage", "The robot should sing.", "Sitting.")


def test_malformed_candidate_records_are_skipped(tmp_path: Path) -> None:
    robot = robot_copy(tmp_path)
    store = CandidateStore(tmp_path / "recordings" / "candidates.jsonl")
    good = store.add("engage", "The robot should wave at the person.", "Walking by.")
    with store.path.open("a", encoding="utf-8") as out:
        out.write('{"event": "candidate", "id": 5}\n[1, 2]\n"text"\n{"event": "registered"}\n')
        out.write('{"event": "candidate", "id": "ab", "skill": "engage", "reply": 7, '
                  '"situation": null, "wall": "x"}\n\xff\n')  # fmt: skip
    listed = onboard("--robot", robot, "actions", "list", cwd=tmp_path)
    assert listed.code == 0 and listed.err == "", listed.err
    assert listed.out.startswith(good.id) and listed.out.count("[engage]") == 1
    missing = onboard("--robot", robot, "actions", "add", "engage", "ab", "--name", "x")
    assert missing.code == ExitCode.INPUT_ERROR
    assert "no candidate with id 'ab'" in one_line_error(missing)
