"""Recordings as MCAP (issue 33, item 2): JSON lines -> MCAP -> JSON lines gives the same
bytes, images included; every channel has a JSON schema; camera frames, detections and poses
are Foxglove's types; a recording made as MCAP replays; a file cut short reads up to its last
whole record.

Real recordings of four kinds (person, scene, code with camera frames, team), made once per
module by ``onboard`` in process against the stand-in LLMs on loopback; the MCAP files are
read back with the ``mcap`` package's own readers.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import resource
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcap.reader import make_reader

from onboard.base.errors import RecordingError, RecordingWriteError
from onboard.cli.main import main
from onboard.cli.replay import replay_recording
from onboard.loop.foxglove import SCHEMAS
from onboard.loop.quota import enforce_quota
from onboard.loop.recorder import Recorder, read_recording
from onboard.loop.recording import images_dir

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("person", "scene", "code", "team")


def onboard(*args: str | Path) -> int:
    return main(["--robot", str(ROOT / "robot.toml"), *map(str, args)])


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One JSON-lines recording of each kind, and a code episode recorded as MCAP."""
    folder = tmp_path_factory.mktemp("recordings")
    paths = {kind: folder / f"{kind}.jsonl" for kind in KINDS}
    paths["direct"] = folder / "direct" / "code.mcap"
    runs = {
        "person": ["run", "engage", "--llm", "standin", "--clock", "virtual"],
        "scene": ["run", "tidy", "--goal", "put the red block on the blue block", "--llm",
                  "standin", "--clock", "virtual"],
        "code": ["code", "do", "--task", "1", "--llm", "standin"],
        "team": ["task", "run", "sweep_floor", "--method", "read_j"],
        "direct": ["code", "do", "--task", "1", "--llm", "standin"],
    }  # fmt: skip
    for name, args in runs.items():
        assert onboard(*args, "--record", paths[name]) == 0, name
    return paths


def images(path: Path) -> dict[str, bytes]:
    folder = images_dir(path)
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else {}


def messages(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """(topic, schema name, decoded message) of every message, read by the seeking reader
    (the file's summary and indexes)."""
    with path.open("rb") as file:
        found = make_reader(file).iter_messages(log_time_order=False)
        return [(channel.topic, schema.name if schema else "", json.loads(message.data))
                for schema, channel, message in found]  # fmt: skip


def test_json_lines_to_mcap_and_back_gives_the_same_bytes_images_included(
    made: dict[str, Path], tmp_path: Path
) -> None:
    assert images(made["code"]), "the code episode's frames went to its images folder"
    for kind in KINDS:
        source = made[kind]
        exported = tmp_path / f"{kind}.mcap"
        back = tmp_path / "back" / f"{kind}.jsonl"
        back.parent.mkdir(exist_ok=True)
        assert onboard("export", source, "--mcap", "--output", exported) == 0
        assert onboard("export", exported, "--jsonl", "--output", back) == 0
        assert back.read_bytes() == source.read_bytes(), kind
        assert images(back) == images(source), kind
        # and the MCAP itself replays, as its JSON lines do
        recorded, replayed = replay_recording(exported)
        assert recorded == replayed and recorded, kind


def test_every_channel_is_typed_one_per_record_kind(made: dict[str, Path], tmp_path: Path) -> None:
    for kind in KINDS:
        exported = tmp_path / f"{kind}.mcap"
        assert onboard("export", made[kind], "--mcap", "--output", exported) == 0
        with exported.open("rb") as file:
            summary = make_reader(file).get_summary()
        assert summary is not None and summary.statistics is not None
        counts = summary.statistics.channel_message_counts
        records = Counter(r["kind"] for r in read_recording(made[kind]))
        onboard_channels = {}
        for channel in summary.channels.values():
            schema = summary.schemas[channel.schema_id]  # schema id 0 (none) is a KeyError
            assert schema.encoding == "jsonschema" and channel.message_encoding == "json"
            assert json.loads(schema.data)["title"] == schema.name
            if "onboard.kind" in channel.metadata:
                record_kind = channel.metadata["onboard.kind"]
                assert channel.topic == f"/onboard/{record_kind}"
                onboard_channels[record_kind] = counts[channel.id]
            else:
                assert schema.name in SCHEMAS
        assert onboard_channels == dict(records), kind


def test_frames_detections_and_poses_are_foxglove_messages(
    made: dict[str, Path], tmp_path: Path
) -> None:
    exported = {}
    for kind in ("scene", "code"):
        exported[kind] = tmp_path / f"{kind}.mcap"
        assert onboard("export", made[kind], "--mcap", "--output", exported[kind]) == 0
    # the code episode's looks: each frame it sent to a bot, as a CompressedImage
    code = messages(exported["code"])
    frames = [m for topic, schema, m in code if schema == "foxglove.CompressedImage"]
    stored = images(made["code"])
    looks = [r for r in read_recording(made["code"]) if r["kind"] == "observation"]
    sent = [r for r in looks if f"{r['image']}.png" in stored]
    assert sent and len(frames) == len(sent)
    for frame, look in zip(frames, sent, strict=True):
        data = base64.b64decode(frame["data"])
        assert hashlib.sha256(data).hexdigest() == look["image"] and frame["format"] == "png"
        assert frame["timestamp"]["sec"] == int(look["wall"])
    # the scene episode's looks: detections as image annotations, objects as transforms
    scene = messages(exported["scene"])
    looks = [r for r in read_recording(made["scene"]) if r["kind"] == "observation"]
    notes = [m for _, schema, m in scene if schema == "foxglove.ImageAnnotations"]
    boxed = [r for r in looks if any("box" in o for o in r["objects"])]
    assert boxed and len(notes) == len(boxed)
    for note, look in zip(notes, boxed, strict=True):
        x1, y1, x2, y2 = look["objects"][0]["box"]
        assert note["points"][0]["type"] == 2  # LINE_LOOP
        assert note["points"][0]["points"] == [{"x": x1, "y": y1}, {"x": x2, "y": y1},
                                               {"x": x2, "y": y2}, {"x": x1, "y": y2}]  # fmt: skip
        assert note["texts"][0]["text"].startswith(look["objects"][0]["label"])
    poses = [m for _, schema, m in scene if schema == "foxglove.FrameTransform"]
    located = [(r["frame"], o["name"], o["position"]) for r in looks for o in r["objects"]]
    assert len(poses) == len(located) > 0
    for pose, (parent, name, (x, y, z)) in zip(poses, located, strict=True):
        assert (pose["parent_frame_id"], pose["child_frame_id"]) == (parent, name)
        assert pose["translation"] == {"x": x, "y": y, "z": z}
    # each message carries every field its schema requires
    for _, schema, message in code + scene:
        if schema in SCHEMAS:
            missing = set(SCHEMAS[schema]["required"]) - set(message)
            assert not missing, (schema, missing)


def test_a_recording_made_as_mcap_replays_and_converts(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    direct = made["direct"]
    assert direct.read_bytes()[:8] == b"\x89MCAP0\r\n" and not images_dir(direct).exists()
    recorded, replayed = replay_recording(direct)
    assert recorded == replayed and recorded
    back = tmp_path / "code.jsonl"
    assert onboard("export", direct, "--jsonl", "--output", back) == 0
    assert images(back), "the frames sent to the bots travel inside the MCAP file"
    restored = list(read_recording(direct, images=True))  # the data URLs, from attachments
    assert restored == list(read_recording(back, images=True))
    assert any("data:image/png;base64," in json.dumps(r) for r in restored)
    assert [r["kind"] for r in read_recording(back)] == [r["kind"] for r in
                                                          read_recording(made["code"])]  # fmt: skip
    # an existing MCAP file is never appended to: one line, exit 2, nothing run
    before = direct.read_bytes()
    assert onboard("run", "engage", "--llm", "standin", "--clock", "virtual",
                   "--record", direct) == 2  # fmt: skip
    assert f"{direct}: exists; an MCAP recording is written once" in capsys.readouterr().err
    assert direct.read_bytes() == before


def test_an_mcap_recording_cut_short_reads_up_to_its_last_whole_record(tmp_path: Path) -> None:
    path = tmp_path / "episode.mcap"
    recorder = Recorder(path)
    for i in range(5):
        recorder.write("step", index=i, text="x" * 100)
    whole = path.read_bytes()  # flushed per record: a crash here keeps all five
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(whole)
    assert [r["index"] for r in read_recording(cut)] == [0, 1, 2, 3, 4]
    cut.write_bytes(whole[:-40])  # torn inside the last record
    assert [r["index"] for r in read_recording(cut)] == [0, 1, 2, 3]
    recorder.close()
    assert [r["index"] for r in read_recording(path)] == [0, 1, 2, 3, 4]


def test_the_recordings_quota_counts_mcap_recordings(tmp_path: Path) -> None:
    old, new = tmp_path / "old.mcap", tmp_path / "new.mcap"
    for i, path in enumerate((old, new)):
        with Recorder(path) as recorder:
            recorder.write("step", text="z" * 2000)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
    keep = tmp_path / "keep.jsonl"
    assert enforce_quota(tmp_path, new.stat().st_size, keep=keep) == [old]
    assert new.exists() and not old.exists()


def test_a_failed_mcap_write_is_a_recording_fault(tmp_path: Path) -> None:
    path = tmp_path / "episode.mcap"
    faults: list[RecordingWriteError] = []
    recorder = Recorder(path)
    recorder.on_fault = faults.append
    recorder.write("header", format=3)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16_384, hard))  # EFBIG past 16 KB
    try:
        recorder.write("request", text="y" * 20_000)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    recorder.write("end", actions=[])  # in memory only from here on
    recorder.close()
    assert recorder.fault is not None and faults == [recorder.fault]
    assert str(recorder.fault).startswith(f"{path}: cannot write the recording: File too large")
    assert [r["kind"] for r in read_recording(path)] == ["header"]
    assert [r["kind"] for r in recorder.records] == ["header", "request", "end"]


def test_an_mcap_replay_error_names_the_mcap_file(made: dict[str, Path], tmp_path: Path) -> None:
    old = tmp_path / "old.jsonl"
    lines = made["person"].read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    del header["format"]  # a format 1 recording
    old.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", encoding="utf-8")
    exported = tmp_path / "old.mcap"
    assert onboard("export", old, "--mcap") == 0  # beside it, named after it
    with pytest.raises(RecordingError, match=rf"^{exported}: a format 1 recording"):
        replay_recording(exported)


def test_export_refuses_to_overwrite_and_to_read_what_is_not_a_recording(
    made: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "person.jsonl"
    shutil.copy(made["person"], source)
    (tmp_path / "person.mcap").write_bytes(b"")
    assert onboard("export", source, "--mcap") == 2
    assert f"{tmp_path / 'person.mcap'}: exists" in capsys.readouterr().err
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n{}\n", encoding="utf-8")
    assert onboard("export", junk, "--mcap") == 2
    assert f"{junk}:1: not an onboard record" in capsys.readouterr().err
    assert onboard("export", source, "--jsonl") == 2
    assert f"{source}: not MCAP" in capsys.readouterr().err
