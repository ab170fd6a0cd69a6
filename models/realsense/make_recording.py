"""Make the small RealSense recording the tests play back, with the real SDK (pyrealsense2).

A synthetic tabletop is ray-cast from two pinhole cameras laid out like a D435i: the color camera
and, 15 mm to its right, the depth camera (its own intrinsics, wider field of view). The frames
are injected into an ``rs.software_device`` with a "Stereo Module" (depth, z16, 1 mm units) and an
"RGB Camera" (color, rgb8) whose depth-to-color extrinsics are registered, and written by
``rs.recorder``. pyrealsense2 2.59 writes a ROS2 bag (SQLite ``.db3``, PNG-compressed images);
it refuses any other extension. The file is then played back through ``rs.pipeline`` and
``rs.align`` as a check.

Everything is in the color camera's frame: x right, y down, z forward, metres.

    .venv/bin/python models/realsense/make_recording.py [--out models/realsense/tabletop.db3]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

HERE = Path(__file__).resolve().parent
WIDTH, HEIGHT, FPS, FRAMES = 320, 240, 30, 30
DEPTH_UNITS = 0.001  # metres per z16 unit
SEED = 0

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Camera:
    fx: float
    fy: float
    cx: float
    cy: float
    origin: tuple[float, float, float]  # in the color camera frame; axes parallel to it


@dataclass(frozen=True)
class Cube:
    label: str
    rgb: tuple[int, int, int]
    lo: tuple[float, float, float]
    hi: tuple[float, float, float]


# D435i-like layout: depth-to-color extrinsics = identity rotation, translation (0.015, 0, 0),
# i.e. p_color = p_depth + t, so the depth camera's origin sits at t in the color frame.
DEPTH_TO_COLOR = (0.015, 0.0, 0.0)
COLOR = Camera(fx=232.0, fy=232.0, cx=161.0, cy=119.0, origin=(0.0, 0.0, 0.0))
DEPTH = Camera(fx=170.0, fy=170.0, cx=159.5, cy=120.5, origin=DEPTH_TO_COLOR)
TABLE_Y = 0.12  # the table top, 12 cm below the optical axis
WALL_Z = 1.10
CUBES = (
    Cube("red cube", (200, 30, 30), (-0.03, 0.06, 0.60), (0.03, 0.12, 0.66)),
    Cube("blue cube", (40, 60, 200), (0.10, 0.07, 0.80), (0.15, 0.12, 0.85)),
)


def rays(cam: Camera) -> Array:
    """(H, W, 3) ray directions with z = 1: pixel index (u, v) is the pixel's centre."""
    u, v = np.meshgrid(np.arange(WIDTH, dtype=np.float64), np.arange(HEIGHT, dtype=np.float64))
    return np.stack([(u - cam.cx) / cam.fx, (v - cam.cy) / cam.fy, np.ones_like(u)], axis=-1)


def hit_cube(origin: Array, d: Array, cube: Cube) -> tuple[Array, npt.NDArray[np.int64]]:
    """Slab test: distance (z units) to the cube per ray (inf = miss) and the axis of the face."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t0 = (np.array(cube.lo) - origin) / d
        t1 = (np.array(cube.hi) - origin) / d
    near, far = np.minimum(t0, t1), np.maximum(t0, t1)
    t_in, t_out = near.max(axis=-1), far.min(axis=-1)
    t = np.where((t_in <= t_out) & (t_in > 0), t_in, np.inf)
    return t, near.argmax(axis=-1)


def render(cam: Camera) -> tuple[npt.NDArray[np.uint8], Array]:
    """Color (H, W, 3) and z (H, W, metres, along the camera's own optical axis)."""
    d, o = rays(cam), np.array(cam.origin)
    with np.errstate(divide="ignore"):
        t_table = np.where(d[..., 1] > 0, (TABLE_Y - o[1]) / d[..., 1], np.inf)
    t_wall = np.full(d.shape[:2], WALL_Z - o[2])
    t = np.minimum(t_table, t_wall)
    p = o + d * t[..., None]
    checker = ((np.floor(p[..., 0] / 0.05) + np.floor(p[..., 2] / 0.05)) % 2)[..., None]
    table = np.where(checker > 0, [175, 170, 160], [145, 140, 132])
    wall = np.array([215, 205, 190]) - 40 * np.clip((p[..., 1:2] + 0.3) / 0.5, 0, 1)
    rgb = np.where((t_table < t_wall)[..., None], table, wall)
    for cube in CUBES:
        tc, axis = hit_cube(o, d, cube)
        shade = np.choose(axis, [0.7, 0.85, 1.0])[..., None]  # side, top, front
        rgb = np.where((tc < t)[..., None], np.array(cube.rgb) * shade, rgb)
        t = np.minimum(t, tc)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8), t


def depth_z16(z: Array, rng: np.random.Generator) -> npt.NDArray[np.uint16]:
    """z in metres to z16 units with D4xx-like noise (about 2 mm at 1 m, growing as z²) and 3 %
    holes (zeros: no depth), as a stereo camera gives."""
    noisy = z + rng.normal(0.0, 0.002, z.shape) * z**2
    units = np.rint(noisy / DEPTH_UNITS)
    units[rng.random(z.shape) < 0.03] = 0
    return np.clip(units, 0, 65535).astype(np.uint16)


def intrinsics(rs: Any, cam: Camera) -> Any:
    i = rs.intrinsics()
    i.width, i.height = WIDTH, HEIGHT
    i.fx, i.fy, i.ppx, i.ppy = cam.fx, cam.fy, cam.cx, cam.cy
    i.model, i.coeffs = rs.distortion.none, [0.0] * 5
    return i


def add_stream(rs: Any, sensor: Any, cam: Camera, stream: Any, fmt: Any, bpp: int, uid: int) -> Any:
    vs = rs.video_stream()
    vs.type, vs.index, vs.uid = stream, 0, uid
    vs.width, vs.height, vs.fps, vs.bpp, vs.fmt = WIDTH, HEIGHT, FPS, bpp, fmt
    vs.intrinsics = intrinsics(rs, cam)
    return sensor.add_video_stream(vs)


def video_frame(rs: Any, profile: Any, pixels: npt.NDArray[Any], index: int) -> Any:
    f = rs.software_video_frame()
    f.pixels = np.ascontiguousarray(pixels)
    f.bpp = pixels.dtype.itemsize * (pixels.shape[2] if pixels.ndim == 3 else 1)
    f.stride = WIDTH * f.bpp
    f.timestamp = index * 1000.0 / FPS  # ms
    f.domain = rs.timestamp_domain.hardware_clock
    f.frame_number = index
    f.profile = profile.as_video_stream_profile()
    if pixels.dtype == np.uint16:
        f.depth_units = DEPTH_UNITS
    return f


def record(rs: Any, out: Path) -> None:
    device = rs.software_device()
    device.register_info(rs.camera_info.name, "onboard synthetic D435i")
    device.register_info(rs.camera_info.serial_number, "000000000435")
    stereo, rgb = device.add_sensor("Stereo Module"), device.add_sensor("RGB Camera")
    depth_profile = add_stream(rs, stereo, DEPTH, rs.stream.depth, rs.format.z16, 2, 0)
    color_profile = add_stream(rs, rgb, COLOR, rs.stream.color, rs.format.rgb8, 3, 1)
    stereo.add_read_only_option(rs.option.depth_units, DEPTH_UNITS)
    extrinsics = rs.extrinsics()
    extrinsics.rotation, extrinsics.translation = [1, 0, 0, 0, 1, 0, 0, 0, 1], list(DEPTH_TO_COLOR)
    depth_profile.register_extrinsics_to(color_profile, extrinsics)
    device.create_matcher(rs.matchers.default)

    color, _ = render(COLOR)
    _, z = render(DEPTH)
    rng = np.random.default_rng(SEED)
    out.unlink(missing_ok=True)
    recorder = rs.recorder(str(out), device)
    sink = rs.frame_queue(2 * FRAMES)
    stereo.open(depth_profile)
    rgb.open(color_profile)
    stereo.start(sink)
    rgb.start(sink)
    for index in range(FRAMES):
        stereo.on_video_frame(video_frame(rs, depth_profile, depth_z16(z, rng), index))
        rgb.on_video_frame(video_frame(rs, color_profile, color, index))
        time.sleep(1.0 / FPS)  # the recorder stamps arrival time: keep real-time playback real
    for sensor in (stereo, rgb):
        sensor.stop()
        sensor.close()
    recorder.pause()
    del recorder  # the file is complete only once the recorder is gone


def check(rs: Any, path: Path) -> None:
    """Play the file back through rs.pipeline + rs.align and print what a reader sees."""
    pipeline, config = rs.pipeline(), rs.config()
    config.enable_device_from_file(str(path), repeat_playback=False)
    profile = pipeline.start(config)
    profile.get_device().as_playback().set_real_time(False)
    align, seen, z_front = rs.align(rs.stream.color), 0, []
    while True:
        ok, frames = pipeline.try_wait_for_frames(1000)
        if not ok:
            break
        depth = align.process(frames).get_depth_frame()
        z = np.asanyarray(depth.get_data())[145:163, 152:170].astype(np.float64)
        z_front.append(float(np.median(z[z > 0])) * depth.get_units())
        seen += 1
    pipeline.stop()
    size = path.stat().st_size / 1e6
    print(f"{path.name}: {size:.2f} MB, {seen} framesets through rs.pipeline playback")
    print(f"red cube front face (truth 0.600 m): median aligned depth {np.median(z_front):.4f} m")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "tabletop.db3")
    args = parser.parse_args()
    import pyrealsense2 as rs  # type: ignore[import-untyped,unused-ignore]

    record(rs, args.out)
    check(rs, args.out)


if __name__ == "__main__":
    main()
