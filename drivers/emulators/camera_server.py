"""The twin's camera on TCP (``onboard sim serve --camera-port``): a frame rendered per request.

Speaks :mod:`onboard.drivers.camera.frame_wire` (version 1); the driver that reads it is
:class:`~onboard.drivers.camera.served_camera.ServedCamera` (``kind = "sim-serve"``). Frames
come from the twin's in-process camera (:class:`~onboard.drivers.camera.twin_camera.SimCamera`),
rendered with the twin's lock held, so each shows one physics step, the one its header names.
Bad requests get an error line and the connection reads on.
"""

from __future__ import annotations

import socket

import numpy as np

from onboard.drivers.camera import frame_wire
from onboard.drivers.camera.twin_camera import SimCamera
from onboard.drivers.emulators.tcp_service import LineReader, LineTooLong, TcpService
from onboard.drivers.twin.world import Twin

__all__ = ["CameraServer"]


class CameraServer(TcpService):
    """Frames of ``twin`` to every client that asks, on ``host:port``."""

    what = "camera"

    def __init__(self, twin: Twin, host: str = "127.0.0.1", port: int = 10002) -> None:
        super().__init__(host, port, max_clients=frame_wire.MAX_CLIENTS)
        self.twin = twin
        self.camera = SimCamera(twin)
        self.camera.connect()

    def refusal(self, reason: str) -> bytes:
        return frame_wire.encode_error(f"sim serve camera: {reason}")

    def handle(self, sock: socket.socket, reader: LineReader) -> None:
        while True:
            try:
                line = reader.line(frame_wire.MAX_REQUEST)
            except LineTooLong as exc:
                self.send(sock, frame_wire.encode_error(f"request line too long: {exc}"))
                return  # its end cannot be told apart from the next request's start
            if line is None:
                return
            try:
                get = frame_wire.parse_request(line)
            except ValueError as exc:
                self.send(sock, frame_wire.encode_error(str(exc)))
                continue
            if get == "info":
                self.send(sock, frame_wire.encode_info(self.twin.intrinsics()))
            else:
                self.send(sock, *self.frame())

    def frame(self) -> tuple[bytes, memoryview, memoryview]:
        """A new frame as the header line, the colour bytes and the depth bytes."""
        with self.twin.lock:  # no physics step between the picture and its time
            frame = self.camera.read()
            snapshot = self.twin.snapshot
        header = frame_wire.FrameHeader(frame.intrinsics, frame.index, snapshot.time, snapshot.step)
        color = np.ascontiguousarray(frame.color, dtype=np.uint8)
        depth = np.ascontiguousarray(frame.depth, dtype=np.dtype("<f4"))
        return (
            frame_wire.encode_frame_header(header),
            color.data.cast("B"),
            depth.data.cast("B"),
        )
