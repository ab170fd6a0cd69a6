"""``python -m onboard.testing.vlm_standin --port 0 --seed S --competence C --log FILE``:
serve the stand-in VLM on loopback until SIGINT or SIGTERM; prints its base URL
(``http://127.0.0.1:PORT/v1``) on one line once it listens."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from onboard.base.errors import OnboardError
from onboard.base.listen import check_port, listen_error
from onboard.testing.vlm_standin.planting import DEFAULT_COMPETENCE
from onboard.testing.vlm_standin.seeing import detector
from onboard.testing.vlm_standin.server import VLMStandIn


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m onboard.testing.vlm_standin",
        description="The stand-in VLM: an OpenAI-compatible chat server on loopback that "
        "plays the ReplanVLM bots (see ERRORS.md for its planted errors).",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--competence", type=float, default=DEFAULT_COMPETENCE, help="0..1")
    p.add_argument("--log", type=Path, default=None, help="append one JSON line per reply")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        check_port("--port", args.port)
        if not 0.0 <= args.competence <= 1.0:
            raise ValueError(f"--competence {args.competence}: not between 0 and 1")
        detector()  # loaded before the URL is printed: the first request is not slower
        server = VLMStandIn(args.seed, args.competence, args.log, args.host, args.port)
        stop = threading.Event()

        def _on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _on_signal)
        try:
            server.start()
        except OSError as exc:
            raise listen_error("vlm stand-in", args.host, str(args.port), exc) from exc
    except (OnboardError, ValueError) as exc:
        print(f"vlm stand-in: {exc}", file=sys.stderr)
        return 2
    try:
        print(server.base_url, flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
