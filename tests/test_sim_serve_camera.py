"""sim serve's camera and truth ports, on real loopback sockets against ``serve`` itself.

``serve`` runs in a thread on free ports; its ``ready`` callback (an event) says when every
port listens. The robot side is what robot.toml builds: ``drivers/factory.py`` ``hardware``
with a JAKA arm on the served JAKA port and a ``sim-serve`` camera on the served camera port,
so the camera watches the twin the arm moves. The judge side is the truth port. Faults use
the real server stopped, and fake servers on loopback that answer wrongly.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import IO

import numpy as np
import pytest
from arm_harness import BOUND, require
from test_cli import onboard, one_line_error
from test_layers import graph, onboard_modules, within

from onboard.base.errors import CameraError, DriverError, StaleFrame
from onboard.drivers.arm.config import GcodeArmConfig, JakaArmConfig, SimArmConfig
from onboard.drivers.arm.safety import SafetyLimits
from onboard.drivers.camera import frame_wire
from onboard.drivers.camera.base import Frame, Intrinsics
from onboard.drivers.camera.config import SimCameraConfig, SimServeCameraConfig
from onboard.drivers.camera.served_camera import ServedCamera
from onboard.drivers.emulators import truth_client, truth_server
from onboard.drivers.emulators.serve import Served, serve
from onboard.drivers.emulators.truth_client import Truth, TruthClient
from onboard.drivers.factory import hardware
from onboard.loop.exitcodes import ExitCode

LIMITS = SafetyLimits(z_floor=0.0, max_speed=0.5)  # the blocks rest below the default floor


@contextlib.contextmanager
def serving(scene: str = "blocks", gcode: bool = False) -> Iterator[tuple[Served, threading.Event]]:
    """``serve`` on ``scene``, every port free, in a thread; stopped at the end (or when the
    test sets the event it is handed); ``gcode``: the G-code emulators' ptys too."""
    stop, up = threading.Event(), threading.Event()
    where: list[Served] = []

    def ready(s: Served) -> None:
        where.append(s)
        up.set()

    thread = threading.Thread(
        target=serve,
        args=(scene,),
        kwargs={
            "jaka_port": 0,
            "status_port": 0,
            "camera_port": 0,
            "truth_port": 0,
            "gcode": gcode,
            "stop": stop,
            "say": lambda _line: None,
            "ready": ready,
        },
        daemon=True,
    )
    thread.start()
    require(up.wait(BOUND), "sim serve listens")
    try:
        yield where[0], stop
    finally:
        stop.set()
        thread.join(BOUND)
        require(not thread.is_alive(), "sim serve stopped")


@pytest.fixture
def served() -> Iterator[Served]:
    with serving() as (where, _stop):
        yield where


def camera_config(served: Served, timeout: float = BOUND) -> SimServeCameraConfig:
    host, port = served.camera
    return SimServeCameraConfig(host=host, port=port, timeout=timeout)


def jaka_config(served: Served) -> JakaArmConfig:
    host, port = served.jaka
    return JakaArmConfig(
        host=host, port=port, status_port=served.status[1], timeout=BOUND, grip_settle=0.0
    )


def pixel(
    truth: Truth, intrinsics: Intrinsics, point: tuple[float, float, float]
) -> tuple[tuple[int, int], float]:
    """Where a world point lands in the image: (row, column) and its depth along the axis."""
    to_camera = np.linalg.inv(np.array(truth.camera_to_world))
    x, y, z, _ = to_camera @ np.array([*point, 1.0])
    u, v = intrinsics.fx * x / z + intrinsics.cx, intrinsics.fy * y / z + intrinsics.cy
    return (round(v), round(u)), float(z)


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text
    return text


# -- the robot sees the arm's world; the judge sees the truth --------------------------------


def test_the_served_camera_sees_what_the_jaka_arm_moves(served: Served, tmp_path: Path) -> None:
    with (
        hardware(jaka_config(served), camera_config(served), LIMITS, tmp_path) as hw,
        TruthClient(*served.truth, timeout=BOUND) as judge,
    ):
        assert hw.arm is not None and hw.camera is not None
        assert hw.twin is None, "no twin in the robot's process: the camera is sim serve's"
        start = judge.truth()
        block = start.objects["red block"]
        assert start.held is None and not start.gripper_closed
        before = hw.camera.read()

        tool = hw.arm.state().pose
        x, y, z = block.base.position
        pick = replace(tool, x=x, y=y, z=z)
        hw.arm.grip(False)
        hw.arm.move_to(replace(pick, z=z + 0.1), 0.4)
        hw.arm.move_to(pick, 0.4)
        hw.arm.grip(True)
        hw.arm.move_to(replace(pick, z=z + 0.1), 0.4)
        hw.arm.move_to(replace(pick, x=0.45, y=-0.15, z=0.25), 0.4)

        now = judge.truth()
        assert now.held == "red block" and now.gripper_closed
        held = now.objects["red block"]
        assert math.dist(held.world.position, now.tool_world.position) < 0.03, "in the hand"
        assert math.dist(held.base.position, (0.45, -0.15, 0.25)) < 0.03, "where the arm went"
        assert now.time > start.time
        after = hw.camera.read()
        served_camera = hw.camera
        assert isinstance(served_camera, ServedCamera)
        assert served_camera.twin_time is not None and served_camera.twin_time >= now.time
        assert after.index > before.index

        # where the arm went, the camera now sees the hand and block, not the table far behind
        (row, col), tool_depth = pixel(now, after.intrinsics, now.tool_world.position)
        assert abs(float(after.depth[row, col]) - tool_depth) < 0.06
        assert float(before.depth[row, col]) - float(after.depth[row, col]) > 0.1
        # where the block stood, it sees the table behind the block's top
        top = (*block.world.position[:2], block.world.position[2] + 0.02)
        (row, col), _ = pixel(start, before.intrinsics, top)
        assert float(after.depth[row, col]) - float(before.depth[row, col]) > 0.02


def test_truth_move_shows_in_the_next_frame(served: Served) -> None:
    with ServedCamera(camera_config(served)) as camera, TruthClient(*served.truth) as judge:
        start = judge.truth()
        old = start.objects["blue block"].world.position
        before = camera.read()
        placed = judge.move("blue block", (0.3, 0.25))  # knocked aside: same height
        assert math.dist(placed.position, (0.3, 0.25, old[2])) < 1e-6
        assert judge.truth().objects["blue block"].world.position == placed.position
        after = camera.read()

    top = (*old[:2], old[2] + 0.02)
    (row, col), _ = pixel(start, before.intrinsics, top)
    assert float(after.depth[row, col]) - float(before.depth[row, col]) > 0.02, "gone from here"
    (row, col), _ = pixel(start, before.intrinsics, (0.3, 0.25, old[2] + 0.02))
    assert float(before.depth[row, col]) - float(after.depth[row, col]) > 0.02, "and there now"
    assert not np.array_equal(before.color, after.color)


def test_truth_move_in_the_base_frame_with_an_orientation(served: Served) -> None:
    with TruthClient(*served.truth) as judge:
        quarter = (0.0, 0.0, math.sin(math.pi / 8), math.cos(math.pi / 8))
        judge.move("green block", (0.35, -0.05, 0.1), quarter, frame="base")
        green = judge.truth().objects["green block"]
        assert math.dist(green.base.position, (0.35, -0.05, 0.1)) < 1e-6
        dot = abs(sum(a * b for a, b in zip(green.base.orientation, quarter, strict=True)))
        assert dot > 1 - 1e-6


def test_several_clients_read_at_once_and_a_ninth_is_refused(served: Served) -> None:
    cameras = [ServedCamera(camera_config(served)) for _ in range(frame_wire.MAX_CLIENTS)]
    frames: list[Frame] = []
    try:
        for camera in cameras:
            camera.connect()
        threads = [
            threading.Thread(target=lambda c=camera: frames.append(c.read())) for camera in cameras
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(BOUND)
        assert len(frames) == len(cameras)
        assert len({f.index for f in frames}) == len(frames), "each read got its own frame"
        with pytest.raises(CameraError) as refused:
            ServedCamera(camera_config(served)).connect()
        assert "8 clients connected already" in one_line(refused.value)
    finally:
        for camera in cameras:
            camera.close()


# -- the factory ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arm", [JakaArmConfig(host="127.0.0.1", port=9), GcodeArmConfig(url="loop://")]
)
def test_the_factory_refuses_a_sim_camera_beside_an_arm_it_cannot_see(
    arm: JakaArmConfig | GcodeArmConfig, tmp_path: Path
) -> None:
    with pytest.raises(DriverError) as refused, hardware(arm, SimCameraConfig(), LIMITS, tmp_path):
        pass
    message = one_line(refused.value)
    assert "the sim camera would watch its own twin, not the arm's" in message
    assert 'kind = "sim-serve"' in message and "onboard sim serve" in message


def test_the_factory_refuses_a_served_camera_beside_the_sim_arm(tmp_path: Path) -> None:
    camera = SimServeCameraConfig(port=9)
    with pytest.raises(DriverError) as refused, hardware(SimArmConfig(), camera, LIMITS, tmp_path):
        pass
    assert "watches sim serve's twin, not this arm's" in one_line(refused.value)


def test_calibrate_with_a_jaka_arm_and_the_sim_camera_is_one_line(tmp_path: Path) -> None:
    robot = tmp_path / "robot.toml"
    robot.write_text(
        'name = "r"\n\n[drivers.arm]\nkind = "jaka"\nhost = "127.0.0.1"\n\n'
        '[drivers.camera]\nkind = "sim"\n',
        encoding="utf-8",
    )
    result = onboard("--robot", robot, "calibrate", cwd=tmp_path)
    assert result.code == ExitCode.INCOMPLETE
    assert 'set kind = "sim-serve"' in one_line_error(result)


# -- faults: one line, bounded, never a hang --------------------------------------------------


def test_a_stopped_server_is_one_line_within_the_timeout() -> None:
    timeout = 5.0
    with serving() as (where, stop):
        camera = ServedCamera(camera_config(where, timeout))
        camera.connect()
        camera.read()
    assert stop.is_set()  # and the server thread has ended
    address = f"{where.camera[0]}:{where.camera[1]}"
    for _ in range(2):  # the dropped connection, then the refused reconnection
        began = time.monotonic()
        with pytest.raises(CameraError) as failed:
            camera.read()
        assert time.monotonic() - began < timeout + 1.0
        assert f"sim-serve camera {address}" in one_line(failed.value)
    assert "connection refused" in str(failed.value)
    with pytest.raises(StaleFrame, match="old"):
        camera.latest(max_age=0.0)
    camera.close()


class FakeCamera:
    """A camera server on loopback that answers ``info`` well and ``frame`` with ``reply``'s
    bytes; ``reply`` returning None leaves the request unanswered (a hung server)."""

    def __init__(self, reply: Callable[[], bytes | None]) -> None:
        self.reply = reply
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.done = threading.Event()
        self.asked = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock, sock.makefile("rb") as lines:
            for line in lines:
                if json.loads(line)["get"] == "info":
                    sock.sendall(frame_wire.encode_info(INTRINSICS))
                    continue
                self.asked.set()
                answer = self.reply()
                if answer is None:
                    self.done.wait(BOUND)
                    return
                sock.sendall(answer)
                if answer.endswith(b"<close>"):
                    return

    def close(self) -> None:
        self.done.set()
        with contextlib.suppress(OSError):  # on Linux close() alone leaves accept() blocked
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


INTRINSICS = Intrinsics(4, 2, 3.0, 3.0, 1.5, 0.5)
GOOD = frame_wire.FrameHeader(INTRINSICS, 7, 1.25, 300)


def header_with(**change: object) -> bytes:
    header = json.loads(frame_wire.encode_frame_header(GOOD))
    header.update(change)
    return json.dumps(header).encode() + b"\n"


def pixels(n: int) -> bytes:
    return bytes(range(n))


@pytest.fixture
def fake() -> Iterator[Callable[[Callable[[], bytes | None]], FakeCamera]]:
    made: list[FakeCamera] = []

    def make(reply: Callable[[], bytes | None]) -> FakeCamera:
        made.append(FakeCamera(reply))
        return made[-1]

    yield make
    for server in made:
        server.close()


def test_a_fake_server_with_a_good_frame_is_read(fake: Callable[..., FakeCamera]) -> None:
    color = bytes(range(24))
    depth = np.arange(8, dtype="<f4").tobytes()
    server = fake(lambda: frame_wire.encode_frame_header(GOOD) + color + depth)
    with ServedCamera(SimServeCameraConfig(port=server.port, timeout=BOUND)) as camera:
        frame = camera.read()
    assert frame.index == 7 and camera.twin_time == 1.25 and frame.intrinsics == INTRINSICS
    assert frame.color.shape == (2, 4, 3) and frame.color.tobytes() == color
    assert frame.depth.dtype == np.float32 and frame.depth[1, 3] == 7.0


PAYLOAD = 2 * 4 * 3 + 2 * 4 * 4


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        (b"\x00\xfe garbled ]}\n", "is not a line of JSON"),
        (b"[1, 2]\n", "is not a JSON object"),
        (b"x" * (frame_wire.MAX_HEADER + 10), "no line break in the first 8192 bytes"),
        (header_with(v=2), "protocol version 2"),
        (header_with(v=True), "protocol version True"),
        (header_with(color_bytes=5), "color_bytes is 5"),
        (header_with(width=-4), "width is -4"),
        (header_with(width=10**9), "width is 1000000000"),
        (header_with(intrinsics={"fx": "a"}), "fx is 'a'"),
        (header_with(twin_time=None), "twin_time is None"),
        (header_with(depth="float16"), "depth is 'float16'"),
        (b'{"v": 1, "ok": false, "error": "render failed"}\n', "the server refused: render"),
        (frame_wire.encode_frame_header(GOOD) + pixels(20) + b"<close>", "short payload"),
        (b'{"v": 1, "ok": true, "wid<close>', "closed the connection after"),
    ],
)
def test_a_garbled_or_short_reply_is_one_line(
    fake: Callable[..., FakeCamera], reply: bytes, words: str
) -> None:
    server = fake(lambda: reply)
    config = SimServeCameraConfig(port=server.port, timeout=BOUND)
    with ServedCamera(config) as camera, pytest.raises(CameraError) as failed:
        camera.read()
    message = one_line(failed.value)
    assert f"sim-serve camera 127.0.0.1:{server.port}" in message
    assert words in message, message
    assert not isinstance(failed.value, StaleFrame)


def test_a_server_that_stops_answering_is_stale_within_the_timeout(
    fake: Callable[..., FakeCamera],
) -> None:
    server = fake(lambda: None)
    with ServedCamera(SimServeCameraConfig(port=server.port, timeout=BOUND)) as camera:
        began = time.monotonic()
        with pytest.raises(StaleFrame) as stale:
            camera.read_timeout(0.3)
        waited = time.monotonic() - began
    assert server.asked.is_set()
    assert 0.3 <= waited < BOUND
    assert "no frame within 0.3 s" in one_line(stale.value)


def test_a_payload_that_stops_midway_is_stale_and_the_next_read_reconnects(
    fake: Callable[..., FakeCamera],
) -> None:
    replies = iter([frame_wire.encode_frame_header(GOOD) + pixels(10)])
    good = frame_wire.encode_frame_header(GOOD) + bytes(PAYLOAD)
    server = fake(lambda: next(replies, good))
    with ServedCamera(SimServeCameraConfig(port=server.port, timeout=BOUND)) as camera:
        with pytest.raises(StaleFrame):
            camera.read_timeout(0.3)
        assert camera.read().index == 7  # the stalled connection was dropped, a new one used


def test_nothing_listening_is_one_line_at_connect() -> None:
    with socket.create_server(("127.0.0.1", 0)) as spare:
        port = spare.getsockname()[1]
    camera = ServedCamera(SimServeCameraConfig(port=port, timeout=BOUND))
    with pytest.raises(CameraError) as failed:
        camera.connect()
    assert f"127.0.0.1:{port}: connection refused" in one_line(failed.value)
    with pytest.raises(CameraError, match="not connected: call connect"):
        camera.read()
    bad_host = ServedCamera(SimServeCameraConfig(host="x" * 300, port=port, timeout=BOUND))
    with pytest.raises(CameraError, match="does not resolve"):
        bad_host.connect()


def test_a_bad_camera_request_gets_an_error_line_and_the_server_serves_on(
    served: Served,
) -> None:
    with socket.create_connection(served.camera, timeout=BOUND) as sock:
        lines = sock.makefile("rb")
        for bad in (b"hello\n", b'{"v": 1, "get": "everything"}\n', b'{"get": "info"}\n'):
            sock.sendall(bad)
            reply = json.loads(lines.readline())
            assert reply["ok"] is False and "\n" not in reply["error"], reply
        sock.sendall(frame_wire.encode_request("info"))
        assert frame_wire.parse_info(lines.readline()).width > 0


# -- the truth port ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_line", "words"),
    [
        (b"not json\n", "not a line of JSON"),
        (b"\xff\xfe\n", "not a line of JSON"),
        (b"[1, 2]\n", "not a JSON object"),
        (b'{"v": 2, "get": "truth"}\n', "protocol version 2"),
        (b'{"v": true, "get": "truth"}\n', "protocol version True"),
        (b'{"get": "lies"}\n', "unknown get 'lies'"),
        (b'{"teleport": "red block"}\n', "unknown request"),
        (b'{"move": "no such"}\n', "no object 'no such' in the scene; objects: 'red block'"),
        (b'{"move": 3, "position": [0, 0]}\n', "no object 3"),
        (b'{"move": "red block"}\n', "move needs a position"),
        (b'{"move": "red block", "position": [1, "a"]}\n', "give 2 or 3 finite numbers"),
        (b'{"move": "red block", "position": [NaN, 0, 0]}\n', "finite numbers"),
        (b'{"move": "red block", "position": [0, 0, 0, 0]}\n', "finite numbers"),
        (b'{"move": "red block", "position": [0, 0], "orientation": [0, 0, 0, 0]}\n', "zero"),
        (b'{"move": "red block", "position": [0, 0], "frame": "camera"}\n', "frame 'camera'"),
    ],
)
def test_a_bad_truth_request_is_a_json_error_and_the_server_serves_on(
    served: Served, request_line: bytes, words: str
) -> None:
    with socket.create_connection(served.truth, timeout=BOUND) as sock:
        lines = sock.makefile("rb")
        sock.sendall(request_line)
        reply = json.loads(lines.readline())
        assert reply["v"] == 1 and reply["ok"] is False
        assert words in reply["error"] and "\n" not in reply["error"], reply
        sock.sendall(b'{"get": "truth"}\n')
        assert json.loads(lines.readline())["ok"] is True


def test_a_truth_line_too_long_ends_that_connection_only(served: Served) -> None:
    with socket.create_connection(served.truth, timeout=BOUND) as sock:
        lines = sock.makefile("rb")
        sock.sendall(b"x" * (truth_server.MAX_LINE + 1))
        assert "too long" in json.loads(lines.readline())["error"]
        assert lines.readline() == b"", "the server closed it"
    with TruthClient(*served.truth, timeout=BOUND) as judge:
        assert "red block" in judge.truth().objects


def test_a_held_object_is_not_teleported(served: Served, tmp_path: Path) -> None:
    with (
        hardware(jaka_config(served), None, LIMITS, tmp_path) as hw,
        TruthClient(*served.truth, timeout=BOUND) as judge,
    ):
        assert hw.arm is not None
        x, y, z = judge.truth().objects["yellow block"].base.position
        tool = hw.arm.state().pose
        hw.arm.move_to(replace(tool, x=x, y=y, z=z + 0.08), 0.4)
        hw.arm.move_to(replace(tool, x=x, y=y, z=z), 0.4)
        hw.arm.grip(True)
        assert judge.truth().held == "yellow block"
        with pytest.raises(DriverError, match="is in the gripper: open it before moving it"):
            judge.move("yellow block", (0.3, 0.0))


def test_the_truth_client_fails_in_one_line(served: Served) -> None:
    with socket.create_server(("127.0.0.1", 0)) as spare:
        port = spare.getsockname()[1]
    with pytest.raises(DriverError, match=f"truth 127.0.0.1:{port}: cannot connect"):
        TruthClient("127.0.0.1", port).connect()
    with TruthClient(*served.truth) as judge, pytest.raises(DriverError) as failed:
        judge.move("red block", (math.inf, 0.0))
    assert "finite numbers" in one_line(failed.value)


def test_the_truth_client_speaks_the_servers_version() -> None:
    assert (truth_client.VERSION, truth_client.MAX_LINE) == (
        truth_server.VERSION,
        truth_server.MAX_LINE,
    )


def test_the_robot_never_imports_the_truth_port() -> None:
    """Only the simulated worlds (sim serve, the fleet's world) start the truth server; the
    only reader of the client is a judge in onboard.evaluation (the fleet's end of run);
    the robot's own modules import neither."""
    edges = graph(onboard_modules())
    client = "onboard.drivers.emulators.truth_client"
    server = "onboard.drivers.emulators.truth_server"
    worlds = ("onboard.drivers.emulators.serve", "onboard.drivers.emulators.arms_world")
    wrong = [
        e
        for e in edges
        if (within(e.imported, client) and e.importer != client
            and not within(e.importer, "onboard.evaluation"))
        or (within(e.imported, server) and e.importer not in worlds)
    ]  # fmt: skip
    assert not wrong, "\n".join(str(e) for e in wrong)


# -- the command ------------------------------------------------------------------------------


def test_sim_serve_help_documents_the_new_ports() -> None:
    result = onboard("sim", "serve", "--help")
    assert result.code == 0
    for words in ("--camera-port", "10002", "sim-serve", "--truth-port", "10003", "judges"):
        assert words in result.out


@pytest.mark.parametrize(
    ("flag", "words"), [("--camera-port", "99999: not a port"), ("--truth-port", "-1: not a")]
)
def test_a_bad_camera_or_truth_port_is_one_line(tmp_path: Path, flag: str, words: str) -> None:
    value = "99999" if "99999" in words else "-1"
    result = onboard("sim", "serve", "--no-gcode", flag, value, cwd=tmp_path, timeout=30)
    assert result.code == ExitCode.INPUT_ERROR
    assert f"{flag} {words}" in one_line_error(result)


def test_a_camera_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        result = onboard(
            "sim", "serve", "--no-gcode", "--jaka-port", "0", "--status-port", "0",
            "--camera-port", str(port), cwd=tmp_path, timeout=30,
        )  # fmt: skip
    assert result.code == ExitCode.INPUT_ERROR
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in one_line_error(result)


def test_sim_serve_prints_where_the_camera_and_truth_listen(tmp_path: Path) -> None:
    command = [str(Path(sys.executable).parent / "onboard"), "sim", "serve", "--no-gcode"]
    for flag in ("--jaka-port", "--status-port", "--camera-port", "--truth-port"):
        command += [flag, "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=tmp_path) as server:
        try:
            assert server.stdout is not None
            said = banner(server.stdout)
            camera = re.search(r"^camera: ([\d.]+):(\d+) .*kind = \"sim-serve\"", said, re.M)
            truth = re.search(r"^truth: ([\d.]+):(\d+) .*judges", said, re.M)
            assert camera and truth, said
            config = SimServeCameraConfig(port=int(camera.group(2)), timeout=BOUND)
            with ServedCamera(config) as seen, TruthClient(port=int(truth.group(2))) as judge:
                assert seen.read().color.shape[2] == 3
                assert "block" in {o.kind for o in judge.truth().objects.values()}
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=BOUND) == 0
        finally:
            if server.poll() is None:
                server.kill()


def banner(stdout: IO[str]) -> str:
    """The server's lines up to "serving ...", each awaited at most BOUND seconds."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        with contextlib.suppress(ValueError, OSError):  # closed when the test ends
            for line in stdout:
                lines.put(line)
        lines.put("")  # the server ended

    threading.Thread(target=pump, daemon=True).start()
    said: list[str] = []
    while not said or not said[-1].startswith("serving"):
        try:
            said.append(lines.get(timeout=BOUND))
        except queue.Empty:
            require(False, f"the server printed where it listens (so far: {said!r})")
        if said[-1] == "":
            pytest.fail(f"the server ended: {said!r}")
    return "".join(said)


def test_calibrate_a_jaka_arm_with_the_served_camera(tmp_path: Path) -> None:
    """The whole chain: `onboard calibrate` moves the JAKA arm of sim serve and finds the marker
    in the served camera's frames of the same twin."""
    with serving("calibration") as (where, _stop):
        robot = tmp_path / "robot.toml"
        robot.write_text(
            f'name = "r"\n\n[drivers.arm]\nkind = "jaka"\nhost = "127.0.0.1"\n'
            f"port = {where.jaka[1]}\nstatus_port = {where.status[1]}\ngrip_settle = 0.0\n\n"
            f'[drivers.camera]\nkind = "sim-serve"\nport = {where.camera[1]}\n',
            encoding="utf-8",
        )
        result = onboard("--robot", robot, "calibrate", "--steps", "2", cwd=tmp_path)
    assert result.code == 0, result.err
    found = re.search(r"from 8 of 8 poses: RMS residual ([\d.]+) mm", result.out)
    assert found and float(found.group(1)) < 5.0, result.out


def test_sim_serve_on_an_so101_scene_serves_its_bus_on_the_twins_arm(tmp_path: Path) -> None:
    """``onboard sim serve --scene so101_blocks``: the servo bus drives the twin's SO-101, so the
    pose the driver reads over the pty is the truth port's; the JAKA ports are not needed
    (one in use stops nothing); SIGTERM ends it with 0."""
    from onboard.drivers.arm.so101 import So101Arm, So101ArmConfig

    command = [str(Path(sys.executable).parent / "onboard"), "sim", "serve"]
    command += ["--scene", "so101_blocks", "--camera-port", "0", "--truth-port", "0"]
    with socket.create_server(("127.0.0.1", 0)) as busy:
        command += ["--jaka-port", str(busy.getsockname()[1])]
        with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=tmp_path) as server:
            try:
                assert server.stdout is not None
                said = banner(server.stdout)
                bus = re.search(r"^so101 \(feetech bus, the twin's SO-101\): (\S+)$", said, re.M)
                truth = re.search(r"^truth: ([\d.]+):(\d+) .*judges", said, re.M)
                assert bus and truth and "jaka and gcode: not served" in said, said
                config = So101ArmConfig(url=bus.group(1), timeout=BOUND / 10)
                with So101Arm(config) as arm, TruthClient(port=int(truth.group(2))) as judge:
                    tool = judge.truth().tool_base.position
                    assert math.dist(arm.state().pose.position(), tool) < 0.002
                server.send_signal(signal.SIGTERM)
                assert server.wait(timeout=BOUND) == 0
            finally:
                if server.poll() is None:
                    server.kill()
