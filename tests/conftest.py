"""Shared fixtures: the repository's own robot.toml, skill, model and a stand-in LLM.

The stand-in server (runtime/testing/standin_server.py) is a documented stand-in: it sees
only the HTTP request, as a real model would.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from onboard.catalog import load_robot_skill, make_mapper
from onboard.config import RobotConfig, load_robot
from onboard.grounding.embedder import Embedder
from onboard.grounding.mapping import ActionMapper
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _own_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The tests, and the processes they start, keep onboard's caches (reference
    embeddings) in a folder of this run, never in the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ONBOARD_CACHE_DIR", str(tmp_path_factory.mktemp("onboard-cache")))
        yield


@pytest.fixture(scope="session")
def robot() -> RobotConfig:
    return load_robot(ROOT / "robot.toml")


@pytest.fixture
def robot_tmp(robot: RobotConfig, tmp_path: Path) -> RobotConfig:
    """The repository's robot, recording into a temporary folder."""
    return robot.model_copy(update={"recordings": tmp_path / "recordings"})


@pytest.fixture(scope="session")
def skill(robot: RobotConfig) -> Skill:
    """Engage without its learned critic: these tests pin the runtime's and the stand-in's
    own decisions; the critic's are tested with ``critic_skill``."""
    return dataclasses.replace(load_robot_skill(robot, "engage"), critic=None)


@pytest.fixture(scope="session")
def critic_skill(robot: RobotConfig) -> Skill:
    """Engage as shipped, its ``[critic]`` on."""
    return load_robot_skill(robot, "engage")


@pytest.fixture(scope="session")
def embedder(robot: RobotConfig) -> Embedder:
    return Embedder(robot.embedder_dir)


@pytest.fixture(scope="session")
def mapper(robot: RobotConfig, skill: Skill, embedder: Embedder) -> ActionMapper:
    return make_mapper(robot, skill, embedder)


@pytest.fixture
def standin() -> Iterator[StandInServer]:
    with StandInServer(seed=0, noise=0.0, format_noise=0.0) as server:
        yield server
