"""The API key comes from the environment variable robot.toml names, and never lands in a
recording, a candidate or the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from onboard.config import RobotConfig
from onboard.grounding.mapping import ActionMapper
from onboard.hri.scenario import load_scenario
from onboard.hri.session import EpisodeOptions, HttpAsk, run_episode
from onboard.llm.client import ChatClient
from onboard.loop.recorder import Recorder
from onboard.loop.skill import Skill
from onboard.testing.standin_server import StandInServer

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-onboard-test-7f3a9c1e"


def test_the_key_is_never_recorded(
    robot_tmp: RobotConfig,
    skill: Skill,
    mapper: ActionMapper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ONBOARD_TEST_SECRET", SECRET)
    llm = robot_tmp.llm.model_copy(update={"api_key_env": "ONBOARD_TEST_SECRET"})
    robot = robot_tmp.model_copy(update={"llm": llm})
    assert robot.llm.api_key() == SECRET
    scenario = load_scenario(ROOT / "skills" / "scenarios" / "person-robot.toml")
    path = tmp_path / "episode.jsonl"
    with (
        StandInServer(seed=0, off_set_rate=0.5) as server,
        ChatClient(robot.llm, base_url=server.base_url) as client,
        Recorder(path) as recorder,
    ):
        run_episode(robot, skill, scenario, HttpAsk(client), mapper, recorder,
                    EpisodeOptions(latency=1.0))  # fmt: skip
    written = [path, *robot.recordings_dir.glob("**/*")]
    assert any(p.is_file() for p in written)
    for file in (p for p in written if p.is_file()):
        assert SECRET not in file.read_text(encoding="utf-8"), file
    assert "ONBOARD_TEST_SECRET" in path.read_text(encoding="utf-8")  # the name, not the value
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err
