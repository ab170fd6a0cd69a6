"""``python -m onboard.testing.vlm_standin --port 0 --seed S --competence C --log FILE``:
serve the stand-in VLM on loopback until SIGINT or SIGTERM; prints its base URL
(``http://127.0.0.1:PORT/v1``) on one line once it listens."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onboard.testing.chat_standin import serve, standin_parser
from onboard.testing.vlm_standin.planting import DEFAULT_COMPETENCE
from onboard.testing.vlm_standin.seeing import detector
from onboard.testing.vlm_standin.server import VLMStandIn


def _parser() -> argparse.ArgumentParser:
    return standin_parser(
        "onboard.testing.vlm_standin",
        "The stand-in VLM: an OpenAI-compatible chat server on loopback that plays the "
        "ReplanVLM bots (see ERRORS.md for its planted errors).",
        competence=DEFAULT_COMPETENCE,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def make() -> VLMStandIn:
        if not 0.0 <= args.competence <= 1.0:
            raise ValueError(f"--competence {args.competence}: not between 0 and 1")
        detector()  # loaded before the URL is printed: the first request is not slower
        return VLMStandIn(args.seed, args.competence, args.log, args.host, args.port)

    return serve("vlm stand-in", args.host, args.port, make)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
