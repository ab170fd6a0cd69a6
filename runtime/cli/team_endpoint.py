"""The LLM a team command talks to, by the name ``--llm`` gives it.

- ``standin``: the team stand-in (runtime/testing/team_standin) at ``competence``;
- ``control``: the same stand-in ignoring every kind of feedback (FEEDBACK.md's control row);
- ``local``: SmolLM2-135M under llama.cpp on loopback, asked with constrained decoding (it
  does not write the ``EXECUTE`` format freely);
- a URL: any OpenAI-compatible endpoint, with robot.toml's ``[llm]`` settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from onboard.config import LLMConfig, RobotConfig
from onboard.llm.client import ChatClient

__all__ = ["CHOICES", "TeamEndpoint", "team_endpoint"]

CHOICES = ("standin", "control", "local")
#: the stand-in's competence when none is given: it makes mistakes for the critic to catch
STANDIN_COMPETENCE = 0.6
#: a joint reply of three agents in constrained JSON needs well under this many tokens
LOCAL_TOKENS = 96
#: seconds a request to the local model may take: robot.toml's [llm] deadline is Engage's
#: (8 s), but a team prompt is about 600 tokens, which SmolLM2 on a busy 2-core controller
#: reads in more than that
LOCAL_DEADLINE = 120.0


@dataclass(frozen=True)
class TeamEndpoint:
    client: ChatClient
    #: the model's label in tables and recordings: standin@0.6, control@0.6, smollm2, the URL
    label: str
    #: whether requests ask for constrained JSON
    constrained: bool


@contextmanager
def team_endpoint(
    robot: RobotConfig,
    choice: str,
    *,
    competence: float | None = None,
    seed: int = 0,
    constrained: bool | None = None,
) -> Iterator[TeamEndpoint]:
    """The endpoint ``choice`` names, started if it is ours, stopped at the end."""
    if choice in ("standin", "control"):
        from onboard.testing.team_standin import start_team_standin

        level = STANDIN_COMPETENCE if competence is None else competence
        url, stop = start_team_standin(seed, level, ignore_feedback=choice == "control")
        try:
            with _client(robot.llm, url, None) as client:
                yield TeamEndpoint(client, f"{choice}@{level:g}", bool(constrained))
        finally:
            stop()
    elif choice == "local":
        from onboard.llm.local_server import MODEL_ALIAS, local_server

        config = robot.llm.model_copy(
            update={"deadline": LOCAL_DEADLINE, "read_timeout": LOCAL_DEADLINE}
        )
        with local_server() as url, _client(config, url, MODEL_ALIAS, LOCAL_TOKENS) as client:
            yield TeamEndpoint(client, "smollm2", True if constrained is None else constrained)
    else:
        from onboard.base.urls import public_url
        from onboard.cli.endpoint import _check_url

        _check_url(choice)
        with _client(robot.llm, choice.rstrip("/"), None) as client:
            yield TeamEndpoint(client, public_url(choice), bool(constrained))


def _client(
    config: LLMConfig, url: str, model: str | None, max_tokens: int | None = None
) -> ChatClient:
    update: dict[str, object] = {}
    if model is not None:
        update["model"] = model
    if max_tokens is not None:
        update["max_tokens"] = max_tokens
    return ChatClient(config.model_copy(update=update), base_url=url)
