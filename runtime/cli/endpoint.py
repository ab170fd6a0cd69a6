"""The LLM endpoint a command talks to: a URL, the embedded local model, or the stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from onboard.base.errors import UsageError
from onboard.config import RobotConfig

__all__ = ["llm_endpoint"]


@contextmanager
def llm_endpoint(robot: RobotConfig, choice: str | None) -> Iterator[tuple[str, bool]]:
    """The base URL to use, and whether it is the stand-in; starts local servers as needed."""
    choice = choice or robot.llm.base_url
    if choice not in ("local", "standin"):
        _check_url(choice)
    if choice == "local":
        from onboard.llm.local_server import local_server

        with local_server() as url:
            yield url, False
    elif choice == "standin":
        from onboard.testing.standin_server import StandInServer

        with StandInServer(seed=robot.eval.seed, noise=robot.eval.standin_noise) as server:
            yield server.base_url, True
    else:
        yield choice.rstrip("/"), False


def _check_url(url: str) -> None:
    """``--llm URL`` is refused as robot.toml's ``llm.base_url`` is: an http(s) URL only."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as exc:
        raise UsageError(f"--llm {url!r}: not a URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname or not url.isprintable():
        raise UsageError(f'--llm {url!r}: must be "local", "standin" or an http(s) URL')
    del port
