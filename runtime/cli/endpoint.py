"""The LLM endpoint a command talks to: a URL, the embedded local model, or the stand-in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from onboard.base.errors import UsageError
from onboard.base.urls import public_url, url_problem
from onboard.config import RobotConfig

__all__ = ["llm_endpoint"]


@contextmanager
def llm_endpoint(robot: RobotConfig, choice: str | None) -> Iterator[tuple[str, bool]]:
    """The base URL to use, and whether it is the stand-in; starts local servers as needed."""
    if choice is not None and choice not in ("local", "standin"):
        _check_url(choice)  # robot.toml's base_url was checked when robot.toml was loaded
    choice = choice or robot.llm.base_url
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
    problem = url_problem(url)
    if problem is None:
        return
    shown = public_url(url)
    if problem.startswith("not a URL ("):
        raise UsageError(f"--llm {shown!r}: {problem}")
    raise UsageError(f'--llm {shown!r}: must be "local", "standin" or an http(s) URL')
