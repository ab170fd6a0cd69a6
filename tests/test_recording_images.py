"""Images in chat messages (OpenAI content parts with base64 data URLs) are recorded once each,
by hash, in ``<recording stem>.images/`` beside the recording; the records hold references,
and reading back with ``images=True`` gives the data URLs byte for byte. A missing or corrupt
image is one error line; a failed image write is a recording fault like any other."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from test_cli import SCENARIOS, onboard, one_line_error, robot_copy

from onboard.base.errors import RecordingError, RecordingWriteError
from onboard.hri.replay import ReplayAsk
from onboard.loop.exitcodes import ExitCode
from onboard.loop.quota import RecordingsQuota, enforce_quota
from onboard.loop.recorder import MemoryRecorder, Recorder, read_recording
from onboard.loop.recording import images_dir

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0" + bytes(reversed(range(256))) * 3
BIG = bytes(range(256)) * 256  # 64 KB
SECRET = "sk-onboard-images-5e2b7d"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def image(data: bytes, media_type: str = "image/png", **extra: Any) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(data, media_type), **extra}}


def reference(data: bytes, media_type: str = "image/png", **extra: Any) -> dict[str, Any]:
    ref = {"url": f"sha256:{sha(data)}", "media_type": media_type, **extra}
    return {"type": "image_url", "image_url": ref}


def user(text: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def record_request(path: Path, messages: list[dict[str, Any]], rid: int = 1) -> Recorder:
    with Recorder(path) as recorder:
        recorder.write("request", id=rid, purpose="plan", messages=messages)
    return recorder


# -- stored once, referenced, read back --------------------------------------------------------


def test_one_image_in_two_messages_is_stored_once(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    messages = [
        {"role": "system", "content": "You plan for a robot."},
        user("What is on the table?", image(PNG)),
        {"role": "assistant", "content": "A cup."},
        user("And now?", image(PNG)),
    ]
    record_request(path, messages)
    folder = tmp_path / "episode.images"
    assert images_dir(path) == folder
    assert [p.name for p in folder.iterdir()] == [f"{sha(PNG)}.png"]
    assert (folder / f"{sha(PNG)}.png").read_bytes() == PNG
    [written] = lines_of(path)
    assert written["messages"] == [
        messages[0],
        user("What is on the table?", reference(PNG)),
        messages[2],
        user("And now?", reference(PNG)),
    ]
    assert base64.b64encode(PNG).decode("ascii") not in path.read_text(encoding="utf-8")
    [restored] = read_recording(path, images=True)
    assert restored["messages"] == messages
    assert restored["messages"][3]["content"][1]["image_url"]["url"] == data_url(PNG)
    [as_written] = read_recording(path)
    assert as_written == written


def test_an_image_already_stored_is_not_written_again(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    record_request(path, [user("first", image(PNG))], rid=1)
    stored = images_dir(path) / f"{sha(PNG)}.png"
    before = stored.stat()
    with Recorder(path) as recorder:  # the same recording, appended to
        recorder.write("request", id=2, purpose="plan", messages=[user("again", image(PNG))])
        recorder.write("request", id=3, purpose="plan", messages=[user("and", image(PNG))])
    after = stored.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert [p.name for p in images_dir(path).iterdir()] == [stored.name]  # no temporary left
    assert [r["id"] for r in read_recording(path, images=True)] == [1, 2, 3]


def test_each_media_type_gets_its_extension_and_other_keys_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    messages = [user("look", image(JPEG, "image/jpeg", detail="low"), image(PNG, "image/webp"))]
    record_request(path, messages)
    names = sorted(p.name for p in images_dir(path).iterdir())
    assert names == sorted([f"{sha(JPEG)}.jpg", f"{sha(PNG)}.webp"])
    [written] = lines_of(path)
    assert written["messages"][0]["content"][1] == reference(JPEG, "image/jpeg", detail="low")
    [restored] = read_recording(path, images=True)
    assert restored["messages"] == messages


def test_urls_that_are_not_base64_images_are_recorded_as_they_are(tmp_path: Path) -> None:
    """Only a data URL its bytes give back exactly becomes a reference."""
    path = tmp_path / "episode.jsonl"
    non_canonical = "data:image/png;base64,AB=="  # decodes to b"\x00", which encodes as AA==
    assert base64.b64decode("AB==", validate=True) == b"\x00"
    parts = [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!not base64!!"}},
        {"type": "image_url", "image_url": {"url": non_canonical}},
        {"type": "image_url", "image_url": {"url": data_url(PNG, "text/plain")}},
        {"type": "image_url", "image_url": "not a mapping"},
    ]
    messages = [user("what are these?", *parts), {"role": "user", "content": "plain text"}]
    record_request(path, messages)
    assert not images_dir(path).exists()
    assert lines_of(path)[0]["messages"] == messages
    assert next(read_recording(path, images=True))["messages"] == messages


def test_secrets_are_scrubbed_from_the_text_and_images_kept(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    messages = [user(f"the key is {SECRET}", image(PNG))]
    with Recorder(path) as recorder:
        recorder.hide(SECRET)
        recorder.write("request", id=1, purpose="plan", messages=messages)
    assert SECRET not in path.read_text(encoding="utf-8")
    [restored] = read_recording(path, images=True)
    assert restored["messages"] == [user("the key is ***", image(PNG))]


def test_a_memory_recorder_keeps_images_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    recorder = MemoryRecorder()
    messages = [user("first", image(PNG)), user("second", image(PNG), image(JPEG, "image/jpeg"))]
    recorder.write("request", id=1, purpose="plan", messages=messages)
    assert recorder.images == {sha(PNG): PNG, sha(JPEG): JPEG}
    [record] = recorder.records
    assert record["messages"][0] == user("first", reference(PNG))
    assert recorder.restored(record)["messages"] == messages
    assert list(tmp_path.iterdir()) == []  # nothing on disk


# -- missing, corrupt and hostile images -------------------------------------------------------


@pytest.mark.parametrize("damage", ["missing", "corrupt", "truncated"])
def test_a_missing_or_corrupt_image_is_one_line(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "episode.jsonl"
    record_request(path, [user("look", image(PNG))])
    stored = images_dir(path) / f"{sha(PNG)}.png"
    if damage == "missing":
        stored.unlink()
    else:
        stored.write_bytes(JPEG if damage == "corrupt" else PNG[:100])
    with pytest.raises(RecordingError) as caught:
        list(read_recording(path, images=True))
    message = str(caught.value)
    assert message.startswith(f"{stored}: image ") and "\n" not in message
    if damage == "missing":
        assert message == (
            f"{stored}: image missing ({path} references it): copy the recording with its "
            "images folder episode.images/"
        )
    else:
        digest = sha(JPEG if damage == "corrupt" else PNG[:100])
        assert f"image corrupt: its bytes have sha256 {digest}, not the one" in message
    assert len(list(read_recording(path))) == 1  # the records themselves still read


@pytest.mark.parametrize(
    ("url", "media_type"),
    [
        ("sha256:../../../etc/passwd", "image/png"),
        (f"sha256:{'a' * 64}/../../x", "image/png"),
        (f"sha256:{'a' * 64}", "image/../../../etc/passwd"),
        (f"sha256:{'A' * 64}", "image/png"),
    ],
)
def test_a_hostile_reference_is_never_followed(tmp_path: Path, url: str, media_type: str) -> None:
    path = tmp_path / "episode.jsonl"
    part = {"type": "image_url", "image_url": {"url": url, "media_type": media_type}}
    record = {"seq": 0, "kind": "request", "id": 1, "purpose": "plan",
              "messages": [user("look", part)]}  # fmt: skip
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    assert list(read_recording(path, images=True)) == [record]  # kept as it is, nothing read


# -- a failed image write is a recording fault -------------------------------------------------


@pytest.mark.parametrize("fault", ["file-size-limit", "folder-in-the-way"])
def test_a_failed_image_write_stops_the_recording_and_keeps_what_was_written(
    tmp_path: Path, fault: str
) -> None:
    path = tmp_path / "episode.jsonl"
    faults: list[RecordingWriteError] = []
    recorder = Recorder(path)
    recorder.on_fault = faults.append
    recorder.write("header", format=2)
    recorder.write("request", id=1, purpose="plan", messages=[user("small", image(PNG))])
    if fault == "folder-in-the-way":
        for stored in images_dir(path).iterdir():
            stored.unlink()
        images_dir(path).rmdir()
        images_dir(path).write_bytes(b"")  # a file where the images folder goes
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if fault == "file-size-limit":  # writes past 16 KB fail with EFBIG (SIGXFSZ is ignored)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, hard))
    try:
        recorder.write("request", id=2, purpose="plan", messages=[user("big", image(BIG))])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    recorder.write("end", actions=[])  # in memory only from here on
    recorder.close()
    assert recorder.fault is not None and faults == [recorder.fault]
    reason = "File too large" if fault == "file-size-limit" else "File exists"
    assert str(recorder.fault) == (
        f"{path}: cannot write the recording: {reason}; the robot was stopped and the "
        "records before the failure were kept"
    )
    kept = list(read_recording(path, images=fault == "file-size-limit"))
    assert [r["kind"] for r in kept] == ["header", "request"] and kept[1]["id"] == 1
    if fault == "file-size-limit":
        assert [p.name for p in images_dir(path).iterdir()] == [f"{sha(PNG)}.png"]  # no part
    assert [r["kind"] for r in recorder.records] == ["header", "request", "request", "end"]
    assert recorder.images == {sha(BIG): BIG}
    assert recorder.restored(recorder.records[2])["messages"] == [user("big", image(BIG))]


# -- the quota, and replay ---------------------------------------------------------------------


def test_the_quota_counts_and_deletes_an_episodes_images(tmp_path: Path) -> None:
    old, new, keep = (tmp_path / f"{name}.jsonl" for name in ("old", "new", "keep"))
    for i, path in enumerate((old, new)):
        record_request(path, [user("look", image(BIG[: 8192 * (2 - i)]))])
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    episodes = old.stat().st_size + new.stat().st_size
    dropped = enforce_quota(tmp_path, episodes + 12_000, keep=keep)  # the images: 16 + 8 KB
    assert dropped == [old]
    assert not old.exists() and not images_dir(old).exists()
    assert new.exists() and images_dir(new).exists()


#: the folders os.scandir opened while a quota made room (CPython's audit events: the calls
#: themselves, observed, not replaced); None: not watching
_SCANNED: list[Path] | None = None


def _on_audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "os.scandir" or _SCANNED is None:
        return
    if isinstance(args[0], str | bytes | os.PathLike):  # shutil.rmtree's go by descriptor
        _SCANNED.append(Path(os.fsdecode(args[0])))


def _scanned_making_room(quota: RecordingsQuota, keep: Path) -> tuple[list[Path], list[Path]]:
    """What ``quota.make_room(keep)`` deleted, and the folders it listed meanwhile."""
    global _SCANNED
    if not getattr(sys, "_onboard_quota_audit", False):  # a hook cannot be removed: once
        sys.addaudithook(_on_audit)
        sys._onboard_quota_audit = True  # type: ignore[attr-defined]
    _SCANNED = []
    try:
        dropped = quota.make_room(keep)
        return dropped, _SCANNED
    finally:
        _SCANNED = None


def test_the_quota_kept_across_recordings_measures_each_episode_once(tmp_path: Path) -> None:
    """As ``onboard up`` keeps it: each recording's start measures only the episodes new
    since the last (one listing of the folder, then the new ones' images folders), and
    deletes what a fresh count deletes: the oldest, until the rest fit."""
    folder = tmp_path / "rec"
    folder.mkdir()
    sizes: dict[str, int] = {}  # the episodes on disk, oldest first, as the test measures them

    def record(name: str, at: int, kb: int) -> None:
        path = folder / name
        record_request(path, [user(name, image(BIG[at : at + 1024 * kb]))])
        os.utime(path, (1_000_000 + at, 1_000_000 + at))
        images = sum(f.stat().st_size for f in images_dir(path).iterdir())
        sizes[name] = path.stat().st_size + images

    quota = RecordingsQuota(folder, 20_000)
    gone: list[Path] = []
    for step in range(8):
        keep = folder / f"ep{step}.jsonl"
        total, expected = sum(sizes.values()), []
        for name in list(sizes):  # a fresh count: the oldest go until the rest fit
            if total <= quota.max_bytes:
                break
            total -= sizes.pop(name)
            expected.append(folder / name)
        dropped, scanned = _scanned_making_room(quota, keep)
        assert dropped == expected, step
        new = [images_dir(folder / f"ep{step - 1}.jsonl")] if step else []
        if step == 5:  # recorded by another process meanwhile: measured once, too
            new.append(images_dir(folder / "other.jsonl"))
        assert sorted(scanned) == sorted([folder, *new]), step  # the older ones: not again
        gone += dropped
        record(keep.name, step, 4 + step % 3)
        if step == 4:
            record("other.jsonl", 100, 3)
            shutil.rmtree(images_dir(folder / "ep3.jsonl"))  # deleted by hand: not counted
            (folder / "ep3.jsonl").unlink()
            del sizes["ep3.jsonl"]
            gone.append(folder / "ep3.jsonl")
    assert len(gone) > 2 and sorted(p.name for p in folder.glob("*.jsonl")) == sorted(sizes)
    assert quota.take_gone() == gone and quota.take_gone() == []


def test_replay_compares_requests_with_their_images_restored(tmp_path: Path) -> None:
    path = tmp_path / "episode.jsonl"
    messages = [user("What is on the table?", image(PNG)), user("and here?", image(JPEG))]
    with Recorder(path) as recorder:
        recorder.write("request", id=1, purpose="plan", messages=messages)
        recorder.write("reply", id=1, purpose="plan", text="speak", latency=0.2)
        recorder.write("request", id=2, purpose="plan", messages=messages)
        recorder.write("reply", id=2, purpose="plan", text="wait", latency=0.2)
    ask = ReplayAsk(list(read_recording(path, images=True)), path)
    assert ask("plan", messages, None).text == "speak" and ask.divergence is None
    other = [user("What is on the table?", image(JPEG)), messages[1]]
    with pytest.raises(RecordingError, match=r"request 2 \(plan\) differs from the recording") as e:
        ask("plan", other, None)
    assert "message 1 (user), part 2" in str(e.value)  # the image part, not the text


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("run")
    path = tmp_path / "episode.jsonl"
    result = onboard("--robot", robot_copy(tmp_path), "run", "engage", "--llm", "standin",
                     "--clock", "virtual", "--record", path,
                     "--scenario", SCENARIOS / "person-object.toml")  # fmt: skip
    assert result.code == ExitCode.SUCCESS, result.err
    return path


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_onboard_replay_of_a_missing_or_corrupt_image_is_one_line(
    recorded: Path, tmp_path: Path, damage: str
) -> None:
    records = lines_of(recorded)
    request = next(r for r in records if r["kind"] == "request")
    request["messages"][0] = user(request["messages"][0]["content"], reference(PNG))
    path = tmp_path / "with-image.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    stored = images_dir(path) / f"{sha(PNG)}.png"
    if damage == "corrupt":
        stored.parent.mkdir()
        stored.write_bytes(JPEG)
    result = onboard("replay", path, cwd=tmp_path)
    assert result.code == ExitCode.INPUT_ERROR
    line = one_line_error(result)
    assert line.startswith(f"onboard: error: {stored}: image {damage}")
