"""``python -m onboard.testing.team_standin --port 0 --seed S --competence C
[--ignore-feedback] [--log FILE]``: serve the team stand-in on loopback until SIGINT or
SIGTERM; prints its base URL (``http://127.0.0.1:PORT/v1``) on one line once it listens."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from onboard.testing.chat_standin import serve, standin_parser
from onboard.testing.team_standin.server import TeamStandIn


def _parser() -> argparse.ArgumentParser:
    p = standin_parser(
        "onboard.testing.team_standin",
        "The team stand-in LLM: an OpenAI-compatible chat server on loopback that plans "
        "multi-robot task actions (see FEEDBACK.md for its reactions to feedback).",
        competence=1.0,
    )
    p.add_argument("--ignore-feedback", action="store_true", help="the control: ban nothing")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)

    def make() -> TeamStandIn:
        return TeamStandIn(args.seed, args.competence, args.ignore_feedback, args.log,
                           args.host, args.port)  # fmt: skip

    return serve("team stand-in", args.host, args.port, make)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
