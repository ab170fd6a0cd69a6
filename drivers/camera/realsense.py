"""Intel RealSense (D435i and kin) through pyrealsense2: color + depth aligned to color.

A background thread waits for framesets, aligns depth to color with ``rs.align`` and keeps the
newest :class:`~onboard.drivers.camera.base.Frame` in a
:class:`~onboard.drivers.camera.freshness.FrameSlot`.
The same driver plays a recording back (``playback = "file.db3"`` or ``.bag``) through the
SDK's own playback device, so CI runs the real SDK code path without a camera.

pyrealsense2 is an optional SDK (the ``realsense`` extra); it is imported on ``connect()``.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from onboard.base.errors import CameraError, StaleFrame
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.camera.config import RealSenseConfig
from onboard.drivers.camera.freshness import FrameSlot
from onboard.drivers.device import Device

__all__ = ["RealSenseCamera", "RealSenseConfig", "import_pyrealsense2"]

_INSTALL = "pip install -e '.[realsense]' (the realsense extra) and apt-get install libusb-1.0-0"
_COLOR_ORDER = {"rgb8": (0, 1, 2), "bgr8": (2, 1, 0), "rgba8": (0, 1, 2), "bgra8": (2, 1, 0)}


def import_pyrealsense2() -> Any:
    """The pyrealsense2 module, or a one-line CameraError that says how to install it."""
    try:
        import pyrealsense2 as rs  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise CameraError(f"realsense: cannot import pyrealsense2 ({exc}): {_INSTALL}") from exc
    return rs


class RealSenseCamera(Device):
    """The :class:`~onboard.drivers.camera.base.Camera` protocol on a RealSense or a recording
    of one."""

    def __init__(self, config: RealSenseConfig) -> None:
        self.config = config
        self._rs: Any = None
        self._pipeline: Any = None
        self._align: Any = None
        self._intrinsics: Intrinsics | None = None
        self._period = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._slot = FrameSlot(self.name)

    @property
    def name(self) -> str:
        if self.config.playback is not None:
            return f"realsense playback {self.config.playback.name}"
        return f"realsense {self.config.serial or '(first found)'}"

    # -- lifecycle -----------------------------------------------------------------------------

    def connect(self) -> None:
        """Start streaming; returns once the first aligned frame has arrived."""
        if self._thread is not None:
            return
        self._rs = import_pyrealsense2()
        self._slot.reopen()
        self._stop.clear()
        try:
            self._start_pipeline()
            self._warm_up()
        except CameraError:
            self._stop_pipeline()
            raise
        except RuntimeError as exc:  # the SDK's errors
            self._stop_pipeline()
            raise CameraError(f"{self.name}: {exc}") from exc
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        try:
            self._slot.next(self.config.start_timeout, after=0)
        except CameraError as exc:
            self.close()
            raise CameraError(f"{exc} (while connecting)") from exc

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.frame_timeout)
            self._thread = None
        self._stop_pipeline()
        self._slot.close(CameraError(f"{self.name}: closed: call connect() first"))

    # -- reads ---------------------------------------------------------------------------------

    @property
    def intrinsics(self) -> Intrinsics:
        """Pinhole intrinsics of the color stream (depth is aligned to it)."""
        self._require()
        assert self._intrinsics is not None
        return self._intrinsics

    def read(self) -> Frame:
        """Block until the next new frame; a camera silent for ``frame_timeout`` s is StaleFrame."""
        return self.read_timeout(self.config.frame_timeout)

    def read_timeout(self, timeout: float) -> Frame:
        self._require()
        return self._slot.next(timeout)

    def latest(self, max_age: float) -> Frame:
        self._require()
        return self._slot.latest(max_age)

    def _require(self) -> None:
        if self._thread is None:
            raise CameraError(f"{self.name}: not connected: call connect() first")

    # -- the SDK -------------------------------------------------------------------------------

    def _start_pipeline(self) -> None:
        rs, cfg = self._rs, self._rs.config()
        playback = self.config.playback
        if playback is not None:
            if not playback.is_file():
                raise CameraError(f"{self.name}: recording {playback} not found")
            cfg.enable_device_from_file(str(playback), repeat_playback=self.config.playback_repeat)
            cfg.enable_stream(rs.stream.color)
            cfg.enable_stream(rs.stream.depth)
        else:
            cfg.enable_device(self._pick_serial())
            c = self.config
            cfg.enable_stream(rs.stream.color, c.width, c.height, rs.format.rgb8, c.fps)
            cfg.enable_stream(rs.stream.depth, c.width, c.height, rs.format.z16, c.fps)
        self._pipeline = rs.pipeline()
        profile = self._pipeline.start(cfg)
        self._configure(profile)
        self._align = rs.align(rs.stream.color)

    def _pick_serial(self) -> str:
        rs = self._rs
        found = [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
        if not found:
            raise CameraError(
                f"{self.name}: no RealSense connected: plug it into a USB 3 port and install the "
                'udev rules, or set playback = "recording.db3" in [drivers.camera]'
            )
        wanted = self.config.serial
        if wanted is None:
            if len(found) > 1:
                raise CameraError(f"{self.name}: cameras {found} connected: set serial to one")
            return str(found[0])
        if wanted not in found:
            raise CameraError(f"{self.name}: not connected; connected serials: {found}")
        return wanted

    def _configure(self, profile: Any) -> None:
        rs = self._rs
        device = profile.get_device()
        if self.config.playback is not None:
            device.as_playback().set_real_time(self.config.playback_real_time)
        elif self.config.depth_units is not None:
            sensor = device.first_depth_sensor()
            if sensor.supports(rs.option.depth_units):
                sensor.set_option(rs.option.depth_units, self.config.depth_units)
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        fmt = str(color.format()).rsplit(".", 1)[-1]
        if fmt not in _COLOR_ORDER:
            known = sorted(_COLOR_ORDER)
            raise CameraError(f"{self.name}: color format {fmt} unsupported; use one of {known}")
        i = color.get_intrinsics()
        self._intrinsics = Intrinsics(i.width, i.height, i.fx, i.fy, i.ppx, i.ppy)
        self._period = 1.0 / color.fps() if color.fps() > 0 else 0.0

    def _warm_up(self) -> None:
        if self.config.playback is not None:
            return
        timeout_ms = int(self.config.start_timeout * 1000)
        for _ in range(self.config.warmup):
            self._pipeline.wait_for_frames(timeout_ms)

    def _stop_pipeline(self) -> None:
        if self._pipeline is None:
            return
        with contextlib.suppress(RuntimeError):  # never started, or already stopped
            self._pipeline.stop()
        self._pipeline = None

    def _run(self) -> None:
        index = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                ok, frames = self._pipeline.try_wait_for_frames(200)
                if not ok:
                    if self._playback_ended():
                        self._slot.close(StaleFrame(f"{self.name}: playback ended: no more frames"))
                        return
                    continue
                frame = self._to_frame(frames, index)
                if frame is not None:
                    self._slot.put(frame)
                    index += 1
                    self._pace(started)
        except (RuntimeError, CameraError) as exc:
            self._slot.close(CameraError(f"{self.name}: stream failed: {exc}"))

    def _playback_ended(self) -> bool:
        if self.config.playback is None or self.config.playback_repeat:
            return False
        playback = self._pipeline.get_active_profile().get_device().as_playback()
        return bool(playback.current_status() == self._rs.playback_status.stopped)

    def _pace(self, started: float) -> None:
        """Deliver a recording at its own frame rate when the SDK does not (real time off)."""
        if self.config.playback is not None and not self.config.playback_real_time:
            self._stop.wait(max(0.0, self._period - (time.monotonic() - started)))

    def _to_frame(self, frames: Any, index: int) -> Frame | None:
        aligned = self._align.process(frames)
        color, depth = aligned.get_color_frame(), aligned.get_depth_frame()
        if not color or not depth:
            return None
        assert self._intrinsics is not None
        return Frame(
            color=self._rgb(color),
            depth=_metres(depth),
            intrinsics=self._intrinsics,
            timestamp=time.monotonic(),
            index=index,
        )

    def _rgb(self, color: Any) -> npt.NDArray[np.uint8]:
        fmt = str(color.get_profile().format()).rsplit(".", 1)[-1]
        pixels = np.asanyarray(color.get_data())
        return np.ascontiguousarray(pixels[..., list(_COLOR_ORDER[fmt])], dtype=np.uint8)


def _metres(depth: Any) -> npt.NDArray[np.float32]:
    raw: npt.NDArray[np.uint16] = np.asanyarray(depth.get_data())
    return raw.astype(np.float32) * np.float32(depth.get_units())
