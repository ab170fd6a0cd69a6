"""The RealSense driver on the real SDK, playing back the recording shipped in models/realsense.

The recording (models/realsense/README.md) is a synthetic D435i tabletop made with the SDK's
software device and recorder: a red cube whose front face is 0.600 m from the color camera.
CI sets ONBOARD_REQUIRE_REALSENSE=1 so a missing ``realsense`` extra fails instead of skipping.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from onboard.base.errors import CameraError, StaleFrame
from onboard.drivers.camera.base import Camera, Frame, Intrinsics
from onboard.drivers.camera.freshness import FrameSlot
from onboard.drivers.camera.realsense import RealSenseCamera, RealSenseConfig, import_pyrealsense2
from onboard.perception.pose import Box, locate

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "models" / "realsense" / "tabletop.db3"
#: the ground truth of the recording (models/realsense/README.md), color camera frame
COLOR_INTRINSICS = Intrinsics(width=320, height=240, fx=232.0, fy=232.0, cx=161.0, cy=119.0)
RED_FRONT_DEPTH = 0.600
RED_FRONT_CENTRE = (0.0, 0.09, 0.600)


def _sdk() -> None:
    if importlib.util.find_spec("pyrealsense2") is None:
        if os.environ.get("ONBOARD_REQUIRE_REALSENSE") == "1":
            pytest.fail("the realsense extra is required here: pip install -e '.[realsense]'")
        pytest.skip("the realsense extra (pyrealsense2) is not installed")


def in_child(test: Callable[[], None]) -> Callable[[], None]:
    """Run the test in a forked child, its camera's close() included, and fail it there.

    librealsense can abort the whole process natively while a playback stops (one CI run
    did, in pipeline.stop(); see realsenseai/librealsense#9446). In a pytest-xdist worker
    that killed the worker and then hung the run; in a child it fails this one test with
    the signal that ended it.
    """

    @functools.wraps(test)
    def run() -> None:
        _sdk()
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)

        def child() -> None:
            try:
                test()
            except BaseException:  # the assertion's message goes back to the parent
                send.send(traceback.format_exc())
            else:
                send.send("")

        # daemon: a child that hangs is killed when its worker exits, after the test's timeout
        process = context.Process(target=child, name=test.__name__, daemon=True)
        with warnings.catch_warnings():  # 3.12+ warns of fork beside threads: the child
            warnings.simplefilter("ignore", DeprecationWarning)  # runs only this test
            process.start()
        send.close()
        try:
            failure = receive.recv()
        except EOFError:  # the child died before it could say
            process.join()
            code = process.exitcode or 0
            ended = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            pytest.fail(f"{test.__name__}: the forked child died of {ended}", pytrace=False)
        process.join()
        if failure:
            pytest.fail(f"{test.__name__}, in a forked child:\n{failure}", pytrace=False)

    return run


@contextlib.contextmanager
def playing() -> Iterator[RealSenseCamera]:
    """The recording, played back (open it inside an ``in_child`` test)."""
    with RealSenseCamera(RealSenseConfig(playback=RECORDING)) as camera:
        yield camera


def red_box(frame: Frame) -> Box:
    """The red cube by color threshold: its pixels' bounding box."""
    rgb = frame.color.astype(np.int16)
    mask = (rgb[..., 0] > 120) & (rgb[..., 1] < 60) & (rgb[..., 2] < 60)
    rows, cols = np.nonzero(mask)
    assert rows.size > 100
    return (float(cols.min()), float(rows.min()), float(cols.max() + 1), float(rows.max() + 1))


# -- without the SDK -----------------------------------------------------------------------


def test_missing_sdk_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyrealsense2", None)  # makes the import fail
    with pytest.raises(CameraError) as err:
        import_pyrealsense2()
    message = str(err.value)
    assert "\n" not in message
    assert "pip install -e '.[realsense]'" in message
    assert "libusb-1.0-0" in message
    with pytest.raises(CameraError, match="realsense extra"):
        RealSenseCamera(RealSenseConfig()).connect()


def test_config_is_strict() -> None:
    assert RealSenseConfig().kind == "realsense"
    with pytest.raises(ValidationError):
        RealSenseConfig(kind="sim")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        RealSenseConfig.model_validate({"fps": 30, "exposure": 100})
    with pytest.raises(ValidationError):
        RealSenseConfig(width=0)


def test_reads_before_connect_say_what_to_do() -> None:
    camera = RealSenseCamera(RealSenseConfig(playback=RECORDING))
    for call in (camera.read, lambda: camera.latest(1.0), lambda: camera.intrinsics):
        with pytest.raises(CameraError, match=r"call connect\(\) first"):
            call()


# -- freshness rules, on a slot fed by hand ------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def frame_at(t: float, index: int = 0) -> Frame:
    color = np.zeros((2, 2, 3), np.uint8)
    depth = np.zeros((2, 2), np.float32)
    return Frame(color, depth, Intrinsics(2, 2, 1.0, 1.0, 1.0, 1.0), timestamp=t, index=index)


def test_latest_refuses_a_frame_older_than_max_age() -> None:
    clock = FakeClock()
    slot = FrameSlot("cam", clock)
    with pytest.raises(StaleFrame, match="no frame yet"):
        slot.latest(1.0)
    slot.put(frame_at(clock.now, 7))
    clock.now += 0.2
    assert slot.latest(0.5).index == 7
    clock.now += 0.5  # a frozen camera: no new frame for 0.7 s
    with pytest.raises(StaleFrame, match=r"0\.7 s old, over max_age 0\.5 s"):
        slot.latest(0.5)


def test_next_never_returns_a_frame_already_there() -> None:
    slot = FrameSlot("cam")
    slot.put(frame_at(time.monotonic(), 1))
    with pytest.raises(StaleFrame, match="no new frame within"):
        slot.next(0.05)
    timer = threading.Timer(0.05, lambda: slot.put(frame_at(time.monotonic(), 2)))
    timer.start()
    assert slot.next(2.0).index == 2
    timer.join()


def test_next_after_a_count_returns_a_frame_already_there() -> None:
    slot = FrameSlot("cam")
    slot.put(frame_at(time.monotonic(), 1))
    assert slot.next(0.01, after=0).index == 1  # connect(): the first frame, however early
    assert slot.count == 1


def test_a_closed_stream_wakes_waiting_readers() -> None:
    slot = FrameSlot("cam")
    timer = threading.Timer(0.05, lambda: slot.close(StaleFrame("cam: playback ended")))
    timer.start()
    started = time.monotonic()
    with pytest.raises(StaleFrame, match="playback ended"):
        slot.next(5.0)
    assert time.monotonic() - started < 1.0
    timer.join()


# -- the real SDK on the shipped recording -------------------------------------------------


def test_recording_is_small_and_present() -> None:
    assert RECORDING.is_file()
    assert RECORDING.stat().st_size < 5_000_000


@in_child
def test_playback_frames() -> None:
    with playing() as playback:
        camera: Camera = playback  # the protocol, checked by mypy
        frame = camera.read()
        assert frame.color.shape == (240, 320, 3) and frame.color.dtype == np.uint8
        assert frame.depth.shape == (240, 320) and frame.depth.dtype == np.float32
        assert frame.intrinsics == playback.intrinsics == COLOR_INTRINSICS
        assert abs(frame.timestamp - time.monotonic()) < 1.0
        newer = playback.read_timeout(1.0)
        assert newer.index > frame.index and newer.timestamp >= frame.timestamp
        assert float((frame.depth > 0).mean()) > 0.95  # aligned depth covers the color image


@in_child
def test_known_object_depth_through_align() -> None:
    """The red cube's front face: 0.600 m, its centre at (0, 0.09, 0.6) in the color frame."""
    with playing() as playback:
        for _ in range(5):
            frame = playback.read()
            seen = locate(red_box(frame), frame.depth, frame.intrinsics)
            assert abs(seen.depth - RED_FRONT_DEPTH) < 0.01
            assert np.linalg.norm(seen.point - RED_FRONT_CENTRE) < 0.01
            assert seen.size[0] == pytest.approx(0.06, abs=0.01)


@in_child
def test_ended_playback_is_a_frozen_camera() -> None:
    with playing() as playback:
        frames = 0
        with pytest.raises(StaleFrame, match="playback ended"):
            for _ in range(200):
                playback.read()
                frames += 1
        assert 10 <= frames <= 30  # the file holds 30 framesets; a slow reader may skip some
        last = playback.latest(max_age=5.0)  # the last frame is still there while young ...
        time.sleep(0.15)
        with pytest.raises(StaleFrame, match=r"over max_age 0\.1 s"):  # ... and refused once old
            playback.latest(max_age=0.1)
        with pytest.raises(StaleFrame):
            playback.read_timeout(0.1)
        assert playback.latest(max_age=5.0) is last


@in_child
def test_repeat_playback_keeps_delivering() -> None:
    config = RealSenseConfig(playback=RECORDING, playback_repeat=True)
    with RealSenseCamera(config) as camera:
        indices = [camera.read().index for _ in range(40)]  # past the 30 in the file
    assert indices == sorted(indices) and len(set(indices)) == 40


@in_child
def test_missing_recording_is_a_camera_error() -> None:
    with pytest.raises(CameraError, match="not found"):
        RealSenseCamera(RealSenseConfig(playback=ROOT / "no-such.db3")).connect()


@in_child
def test_unknown_serial_lists_what_is_connected() -> None:
    with pytest.raises(CameraError, match=r"no RealSense connected|connected serials"):
        RealSenseCamera(RealSenseConfig(serial="not-a-serial")).connect()
